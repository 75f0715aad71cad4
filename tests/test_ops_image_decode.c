/* test_ops_image_decode.c: ImageDecoder on the fixtures of tests/data/images
 * (tools/make_image_fixtures.py: JPEG baseline, progressive and gray; PNG
 * RGB, RGBA, gray, 16-bit gray, palette and 1-bit; BMP 24-bit, palette,
 * 1-bit and gray; binary and plain PPM, PGM (maxval 100) and PBM; TIFF
 * raw, LZW and deflate; WebP lossy and lossless; JP2 and J2K) in RGB, BGR
 * and Grayscale against PIL's decode of the same bytes, exactly.
 *
 * Then the bytes are hostile: every fixture cut at every length, and with
 * random bytes overwritten, must give an image or an error with a message,
 * never a crash (the ASan builds run this too, so a library leak or an
 * out-of-bounds read in a reader fails here), and keel must hold nothing
 * afterwards. Bad attributes and input types are errors. */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define DIR "tests/data/images/"

static uint64_t rng = 0xA0761D6478BD642Full;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* ========================================================= harness */

static uint8_t *read_file(const char *name, const char *ext, size_t *n) {
  char path[256];
  snprintf(path, sizeof path, DIR "%s%s", name, ext);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc(len > 0 ? (size_t)len : 1);
  *n = p && len >= 0 ? fread(p, 1, (size_t)len, f) : 0;
  fclose(f);
  return p;
}

static keel_session_t *decoder(const char *fmt) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_UINT8, 1, (int64_t[]){-1});
  mb_output(g, "Y", KEEL_UINT8, -1, NULL);
  mb_node *n = mb_add(g, "ImageDecoder", "X", "Y");
  if (fmt) mb_attr_s(n, "pixel_format", fmt);
  return mb_session(g, 20);
}

/* Decodes bytes with s; returns the status, the image in *out. */
static keel_status decode(keel_session_t *s, const uint8_t *p, size_t n, keel_value_t **out) {
  int64_t len = (int64_t)n;
  keel_value_t *in = NULL;
  *out = NULL;
  CHECK_OK(keel_tensor_create(s, KEEL_UINT8, 1, &len, n ? p : (const uint8_t *)"", &in));
  keel_status st = keel_run(s, (const char *[]){"X"}, &in, 1, out);
  keel_value_release(in);
  return st;
}

/* ======================================================= fixtures */

/* The image in each pixel format against PIL's bytes. */
static void check_fixture(keel_session_t *const *s, const char *name, int64_t w, int64_t h) {
  size_t n, nrgb, ngray;
  uint8_t *data = read_file(name, "", &n), *rgb = read_file(name, ".rgb", &nrgb),
          *gray = read_file(name, ".gray", &ngray);
  CHECK(data && rgb && gray && nrgb == (size_t)(w * h * 3) && ngray == (size_t)(w * h));
  for (int f = 0; data && rgb && gray && f < 3; f++) {
    keel_value_t *y;
    CHECK_OK(decode(s[f], data, n, &y));
    int64_t c = f == 2 ? 1 : 3;
    bool ok = y && keel_value_rank(y) == 3 && keel_value_shape(y)[0] == h &&
              keel_value_shape(y)[1] == w && keel_value_shape(y)[2] == c;
    const uint8_t *px = ok ? keel_value_data(y) : NULL;
    int64_t bad = -1;
    for (int64_t i = 0; ok && i < w * h * c && bad < 0; i++) {
      int64_t want = f == 2 ? gray[i] : f == 0 ? rgb[i] : rgb[i / 3 * 3 + 2 - i % 3];
      if (px[i] != want) bad = i;
    }
    if (!ok || bad >= 0)
      fprintf(stderr, "  %s (%s): %s at byte %lld\n", name, f == 0 ? "RGB" : f == 1 ? "BGR" : "Grayscale",
              ok ? "differs from PIL" : "wrong shape", (long long)bad);
    CHECK(ok && bad < 0);
    keel_value_release(y);
  }
  free(data);
  free(rgb);
  free(gray);
}

/* ==================================================== hostile bytes */

static int n_ok, n_err;

/* Any outcome but a crash: an image, or an error that says something. */
static void survive(keel_session_t *s, const uint8_t *p, size_t n) {
  keel_value_t *y;
  keel_status st = decode(s, p, n, &y);
  if (st == KEEL_OK) {
    CHECK(y != NULL && keel_value_rank(y) == 3);
    n_ok++;
  } else {
    CHECK(y == NULL && strstr(keel_last_error(), "ImageDecoder") != NULL);
    n_err++;
  }
  keel_value_release(y);
}

static void fuzz_fixture(keel_session_t *s, const char *name) {
  size_t n;
  uint8_t *data = read_file(name, "", &n);
  if (!data) return;
  uint8_t *buf = malloc(n + 1);
  for (size_t len = 0; len < n; len += 1 + (n > 2000 ? len / 64 : 0)) { /* truncations */
    memcpy(buf, data, len);
    survive(s, buf, len);
  }
  for (int r = 0; r < 150; r++) { /* overwritten bytes, more often in the header */
    memcpy(buf, data, n);
    int k = 1 + (int)(next() % 4);
    for (int i = 0; i < k; i++) {
      size_t at = next() % 2 ? next() % (n < 64 ? n : 64) : next() % n;
      buf[at] = (uint8_t)next();
    }
    survive(s, buf, n);
  }
  free(buf);
  free(data);
}

/* Headers that claim huge images, and bytes of no known format. */
static void check_refusals(keel_session_t *s) {
  static const uint8_t pnm_big[] = "P6\n100000 100000\n255\n\x01\x02\x03";
  static const uint8_t pnm_neg[] = "P5\n-3 2\n255\n";
  uint8_t bmp[64] = {'B', 'M'};
  bmp[14] = 40, bmp[18] = 0xFF, bmp[19] = 0xFF, bmp[20] = 0xFF, bmp[21] = 0x7F; /* width 2^31-1 */
  bmp[22] = 1, bmp[26] = 1, bmp[28] = 24;
  static const uint8_t junk[] = "hello, world";
  const uint8_t *cases[4] = {pnm_big, pnm_neg, bmp, junk};
  size_t lens[4] = {sizeof pnm_big - 1, sizeof pnm_neg - 1, sizeof bmp, sizeof junk - 1};
  for (int i = 0; i < 4; i++) {
    keel_value_t *y;
    CHECK_STATUS(decode(s, cases[i], lens[i], &y), KEEL_ERR_RUNTIME);
    CHECK(y == NULL);
  }
  keel_value_t *y;
  CHECK_STATUS(decode(s, NULL, 0, &y), KEEL_ERR_RUNTIME); /* no bytes at all */
}

/* pixel_format outside the three, and a float input. */
static void check_bad_inputs(void) {
  keel_session_t *s = decoder("CMYK");
  keel_value_t *y;
  CHECK_STATUS(decode(s, (const uint8_t *)"P5\n1 1\n255\n\x07", 13, &y), KEEL_ERR_INVALID_MODEL);
  keel_session_destroy(s);
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, -1, NULL);
  mb_output(g, "Y", KEEL_UINT8, -1, NULL);
  mb_add(g, "ImageDecoder", "X", "Y");
  s = mb_session(g, 20);
  keel_value_t *in = NULL;
  CHECK_OK(keel_tensor_create(s, KEEL_FLOAT, 1, (int64_t[]){2}, (float[]){1, 2}, &in));
  CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, &y), KEEL_ERR_SHAPE);
  keel_value_release(in);
  keel_session_destroy(s);
}

int main(void) {
  keel_session_t *s[3] = {decoder(NULL), decoder("BGR"), decoder("Grayscale")};
  FILE *m = fopen(DIR "MANIFEST", "r");
  CHECK(m != NULL);
  char name[64];
  long long w, h;
  int count = 0;
  while (m && fscanf(m, "%63s %lld %lld", name, &w, &h) == 3) {
    check_fixture(s, name, w, h);
    fuzz_fixture(s[count % 3], name);
    count++;
  }
  if (m) fclose(m);
  CHECK(count >= 26);
  fprintf(stderr, "hostile inputs: %d decoded, %d refused\n", n_ok, n_err);
  CHECK(n_err > 0);
  check_refusals(s[0]);
  for (int i = 0; i < 3; i++) keel_session_destroy(s[i]);
  check_bad_inputs();
  return check_report();
}

/* image_decode.c: ImageDecoder (opset 20): encoded image bytes (a 1-D
 * uint8 tensor) to an (H, W, C) uint8 image, C = 3 for pixel_format RGB
 * and BGR, 1 for Grayscale.
 *
 * The format is told by its magic bytes. JPEG, PNG, WebP, TIFF and JPEG
 * 2000 go through Debian's libraries (libjpeg-turbo, libpng, libwebp,
 * libtiff, OpenJPEG); BMP and PNM, which no Debian library reads from
 * memory, through the small readers at the end of this file, every
 * offset checked against the buffer. Each decoder yields RGB8 in kernel
 * scratch, then the pixel format is applied: BGR swaps, Grayscale is
 * PIL's convert("L"), L = (19595 R + 38470 G + 7471 B + 2^15) >> 16,
 * exact for gray sources. ONNX's reference decodes with PIL on the same
 * libraries, so outputs are expected bit-exact; alpha is dropped and
 * palettes and gray are expanded, as PIL's convert("RGB") does.
 *
 * The bytes are untrusted. Images above KEEL_IMG_MAX_PIXELS are refused
 * before anything is allocated; every decoder error is a keel error with
 * the library's reason, never a crash or a message on stderr. libjpeg and
 * libpng report fatal errors by longjmp: each has one wrapper function
 * (jpeg_decode, png_decode) whose setjmp confines the jump, the only
 * longjmps in keel. Libraries allocate with malloc for their own state
 * (not counted in keel's figures) and free it on every path; the pixels
 * are kernel scratch, released by the executor.
 *
 * The spec says an undecodable image "will return an empty matrix"; keel
 * returns an error instead (KEEL_ERR_RUNTIME, with the reason), as ONNX's
 * reference does (PIL raises), so a corrupt input is never mistaken for
 * an empty image.
 */
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>

#include <jerror.h> /* the message codes: JWRN_JPEG_EOF */
#include <jpeglib.h>
#include <openjpeg.h>
#include <png.h>
#include <tiffio.h>
#include <webp/decode.h>

#include "ops/kernel.h"

/* 64 Mpixel: 192 MiB of RGB. */
#define KEEL_IMG_MAX_PIXELS ((int64_t)1 << 26)

/* ========================================================== output */

typedef struct dimg {
  keel_kctx *k;
  int64_t h, w;
  uint8_t *rgb;                /* (h, w, 3), kernel scratch */
} dimg;

/* Checks the size and allocates the RGB buffer. */
static keel_status dimg_alloc(dimg *im, const char *fmt, int64_t w, int64_t h) {
  if (w <= 0 || h <= 0 || w > KEEL_IMG_MAX_PIXELS || h > KEEL_IMG_MAX_PIXELS / w)
    return keel_err(KEEL_ERR_RUNTIME, "ImageDecoder: %s image of %lld x %lld pixels is empty or above %lld pixels",
                    fmt, (long long)w, (long long)h, (long long)KEEL_IMG_MAX_PIXELS);
  im->w = w, im->h = h;
  return keel_k_scratch_n(im->k, w * h, 3, (void **)&im->rgb);
}

static keel_status bad(const char *fmt, const char *why) {
  return keel_err(KEEL_ERR_RUNTIME, "ImageDecoder: cannot decode the %s image: %s", fmt, why);
}

/* ============================================================ JPEG */

typedef struct jerr {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
} jerr;

static void jerr_exit(j_common_ptr c) {
  jerr *e = (jerr *)c->err;
  c->err->format_message(c, e->msg);
  longjmp(e->jb, 1);
}

/* Warnings stay silent, except a premature end of data: PIL refuses a
 * truncated JPEG, so keel does too (libjpeg would pad it with gray). */
static void jerr_emit(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) jerr_exit(c);
}

static void jerr_output(j_common_ptr c) { (void)c; }

/* The only setjmp for libjpeg: every longjmp from the library lands here,
 * and cinfo is destroyed on both paths. Locals changed after setjmp are
 * not read after the jump. */
static keel_status jpeg_decode(dimg *im, const uint8_t *p, size_t n) {
  struct jpeg_decompress_struct cinfo;
  jerr je;
  cinfo.err = jpeg_std_error(&je.pub);
  je.pub.error_exit = jerr_exit;
  je.pub.emit_message = jerr_emit;
  je.pub.output_message = jerr_output;
  je.msg[0] = 0;
  if (setjmp(je.jb)) {
    jpeg_destroy_decompress(&cinfo);
    return bad("JPEG", je.msg);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, p, (unsigned long)n);
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return keel_err(KEEL_ERR_UNSUPPORTED, "ImageDecoder: CMYK JPEG images are not supported");
  }
  cinfo.out_color_space = JCS_RGB;
  keel_status st = dimg_alloc(im, "JPEG", cinfo.image_width, cinfo.image_height);
  if (st) {
    jpeg_destroy_decompress(&cinfo);
    return st;
  }
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != 3 || (int64_t)cinfo.output_width != im->w ||
      (int64_t)cinfo.output_height != im->h) {
    jpeg_destroy_decompress(&cinfo);
    return bad("JPEG", "unexpected output geometry");
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = im->rgb + (size_t)cinfo.output_scanline * (size_t)im->w * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return KEEL_OK;
}

/* ============================================================= PNG */

typedef struct pngsrc {
  const uint8_t *p;
  size_t n, at;
  char msg[128];
} pngsrc;

static void png_read_mem(png_structp png, png_bytep out, size_t len) {
  pngsrc *s = png_get_io_ptr(png);
  if (len > s->n - s->at) png_error(png, "truncated data");
  memcpy(out, s->p + s->at, len);
  s->at += len;
}

static void png_fail(png_structp png, png_const_charp msg) {
  pngsrc *s = png_get_error_ptr(png);
  snprintf(s->msg, sizeof s->msg, "%s", msg);
  png_longjmp(png, 1);
}

static void png_warn(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

/* Any PNG to 8-bit RGB: palettes and gray expanded, 16 bits truncated
 * (as PIL), alpha dropped, interlacing undone by libpng. */
static void png_to_rgb8(png_structp png, png_infop info) {
  int ct = png_get_color_type(png, info);
  png_set_expand(png);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
}

/* The only setjmp for libpng: its errors longjmp here; both structs are
 * destroyed on every path. rows is the one local set after setjmp and
 * read after a jump, hence volatile. */
static keel_status png_decode(dimg *im, const uint8_t *p, size_t n) {
  pngsrc src = {p, n, 0, ""};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_warn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "ImageDecoder: libpng could not start");
  }
  png_bytep *volatile rows = NULL;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    return bad("PNG", src.msg[0] ? src.msg : "error");
  }
  png_set_read_fn(png, &src, png_read_mem);
  png_set_user_limits(png, 1u << 24, 1u << 24);
  png_read_info(png, info);
  png_to_rgb8(png, info);
  keel_status st = dimg_alloc(im, "PNG", png_get_image_width(png, info), png_get_image_height(png, info));
  if (!st && png_get_rowbytes(png, info) != (size_t)im->w * 3) st = bad("PNG", "unexpected row size");
  if (!st) st = keel_k_scratch_n(im->k, im->h, sizeof(png_bytep), (void **)&rows);
  if (st) {
    png_destroy_read_struct(&png, &info, NULL);
    return st;
  }
  for (int64_t y = 0; y < im->h; y++) rows[y] = im->rgb + (size_t)y * (size_t)im->w * 3;
  png_read_image(png, rows);
  png_read_end(png, NULL);
  png_destroy_read_struct(&png, &info, NULL);
  return KEEL_OK;
}

/* ============================================================ WebP */

static keel_status webp_decode(dimg *im, const uint8_t *p, size_t n) {
  int w, h;
  if (!WebPGetInfo(p, n, &w, &h)) return bad("WebP", "not a valid WebP header");
  KEEL_TRY(dimg_alloc(im, "WebP", w, h));
  size_t size = (size_t)im->w * (size_t)im->h * 3;
  if (!WebPDecodeRGBInto(p, n, im->rgb, size, w * 3)) return bad("WebP", "corrupt or truncated data");
  return KEEL_OK;
}

/* ============================================================ TIFF */

typedef struct tiffsrc {
  const uint8_t *p;
  toff_t n, at;
  char msg[160];
} tiffsrc;

static tmsize_t tiff_read(thandle_t h, void *buf, tmsize_t len) {
  tiffsrc *s = h;
  if (len < 0) return -1;
  toff_t left = s->at < s->n ? s->n - s->at : 0, m = (toff_t)len < left ? (toff_t)len : left;
  if (m) memcpy(buf, s->p + s->at, (size_t)m);
  s->at += m;
  return (tmsize_t)m;
}

static tmsize_t tiff_write(thandle_t h, void *buf, tmsize_t len) {
  (void)h, (void)buf, (void)len;
  return -1;
}

static toff_t tiff_seek(thandle_t h, toff_t off, int whence) {
  tiffsrc *s = h;
  toff_t base = whence == SEEK_CUR ? s->at : whence == SEEK_END ? s->n : 0;
  if (off > UINT64_MAX - base) return (toff_t)-1;
  s->at = base + off;
  return s->at;
}

static int tiff_close(thandle_t h) { return (void)h, 0; }
static toff_t tiff_size(thandle_t h) { return ((tiffsrc *)h)->n; }
static int tiff_map(thandle_t h, void **base, toff_t *size) { return (void)h, (void)base, (void)size, 0; }
static void tiff_unmap(thandle_t h, void *base, toff_t size) { (void)h, (void)base, (void)size; }

/* Keeps the first error's text; returning 1 stops libtiff printing it. */
static int tiff_error(TIFF *t, void *ud, const char *mod, const char *fmt, va_list ap) {
  tiffsrc *s = ud;
  (void)t, (void)mod;
  if (!s->msg[0]) vsnprintf(s->msg, sizeof s->msg, fmt, ap);
  return 1;
}

static int tiff_warning(TIFF *t, void *ud, const char *mod, const char *fmt, va_list ap) {
  (void)t, (void)ud, (void)mod, (void)fmt, (void)ap;
  return 1;
}

/* The first directory through TIFFReadRGBAImageOriented (any layout,
 * compression and photometric libtiff knows), alpha dropped. */
static keel_status tiff_pixels(dimg *im, TIFF *t, tiffsrc *src) {
  uint32_t w = 0, h = 0, *raster;
  if (!TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(t, TIFFTAG_IMAGELENGTH, &h))
    return bad("TIFF", "no image size");
  KEEL_TRY(dimg_alloc(im, "TIFF", w, h));
  KEEL_TRY(keel_k_scratch_n(im->k, im->w * im->h, sizeof(uint32_t), (void **)&raster));
  if (!TIFFReadRGBAImageOriented(t, w, h, raster, ORIENTATION_TOPLEFT, 1))
    return bad("TIFF", src->msg[0] ? src->msg : "unreadable image data");
  for (int64_t i = 0; i < im->w * im->h; i++) {
    im->rgb[3 * i] = (uint8_t)TIFFGetR(raster[i]);
    im->rgb[3 * i + 1] = (uint8_t)TIFFGetG(raster[i]);
    im->rgb[3 * i + 2] = (uint8_t)TIFFGetB(raster[i]);
  }
  return KEEL_OK;
}

static keel_status tiff_decode(dimg *im, const uint8_t *p, size_t n) {
  tiffsrc src = {p, n, 0, ""};
  TIFFOpenOptions *opt = TIFFOpenOptionsAlloc();
  if (!opt) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "ImageDecoder: libtiff could not start");
  TIFFOpenOptionsSetErrorHandlerExtR(opt, tiff_error, &src);
  TIFFOpenOptionsSetWarningHandlerExtR(opt, tiff_warning, &src);
  TIFFOpenOptionsSetMaxSingleMemAlloc(opt, (tmsize_t)KEEL_IMG_MAX_PIXELS * 4);
  TIFF *t = TIFFClientOpenExt("ImageDecoder", "rm", &src, tiff_read, tiff_write, tiff_seek, tiff_close,
                              tiff_size, tiff_map, tiff_unmap, opt);
  TIFFOpenOptionsFree(opt);
  if (!t) return bad("TIFF", src.msg[0] ? src.msg : "not a readable TIFF");
  keel_status st = tiff_pixels(im, t, &src);
  TIFFClose(t);
  return st;
}

/* ====================================================== JPEG 2000 */

typedef struct j2ksrc {
  const uint8_t *p;
  OPJ_UINT64 n, at;
  char msg[160];
} j2ksrc;

static OPJ_SIZE_T j2k_read(void *buf, OPJ_SIZE_T len, void *ud) {
  j2ksrc *s = ud;
  OPJ_UINT64 left = s->n - s->at, m = len < left ? len : left;
  if (m == 0) return (OPJ_SIZE_T)-1; /* end of stream */
  memcpy(buf, s->p + s->at, (size_t)m);
  s->at += m;
  return (OPJ_SIZE_T)m;
}

static OPJ_OFF_T j2k_skip(OPJ_OFF_T off, void *ud) {
  j2ksrc *s = ud;
  if (off < 0) off = -(OPJ_OFF_T)s->at < off ? off : -(OPJ_OFF_T)s->at;
  else if ((OPJ_UINT64)off > s->n - s->at) off = (OPJ_OFF_T)(s->n - s->at);
  s->at = (OPJ_UINT64)((OPJ_OFF_T)s->at + off);
  return off;
}

static OPJ_BOOL j2k_seek(OPJ_OFF_T off, void *ud) {
  j2ksrc *s = ud;
  if (off < 0 || (OPJ_UINT64)off > s->n) return OPJ_FALSE;
  s->at = (OPJ_UINT64)off;
  return OPJ_TRUE;
}

static void j2k_error(const char *msg, void *ud) {
  j2ksrc *s = ud;
  if (!s->msg[0]) snprintf(s->msg, sizeof s->msg, "%s", msg);
}

static void j2k_quiet(const char *msg, void *ud) { (void)msg, (void)ud; }

/* A sample at precision prec (maybe signed) as 8 bits, as PIL does:
 * shifted to 8 bits, signed values offset to unsigned, clamped. */
static uint8_t j2k_u8(OPJ_INT32 v, OPJ_UINT32 prec, OPJ_UINT32 sgnd) {
  int64_t x = v;
  if (sgnd) x += (int64_t)1 << (prec - 1);
  x = prec > 8 ? x >> (prec - 8) : x << (8 - prec);
  return (uint8_t)(x < 0 ? 0 : x > 255 ? 255 : x);
}

/* 1 (gray), 2 (gray + alpha), 3 or 4 (RGB + alpha) full-size components. */
static keel_status j2k_pixels(dimg *im, const opj_image_t *img) {
  OPJ_UINT32 nc = img->numcomps;
  if (nc < 1 || nc > 4) return bad("JPEG 2000", "unsupported component count");
  KEEL_TRY(dimg_alloc(im, "JPEG 2000", (int64_t)img->x1 - img->x0, (int64_t)img->y1 - img->y0));
  for (OPJ_UINT32 c = 0; c < nc; c++) {
    const opj_image_comp_t *cp = &img->comps[c];
    if (!cp->data || cp->w != (OPJ_UINT32)im->w || cp->h != (OPJ_UINT32)im->h || cp->prec < 1 ||
        cp->prec > 31)
      return keel_err(KEEL_ERR_UNSUPPORTED, "ImageDecoder: JPEG 2000 with subsampled or %u-bit components",
                      cp->prec);
  }
  int64_t np = im->w * im->h;
  for (int64_t i = 0; i < np; i++)
    for (int c = 0; c < 3; c++) {
      const opj_image_comp_t *cp = &img->comps[nc >= 3 ? (OPJ_UINT32)c : 0];
      im->rgb[3 * i + c] = j2k_u8(cp->data[i], cp->prec, cp->sgnd);
    }
  return KEEL_OK;
}

/* Header, size check, decode: OpenJPEG reports errors by return value
 * (the handlers only keep the text). */
static keel_status j2k_run(dimg *im, opj_codec_t *codec, opj_stream_t *st, j2ksrc *src) {
  opj_dparameters_t prm;
  opj_image_t *img = NULL;
  opj_set_default_decoder_parameters(&prm);
  if (!opj_setup_decoder(codec, &prm)) return bad("JPEG 2000", "decoder setup failed");
  if (!opj_read_header(st, codec, &img)) return bad("JPEG 2000", src->msg[0] ? src->msg : "bad header");
  keel_status s = KEEL_OK;
  int64_t w = (int64_t)img->x1 - img->x0, h = (int64_t)img->y1 - img->y0;
  if (w <= 0 || h <= 0 || w > KEEL_IMG_MAX_PIXELS / h || img->numcomps > 4)
    s = bad("JPEG 2000", "empty, too large or too many components");
  else if (!opj_decode(codec, st, img) || !opj_end_decompress(codec, st))
    s = bad("JPEG 2000", src->msg[0] ? src->msg : "corrupt or truncated data");
  else
    s = j2k_pixels(im, img);
  opj_image_destroy(img);
  return s;
}

static keel_status j2k_decode(dimg *im, const uint8_t *p, size_t n, bool jp2) {
  j2ksrc src = {p, n, 0, ""};
  opj_codec_t *codec = opj_create_decompress(jp2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K);
  opj_stream_t *st = opj_stream_create(1 << 16, OPJ_TRUE);
  keel_status s;
  if (!codec || !st) {
    s = keel_err(KEEL_ERR_OUT_OF_MEMORY, "ImageDecoder: OpenJPEG could not start");
  } else {
    opj_set_error_handler(codec, j2k_error, &src);
    opj_set_warning_handler(codec, j2k_quiet, &src);
    opj_set_info_handler(codec, j2k_quiet, &src);
    opj_stream_set_read_function(st, j2k_read);
    opj_stream_set_skip_function(st, j2k_skip);
    opj_stream_set_seek_function(st, j2k_seek);
    opj_stream_set_user_data(st, &src, NULL);
    opj_stream_set_user_data_length(st, src.n);
    s = j2k_run(im, codec, st, &src);
  }
  if (st) opj_stream_destroy(st);
  if (codec) opj_destroy_codec(codec);
  return s;
}

/* ============================================================= BMP */

/* A bounds-checked little-endian reader over the whole file. */
static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

typedef struct bmpinfo {
  int64_t w, h;
  bool top_down;
  int bpp;
  uint32_t mask[3];            /* R, G, B bitfields (16 and 32 bpp)       */
  const uint8_t *pal;          /* palette entries (B, G, R, x), pal_stride */
  int pal_n, pal_stride;
  size_t data, stride;         /* pixel array offset and row size          */
} bmpinfo;

/* A bitfield's value scaled to 0..255 (PIL: v * 255 / max). */
static uint8_t bmp_field(uint32_t px, uint32_t mask) {
  if (!mask) return 0;
  int shift = __builtin_ctz(mask);
  uint32_t max = mask >> shift, v = (px & mask) >> shift;
  return (uint8_t)((uint64_t)v * 255 / max);
}

/* Header fields: BITMAPCOREHEADER (12 bytes) or BITMAPINFOHEADER and its
 * V2-V5 extensions (40+); compression BI_RGB or BI_BITFIELDS. */
static keel_status bmp_header(const uint8_t *p, size_t n, bmpinfo *b) {
  if (n < 26) return bad("BMP", "truncated header");
  uint32_t hs = le32(p + 14);
  if (hs != 12 && (hs < 40 || hs > n - 14)) return bad("BMP", "unknown header size");
  int32_t h;
  uint32_t comp = 0;
  if (hs == 12) {
    b->w = le16(p + 18), h = le16(p + 20), b->bpp = le16(p + 24), b->pal_stride = 3;
  } else {
    b->w = (int32_t)le32(p + 18), h = (int32_t)le32(p + 22), b->bpp = le16(p + 28);
    comp = le32(p + 30), b->pal_stride = 4;
  }
  if (h == INT32_MIN) return bad("BMP", "bad height");
  b->top_down = h < 0, b->h = h < 0 ? -(int64_t)h : h;
  if (comp != 0 && comp != 3) return keel_err(KEEL_ERR_UNSUPPORTED, "ImageDecoder: compressed BMP (method %u) is not supported", comp);
  if (comp == 3 && (b->bpp != 16 && b->bpp != 32)) return bad("BMP", "bitfields need 16 or 32 bits per pixel");
  bool def16 = b->bpp == 16;
  b->mask[0] = def16 ? 0x7C00 : 0xFF0000, b->mask[1] = def16 ? 0x03E0 : 0xFF00, b->mask[2] = def16 ? 0x1F : 0xFF;
  if (comp == 3) { /* masks follow a 40-byte header, or sit inside V2+ */
    if (14 + 40 + 12 > n) return bad("BMP", "truncated bitfields");
    for (int i = 0; i < 3; i++) b->mask[i] = le32(p + 54 + 4 * i);
  }
  size_t pal_at = 14 + hs + (comp == 3 && hs == 40 ? 12 : 0);
  b->pal = p + (pal_at < n ? pal_at : n);
  uint32_t used = hs >= 40 ? le32(p + 46) : 0;
  b->pal_n = b->bpp <= 8 ? (used && used < (1u << b->bpp) ? (int)used : 1 << b->bpp) : 0;
  if (b->bpp <= 8 && (pal_at > n || (size_t)b->pal_n * (size_t)b->pal_stride > n - pal_at))
    b->pal_n = pal_at > n ? 0 : (int)((n - pal_at) / (size_t)b->pal_stride); /* short palette */
  b->data = le32(p + 10);
  return KEEL_OK;
}

/* Pixel x of a row as RGB. */
static void bmp_pixel(const bmpinfo *b, const uint8_t *row, int64_t x, uint8_t *o) {
  if (b->bpp <= 8) {
    int per = 8 / b->bpp, idx = (row[x / per] >> (8 - b->bpp * (int)(x % per + 1))) & ((1 << b->bpp) - 1);
    if (idx >= b->pal_n) { /* an index past the palette reads black */
      o[0] = o[1] = o[2] = 0;
      return;
    }
    const uint8_t *e = b->pal + (size_t)idx * (size_t)b->pal_stride;
    o[0] = e[2], o[1] = e[1], o[2] = e[0];
  } else if (b->bpp == 24) {
    o[0] = row[3 * x + 2], o[1] = row[3 * x + 1], o[2] = row[3 * x];
  } else {
    uint32_t px = b->bpp == 16 ? le16(row + 2 * x) : le32(row + 4 * x);
    for (int c = 0; c < 3; c++) o[c] = bmp_field(px, b->mask[c]);
  }
}

static keel_status bmp_decode(dimg *im, const uint8_t *p, size_t n) {
  bmpinfo b;
  KEEL_TRY(bmp_header(p, n, &b));
  if (b.bpp != 1 && b.bpp != 4 && b.bpp != 8 && b.bpp != 16 && b.bpp != 24 && b.bpp != 32)
    return bad("BMP", "unsupported bits per pixel");
  KEEL_TRY(dimg_alloc(im, "BMP", b.w, b.h));
  b.stride = ((size_t)b.w * (size_t)b.bpp + 31) / 32 * 4;
  if (b.data > n || b.stride * (size_t)b.h > n - b.data) return bad("BMP", "truncated pixel data");
  for (int64_t y = 0; y < b.h; y++) {
    const uint8_t *row = p + b.data + (size_t)(b.top_down ? y : b.h - 1 - y) * b.stride;
    for (int64_t x = 0; x < b.w; x++) bmp_pixel(&b, row, x, im->rgb + (size_t)(y * b.w + x) * 3);
  }
  return KEEL_OK;
}

/* ============================================================= PNM */

typedef struct pnm {
  const uint8_t *p;
  size_t n, at;
} pnm;

/* The next header integer, skipping whitespace and # comments; -1 when
 * missing or above 2^31. */
static int64_t pnm_int(pnm *s) {
  for (;;) {
    while (s->at < s->n && (s->p[s->at] == ' ' || (s->p[s->at] >= '\t' && s->p[s->at] <= '\r'))) s->at++;
    if (s->at < s->n && s->p[s->at] == '#')
      while (s->at < s->n && s->p[s->at] != '\n' && s->p[s->at] != '\r') s->at++;
    else break;
  }
  if (s->at >= s->n || s->p[s->at] < '0' || s->p[s->at] > '9') return -1;
  int64_t v = 0;
  while (s->at < s->n && s->p[s->at] >= '0' && s->p[s->at] <= '9') {
    v = v * 10 + (s->p[s->at++] - '0');
    if (v > INT32_MAX) return -1;
  }
  return v;
}

/* Sample i of the raster (binary or plain), scaled to 0..255 with
 * rounding half to even (PIL's round(v / maxval * 255)); P1/P4 bits are 1 = black. -1 when truncated. */
static int pnm_sample(pnm *s, int kind, int64_t maxval, int64_t i, int64_t w) {
  int64_t v;
  if (kind == 4) { /* rows of packed bits */
    int64_t row = i / w, x = i % w, at = (int64_t)s->at + row * ((w + 7) / 8) + x / 8;
    if (at >= (int64_t)s->n) return -1;
    return (s->p[at] >> (7 - x % 8)) & 1 ? 0 : 255;
  }
  if (kind == 5 || kind == 6) {
    size_t bytes = maxval > 255 ? 2 : 1, at = s->at + (size_t)i * bytes;
    if (at + bytes > s->n) return -1;
    v = bytes == 2 ? (s->p[at] << 8 | s->p[at + 1]) : s->p[at];
  } else if (kind == 1) { /* plain bits: one digit each, separators optional */
    while (s->at < s->n && s->p[s->at] != '0' && s->p[s->at] != '1') s->at++;
    if (s->at >= s->n) return -1;
    return s->p[s->at++] == '1' ? 0 : 255;
  } else if ((v = pnm_int(s)) < 0) {
    return -1;
  }
  if (v > maxval) v = maxval;
  int64_t q = v * 255 / maxval, r = v * 255 % maxval; /* Python's round: half to even */
  return (int)(2 * r > maxval || (2 * r == maxval && (q & 1)) ? q + 1 : q);
}

static keel_status pnm_decode(dimg *im, const uint8_t *p, size_t n) {
  pnm s = {p, n, 2};
  int kind = p[1] - '0';
  int64_t w = pnm_int(&s), h = pnm_int(&s), maxval = kind == 1 || kind == 4 ? 1 : pnm_int(&s);
  if (w <= 0 || h <= 0 || maxval <= 0 || maxval > 65535) return bad("PNM", "bad header");
  if (s.at >= n) return bad("PNM", "truncated header");
  s.at++; /* the single whitespace byte before a binary raster */
  KEEL_TRY(dimg_alloc(im, "PNM", w, h));
  bool color = kind == 3 || kind == 6;
  for (int64_t i = 0; i < w * h; i++)
    for (int c = 0; c < 3; c++) {
      if (c && !color) {
        im->rgb[3 * i + c] = im->rgb[3 * i];
        continue;
      }
      int v = pnm_sample(&s, kind, maxval, color ? 3 * i + c : i, w);
      if (v < 0) return bad("PNM", "truncated pixel data");
      im->rgb[3 * i + c] = (uint8_t)v;
    }
  return KEEL_OK;
}

/* ========================================================== kernel */

static bool has_magic(const uint8_t *p, size_t n, const char *m, size_t len) {
  return n >= len && !memcmp(p, m, len);
}

static keel_status decode_any(dimg *im, const uint8_t *p, size_t n) {
  if (has_magic(p, n, "\xFF\xD8\xFF", 3)) return jpeg_decode(im, p, n);
  if (has_magic(p, n, "\x89PNG\r\n\x1A\n", 8)) return png_decode(im, p, n);
  if (n >= 12 && has_magic(p, n, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4)) return webp_decode(im, p, n);
  if (has_magic(p, n, "II*\0", 4) || has_magic(p, n, "MM\0*", 4)) return tiff_decode(im, p, n);
  if (has_magic(p, n, "\0\0\0\x0CjP  \r\n\x87\n", 12)) return j2k_decode(im, p, n, true);
  if (has_magic(p, n, "\xFF\x4F\xFF\x51", 4)) return j2k_decode(im, p, n, false);
  if (has_magic(p, n, "BM", 2)) return bmp_decode(im, p, n);
  if (n >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '6') return pnm_decode(im, p, n);
  return keel_err(KEEL_ERR_RUNTIME, "ImageDecoder: %zu bytes that are not JPEG, PNG, WebP, TIFF, JPEG 2000, BMP or PNM", n);
}

static keel_status op_image_decoder(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (x->dtype != KEEL_UINT8 || x->rank != 1)
    return keel_err(KEEL_ERR_SHAPE, "ImageDecoder: encoded_stream must be 1-D uint8, got %s of rank %d",
                    keel_dtype_name((keel_dtype)x->dtype), x->rank);
  const char *fmt = keel_k_attr_s(k, "pixel_format", "RGB");
  int mode = !strcmp(fmt, "RGB") ? 0 : !strcmp(fmt, "BGR") ? 1 : !strcmp(fmt, "Grayscale") ? 2 : -1;
  if (mode < 0) return keel_err(KEEL_ERR_INVALID_MODEL, "ImageDecoder: pixel_format '%s' is not RGB, BGR or Grayscale", fmt);
  dimg im = {k, 0, 0, NULL};
  KEEL_TRY(decode_any(&im, x->data, (size_t)keel_tensor_numel(x)));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_UINT8, 3, (int64_t[]){im.h, im.w, mode == 2 ? 1 : 3}, &y));
  uint8_t *o = y->data;
  const uint8_t *s = im.rgb;
  int64_t np = im.h * im.w;
  if (mode == 0) memcpy(o, s, (size_t)np * 3);
  for (int64_t i = 0; mode == 1 && i < np; i++)
    o[3 * i] = s[3 * i + 2], o[3 * i + 1] = s[3 * i + 1], o[3 * i + 2] = s[3 * i];
  for (int64_t i = 0; mode == 2 && i < np; i++)
    o[i] = (uint8_t)((s[3 * i] * 19595u + s[3 * i + 1] * 38470u + s[3 * i + 2] * 7471u + 0x8000u) >> 16);
  return KEEL_OK;
}

/* ============================================================= table */

const keel_opdef keel_ops_image_decode[] = {
    {"", "ImageDecoder", 20, KEEL_OPSET_MAX, op_image_decoder, 0, KEEL_T(KEEL_UINT8)},
    {0},
};

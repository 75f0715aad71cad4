/* util.c: files, sizes, inputs and value summaries for the command. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli.h"

void *cli_read_file(const char *path, size_t *len, const char **err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    *err = strerror(errno);
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    char *nb = realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (!buf || bad) {
    free(buf);
    *err = buf ? "read error" : "out of memory";
    return NULL;
  }
  *len = n;
  return buf;
}

bool cli_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool cli_is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool cli_parse_threads(const char *s, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < 0 || v > 256) return false;
  *out = (int)v;
  return true;
}

bool cli_parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || v < 0) return false;
  double mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1024, end++;
  else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
  else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return false;
  *out = (size_t)(v * mul);
  return true;
}

const char *cli_bytes(uint64_t b, char *buf, size_t cap) {
  if (b >= (1ull << 30)) snprintf(buf, cap, "%.1f GB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20)) snprintf(buf, cap, "%.1f MB", (double)b / (double)(1ull << 20));
  else if (b >= 1024) snprintf(buf, cap, "%.1f KB", (double)b / 1024.0);
  else snprintf(buf, cap, "%llu B", (unsigned long long)b);
  return buf;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double cli_median(double *x, size_t n) {
  if (!n) return 0;
  qsort(x, n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* ============================================================ inputs */

static keel_status load_pb(keel_session_t *s, const char *path, keel_value_kind kind,
                           keel_value_t **out) {
  size_t len;
  const char *err;
  void *bytes = cli_read_file(path, &len, &err);
  if (!bytes) {
    fprintf(stderr, "keel: %s: %s\n", path, err);
    return KEEL_ERR_IO;
  }
  keel_status st = keel_value_from_pb(s, bytes, len, kind, out);
  free(bytes);
  return st;
}

static void release_value(void *ud) { keel_value_release(ud); }

/* ONNX's test data (1.12) stores bfloat16 tensors as uint16 bit patterns,
 * numpy having no bfloat16. Where the model declares bfloat16 and the file
 * holds uint16, the bits are the value: wrap them as bfloat16, no copy. */
static keel_status bf16_from_u16(keel_session_t *s, const keel_io_info *io, keel_value_t **v) {
  if (io->dtype != KEEL_BFLOAT16 || keel_value_kind_of(*v) != KEEL_KIND_TENSOR ||
      keel_value_dtype(*v) != KEEL_UINT16)
    return KEEL_OK;
  keel_value_t *w;
  keel_status st = keel_tensor_wrap(s, KEEL_BFLOAT16, keel_value_rank(*v), keel_value_shape(*v),
                                    (void *)keel_value_data(*v), release_value, *v, &w);
  if (st) return st;
  *v = w; /* w holds the original until it is released */
  return KEEL_OK;
}

static keel_value_kind kind_of(const keel_io_info *io) {
  if (io->optional) return KEEL_KIND_NONE;
  return io->kind;
}

keel_status cli_load_data_dir(keel_session_t *s, const char *dir, cli_inputs *in) {
  size_t k = 0;
  for (size_t i = 0; i < keel_session_input_count(s); i++) {
    keel_io_info io;
    keel_session_input(s, i, &io);
    if (io.has_default) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/input_%zu.pb", dir, k++);
    if (!cli_is_file(path)) break;
    if (in->n == KEEL_CLI_MAX_INPUTS) return KEEL_ERR_INVALID_ARG;
    keel_status st = load_pb(s, path, kind_of(&io), &in->values[in->n]);
    if (!st) st = bf16_from_u16(s, &io, &in->values[in->n]);
    if (st) return st;
    in->names[in->n++] = io.name;
  }
  return KEEL_OK;
}

keel_status cli_load_named(keel_session_t *s, const char *spec, cli_inputs *in) {
  const char *eq = strchr(spec, '=');
  if (!eq || eq == spec || in->n == KEEL_CLI_MAX_INPUTS) return KEEL_ERR_INVALID_ARG;
  char *name = strndup(spec, (size_t)(eq - spec));
  keel_value_kind kind = KEEL_KIND_TENSOR;
  for (size_t i = 0; i < keel_session_input_count(s); i++) {
    keel_io_info io;
    keel_session_input(s, i, &io);
    if (!strcmp(io.name, name)) kind = kind_of(&io);
  }
  keel_status st = load_pb(s, eq + 1, kind, &in->values[in->n]);
  if (st) {
    free(name);
    return st;
  }
  in->owned_names[in->n] = name;
  in->names[in->n++] = name;
  return KEEL_OK;
}

static bool given(const cli_inputs *in, const char *name) {
  for (size_t i = 0; i < in->n; i++)
    if (!strcmp(in->names[i], name)) return true;
  return false;
}

/* xorshift: deterministic inputs without libc's rand state */
static uint64_t next_rand(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

static keel_status generate(keel_session_t *s, const keel_io_info *io, keel_value_t **out,
                            FILE *note) {
  int64_t shape[KEEL_MAX_RANK];
  int rank = io->rank < 0 ? 0 : io->rank;
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) {
    shape[d] = io->dims[d] > 0 ? io->dims[d] : 1;
    numel *= shape[d];
  }
  keel_dtype dt = io->dtype ? io->dtype : KEEL_FLOAT;
  if (io->kind != KEEL_KIND_TENSOR || dt == KEEL_STRING || numel > (1 << 28)) {
    fprintf(note, "keel: cannot generate input '%s'; give it with --input or --data\n", io->name);
    return KEEL_ERR_INVALID_ARG;
  }
  keel_status st = keel_tensor_create(s, dt, rank, shape, NULL, out);
  if (st) return st;
  void *data = (void *)keel_value_data(*out);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int64_t i = 0; i < numel; i++) {
    double r = (double)(next_rand(&x) >> 11) / 9007199254740992.0; /* [0,1) */
    switch (dt) {
      case KEEL_FLOAT: ((float *)data)[i] = (float)(r * 2 - 1); break;
      case KEEL_DOUBLE: ((double *)data)[i] = r * 2 - 1; break;
      case KEEL_BOOL: ((uint8_t *)data)[i] = r < 0.5; break;
      case KEEL_INT64: ((int64_t *)data)[i] = (int64_t)(r * 10); break;
      case KEEL_INT32: ((int32_t *)data)[i] = (int32_t)(r * 10); break;
      default: memset((char *)data + (size_t)i * keel_dtype_size(dt), 0, keel_dtype_size(dt)); break;
    }
  }
  char desc[256];
  cli_describe(*out, desc, sizeof desc);
  fprintf(note, "input  %s: generated %s\n", io->name, desc);
  return KEEL_OK;
}

keel_status cli_generate_missing(keel_session_t *s, cli_inputs *in, FILE *note) {
  for (size_t i = 0; i < keel_session_input_count(s); i++) {
    keel_io_info io;
    keel_session_input(s, i, &io);
    if (io.has_default || io.optional || given(in, io.name)) continue;
    if (in->n == KEEL_CLI_MAX_INPUTS) return KEEL_ERR_INVALID_ARG;
    keel_status st = generate(s, &io, &in->values[in->n], note);
    if (st) return st;
    in->names[in->n++] = io.name;
  }
  return KEEL_OK;
}

void cli_inputs_free(cli_inputs *in) {
  for (size_t i = 0; i < in->n; i++) {
    keel_value_release(in->values[i]);
    free(in->owned_names[i]);
  }
  memset(in, 0, sizeof *in);
}

keel_status cli_load_expected(keel_session_t *s, const char *dir, keel_value_t **out,
                              size_t n_out, size_t *n_found) {
  *n_found = 0;
  for (size_t i = 0; i < n_out; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/output_%zu.pb", dir, i);
    if (!cli_is_file(path)) break;
    keel_io_info io;
    keel_session_output(s, i, &io);
    keel_status st = load_pb(s, path, kind_of(&io), &out[i]);
    if (!st) st = bf16_from_u16(s, &io, &out[i]);
    if (st) return st;
    (*n_found)++;
  }
  return KEEL_OK;
}

/* =========================================================== printing */

static void shape_str(const keel_value_t *v, char *buf, size_t cap) {
  size_t at = (size_t)snprintf(buf, cap, "[");
  const int64_t *sh = keel_value_shape(v);
  for (int i = 0; i < keel_value_rank(v) && at < cap; i++)
    at += (size_t)snprintf(buf + at, cap - at, i ? ",%" PRId64 : "%" PRId64, sh[i]);
  if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* "map<string,float> of 3: {"a": 0.5, "b": 1, ...}" (up to 6 entries). */
static void describe_map(const keel_value_t *v, char *buf, size_t cap) {
  keel_dtype kt = keel_map_key_dtype(v), vt = keel_value_dtype(v);
  size_t n = keel_map_size(v);
  size_t at = (size_t)snprintf(buf, cap, "map<%s,%s> of %zu: {", keel_dtype_name(kt), keel_dtype_name(vt), n);
  const void *k = keel_map_keys(v), *d = keel_map_values(v);
  for (size_t i = 0; i < n && i < 6 && at < cap; i++) {
    const char *sep = i ? ", " : "";
    if (kt == KEEL_INT64) at += (size_t)snprintf(buf + at, cap - at, "%s%" PRId64 ": ", sep, ((const int64_t *)k)[i]);
    else at += (size_t)snprintf(buf + at, cap - at, "%s\"%.20s\": ", sep, ((const keel_string *)k)[i].data);
    if (at >= cap) break;
    if (vt == KEEL_STRING) at += (size_t)snprintf(buf + at, cap - at, "\"%.20s\"", ((const keel_string *)d)[i].data);
    else if (vt == KEEL_FLOAT) at += (size_t)snprintf(buf + at, cap - at, "%.6g", ((const float *)d)[i]);
    else if (vt == KEEL_DOUBLE) at += (size_t)snprintf(buf + at, cap - at, "%.6g", ((const double *)d)[i]);
    else if (vt == KEEL_INT64) at += (size_t)snprintf(buf + at, cap - at, "%" PRId64, ((const int64_t *)d)[i]);
    else at += (size_t)snprintf(buf + at, cap - at, "?");
  }
  if (at < cap) snprintf(buf + at, cap - at, n > 6 ? ", ...}" : "}");
}

void cli_describe(const keel_value_t *v, char *buf, size_t cap) {
  keel_value_kind kind = keel_value_kind_of(v);
  if (kind == KEEL_KIND_NONE) {
    snprintf(buf, cap, "none (empty optional)");
    return;
  }
  if (kind == KEEL_KIND_MAP) {
    describe_map(v, buf, cap);
    return;
  }
  if (kind == KEEL_KIND_SEQUENCE) {
    const keel_value_t *e0 = keel_sequence_length(v) ? keel_sequence_at(v, 0) : NULL;
    if (e0 && keel_value_kind_of(e0) == KEEL_KIND_MAP) {
      size_t at = (size_t)snprintf(buf, cap, "sequence<map<%s,%s>> of %zu; item 0: ",
                                   keel_dtype_name(keel_map_key_dtype(e0)),
                                   keel_dtype_name(keel_value_dtype(e0)), keel_sequence_length(v));
      if (at < cap) describe_map(e0, buf + at, cap - at);
      return;
    }
    snprintf(buf, cap, "sequence<%s> of %zu", keel_dtype_name(keel_value_dtype(v)),
             keel_sequence_length(v));
    return;
  }
  char sh[128];
  shape_str(v, sh, sizeof sh);
  keel_dtype dt = keel_value_dtype(v);
  int64_t n = keel_value_numel(v);
  size_t at = (size_t)snprintf(buf, cap, "%s %s", keel_dtype_name(dt), sh);
  const void *d = keel_value_data(v);
  if (!n || at >= cap) return;
  if (dt == KEEL_STRING) {
    const keel_string *s = d;
    snprintf(buf + at, cap - at, " \"%.40s\"%s", s[0].data, n > 1 ? " ..." : "");
    return;
  }
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = keel_value_at(v, i);
    mn = fmin(mn, x), mx = fmax(mx, x), sum += x;
  }
  at += (size_t)snprintf(buf + at, cap - at, " min %.6g max %.6g mean %.6g:", mn, mx, sum / (double)n);
  for (int64_t i = 0; i < n && i < 6 && at < cap; i++)
    at += (size_t)snprintf(buf + at, cap - at, " %.6g", keel_value_at(v, i));
  if (n > 6 && at < cap) snprintf(buf + at, cap - at, " ...");
}

int cli_leak_report(keel_session_t *s, uint64_t mark, const char *why, const char *since) {
  keel_live_filter f = {.size = sizeof f, .since = mark};
  char *rep = NULL, b[32];
  uint64_t bytes = 0;
  keel_mem_live_report(s, &f, 0, &rep, &bytes);
  printf("%sverdict: LEAK: %s; %s allocated since %s is still alive:\n%s", cli_dist_tag(), why,
         cli_bytes(bytes, b, sizeof b), since, rep ? rep : "");
  keel_free(rep);
  return 1;
}

void cli_print_line(void *arg, const char *line) { fprintf(arg, "  %s\n", line); }

const char *cli_duration(double seconds, char *buf, size_t cap) {
  if (seconds >= 1e-3) snprintf(buf, cap, "%.3f ms", seconds * 1e3);
  else if (seconds >= 1e-6) snprintf(buf, cap, "%.3f us", seconds * 1e6);
  else snprintf(buf, cap, "%.0f ns", seconds * 1e9);
  return buf;
}

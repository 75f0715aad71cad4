/* cmd_test.c: `keel test`: the ONNX backend test-suite runner.
 *
 * A test is a folder with model.onnx and test_data_set_N folders holding
 * input_K.pb and output_K.pb. Each data set is run and compared: shapes and
 * types exactly; floats within |a-b| <= 1e-5 + 1e-3*|b| (NaN matches NaN);
 * integers, bools and strings exactly. After each test the session is
 * destroyed and keel must hold zero bytes: anything left is a failure.
 * Models with random ops are compared by property (compare_random).
 * With --repeat N each data set runs N times and the allocated bytes after
 * every run (outputs released) must equal those after the first.
 * Under mpirun a shard folder (rank_R.onnx, no model.onnx) is a test too:
 * every rank runs its own file and checks its memory, rank 0 compares.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "exec/shapecheck.h"

#define ATOL 1e-5
#define RTOL 1e-3

typedef enum { R_PASS, R_FAIL, R_ERROR, R_UNSUPPORTED, R_SKIP } result_kind;
static const char *kind_name[] = {"PASS", "FAIL", "ERROR", "UNSUPPORTED", "SKIP"};

typedef struct result {
  char *name;
  result_kind kind;
  char *detail;
} result;

typedef struct results {
  result *r;
  size_t n, cap;
} results;

/* ======================================================== comparing */

static bool is_float(keel_dtype t) {
  return t == KEEL_FLOAT || t == KEEL_DOUBLE || t == KEEL_FLOAT16 || t == KEEL_BFLOAT16 ||
         (t >= KEEL_FLOAT8E4M3FN && t <= KEEL_FLOAT8E5M2FNUZ) || t == KEEL_FLOAT4E2M1 ||
         t == KEEL_FLOAT8E8M0;
}

static void shape_text(const keel_value_t *v, char *buf, size_t cap) {
  size_t at = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < keel_value_rank(v) && at < cap; i++)
    at += (size_t)snprintf(buf + at, cap - at, i ? ",%lld" : "%lld",
                           (long long)keel_value_shape(v)[i]);
  if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* Compares two tensors; on mismatch writes why (the worst element). */
static bool compare_tensor(const keel_value_t *got, const keel_value_t *want, char *why,
                           size_t cap) {
  keel_dtype dg = keel_value_dtype(got), dw = keel_value_dtype(want);
  char sg[128], sw[128];
  shape_text(got, sg, sizeof sg);
  shape_text(want, sw, sizeof sw);
  if (dg != dw) {
    snprintf(why, cap, "type %s, expected %s", keel_dtype_name(dg), keel_dtype_name(dw));
    return false;
  }
  if (strcmp(sg, sw)) {
    snprintf(why, cap, "shape %s, expected %s", sg, sw);
    return false;
  }
  int64_t n = keel_value_numel(want);
  if (dw == KEEL_STRING) {
    const keel_string *a = keel_value_data(got), *b = keel_value_data(want);
    for (int64_t i = 0; i < n; i++)
      if (a[i].len != b[i].len || (a[i].len && memcmp(a[i].data, b[i].data, a[i].len))) {
        snprintf(why, cap, "element %lld: \"%.60s\", expected \"%.60s\"", (long long)i,
                 a[i].data ? a[i].data : "", b[i].data ? b[i].data : "");
        return false;
      }
    return true;
  }
  int64_t worst = -1;
  double worst_excess = 0;
  for (int64_t i = 0; i < n; i++) {
    double a = keel_value_at(got, i), b = keel_value_at(want, i);
    if (isnan(a) && isnan(b)) continue;
    double excess;
    if (is_float(dw)) {
      if (isinf(a) || isinf(b)) excess = a == b ? 0 : INFINITY;
      else excess = fabs(a - b) - (ATOL + RTOL * fabs(b));
      if (isnan(excess)) excess = INFINITY;
    } else {
      excess = a == b ? 0 : fabs(a - b) + 1;
    }
    if (excess > 0 && (worst < 0 || excess > worst_excess)) worst = i, worst_excess = excess;
  }
  if (worst < 0) return true;
  snprintf(why, cap, "shape %s, element %lld: got %.9g, expected %.9g", sw, (long long)worst,
           keel_value_at(got, worst), keel_value_at(want, worst));
  return false;
}

/* Random ops: the values come from another generator, so compare by
 * property: same type and shape; every value inside the expected values'
 * range (widened by a quarter of it); integral where they all are; and the
 * mean within half the range of the expected mean, or within 3.5 range /
 * sqrt(n) when that is wider: both means are of n random draws, and with
 * few of them (ten Bernoulli trials) half the range is crossed about once in
 * 300 runs; Hoeffding's bound puts the wider limit's false alarms below 1e-5. */
static bool compare_random(const keel_value_t *got, const keel_value_t *want, char *why,
                           size_t cap) {
  keel_dtype dw = keel_value_dtype(want);
  if (keel_value_dtype(got) != dw || keel_value_rank(got) != keel_value_rank(want) ||
      keel_value_numel(got) != keel_value_numel(want) || dw == KEEL_STRING)
    return compare_tensor(got, want, why, cap);
  int64_t n = keel_value_numel(want);
  double lo = INFINITY, hi = -INFINITY, mw = 0, mg = 0;
  bool integral = true;
  for (int64_t i = 0; i < n; i++) {
    double b = keel_value_at(want, i);
    lo = fmin(lo, b), hi = fmax(hi, b), mw += b;
    integral &= b == floor(b);
  }
  double w = 0.25 * (hi - lo);
  for (int64_t i = 0; i < n; i++) {
    double a = keel_value_at(got, i);
    mg += a;
    if (!(a >= lo - w && a <= hi + w) || (integral && a != floor(a))) {
      snprintf(why, cap, "random value %g at %lld is outside the expected support [%g, %g]%s", a,
               (long long)i, lo, hi, integral ? " (integers)" : "");
      return false;
    }
  }
  double tol = fmax(0.5, 3.5 / sqrt((double)n)) * (hi - lo) + 1e-6;
  if (n && fabs(mg / (double)n - mw / (double)n) > tol) {
    snprintf(why, cap, "random mean %g, expected about %g", mg / (double)n, mw / (double)n);
    return false;
  }
  return true;
}

/* Map values as doubles (numeric value types). */
static double map_num(keel_dtype dt, const void *vals, size_t i) {
  switch (dt) {
    case KEEL_FLOAT: return ((const float *)vals)[i];
    case KEEL_DOUBLE: return ((const double *)vals)[i];
    case KEEL_INT64: return (double)((const int64_t *)vals)[i];
    case KEEL_INT32: return ((const int32_t *)vals)[i];
    default: return (double)NAN;
  }
}

static bool key_eq(keel_dtype kt, const void *a, size_t i, const void *b, size_t j) {
  if (kt == KEEL_INT64) return ((const int64_t *)a)[i] == ((const int64_t *)b)[j];
  const keel_string *x = (const keel_string *)a + i, *y = (const keel_string *)b + j;
  return x->len == y->len && (!x->len || !memcmp(x->data, y->data, x->len));
}

static void key_text(keel_dtype kt, const void *k, size_t i, char *buf, size_t cap) {
  if (kt == KEEL_INT64) snprintf(buf, cap, "%lld", (long long)((const int64_t *)k)[i]);
  else snprintf(buf, cap, "\"%.40s\"", ((const keel_string *)k)[i].data ? ((const keel_string *)k)[i].data : "");
}

/* Value j of want against value i of got (floats with the tolerance). */
static bool map_value_eq(keel_dtype vt, const void *g, size_t i, const void *w, size_t j) {
  if (vt == KEEL_STRING) return key_eq(KEEL_STRING, g, i, w, j);
  double a = map_num(vt, g, i), b = map_num(vt, w, j);
  if (isnan(a) && isnan(b)) return true;
  if (is_float(vt)) return fabs(a - b) <= ATOL + RTOL * fabs(b);
  return a == b;
}

/* Maps are compared as sets of entries (their order carries no meaning). */
static bool compare_map(const keel_value_t *got, const keel_value_t *want, char *why, size_t cap) {
  keel_dtype kt = keel_map_key_dtype(want), vt = keel_value_dtype(want);
  size_t n = keel_map_size(want);
  if (keel_map_key_dtype(got) != kt || keel_value_dtype(got) != vt) {
    snprintf(why, cap, "map<%s,%s>, expected map<%s,%s>", keel_dtype_name(keel_map_key_dtype(got)),
             keel_dtype_name(keel_value_dtype(got)), keel_dtype_name(kt), keel_dtype_name(vt));
    return false;
  }
  if (keel_map_size(got) != n) {
    snprintf(why, cap, "map of %zu entries, expected %zu", keel_map_size(got), n);
    return false;
  }
  const void *gk = keel_map_keys(got), *wk = keel_map_keys(want);
  const void *gv = keel_map_values(got), *wv = keel_map_values(want);
  for (size_t j = 0; j < n; j++) {
    size_t i = 0;
    while (i < n && !key_eq(kt, gk, i, wk, j)) i++;
    char key[64];
    key_text(kt, wk, j, key, sizeof key);
    if (i == n) {
      snprintf(why, cap, "key %s is missing", key);
      return false;
    }
    if (!map_value_eq(vt, gv, i, wv, j)) {
      snprintf(why, cap, "key %s: got %.9g, expected %.9g", key, map_num(vt, gv, i), map_num(vt, wv, j));
      return false;
    }
  }
  return true;
}

static bool compare_value(const keel_value_t *got, const keel_value_t *want, bool random,
                          char *why, size_t cap) {
  keel_value_kind kg = keel_value_kind_of(got), kw = keel_value_kind_of(want);
  if (kg != kw) {
    static const char *names[] = {"?", "tensor", "sequence", "none", "map"};
    snprintf(why, cap, "a %s, expected a %s", names[kg], names[kw]);
    return false;
  }
  if (kw == KEEL_KIND_NONE) return true;
  if (kw == KEEL_KIND_TENSOR)
    return random ? compare_random(got, want, why, cap) : compare_tensor(got, want, why, cap);
  if (kw == KEEL_KIND_MAP) return compare_map(got, want, why, cap);
  size_t ng = keel_sequence_length(got), nw = keel_sequence_length(want);
  if (ng != nw) {
    snprintf(why, cap, "sequence of %zu, expected %zu", ng, nw);
    return false;
  }
  for (size_t i = 0; i < nw; i++) {
    char inner[384];
    const keel_value_t *gi = keel_sequence_at(got, i), *wi = keel_sequence_at(want, i);
    bool maps = keel_value_kind_of(wi) == KEEL_KIND_MAP;
    if (maps && keel_value_kind_of(gi) != KEEL_KIND_MAP) {
      snprintf(why, cap, "item %zu: a tensor, expected a map", i);
      return false;
    }
    if (!(maps ? compare_map(gi, wi, inner, sizeof inner) : compare_tensor(gi, wi, inner, sizeof inner))) {
      snprintf(why, cap, "item %zu: %s", i, inner);
      return false;
    }
  }
  return true;
}

/* ======================================================== one test */

static void add_result(results *R, const char *name, result_kind kind, const char *detail) {
  if (R->n == R->cap) {
    R->cap = R->cap ? R->cap * 2 : 256;
    R->r = realloc(R->r, R->cap * sizeof *R->r);
  }
  R->r[R->n++] = (result){strdup(name), kind, detail ? strdup(detail) : NULL};
  if (detail && *detail) printf("%s %s: %s\n", kind_name[kind], name, detail);
  else printf("%s %s\n", kind_name[kind], name);
  fflush(stdout);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted subfolder names of dir starting with prefix (numeric suffix order
 * for test_data_set_N). */
static size_t list_dirs(const char *dir, const char *prefix, char ***out) {
  DIR *d = opendir(dir);
  size_t n = 0, cap = 0;
  char **names = NULL;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) || e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (!cli_is_dir(path)) continue;
    if (n == cap) names = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *names);
    names[n++] = strdup(e->d_name);
  }
  if (d) closedir(d);
  if (n) qsort(names, n, sizeof *names, cmp_str);
  *out = names;
  return n;
}

static void free_list(char **names, size_t n) {
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
}

static uint64_t allocated(const keel_session_t *s) {
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  return st.allocated;
}

/* Runs the data set `repeat` times; after the first run the allocated bytes
 * (outputs released) must not change: a control-flow leak shows here. */
static keel_status run_repeated(keel_session_t *s, cli_inputs *in, keel_value_t **got,
                                size_t nout, int repeat, char *why, size_t cap, bool *grew) {
  uint64_t first = 0;
  *grew = false;
  for (int r = 0; r < repeat; r++) {
    for (size_t i = 0; i < nout; i++) keel_value_release(got[i]), got[i] = NULL;
    keel_status st = keel_run(s, in->names, in->values, in->n, got);
    if (st) return st;
    if (repeat == 1) break;
    for (size_t i = 0; i < nout; i++) keel_value_release(got[i]), got[i] = NULL;
    uint64_t now = allocated(s);
    if (r == 0) first = now;
    else if (now != first) {
      snprintf(why, cap, "allocated bytes changed from %llu after run 1 to %llu after run %d",
               (unsigned long long)first, (unsigned long long)now, r + 1);
      *grew = true;
      return KEEL_OK;
    }
    if (r + 1 < repeat) continue;
    st = keel_run(s, in->names, in->values, in->n, got); /* outputs to compare */
    if (st) return st;
  }
  return KEEL_OK;
}

/* Runs one data set; returns the result kind and writes details. */
static result_kind run_dataset(keel_session_t *s, const char *dir, int repeat, char *why,
                               size_t cap) {
  cli_inputs in = {0};
  size_t nout = keel_session_output_count(s), nexp = 0;
  keel_value_t **got = calloc(nout + 1, sizeof *got), **want = calloc(nout + 1, sizeof *want);
  result_kind rk = R_PASS;
  bool grew = false;
  keel_status st = cli_load_data_dir(s, dir, &in);
  if (!st) st = cli_load_expected(s, dir, want, nout, &nexp);
  if (st) {
    snprintf(why, cap, "reading test data: %s", keel_last_error());
    rk = R_ERROR;
  } else if ((st = run_repeated(s, &in, got, nout, repeat, why, cap, &grew))) {
    snprintf(why, cap, "%s", keel_last_error());
    rk = st == KEEL_ERR_UNSUPPORTED ? R_UNSUPPORTED : R_ERROR;
  } else if (grew) {
    rk = R_FAIL;
  } else {
    /* under mpirun rank 0's outputs are the model's (others may differ) */
    for (size_t i = 0; i < nexp && rk == R_PASS && cli_dist_rank() == 0; i++) {
      char inner[512];
      keel_io_info io;
      keel_session_output(s, i, &io);
      if (!compare_value(got[i], want[i], keel_session_is_random(s), inner, sizeof inner)) {
        snprintf(why, cap, "output '%s': %s", io.name, inner);
        rk = R_FAIL;
      }
    }
  }
  for (size_t i = 0; i < nout; i++) keel_value_release(got[i]), keel_value_release(want[i]);
  free(got);
  free(want);
  cli_inputs_free(&in);
  return rk;
}

static bool g_debug_leak; /* --debug-leak-subgraphs (test-only) */
static bool g_roundtrip;  /* --roundtrip: run the model as onnx/write.c writes it */
static keel_shapecheck_counts g_shapes; /* --check-shapes: the values compared */

static void run_test(const char *dir, const char *name, const keel_options *opts, int repeat,
                     results *R) {
  char path[4200], why[1024] = "";
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  if (!cli_is_file(path) && cli_is_shard_dir(dir) && cli_dist_model(dir, path, sizeof path)) {
    add_result(R, name, R_ERROR, "the shard folder's rank count differs from the job's");
    return;
  }
  uint64_t before = keel_process_bytes();
  keel_session_t *s;
  keel_status st = g_roundtrip ? cli_roundtrip_session(path, opts, &s)
                               : keel_session_create(path, opts, &s);
  if (st) {
    add_result(R, name, st == KEEL_ERR_UNSUPPORTED ? R_UNSUPPORTED : R_ERROR, keel_last_error());
    return;
  }
  keel_debug_leak_subgraph_results(s, g_debug_leak);
  char **sets;
  size_t nsets = list_dirs(dir, "test_data_set_", &sets);
  result_kind rk = R_PASS;
  for (size_t i = 0; i < nsets && rk == R_PASS; i++) {
    char sd[4096];
    snprintf(sd, sizeof sd, "%s/%s", dir, sets[i]);
    char inner[900] = "";
    rk = run_dataset(s, sd, repeat, inner, sizeof inner);
    if (rk != R_PASS) snprintf(why, sizeof why, "%s: %s", sets[i], inner);
  }
  free_list(sets, nsets);
  keel_shapecheck_counts sc = keel_shapecheck_get(s);
  g_shapes.checked += sc.checked, g_shapes.known += sc.known;
  g_shapes.symbolic += sc.symbolic, g_shapes.unknown += sc.unknown, g_shapes.runs_off += sc.runs_off;
  g_shapes.typed += sc.typed;
  keel_session_destroy(s);
  uint64_t after = keel_process_bytes();
  if (rk == R_PASS && after != before) {
    snprintf(why, sizeof why, "keel still holds %llu bytes after the test",
             (unsigned long long)(after - before));
    rk = R_FAIL;
  }
  add_result(R, name, rk, why);
  /* an error on one rank may leave its peers waiting in a collective */
  if (rk == R_ERROR && cli_dist_on()) {
    fprintf(stderr, "keel: %s%s: %s\n", cli_dist_tag(), name, why);
    exit(cli_dist_end(1));
  }
}

/* The tests under one PATH: the folder itself when it holds model.onnx,
 * else its subfolders (those without a model are listed as skipped). */
typedef struct test_list {
  char **dirs, **names;
  size_t n, cap;
} test_list;

static void list_add(test_list *t, const char *dir, const char *name) {
  if (t->n == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 256;
    t->dirs = realloc(t->dirs, t->cap * sizeof *t->dirs);
    t->names = realloc(t->names, t->cap * sizeof *t->names);
  }
  t->dirs[t->n] = dir ? strdup(dir) : NULL;
  t->names[t->n++] = strdup(name);
}

static void collect_tests(const char *path, test_list *t) {
  char model[4096];
  snprintf(model, sizeof model, "%s/model.onnx", path);
  const char *base = strrchr(path, '/');
  base = base && base[1] ? base + 1 : path;
  if (cli_is_file(model) || cli_is_shard_dir(path)) {
    list_add(t, path, base);
    return;
  }
  char **subs;
  size_t n = list_dirs(path, "", &subs);
  for (size_t i = 0; i < n; i++) {
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/%s", path, subs[i]);
    snprintf(model, sizeof model, "%s/model.onnx", sub);
    list_add(t, cli_is_file(model) || cli_is_shard_dir(sub) ? sub : NULL, subs[i]);
  }
  free_list(subs, n);
}

/* Runs every test, with progress on stderr (a bar on a terminal). */
static void run_all(const test_list *t, const keel_options *opts, int repeat, results *R) {
  cli_progress pr;
  cli_progress_start(&pr, "test", (long)t->n);
  for (size_t i = 0; i < t->n; i++) {
    cli_progress_clear(&pr);
    if (t->dirs[i]) run_test(t->dirs[i], t->names[i], opts, repeat, R);
    else add_result(R, t->names[i], R_SKIP, "no model.onnx");
    if (t->n >= 20) cli_progress_update(&pr, (long)i + 1);
  }
  if (t->n >= 20) cli_progress_end(&pr);
}

/* ========================================================== reports */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static int write_json(const char *path, const results *R, size_t pass, size_t fail, size_t skip) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "keel: cannot write %s\n", path);
    return 1;
  }
  fprintf(f, "{\"passed\": %zu, \"failed\": %zu, \"skipped\": %zu, \"tests\": [\n", pass, fail, skip);
  for (size_t i = 0; i < R->n; i++) {
    fprintf(f, "  {\"name\": ");
    json_str(f, R->r[i].name);
    fprintf(f, ", \"result\": \"%s\", \"detail\": ", kind_name[R->r[i].kind]);
    json_str(f, R->r[i].detail ? R->r[i].detail : "");
    fprintf(f, "}%s\n", i + 1 < R->n ? "," : "");
  }
  fprintf(f, "]}\n");
  return fclose(f) ? 1 : 0;
}

/* Every test named in the list file must have passed. */
static int check_expected(const char *list, const results *R) {
  size_t len;
  const char *err;
  char *text = cli_read_file(list, &len, &err);
  if (!text) {
    fprintf(stderr, "keel: %s: %s\n", list, err);
    return 1;
  }
  text = realloc(text, len + 1);
  text[len] = 0;
  int missing = 0, listed = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (!*line || *line == '#') continue;
    listed++;
    bool ok = false;
    for (size_t i = 0; i < R->n && !ok; i++) ok = !strcmp(R->r[i].name, line) && R->r[i].kind == R_PASS;
    if (!ok) {
      printf("EXPECTED TO PASS: %s\n", line);
      missing++;
    }
  }
  free(text);
  printf("%d of %d expected tests pass\n", listed - missing, listed);
  return missing ? 1 : 0;
}

int cmd_test(int argc, char **argv) {
  const char *json = NULL, *expect = NULL, *paths[1024];
  size_t n_paths = 0, mem_limit = 0;
  int threads = 0;
  const char *device = NULL;   /* --device: keel_options.device            */
  int repeat = 1;
  unsigned flags = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--debug-leak-subgraphs")) g_debug_leak = true;
    else if (!strcmp(argv[i], "--roundtrip")) g_roundtrip = true;
    else if (!strcmp(argv[i], "--check-shapes")) flags |= KEEL_OPT_CHECK_SHAPES;
    else if (!strcmp(argv[i], "--no-passes")) flags |= KEEL_OPT_NO_GRAPH_PASSES;
    else if (!strcmp(argv[i], "--deterministic")) flags |= KEEL_OPT_DETERMINISTIC;
    else if (!strcmp(argv[i], "--plan-only")) flags |= KEEL_OPT_PLAN_ONLY;
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
      repeat = atoi(argv[++i]);
      if (repeat < 1) return cli_usage("test", "--repeat needs a positive number");
    }
    else if (!strcmp(argv[i], "--expect") && i + 1 < argc) expect = argv[++i];
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      if (!cli_parse_threads(argv[++i], &threads)) return cli_usage("test", "bad --threads");
    } else if (!strcmp(argv[i], "--mem-limit") && i + 1 < argc) {
      if (!cli_parse_size(argv[++i], &mem_limit)) return cli_usage("test", "bad --mem-limit");
    } else if (argv[i][0] == '-') {
      char msg[256];
      snprintf(msg, sizeof msg, "unknown or incomplete option '%s'", argv[i]);
      return cli_usage("test", msg);
    } else if (n_paths < 1024) {
      if (!cli_is_dir(argv[i])) {
        char msg[4200];
        snprintf(msg, sizeof msg, "%s: no such folder", argv[i]);
        return cli_usage("test", msg);
      }
      paths[n_paths++] = argv[i];
    }
  }
  if (!n_paths) return cli_usage("test", "no test folder given");
  keel_options opts = {.size = sizeof opts, .mem_limit = mem_limit, .threads = threads, .flags = flags,
                       .device = device};
  bool shards = keel_dist_launched();
  for (size_t i = 0; i < n_paths; i++) shards = shards || cli_is_shard_dir(paths[i]);
  if (shards && cli_dist_start()) return 1;
  results R = {0};
  test_list tests = {0};
  for (size_t i = 0; i < n_paths; i++) collect_tests(paths[i], &tests);
  run_all(&tests, &opts, repeat, &R);
  for (size_t i = 0; i < tests.n; i++) free(tests.dirs[i]), free(tests.names[i]);
  free(tests.dirs), free(tests.names);
  size_t pass = 0, fail = 0, skip = 0;
  for (size_t i = 0; i < R.n; i++) {
    if (R.r[i].kind == R_PASS) pass++;
    else if (R.r[i].kind == R_SKIP) skip++;
    else fail++;
  }
  if (skip) printf("%zu passed, %zu failed, %zu skipped\n", pass, fail, skip);
  else printf("%zu passed, %zu failed\n", pass, fail);
  if (flags & KEEL_OPT_CHECK_SHAPES)
    printf("shapes: %llu values compared with their inferred shapes: %llu fully known, %llu symbolic, "
           "%llu unknown; %llu with their inferred element type; %llu run(s) not checked (inputs "
           "not of the declared shapes)\n",
           (unsigned long long)g_shapes.checked, (unsigned long long)g_shapes.known,
           (unsigned long long)g_shapes.symbolic, (unsigned long long)g_shapes.unknown,
           (unsigned long long)g_shapes.typed, (unsigned long long)g_shapes.runs_off);
  int rc = fail ? 1 : 0;
  if (json && write_json(json, &R, pass, fail, skip)) rc = 1;
  if (expect) rc = check_expected(expect, &R);
  for (size_t i = 0; i < R.n; i++) free(R.r[i].name), free(R.r[i].detail);
  free(R.r);
  return cli_dist_end(rc);
}

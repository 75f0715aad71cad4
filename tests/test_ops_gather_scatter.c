/* test_ops_gather_scatter.c: the indexing family through real sessions.
 *
 * The tricky kernels (Gather, GatherElements, GatherND with batch_dims,
 * ScatterND, ScatterElements with reductions, TopK, Unique, CumSum, CumProd,
 * TensorScatter) run on
 * random shapes against naive references written here with full
 * multi-index arithmetic; the generic data movers also run on strings,
 * float16 and bool. Error cases check the status, the message, that the
 * session still works afterwards, and (check_report) that nothing leaks.
 */
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

/* ======================================================== harness */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int64_t rnd(int64_t lo, int64_t hi) { /* [lo, hi] */
  return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1));
}

static const char *IN_NAMES[] = {"I0", "I1", "I2"};

/* A one-node graph over inputs I0.. and outputs O0..; returns the node so
 * the caller can add attributes before mb_session(). */
static mb_graph *graph_for(const char *op, int n_in, const int *in_dt, int n_out,
                           const int *out_dt, mb_node **node) {
  static const char *outs_all[] = {"O0", "O1", "O2", "O3"};
  mb_graph *g = mb_graph_new("main");
  char ins[32] = "", outs[32] = "";
  for (int i = 0; i < n_in; i++) {
    mb_input(g, IN_NAMES[i], in_dt[i], -1, NULL);
    strcat(ins, i ? "," : ""), strcat(ins, IN_NAMES[i]);
  }
  for (int i = 0; i < n_out; i++) {
    mb_output(g, outs_all[i], out_dt[i], -1, NULL);
    strcat(outs, i ? "," : ""), strcat(outs, outs_all[i]);
  }
  *node = mb_add(g, op, ins, outs);
  mb_name(*node, "n0");
  return g;
}

static keel_status run(keel_session_t *s, int n_in, keel_value_t **in, keel_value_t **out) {
  return keel_run(s, IN_NAMES, in, (size_t)n_in, out);
}

static void release_all(keel_value_t **v, int n) {
  for (int i = 0; i < n; i++) {
    keel_value_release(v[i]);
    v[i] = NULL;
  }
}

/* An int32 or int64 index tensor from int64 values. */
static keel_value_t *index_tensor(keel_session_t *s, int dt, int rank, const int64_t *dims,
                                  const int64_t *v) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  int32_t v32[4096];
  for (int64_t i = 0; i < n && dt == KEEL_INT32; i++) v32[i] = (int32_t)v[i];
  return mb_tensor(s, dt, rank, dims, dt == KEEL_INT32 ? (const void *)v32 : (const void *)v);
}

static int64_t numel(int rank, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= d[i];
  return n;
}
static void unravel(int64_t flat, int rank, const int64_t *d, int64_t *idx) {
  for (int i = rank - 1; i >= 0; i--) {
    idx[i] = flat % d[i];
    flat /= d[i];
  }
}
static int64_t ravel(int rank, const int64_t *d, const int64_t *idx) {
  int64_t f = 0;
  for (int i = 0; i < rank; i++) f = f * d[i] + idx[i];
  return f;
}

static void random_shape(int rank, int64_t lo, int64_t hi, int64_t *d) {
  for (int i = 0; i < rank; i++) d[i] = rnd(lo, hi);
}

/* The output has this shape (memcmp is not given NULL for rank 0). */
static bool same_dims(const keel_value_t *v, int rank, const int64_t *d) {
  if (!v || keel_value_rank(v) != rank) return false;
  for (int i = 0; i < rank; i++)
    if (keel_value_shape(v)[i] != d[i]) return false;
  return true;
}
/* ... and every value, as float or as int64. */
static bool same_f32(const keel_value_t *v, int rank, const int64_t *d, const float *want) {
  if (!same_dims(v, rank, d)) return false;
  for (int64_t i = 0; i < numel(rank, d); i++)
    if (keel_value_at(v, i) != want[i]) return false;
  return true;
}
static bool same_i64(const keel_value_t *v, int rank, const int64_t *d, const int64_t *want) {
  if (!same_dims(v, rank, d) || keel_value_dtype(v) != KEEL_INT64) return false;
  const int64_t *got = keel_value_data(v);
  for (int64_t i = 0; i < numel(rank, d); i++)
    if (got[i] != want[i]) return false;
  return true;
}

/* ========================================================= Gather */

static void gather_case(void) {
  int r = (int)rnd(1, 4), q = (int)rnd(0, 2), dt = next() % 2 ? KEEL_INT32 : KEEL_INT64;
  int64_t xd[4], id[2], od[6], axis_attr = rnd(-r, r - 1), axis = axis_attr < 0 ? axis_attr + r : axis_attr;
  random_shape(r, 1, 4, xd);
  random_shape(q, 1, 3, id);
  float x[256], want[2048];
  int64_t ind[16];
  for (int64_t i = 0; i < numel(r, xd); i++) x[i] = (float)rnd(-100, 100);
  for (int64_t i = 0; i < numel(q, id); i++) ind[i] = rnd(-xd[axis], xd[axis] - 1);
  int orank = r - 1 + q;
  memcpy(od, xd, sizeof(int64_t) * (size_t)axis);
  memcpy(od + axis, id, sizeof(int64_t) * (size_t)q);
  memcpy(od + axis + q, xd + axis + 1, sizeof(int64_t) * (size_t)(r - axis - 1));
  for (int64_t e = 0; e < numel(orank, od); e++) { /* naive: map each output index back */
    int64_t oi[6], xi[4];
    unravel(e, orank, od, oi);
    int64_t v = ind[ravel(q, id, oi + axis)];
    memcpy(xi, oi, sizeof(int64_t) * (size_t)axis);
    xi[axis] = v < 0 ? v + xd[axis] : v;
    memcpy(xi + axis + 1, oi + axis + q, sizeof(int64_t) * (size_t)(r - axis - 1));
    want[e] = x[ravel(r, xd, xi)];
  }
  mb_node *n;
  mb_graph *g = graph_for("Gather", 2, (int[]){KEEL_FLOAT, dt}, 1, (int[]){KEEL_FLOAT}, &n);
  mb_attr_i(n, "axis", axis_attr);
  keel_session_t *s = mb_session(g, 13);
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, r, xd, x), index_tensor(s, dt, q, id, ind)};
  keel_value_t *out[1] = {0};
  CHECK_OK(run(s, 2, in, out));
  CHECK(same_f32(out[0], orank, od, want));
  release_all(out, 1);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* Gather moves bytes: strings, float16 and bool come through unchanged. */
static void gather_any_dtype(void) {
  mb_node *n;
  mb_graph *g = graph_for("Gather", 2, (int[]){KEEL_STRING, KEEL_INT64}, 1, (int[]){KEEL_STRING}, &n);
  mb_attr_i(n, "axis", 1);
  keel_session_t *s = mb_session(g, 13);
  keel_string x[6] = {{"a", 1}, {"bb", 2}, {"", 0}, {"dddd", 4}, {"e", 1}, {"ffffff", 6}};
  keel_value_t *in[2] = {mb_tensor(s, KEEL_STRING, 2, (int64_t[]){2, 3}, x),
                         mb_tensor(s, KEEL_INT64, 1, (int64_t[]){4}, (int64_t[]){2, -3, 1, 2})};
  keel_value_t *out[1] = {0};
  CHECK_OK(run(s, 2, in, out));
  const keel_string *y = keel_value_data(out[0]);
  const char *want[8] = {"", "a", "bb", "", "ffffff", "dddd", "e", "ffffff"};
  CHECK(y && keel_value_numel(out[0]) == 8);
  for (int i = 0; y && i < 8; i++) CHECK(y[i].len == strlen(want[i]) && !memcmp(y[i].data, want[i], y[i].len));
  release_all(out, 1);
  release_all(in, 2);
  keel_session_destroy(s);
  /* float16: the bit patterns are copied exactly (NaN payload included) */
  g = graph_for("Gather", 2, (int[]){KEEL_FLOAT16, KEEL_INT32}, 1, (int[]){KEEL_FLOAT16}, &n);
  s = mb_session(g, 13);
  uint16_t h[3] = {0x3c00, 0x7e01, 0x8000};
  in[0] = mb_tensor(s, KEEL_FLOAT16, 1, (int64_t[]){3}, h);
  in[1] = mb_tensor(s, KEEL_INT32, 1, (int64_t[]){3}, (int32_t[]){1, 2, 0});
  CHECK_OK(run(s, 2, in, out));
  const uint16_t *hy = keel_value_data(out[0]);
  CHECK(hy && hy[0] == 0x7e01 && hy[1] == 0x8000 && hy[2] == 0x3c00);
  release_all(out, 1);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* ================================================ GatherElements */

static void gather_elements_case(void) {
  int r = (int)rnd(1, 4), dt = next() % 2 ? KEEL_INT32 : KEEL_INT64;
  int64_t xd[4], id[4], axis = rnd(0, r - 1);
  random_shape(r, 1, 4, xd);
  for (int i = 0; i < r; i++) id[i] = i == axis ? rnd(1, 5) : rnd(1, xd[i]); /* may be smaller */
  float x[256], want[1024];
  int64_t ind[1024];
  for (int64_t i = 0; i < numel(r, xd); i++) x[i] = (float)i;
  for (int64_t e = 0; e < numel(r, id); e++) {
    int64_t u[4];
    unravel(e, r, id, u);
    ind[e] = rnd(-xd[axis], xd[axis] - 1);
    u[axis] = ind[e] < 0 ? ind[e] + xd[axis] : ind[e];
    want[e] = x[ravel(r, xd, u)];
  }
  mb_node *n;
  mb_graph *g = graph_for("GatherElements", 2, (int[]){KEEL_FLOAT, dt}, 1, (int[]){KEEL_FLOAT}, &n);
  mb_attr_i(n, "axis", axis - (next() % 2 ? r : 0));
  keel_session_t *s = mb_session(g, 13);
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, r, xd, x), index_tensor(s, dt, r, id, ind)};
  keel_value_t *out[1] = {0};
  CHECK_OK(run(s, 2, in, out));
  CHECK(same_f32(out[0], r, id, want));
  release_all(out, 1);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* ======================================================= GatherND */

static void gather_nd_case(void) {
  int r = (int)rnd(1, 4), q = (int)rnd(1, 4);
  int b = (int)rnd(0, (r < q ? r : q) - 1), m = (int)rnd(1, r - b);
  int64_t xd[4], id[4], od[8];
  random_shape(r, 1, 3, xd);
  random_shape(q, 1, 3, id);
  memcpy(id, xd, sizeof(int64_t) * (size_t)b); /* batch dims agree */
  id[q - 1] = m;
  int orank = q - 1 + r - b - m;
  memcpy(od, id, sizeof(int64_t) * (size_t)(q - 1));
  memcpy(od + q - 1, xd + b + m, sizeof(int64_t) * (size_t)(r - b - m));
  float x[128], want[2048];
  int64_t ind[512];
  for (int64_t i = 0; i < numel(r, xd); i++) x[i] = (float)rnd(0, 1000);
  for (int64_t i = 0; i < numel(q, id); i++) {
    int64_t ii[4];
    unravel(i, q, id, ii);
    int64_t dim = xd[b + ii[q - 1]];
    ind[i] = rnd(-dim, dim - 1);
  }
  for (int64_t e = 0; e < numel(orank, od); e++) {
    int64_t oi[8], xi[4], ti[4];
    unravel(e, orank, od, oi);
    memcpy(ti, oi, sizeof(int64_t) * (size_t)(q - 1)); /* the index tuple's position */
    memcpy(xi, oi, sizeof(int64_t) * (size_t)b);        /* batch coordinates */
    for (int j = 0; j < m; j++) {
      ti[q - 1] = j;
      int64_t v = ind[ravel(q, id, ti)];
      xi[b + j] = v < 0 ? v + xd[b + j] : v;
    }
    memcpy(xi + b + m, oi + q - 1, sizeof(int64_t) * (size_t)(r - b - m));
    want[e] = x[ravel(r, xd, xi)];
  }
  mb_node *n;
  mb_graph *g = graph_for("GatherND", 2, (int[]){KEEL_FLOAT, KEEL_INT64}, 1, (int[]){KEEL_FLOAT}, &n);
  if (b) mb_attr_i(n, "batch_dims", b);
  keel_session_t *s = mb_session(g, 13);
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, r, xd, x), index_tensor(s, KEEL_INT64, q, id, ind)};
  keel_value_t *out[1] = {0};
  CHECK_OK(run(s, 2, in, out));
  CHECK(same_f32(out[0], orank, od, want));
  release_all(out, 1);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* ================================================ Scatter* */

static const char *RED[] = {"none", "add", "mul", "max", "min"};
static float reduce1(int red, float a, float b) {
  switch (red) {
    case 1: return a + b;
    case 2: return a * b;
    case 3: return a > b ? a : b;
    case 4: return a < b ? a : b;
    default: return b;
  }
}

/* Runs a Scatter* session on float data and compares with want. */
static void scatter_check(const char *op, int opset, int red, int64_t axis, int r, const int64_t *xd,
                          const float *x, int q, const int64_t *id, const int64_t *ind, int ur,
                          const int64_t *ud, const float *upd, const float *want) {
  mb_node *n;
  mb_graph *g = graph_for(op, 3, (int[]){KEEL_FLOAT, KEEL_INT64, KEEL_FLOAT}, 1,
                          (int[]){KEEL_FLOAT}, &n);
  if (red) mb_attr_s(n, "reduction", RED[red]);
  if (axis) mb_attr_i(n, "axis", axis);
  keel_session_t *s = mb_session(g, opset);
  keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, r, xd, x), index_tensor(s, KEEL_INT64, q, id, ind),
                         mb_tensor(s, KEEL_FLOAT, ur, ud, upd)};
  keel_value_t *out[1] = {0};
  CHECK_OK(run(s, 3, in, out));
  CHECK(same_f32(out[0], r, xd, want));
  release_all(out, 1);
  release_all(in, 3);
  keel_session_destroy(s);
}

/* ScatterND: distinct tuples for "none" (the spec forbids duplicates
 * there), anything for the reductions. */
static void scatter_nd_case(void) {
  int r = (int)rnd(1, 3), q = (int)rnd(1, 3), m = (int)rnd(1, r), red = (int)rnd(0, 4);
  int64_t xd[3], id[3], ud[6];
  random_shape(r, 1, 3, xd);
  random_shape(q, 1, 3, id);
  id[q - 1] = m;
  int ur = q - 1 + r - m;
  memcpy(ud, id, sizeof(int64_t) * (size_t)(q - 1));
  memcpy(ud + q - 1, xd + m, sizeof(int64_t) * (size_t)(r - m));
  int64_t nt = numel(q - 1, id), slice = numel(r - m, xd + m), cells = numel(m, xd), ind[64];
  if (red == 0 && nt > cells) red = 1;
  float x[64], upd[512], want[64];
  for (int64_t i = 0; i < numel(r, xd); i++) x[i] = want[i] = (float)rnd(-9, 9);
  for (int64_t i = 0; i < numel(ur, ud); i++) upd[i] = (float)rnd(-9, 9);
  int64_t perm[64];
  for (int64_t c = 0; c < cells; c++) perm[c] = c;
  for (int64_t c = cells - 1; c > 0; c--) { /* shuffle: distinct cells */
    int64_t j = rnd(0, c), t = perm[c];
    perm[c] = perm[j], perm[j] = t;
  }
  for (int64_t t = 0; t < nt; t++) {
    int64_t cell = red ? rnd(0, cells - 1) : perm[t], ci[3];
    unravel(cell, m, xd, ci);
    for (int j = 0; j < m; j++) ind[t * m + j] = next() % 2 ? ci[j] : ci[j] - xd[j];
    for (int64_t e = 0; e < slice; e++) { /* naive: cell prefix + slice suffix */
      int64_t xi[3], si[3];
      unravel(e, r - m, xd + m, si);
      memcpy(xi, ci, sizeof(int64_t) * (size_t)m);
      memcpy(xi + m, si, sizeof(int64_t) * (size_t)(r - m));
      int64_t at = ravel(r, xd, xi);
      want[at] = reduce1(red, want[at], upd[t * slice + e]);
    }
  }
  scatter_check("ScatterND", 18, red, 0, r, xd, x, q, id, ind, ur, ud, upd, want);
}

static void scatter_elements_case(void) {
  int r = (int)rnd(1, 3), red = (int)rnd(0, 4);
  int64_t xd[3], id[3], axis = rnd(0, r - 1), ind[64];
  random_shape(r, 1, 4, xd);
  for (int i = 0; i < r; i++) id[i] = i == axis ? rnd(1, xd[i]) : rnd(1, xd[i]);
  float x[64], upd[64], want[64];
  for (int64_t i = 0; i < numel(r, xd); i++) x[i] = want[i] = (float)rnd(-9, 9);
  for (int64_t e = 0; e < numel(r, id); e++) {
    int64_t u[3];
    unravel(e, r, id, u);
    /* "none": position u[axis] itself keeps the targets distinct */
    int64_t v = red ? rnd(0, xd[axis] - 1) : u[axis];
    ind[e] = next() % 2 ? v : v - xd[axis];
    upd[e] = (float)rnd(-9, 9);
    u[axis] = v;
    int64_t at = ravel(r, xd, u);
    want[at] = reduce1(red, want[at], upd[e]);
  }
  scatter_check("ScatterElements", 18, red, axis, r, xd, x, r, id, ind, r, id, upd, want);
  if (red == 0) /* the deprecated Scatter is the same op */
    scatter_check("Scatter", 10, 0, axis, r, xd, x, r, id, ind, r, id, upd, want);
}

/* Integer and float16 reductions: wrapping int8 add, float16 max. */
static void scatter_typed(void) {
  mb_node *n;
  mb_graph *g = graph_for("ScatterElements", 3, (int[]){KEEL_INT8, KEEL_INT64, KEEL_INT8}, 1,
                          (int[]){KEEL_INT8}, &n);
  mb_attr_s(n, "reduction", "add");
  keel_session_t *s = mb_session(g, 16);
  keel_value_t *in[3] = {mb_tensor(s, KEEL_INT8, 1, (int64_t[]){2}, (int8_t[]){120, -5}),
                         mb_tensor(s, KEEL_INT64, 1, (int64_t[]){3}, (int64_t[]){0, 0, 1}),
                         mb_tensor(s, KEEL_INT8, 1, (int64_t[]){3}, (int8_t[]){5, 10, -7})};
  keel_value_t *out[1] = {0};
  CHECK_OK(run(s, 3, in, out));
  CHECK(keel_value_at(out[0], 0) == -121 && keel_value_at(out[0], 1) == -12);
  release_all(out, 1);
  release_all(in, 3);
  keel_session_destroy(s);
  g = graph_for("ScatterND", 3, (int[]){KEEL_FLOAT16, KEEL_INT64, KEEL_FLOAT16}, 1,
                (int[]){KEEL_FLOAT16}, &n);
  mb_attr_s(n, "reduction", "max");
  s = mb_session(g, 18);
  /* data [1, 2], indices [[1], [1], [0]], updates [3, 0.5, -1] -> [1, 3] */
  in[0] = mb_tensor(s, KEEL_FLOAT16, 1, (int64_t[]){2}, (uint16_t[]){0x3c00, 0x4000});
  in[1] = mb_tensor(s, KEEL_INT64, 2, (int64_t[]){3, 1}, (int64_t[]){1, 1, 0});
  in[2] = mb_tensor(s, KEEL_FLOAT16, 1, (int64_t[]){3}, (uint16_t[]){0x4200, 0x3800, 0xbc00});
  CHECK_OK(run(s, 3, in, out));
  CHECK(keel_value_at(out[0], 0) == 1 && keel_value_at(out[0], 1) == 3);
  release_all(out, 1);
  release_all(in, 3);
  keel_session_destroy(s);
}

/* ============================================================ TopK */

/* Reference: a stable insertion sort of each line, best first. */
static void topk_case(int opset) {
  int r = (int)rnd(1, 3), lg = opset >= 11 ? (int)rnd(0, 1) : 1;
  int64_t xd[3], axis = rnd(0, r - 1);
  random_shape(r, 1, 6, xd);
  int64_t kk = rnd(0, xd[axis]), od[3], outer = numel((int)axis, xd), dim = xd[axis];
  int64_t inner = numel(r - (int)axis - 1, xd + axis + 1), widx[256];
  memcpy(od, xd, sizeof od);
  od[axis] = kk;
  float x[256], want[256];
  for (int64_t i = 0; i < numel(r, xd); i++) x[i] = (float)rnd(0, 4); /* many ties */
  for (int64_t a = 0; a < outer; a++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t line[6];
      for (int64_t j = 0; j < dim; j++) {
        int64_t c = j;
        for (; c > 0; c--) { /* insert j after every element that ranks before it */
          float pv = x[(a * dim + line[c - 1]) * inner + i], jv = x[(a * dim + j) * inner + i];
          if (lg ? pv >= jv : pv <= jv) break;
          line[c] = line[c - 1];
        }
        line[c] = j;
      }
      for (int64_t j = 0; j < kk; j++) {
        widx[(a * kk + j) * inner + i] = line[j];
        want[(a * kk + j) * inner + i] = x[(a * dim + line[j]) * inner + i];
      }
    }
  mb_node *n;
  int nin = opset >= 10 ? 2 : 1;
  mb_graph *g = graph_for("TopK", nin, (int[]){KEEL_FLOAT, KEEL_INT64}, 2,
                          (int[]){KEEL_FLOAT, KEEL_INT64}, &n);
  mb_attr_i(n, "axis", axis);
  if (opset >= 11) mb_attr_i(n, "largest", lg);
  if (opset < 10) mb_attr_i(n, "k", kk);
  keel_session_t *s = mb_session(g, opset);
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, r, xd, x),
                         mb_tensor(s, KEEL_INT64, 1, (int64_t[]){1}, &kk)};
  keel_value_t *out[2] = {0};
  CHECK_OK(run(s, nin, in, out));
  CHECK(same_f32(out[0], r, od, want));
  CHECK(same_i64(out[1], r, od, widx));
  release_all(out, 2);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* int64 beyond 2^53 and float16 with a NaN (it ranks as the largest). */
static void topk_typed(void) {
  mb_node *n;
  mb_graph *g = graph_for("TopK", 2, (int[]){KEEL_INT64, KEEL_INT64}, 2,
                          (int[]){KEEL_INT64, KEEL_INT64}, &n);
  keel_session_t *s = mb_session(g, 11);
  int64_t big[3] = {(1ll << 60) + 1, (1ll << 60) + 3, (1ll << 60) + 2};
  keel_value_t *in[2] = {mb_tensor(s, KEEL_INT64, 1, (int64_t[]){3}, big),
                         mb_tensor(s, KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){2})};
  keel_value_t *out[2] = {0};
  CHECK_OK(run(s, 2, in, out));
  CHECK(same_i64(out[0], 1, (int64_t[]){2}, (int64_t[]){big[1], big[2]}));
  CHECK(same_i64(out[1], 1, (int64_t[]){2}, (int64_t[]){1, 2}));
  release_all(out, 2);
  release_all(in, 2);
  keel_session_destroy(s);
  g = graph_for("TopK", 2, (int[]){KEEL_FLOAT16, KEEL_INT64}, 2, (int[]){KEEL_FLOAT16, KEEL_INT64}, &n);
  s = mb_session(g, 11);
  in[0] = mb_tensor(s, KEEL_FLOAT16, 1, (int64_t[]){4}, (uint16_t[]){0x3c00, 0x7e00, 0x4000, 0xc000});
  in[1] = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){3});
  CHECK_OK(run(s, 2, in, out));
  CHECK(same_i64(out[1], 1, (int64_t[]){3}, (int64_t[]){1, 2, 0}));
  const uint16_t *h = out[0] ? keel_value_data(out[0]) : NULL;
  CHECK(h && h[0] == 0x7e00 && h[1] == 0x4000 && h[2] == 0x3c00);
  release_all(out, 2);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* ========================================================== Unique */

typedef struct slab {
  const float *x;
  int64_t outer, n, inner;
} slab;

static int slab_cmp(const slab *S, int64_t a, int64_t b) {
  for (int64_t o = 0; o < S->outer; o++)
    for (int64_t i = 0; i < S->inner; i++) {
      float u = S->x[(o * S->n + a) * S->inner + i], v = S->x[(o * S->n + b) * S->inner + i];
      if (u != v) return u < v ? -1 : 1;
    }
  return 0;
}

/* Reference: quadratic grouping in first-occurrence order, then a
 * selection sort of the groups when sorted=1. */
static void unique_case(void) {
  int r = (int)rnd(1, 3), has_axis = (int)rnd(0, 1), sorted = (int)rnd(0, 1);
  int64_t xd[3], axis = rnd(0, r - 1);
  random_shape(r, 1, 4, xd);
  float x[64], y[64];
  for (int64_t i = 0; i < numel(r, xd); i++) x[i] = (float)rnd(0, 2);
  slab S = {x, 1, numel(r, xd), 1};
  if (has_axis) S = (slab){x, numel((int)axis, xd), xd[axis], numel(r - (int)axis - 1, xd + axis + 1)};
  int64_t first[64], cnt[64], inv[64], order[64], pos[64], nu = 0;
  for (int64_t s = 0; s < S.n; s++) {
    int64_t g = 0;
    while (g < nu && slab_cmp(&S, first[g], s) != 0) g++;
    if (g == nu) first[nu] = s, cnt[nu++] = 0;
    cnt[g]++;
    inv[s] = g;
  }
  for (int64_t g = 0; g < nu; g++) order[g] = g;
  for (int64_t a = 0; sorted && a < nu; a++)
    for (int64_t b = a + 1; b < nu; b++)
      if (slab_cmp(&S, first[order[b]], first[order[a]]) < 0) {
        int64_t t = order[a];
        order[a] = order[b], order[b] = t;
      }
  int64_t wfirst[64], wcnt[64], winv[64], yd[3];
  for (int64_t g = 0; g < nu; g++) pos[order[g]] = g, wfirst[g] = first[order[g]], wcnt[g] = cnt[order[g]];
  for (int64_t s = 0; s < S.n; s++) winv[s] = pos[inv[s]];
  for (int64_t o = 0; o < S.outer; o++)
    for (int64_t g = 0; g < nu; g++)
      for (int64_t i = 0; i < S.inner; i++)
        y[(o * nu + g) * S.inner + i] = x[(o * S.n + wfirst[g]) * S.inner + i];
  memcpy(yd, xd, sizeof yd);
  if (has_axis) yd[axis] = nu;
  else yd[0] = nu;
  mb_node *n;
  mb_graph *g = graph_for("Unique", 1, (int[]){KEEL_FLOAT}, 4,
                          (int[]){KEEL_FLOAT, KEEL_INT64, KEEL_INT64, KEEL_INT64}, &n);
  if (has_axis) mb_attr_i(n, "axis", axis - (next() % 2 ? r : 0));
  mb_attr_i(n, "sorted", sorted);
  keel_session_t *s = mb_session(g, 11);
  keel_value_t *in[1] = {mb_tensor(s, KEEL_FLOAT, r, xd, x)}, *out[4] = {0};
  CHECK_OK(run(s, 1, in, out));
  CHECK(same_f32(out[0], has_axis ? r : 1, yd, y));
  CHECK(same_i64(out[1], 1, &nu, wfirst));
  CHECK(same_i64(out[2], 1, &S.n, winv));
  CHECK(same_i64(out[3], 1, &nu, wcnt));
  release_all(out, 4);
  release_all(in, 1);
  keel_session_destroy(s);
}

/* Strings, sorted by bytes; only Y and counts requested. */
static void unique_strings(void) {
  mb_node *n;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "I0", KEEL_STRING, -1, NULL);
  mb_output(g, "Y", KEEL_STRING, -1, NULL);
  mb_output(g, "C", KEEL_INT64, -1, NULL);
  n = mb_add(g, "Unique", "I0", "Y,,,C");
  keel_session_t *s = mb_session(g, 11);
  keel_string x[5] = {{"pear", 4}, {"apple", 5}, {"pear", 4}, {"app", 3}, {"", 0}};
  keel_value_t *in[1] = {mb_tensor(s, KEEL_STRING, 1, (int64_t[]){5}, x)}, *out[2] = {0};
  CHECK_OK(keel_run(s, IN_NAMES, in, 1, out));
  const char *want[4] = {"", "app", "apple", "pear"};
  const keel_string *y = out[0] ? keel_value_data(out[0]) : NULL;
  CHECK(y && keel_value_numel(out[0]) == 4);
  for (int i = 0; y && i < 4; i++) CHECK(y[i].len == strlen(want[i]) && !memcmp(y[i].data, want[i], y[i].len));
  CHECK(same_i64(out[1], 1, (int64_t[]){4}, (int64_t[]){1, 1, 1, 2}));
  release_all(out, 2);
  release_all(in, 1);
  keel_session_destroy(s);
  (void)n;
}

/* ================================================= CumSum, CumProd */

/* prod: CumProd (opset 26) on values in [-3, 3], exact in every type. */
static void cumul_case(int dt, bool prod) {
  int r = (int)rnd(1, 3), excl = (int)rnd(0, 1), rev = (int)rnd(0, 1);
  int64_t xd[3], axis = rnd(0, r - 1);
  random_shape(r, 1, 5, xd);
  float x[128], want[128];
  int32_t xi[128];
  uint16_t xh[128];
  for (int64_t e = 0; e < numel(r, xd); e++) {
    x[e] = (float)(prod ? rnd(-3, 3) : rnd(-20, 20)), xi[e] = (int32_t)x[e];
    xh[e] = dt == KEEL_BFLOAT16 ? keel_f32_to_bf16(x[e]) : keel_f32_to_f16(x[e]); /* exact */
  }
  for (int64_t e = 0; e < numel(r, xd); e++) { /* naive: combine the whole range */
    int64_t u[3], v[3];
    unravel(e, r, xd, u);
    memcpy(v, u, sizeof v);
    want[e] = prod ? 1 : 0;
    for (v[axis] = 0; v[axis] < xd[axis]; v[axis]++) {
      bool before = rev ? v[axis] > u[axis] : v[axis] < u[axis];
      if (!before && (excl || v[axis] != u[axis])) continue;
      if (prod) want[e] *= x[ravel(r, xd, v)];
      else want[e] += x[ravel(r, xd, v)];
    }
  }
  mb_node *n;
  mb_graph *g = graph_for(prod ? "CumProd" : "CumSum", 2, (int[]){dt, KEEL_INT32}, 1, (int[]){dt}, &n);
  mb_attr_i(n, "exclusive", excl);
  mb_attr_i(n, "reverse", rev);
  keel_session_t *s = mb_session(g, prod ? 26 : 14);
  const void *data = dt == KEEL_FLOAT ? (const void *)x : dt == KEEL_INT32 ? (const void *)xi : (const void *)xh;
  int32_t ax = (int32_t)(axis - (next() % 2 ? r : 0));
  keel_value_t *in[2] = {mb_tensor(s, dt, r, xd, data), mb_tensor(s, KEEL_INT32, 0, NULL, &ax)};
  keel_value_t *out[1] = {0};
  CHECK_OK(run(s, 2, in, out));
  CHECK(same_f32(out[0], r, xd, want));
  release_all(out, 1);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* CumProd on int64 wraps like unsigned arithmetic; a bad axis is an error. */
static void cumprod_edges(void) {
  mb_node *n;
  mb_graph *g = graph_for("CumProd", 2, (int[]){KEEL_INT64, KEEL_INT64}, 1, (int[]){KEEL_INT64}, &n);
  keel_session_t *s = mb_session(g, 26);
  int64_t x[3] = {INT64_MAX, 2, 3}, ax = 0, bad = 1;
  keel_value_t *in[2] = {mb_tensor(s, KEEL_INT64, 1, (int64_t[]){3}, x), mb_tensor(s, KEEL_INT64, 0, NULL, &ax)};
  keel_value_t *out[1] = {0};
  CHECK_OK(run(s, 2, in, out));
  const int64_t *y = out[0] ? keel_value_data(out[0]) : NULL;
  CHECK(y && y[0] == INT64_MAX && y[1] == (int64_t)((uint64_t)INT64_MAX * 2u) &&
        y[2] == (int64_t)((uint64_t)INT64_MAX * 6u));
  release_all(out, 1);
  keel_value_release(in[1]);
  in[1] = mb_tensor(s, KEEL_INT64, 0, NULL, &bad);
  CHECK_STATUS(run(s, 2, in, out), KEEL_ERR_SHAPE);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* ==================================================== TensorScatter */

/* past (B, H, S, D) or (B, S, D), update with U <= S rows along axis,
 * write_indices per batch (or omitted); naive reference per element. */
static void tensor_scatter_case(void) {
  int r = (int)rnd(3, 4), circ = (int)rnd(0, 1), with_wi = (int)rnd(0, 2) > 0;
  int64_t pd[4], ud[4];
  random_shape(r, 1, 4, pd);
  int axis = (int)rnd(1, r - 1);
  memcpy(ud, pd, sizeof pd);
  ud[axis] = rnd(0, pd[axis]);
  int64_t wi[4], np = numel(r, pd), nu = numel(r, ud);
  for (int64_t b = 0; b < pd[0]; b++)
    wi[b] = with_wi ? (circ ? rnd(0, pd[axis] - 1) : rnd(0, pd[axis] - ud[axis])) : 0;
  float past[256], upd[256], want[256];
  for (int64_t e = 0; e < np; e++) past[e] = want[e] = (float)e;
  for (int64_t e = 0; e < nu; e++) upd[e] = (float)(1000 + e);
  for (int64_t e = 0; e < nu; e++) {
    int64_t u[4];
    unravel(e, r, ud, u);
    u[axis] = (wi[u[0]] + u[axis]) % pd[axis];
    want[ravel(r, pd, u)] = upd[e];
  }
  mb_node *n;
  mb_graph *g = graph_for("TensorScatter", with_wi ? 3 : 2, (int[]){KEEL_FLOAT, KEEL_FLOAT, KEEL_INT64}, 1,
                          (int[]){KEEL_FLOAT}, &n);
  mb_attr_i(n, "axis", axis - (rnd(0, 1) ? r : 0));
  if (circ || rnd(0, 1)) mb_attr_s(n, "mode", circ ? "circular" : "linear");
  keel_session_t *s = mb_session(g, 24);
  keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, r, pd, past), mb_tensor(s, KEEL_FLOAT, r, ud, upd),
                         mb_tensor(s, KEEL_INT64, 1, pd, wi)};
  keel_value_t *out[1] = {0};
  CHECK_OK(run(s, with_wi ? 3 : 2, in, out));
  CHECK(same_f32(out[0], r, pd, want));
  release_all(out, 1);
  release_all(in, 3);
  keel_session_destroy(s);
}

/* Linear writes past the end, negative indices, mismatched shapes and the
 * batch axis are errors; the session stays usable. */
static void tensor_scatter_errors(void) {
  float past[24] = {0}, upd[12] = {0};
  int64_t pd[3] = {2, 4, 3}, ud[3] = {2, 2, 3}, bd[3] = {2, 2, 2};
  int64_t wis[3][2] = {{0, 3}, {-1, 0}, {0, 2}};
  keel_status want[3] = {KEEL_ERR_SHAPE, KEEL_ERR_SHAPE, KEEL_OK};
  mb_node *n;
  mb_graph *g = graph_for("TensorScatter", 3, (int[]){KEEL_FLOAT, KEEL_FLOAT, KEEL_INT64}, 1,
                          (int[]){KEEL_FLOAT}, &n);
  keel_session_t *s = mb_session(g, 24);
  for (int c = 0; c < 4; c++) {
    keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, 3, pd, past),
                           mb_tensor(s, KEEL_FLOAT, 3, c == 3 ? bd : ud, upd),
                           mb_tensor(s, KEEL_INT64, 1, pd, wis[c == 3 ? 2 : c])};
    keel_value_t *out[1] = {0};
    CHECK_STATUS(run(s, 3, in, out), c == 3 ? KEEL_ERR_SHAPE : want[c]);
    release_all(out, 1);
    release_all(in, 3);
  }
  keel_session_destroy(s);
  g = graph_for("TensorScatter", 2, (int[]){KEEL_FLOAT, KEEL_FLOAT}, 1, (int[]){KEEL_FLOAT}, &n);
  mb_attr_i(n, "axis", 0);
  s = mb_session(g, 24);
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 3, pd, past), mb_tensor(s, KEEL_FLOAT, 3, pd, past)}, *out[1] = {0};
  CHECK_STATUS(run(s, 2, in, out), KEEL_ERR_SHAPE);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* ================================== OneHot, Compress, NonZero */

static void onehot_cases(void) {
  mb_node *n;
  mb_graph *g = graph_for("OneHot", 3, (int[]){KEEL_FLOAT, KEEL_INT64, KEEL_INT32}, 1,
                          (int[]){KEEL_INT32}, &n);
  keel_session_t *s = mb_session(g, 11);
  /* 1.7 truncates to 1; -1 wraps to 3; 4 and -5 are outside [-4, 4): all off */
  keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){4}, (float[]){1.7f, -1, 4, -5}),
                         mb_tensor(s, KEEL_INT64, 0, NULL, (int64_t[]){4}),
                         mb_tensor(s, KEEL_INT32, 1, (int64_t[]){2}, (int32_t[]){2, 9})};
  keel_value_t *out[1] = {0};
  CHECK_OK(run(s, 3, in, out));
  float want[16] = {2, 9, 2, 2, 2, 2, 2, 9, 2, 2, 2, 2, 2, 2, 2, 2};
  CHECK(same_f32(out[0], 2, (int64_t[]){4, 4}, want));
  release_all(out, 1);
  keel_value_release(in[1]); /* depth 0: an error, then the session goes on */
  in[1] = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){0});
  CHECK_STATUS(run(s, 3, in, out), KEEL_ERR_RUNTIME);
  CHECK(strstr(keel_last_error(), "depth") != NULL);
  release_all(in, 3);
  keel_session_destroy(s);
  /* string values, axis 0 */
  g = graph_for("OneHot", 3, (int[]){KEEL_INT32, KEEL_INT32, KEEL_STRING}, 1, (int[]){KEEL_STRING}, &n);
  mb_attr_i(n, "axis", 0);
  s = mb_session(g, 11);
  in[0] = mb_tensor(s, KEEL_INT32, 1, (int64_t[]){2}, (int32_t[]){0, -1});
  in[1] = mb_tensor(s, KEEL_INT32, 0, NULL, (int32_t[]){3});
  in[2] = mb_tensor(s, KEEL_STRING, 1, (int64_t[]){2}, (keel_string[]){{"no", 2}, {"yes", 3}});
  CHECK_OK(run(s, 3, in, out));
  const keel_string *y = out[0] ? keel_value_data(out[0]) : NULL;
  const char *w[6] = {"yes", "no", "no", "no", "no", "yes"}; /* (3, 2) */
  CHECK(y && keel_value_rank(out[0]) == 2 && keel_value_shape(out[0])[0] == 3);
  for (int i = 0; y && i < 6; i++) CHECK(y[i].len == strlen(w[i]) && !memcmp(y[i].data, w[i], y[i].len));
  release_all(out, 1);
  release_all(in, 3);
  keel_session_destroy(s);
}

static void compress_case(int64_t axis, int ncond, const uint8_t *cond, int orank,
                          const int64_t *od, const float *want) {
  mb_node *n;
  mb_graph *g = graph_for("Compress", 2, (int[]){KEEL_FLOAT, KEEL_BOOL}, 1, (int[]){KEEL_FLOAT}, &n);
  if (axis != 99) mb_attr_i(n, "axis", axis);
  keel_session_t *s = mb_session(g, 11);
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 2}, (float[]){1, 2, 3, 4, 5, 6}),
                         mb_tensor(s, KEEL_BOOL, 1, (int64_t[]){ncond}, cond)};
  keel_value_t *out[1] = {0};
  if (want) {
    CHECK_OK(run(s, 2, in, out));
    CHECK(same_f32(out[0], orank, od, want));
  } else {
    CHECK_STATUS(run(s, 2, in, out), KEEL_ERR_RUNTIME);
    CHECK(strstr(keel_last_error(), "condition element 3 is true") != NULL);
  }
  release_all(out, 1);
  release_all(in, 2);
  keel_session_destroy(s);
}

static void compress_cases(void) {
  compress_case(0, 3, (uint8_t[]){0, 1, 1}, 2, (int64_t[]){2, 2}, (float[]){3, 4, 5, 6});
  compress_case(-1, 2, (uint8_t[]){0, 1}, 2, (int64_t[]){3, 1}, (float[]){2, 4, 6});
  compress_case(0, 1, (uint8_t[]){1}, 2, (int64_t[]){1, 2}, (float[]){1, 2}); /* short */
  compress_case(0, 4, (uint8_t[]){1, 0, 0, 0}, 2, (int64_t[]){1, 2}, (float[]){1, 2});
  compress_case(99, 5, (uint8_t[]){0, 0, 1, 0, 1}, 1, (int64_t[]){2}, (float[]){3, 5}); /* flat */
  compress_case(0, 4, (uint8_t[]){1, 0, 0, 1}, 0, NULL, NULL); /* true past the end */
}

static void nonzero_cases(void) {
  mb_node *n;
  mb_graph *g = graph_for("NonZero", 1, (int[]){KEEL_FLOAT}, 1, (int[]){KEEL_INT64}, &n);
  keel_session_t *s = mb_session(g, 13);
  keel_value_t *in[1] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 3},
                                   (float[]){0, 1, 0, 2, -0.0f, NAN})};
  keel_value_t *out[1] = {0};
  CHECK_OK(run(s, 1, in, out));
  CHECK(same_i64(out[0], 2, (int64_t[]){2, 3}, (int64_t[]){0, 1, 1, 1, 0, 2}));
  release_all(out, 1);
  release_all(in, 1);
  in[0] = mb_tensor(s, KEEL_FLOAT, 0, NULL, (float[]){3}); /* a scalar: shape (0, 1) */
  CHECK_OK(run(s, 1, in, out));
  CHECK(out[0] && keel_value_rank(out[0]) == 2 && keel_value_shape(out[0])[0] == 0 &&
        keel_value_shape(out[0])[1] == 1);
  release_all(out, 1);
  release_all(in, 1);
  keel_session_destroy(s);
}

/* ================================================ empty, strings */

typedef struct tv { /* an input: dtype, shape, data */
  int dt, rank;
  int64_t d[3];
  const void *data;
} tv;

/* Runs op on the inputs; checks the status and output 0's shape, and
 * (when want_s is given) its strings. */
static void run_case(const char *op, int opset, const char *attr, int64_t av, int n_in,
                     const tv *in_tv, int n_out, keel_status want, int orank, const int64_t *od,
                     const char *const *want_s) {
  mb_node *n;
  int dts[3], odts[4] = {in_tv[0].dt, KEEL_INT64, KEEL_INT64, KEEL_INT64};
  for (int i = 0; i < n_in; i++) dts[i] = in_tv[i].dt;
  if (!strcmp(op, "NonZero")) odts[0] = KEEL_INT64;
  mb_graph *g = graph_for(op, n_in, dts, n_out, odts, &n);
  if (attr) mb_attr_i(n, attr, av);
  keel_session_t *s = mb_session(g, opset);
  keel_value_t *in[3], *out[4] = {0};
  for (int i = 0; i < n_in; i++) in[i] = mb_tensor(s, in_tv[i].dt, in_tv[i].rank, in_tv[i].d, in_tv[i].data);
  CHECK_STATUS(run(s, n_in, in, out), want);
  if (want == KEEL_OK) {
    CHECK(same_dims(out[0], orank, od));
    const keel_string *y = want_s && out[0] ? keel_value_data(out[0]) : NULL;
    for (int64_t i = 0; want_s && i < numel(orank, od); i++)
      CHECK(y && y[i].len == strlen(want_s[i]) && !memcmp(y[i].data, want_s[i], y[i].len));
  }
  release_all(out, n_out);
  release_all(in, n_in);
  keel_session_destroy(s);
}

static void empty_cases(void) {
  static const float f[6] = {1, 2, 3, 4, 5, 6};
  static const int64_t i2[2] = {2, -1}, i0[1] = {0};
  tv x03 = {KEEL_FLOAT, 2, {0, 3}, NULL}, x4 = {KEEL_FLOAT, 1, {4}, f}, x0 = {KEEL_FLOAT, 1, {0}, NULL};
  tv ind2 = {KEEL_INT64, 1, {2}, i2}, ind0 = {KEEL_INT64, 1, {0}, NULL};
  run_case("Gather", 13, "axis", 1, 2, (tv[]){x03, ind2}, 1, KEEL_OK, 2, (int64_t[]){0, 2}, NULL);
  run_case("Gather", 13, NULL, 0, 2, (tv[]){x4, ind0}, 1, KEEL_OK, 1, (int64_t[]){0}, NULL);
  run_case("Gather", 13, NULL, 0, 2, (tv[]){x0, {KEEL_INT64, 1, {1}, i0}}, 1, KEEL_ERR_RUNTIME, 0, NULL, NULL);
  run_case("Gather", 13, "axis", 1, 2, (tv[]){x03, {KEEL_INT64, 1, {1}, (int64_t[]){3}}}, 1,
           KEEL_ERR_RUNTIME, 0, NULL, NULL); /* checked even with nothing to copy */
  run_case("GatherND", 13, NULL, 0, 2, (tv[]){x4, {KEEL_INT64, 2, {0, 1}, NULL}}, 1, KEEL_OK, 1,
           (int64_t[]){0}, NULL);
  run_case("ScatterND", 13, NULL, 0, 3, (tv[]){x4, {KEEL_INT64, 2, {0, 1}, NULL}, x0}, 1, KEEL_OK,
           1, (int64_t[]){4}, NULL);
  run_case("ScatterElements", 13, NULL, 0, 3, (tv[]){x4, ind0, x0}, 1, KEEL_OK, 1, (int64_t[]){4}, NULL);
  run_case("GatherElements", 13, NULL, 0, 2, (tv[]){x4, ind0}, 1, KEEL_OK, 1, (int64_t[]){0}, NULL);
  run_case("Unique", 11, NULL, 0, 1, (tv[]){x0}, 4, KEEL_OK, 1, (int64_t[]){0}, NULL);
  run_case("Unique", 11, "axis", 1, 1, (tv[]){x03}, 4, KEEL_OK, 2, (int64_t[]){0, 1}, NULL);
  run_case("CumSum", 14, NULL, 0, 2, (tv[]){x03, {KEEL_INT64, 0, {0}, i0}}, 1, KEEL_OK, 2,
           (int64_t[]){0, 3}, NULL);
  run_case("NonZero", 13, NULL, 0, 1, (tv[]){x03}, 1, KEEL_OK, 2, (int64_t[]){2, 0}, NULL);
  run_case("Compress", 11, "axis", 1, 2, (tv[]){x03, {KEEL_BOOL, 1, {2}, (uint8_t[]){1, 0}}}, 1,
           KEEL_OK, 2, (int64_t[]){0, 1}, NULL);
  run_case("OneHot", 11, NULL, 0, 3, (tv[]){ind0, {KEEL_INT64, 0, {0}, i2}, {KEEL_FLOAT, 1, {2}, f}},
           1, KEEL_OK, 2, (int64_t[]){0, 2}, NULL);
  run_case("TopK", 11, NULL, 0, 2, (tv[]){x03, {KEEL_INT64, 1, {1}, (int64_t[]){2}}}, 2, KEEL_OK,
           2, (int64_t[]){0, 2}, NULL);
}

/* The data movers on strings (and bool) through every path. */
static void string_cases(void) {
  static const keel_string sx[6] = {{"a", 1}, {"bb", 2}, {"ccc", 3}, {"", 0}, {"e", 1}, {"ff", 2}};
  tv x23 = {KEEL_STRING, 2, {2, 3}, sx};
  run_case("GatherElements", 13, "axis", 1, 2,
           (tv[]){x23, {KEEL_INT64, 2, {2, 2}, (int64_t[]){2, 0, -1, 1}}}, 1, KEEL_OK, 2,
           (int64_t[]){2, 2}, (const char *[]){"ccc", "a", "ff", "e"});
  run_case("GatherND", 13, NULL, 0, 2, (tv[]){x23, {KEEL_INT64, 2, {2, 2}, (int64_t[]){1, 2, 0, 1}}},
           1, KEEL_OK, 1, (int64_t[]){2}, (const char *[]){"ff", "bb"});
  run_case("ScatterND", 13, NULL, 0, 3,
           (tv[]){x23, {KEEL_INT64, 2, {1, 1}, (int64_t[]){1}},
                  {KEEL_STRING, 2, {1, 3}, (keel_string[]){{"x", 1}, {"yy", 2}, {"zzz", 3}}}},
           1, KEEL_OK, 2, (int64_t[]){2, 3}, (const char *[]){"a", "bb", "ccc", "x", "yy", "zzz"});
  run_case("ScatterElements", 13, "axis", 1, 3,
           (tv[]){x23, {KEEL_INT32, 2, {1, 1}, (int32_t[]){-1}}, {KEEL_STRING, 2, {1, 1}, (keel_string[]){{"q", 1}}}},
           1, KEEL_OK, 2, (int64_t[]){2, 3}, (const char *[]){"a", "bb", "q", "", "e", "ff"});
  run_case("Compress", 11, NULL, 0, 2, (tv[]){x23, {KEEL_BOOL, 1, {4}, (uint8_t[]){0, 1, 0, 1}}}, 1,
           KEEL_OK, 1, (int64_t[]){2}, (const char *[]){"bb", ""});
  run_case("NonZero", 13, NULL, 0, 1, (tv[]){x23}, 1, KEEL_OK, 2, (int64_t[]){2, 5}, NULL);
  run_case("ScatterElements", 16, NULL, 0, 3,
           (tv[]){{KEEL_BOOL, 1, {3}, (uint8_t[]){0, 0, 1}}, {KEEL_INT64, 1, {1}, (int64_t[]){1}},
                  {KEEL_BOOL, 1, {1}, (uint8_t[]){1}}},
           1, KEEL_OK, 1, (int64_t[]){3}, NULL);
}

/* ========================================================== errors */

/* Runs a node expected to fail: status, a message naming the problem, no
 * output, and the same session then runs good inputs. */
static void expect_error(const char *op, int opset, int n_in, const int *dt, keel_value_t *(*make)(keel_session_t *, int, int),
                         const char *attr, int64_t attr_v, keel_status want, const char *needle) {
  mb_node *n;
  mb_graph *g = graph_for(op, n_in, dt, 1, (int[]){dt[0]}, &n);
  if (attr) mb_attr_i(n, attr, attr_v);
  keel_session_t *s = mb_session(g, opset);
  keel_value_t *bad[3], *good[3], *out[1] = {0};
  for (int i = 0; i < n_in; i++) bad[i] = make(s, i, 1), good[i] = make(s, i, 0);
  CHECK_STATUS(run(s, n_in, bad, out), want);
  if (!strstr(keel_last_error(), needle)) {
    fprintf(stderr, "%s: message \"%s\" lacks \"%s\"\n", op, keel_last_error(), needle);
    CHECK(!"error message");
  }
  CHECK(out[0] == NULL);
  CHECK_OK(run(s, n_in, good, out));
  release_all(out, 1);
  release_all(bad, n_in);
  release_all(good, n_in);
  keel_session_destroy(s);
}

/* Inputs for the error cases: input i, in its bad or good version. Data is
 * float [5] or [2, 3]; the bad index is 7, or -6 for the negative case. */
static int64_t bad_index = 7;
static keel_value_t *mk_gather(keel_session_t *s, int i, int bad) {
  if (i == 0) return mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){5}, (float[]){1, 2, 3, 4, 5});
  return mb_tensor(s, KEEL_INT32, 1, (int64_t[]){4}, (int32_t[]){0, 1, -5, bad ? (int32_t)bad_index : 4});
}
static keel_value_t *mk_gather_axis(keel_session_t *s, int i, int bad) { /* rank 1 vs 2 */
  if (i == 0 && !bad) return mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){1, 5}, (float[]){1, 2, 3, 4, 5});
  return mk_gather(s, i, 0);
}
static keel_value_t *mk_elems(keel_session_t *s, int i, int bad) {
  if (i == 0 || i == 2) return mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
  return mb_tensor(s, KEEL_INT64, 2, (int64_t[]){2, 3}, (int64_t[]){0, 1, 2, 2, bad ? -4 : -3, 0});
}
static keel_value_t *mk_nd(keel_session_t *s, int i, int bad) {
  if (i == 0) return mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
  if (i == 2) return mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){2}, (float[]){7, 8});
  return mb_tensor(s, KEEL_INT64, 2, (int64_t[]){2, 2}, (int64_t[]){1, 2, 0, bad ? 3 : -1});
}
static keel_value_t *mk_elems_shape(keel_session_t *s, int i, int bad) {
  if (i == 2 && bad) return mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 2}, (float[]){1, 2, 3, 4, 5, 6});
  return mk_elems(s, i, 0);
}
static keel_value_t *mk_topk(keel_session_t *s, int i, int bad) {
  if (i == 0) return mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
  return mb_tensor(s, KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){bad ? 4 : 3});
}
static keel_value_t *mk_nd_batch(keel_session_t *s, int i, int bad) {
  if (i == 0) return mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
  if (bad) return mb_tensor(s, KEEL_INT64, 2, (int64_t[]){3, 1}, (int64_t[]){0, 1, 2});
  return mb_tensor(s, KEEL_INT64, 2, (int64_t[]){2, 1}, (int64_t[]){2, 0});
}

static void error_cases(void) {
  const int gi[2] = {KEEL_FLOAT, KEEL_INT32}, ei[3] = {KEEL_FLOAT, KEEL_INT64, KEEL_FLOAT};
  expect_error("Gather", 13, 2, gi, mk_gather, NULL, 0, KEEL_ERR_RUNTIME,
               "Gather: index 7 is out of range for axis 0 of size 5 (element 3 of indices)");
  bad_index = -6;
  expect_error("Gather", 13, 2, gi, mk_gather, NULL, 0, KEEL_ERR_RUNTIME,
               "index -6 is out of range for axis 0 of size 5");
  expect_error("Gather", 1, 2, gi, mk_gather_axis, "axis", 1, KEEL_ERR_SHAPE,
               "Gather: axis 1 is out of range for rank 1");
  expect_error("GatherElements", 13, 2, ei, mk_elems, "axis", 1, KEEL_ERR_RUNTIME,
               "index -4 is out of range for axis 1 of size 3 (element 4 of indices)");
  expect_error("ScatterElements", 13, 3, ei, mk_elems, "axis", 1, KEEL_ERR_RUNTIME,
               "index -4 is out of range for axis 1 of size 3");
  expect_error("Scatter", 9, 3, ei, mk_elems, "axis", -1, KEEL_ERR_RUNTIME, "index -4");
  expect_error("ScatterElements", 18, 3, ei, mk_elems_shape, "axis", 1, KEEL_ERR_SHAPE,
               "updates have shape [3,2], indices [2,3]");
  expect_error("GatherND", 13, 2, ei, mk_nd, NULL, 0, KEEL_ERR_RUNTIME,
               "index 3 is out of range for axis 1 of size 3 (element 3 of indices)");
  expect_error("ScatterND", 13, 3, ei, mk_nd, NULL, 0, KEEL_ERR_RUNTIME,
               "index 3 is out of range for axis 1 of size 3");
  expect_error("GatherND", 13, 2, ei, mk_nd_batch, "batch_dims", 1, KEEL_ERR_SHAPE,
               "batch dim 0 is 2 in data but 3 in indices");
  expect_error("TopK", 11, 2, (int[]){KEEL_FLOAT, KEEL_INT64}, mk_topk, "axis", 1,
               KEEL_ERR_RUNTIME, "k = 4 is out of range for axis 1 of size 3");
}

/* Attribute errors fail every run with KEEL_ERR_INVALID_MODEL; a reduction
 * on strings is UNSUPPORTED. */
static void reduction_errors(void) {
  const char *bad[4] = {"max", "sum", "add", "add"};
  const int opset[4] = {16, 18, 13, 16}, dt[4] = {KEEL_FLOAT, KEEL_FLOAT, KEEL_FLOAT, KEEL_STRING};
  const keel_status want[4] = {KEEL_ERR_INVALID_MODEL, KEEL_ERR_INVALID_MODEL, KEEL_ERR_INVALID_MODEL,
                               KEEL_ERR_UNSUPPORTED};
  keel_string sx[2] = {{"a", 1}, {"b", 1}};
  for (int c = 0; c < 4; c++) {
    mb_node *n;
    mb_graph *g = graph_for("ScatterND", 3, (int[]){dt[c], KEEL_INT64, dt[c]}, 1, (int[]){dt[c]}, &n);
    mb_attr_s(n, "reduction", bad[c]);
    keel_session_t *s = mb_session(g, opset[c]);
    keel_value_t *in[3] = {mk_nd(s, 0, 0), mk_nd(s, 1, 0), mk_nd(s, 2, 0)}, *out[1] = {0};
    if (dt[c] == KEEL_STRING) {
      keel_value_release(in[0]);
      keel_value_release(in[2]);
      in[0] = mb_tensor(s, KEEL_STRING, 2, (int64_t[]){1, 2}, sx);
      in[2] = mb_tensor(s, KEEL_STRING, 1, (int64_t[]){2}, sx);
      keel_value_release(in[1]);
      in[1] = mb_tensor(s, KEEL_INT64, 2, (int64_t[]){2, 2}, (int64_t[]){0, 0, 0, 1});
    }
    CHECK_STATUS(run(s, 3, in, out), want[c]);
    CHECK(strstr(keel_last_error(), "reduction") != NULL);
    release_all(in, 3);
    keel_session_destroy(s);
  }
}

int main(void) {
  for (int i = 0; i < 150; i++) gather_case();
  gather_any_dtype();
  for (int i = 0; i < 150; i++) gather_elements_case();
  for (int i = 0; i < 200; i++) gather_nd_case();
  for (int i = 0; i < 200; i++) scatter_nd_case();
  for (int i = 0; i < 150; i++) scatter_elements_case();
  scatter_typed();
  for (int i = 0; i < 150; i++) topk_case(i % 3 == 0 ? 1 : i % 3 == 1 ? 10 : 11);
  topk_typed();
  for (int i = 0; i < 200; i++) unique_case();
  unique_strings();
  for (int i = 0; i < 120; i++)
    cumul_case(i % 4 == 0 ? KEEL_INT32 : i % 4 == 1 ? KEEL_FLOAT16 : i % 4 == 2 ? KEEL_BFLOAT16 : KEEL_FLOAT, i >= 60);
  cumprod_edges();
  for (int i = 0; i < 60; i++) tensor_scatter_case();
  tensor_scatter_errors();
  onehot_cases();
  compress_cases();
  nonzero_cases();
  empty_cases();
  string_cases();
  error_cases();
  reduction_errors();
  return check_report();
}

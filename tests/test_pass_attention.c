/* test_pass_attention.c: the fuse-attention pass (src/passes/pass_attention.c)
 * and its kernel (src/ops/nn/attention/attention_fused.c). Attention is built as
 * PyTorch exports it: Reshape/Transpose of q, k and v, MatMul, a scale,
 * an additive mask (Add, either operand order) or a causal one
 * (Where(Cast(Not(Trilu(ones))), -inf, s)) or a constant one with gaps
 * (kept keys not one run), Softmax, MatMul. Each model
 * runs with the passes on (one FusedAttention node, reading q, k, v and
 * writing Y in [B, S, H, D] when their Transposes have no other reader,
 * through the Transposes when they have; 1, 2 and 8 threads) and
 * with KEEL_OPT_NO_GRAPH_PASSES (every node its own kernel, the
 * reference): outputs agree within 1e-5. Near-misses must be left alone:
 * a Softmax over another axis, the scores read a second time, a chain
 * with neither scale nor Where (no float32 constant to fix its type).
 *
 * Then nn.MultiheadAttention's rank-3 form (heads joined with the batch:
 * q, k, v [S, N, D], Transpose 1,0,2 / 1,2,0, the scale on Q or K before
 * the product, Y transposed back or not, a constant 2-D mask), fused with
 * every Transpose folded; a rank-3 chain whose mask is computed (its rank
 * unknown to the pass) is left alone.
 *
 * Then the causal-mask pass (src/passes/pass_causal.c): the dynamo form
 * with its mask computed from the input length as torch.triu(torch.full(
 * (T, T), -inf), diagonal=1) exports it (Shape -> Gather -> Unsqueeze ->
 * Concat -> ConstantOfShape -> Trilu), or with torch.finfo's minimum as
 * the fill, becomes the attention's causal flag (no Trilu left, the
 * count in the JSON description); near misses keep their mask: the
 * diagonal masked too (k = 0: row 0 fully masked, NaN rows), a fill that
 * a score could offset (-1e4), the lower triangle (upper = 0), and a mask
 * whose column count is another tensor's length (not provably the key
 * count). Each against the unfused reference as above.
 *
 * Then the attention-qkv pass (src/passes/pass_qkv.c): q, k, v cut from one
 * projection X [B, S, 3E] by a Split (sizes as an input, or equal parts)
 * or by three Slices, each Reshaped into heads: the attention reads X by
 * columns (no Split or Slice left), with the Reshapes' shapes constant
 * [B, S, H, D] (and X given as [1, 2S, 3E]: the Reshapes make 2 x S rows
 * of its 2S, as the packed reading must too) or [0, 0, H, D]; near
 * misses keep their Split: a part also read as a graph output, and a
 * Split of X's rows instead of its columns. nn.MultiheadAttention's
 * rank-3 form of one batch (torchvision's ViT: Slices of [S, 1, 3E], each
 * Reshaped to [S, H, D]) is packed too, Y of rank 3; with a mask it is
 * left alone. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define B 2
#define S 150 /* query blocks of 32 rows and K panels of 128 keys, both with tails */
#define H 2
#define D 4
#define E (H * D)

enum { F_ADD, F_ADD_REV, F_CAUSAL, F_GAPS, F_WHERE_NOT, F_NONE, F_AXIS, F_TWICE, F_KEEP_T,
       F_DYNAMO, F_DYNAMO_SHAPES, F_DYNAMO_SYM, F_DYNAMO_BAD,
       /* causal-mask: a Trilu mask from the length (F_TRI*: >= F_TRI) */
       F_TRI, F_TRI_MIN, F_TRI_K0, F_TRI_FILL, F_TRI_LOWER, F_TRI_OTHER };

static float g_q[B * S * E], g_k[B * S * E], g_v[B * S * E], g_mask[B * S];

static void fill(void) {
  uint32_t r = 777;
  float *all[3] = {g_q, g_k, g_v};
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < B * S * E; i++)
      all[t][i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / (1 << 23) - 1.0f;
  for (int b = 0; b < B; b++)
    for (int j = 0; j < S; j++) g_mask[b * S + j] = j >= S - 5 - 3 * b ? -10000.0f : 0.0f;
}

/* q, k, v -> [B, H, S, D] (k as [B, H, D, S]) by Reshape to the shape
 * "shp" the caller made, then Transposes. */
static void heads_by(mb_graph *g) {
  mb_add(g, "Reshape", "q,shp", "q3");
  mb_add(g, "Reshape", "k,shp", "k3");
  mb_add(g, "Reshape", "v,shp", "v3");
  mb_attr_ints(mb_add(g, "Transpose", "q3", "Q4"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_attr_ints(mb_add(g, "Transpose", "k3", "Kt"), "perm", 4, (int64_t[]){0, 2, 3, 1});
  mb_attr_ints(mb_add(g, "Transpose", "v3", "V4"), "perm", 4, (int64_t[]){0, 2, 1, 3});
}

/* q, k, v [B, S, E] -> [B, H, S, D] (k as [B, H, D, S]). */
static void heads(mb_graph *g) {
  int64_t shp[4] = {B, S, H, D};
  mb_init(g, "shp", KEEL_INT64, 1, (int64_t[]){4}, shp);
  heads_by(g);
}

/* PyTorch's dynamo exporter (torchlib's scaled_dot_product_attention,
 * opset 18): K4 = Transpose(k3, 0,2,1,3) is transposed on its last two axes
 * through a rank-3 Reshape -> Transpose(0,2,1) -> Reshape, and the scale's
 * square root multiplies Q and K^T each. `computed`: the Reshape shapes
 * are Shape -> Slice -> Concat of K4 as torchlib writes them (else
 * constants, as its optimizer leaves them for static shapes); `bad`: the
 * first Reshape merges the heads into the rows ([B, H * S, D]), so the
 * chain transposes [H * S, D] matrices and the split back scrambles K4:
 * not a transpose of it, which canon-transpose must leave alone. Writes
 * Q4, Kt (scaled) and V4. */
static void heads_dynamo(mb_graph *g, bool computed, bool bad) {
  float root = sqrtf(0.5f);
  int64_t shp[4] = {B, S, H, D}, sq[3] = {bad ? B : -1, bad ? H * S : S, D}, tr[4] = {B, H, D, S};
  mb_init(g, "root", KEEL_FLOAT, 1, (int64_t[]){1}, &root);
  if (computed) { /* [B, S] of q, then H, D */
    int64_t z[1] = {0}, two[1] = {2}, hd[2] = {H, D};
    mb_init(g, "z", KEEL_INT64, 1, (int64_t[]){1}, z);
    mb_init(g, "two", KEEL_INT64, 1, (int64_t[]){1}, two);
    mb_init(g, "hd", KEEL_INT64, 1, (int64_t[]){2}, hd);
    mb_add(g, "Shape", "q", "qs");
    mb_add(g, "Slice", "qs,z,two", "bs");
    mb_attr_i(mb_add(g, "Concat", "bs,hd", "shp"), "axis", 0);
  } else {
    mb_init(g, "shp", KEEL_INT64, 1, (int64_t[]){4}, shp);
  }
  mb_add(g, "Reshape", "q,shp", "q3");
  mb_add(g, "Reshape", "k,shp", "k3");
  mb_add(g, "Reshape", "v,shp", "v3");
  mb_attr_ints(mb_add(g, "Transpose", "q3", "Q0"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_attr_ints(mb_add(g, "Transpose", "k3", "K4"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_attr_ints(mb_add(g, "Transpose", "v3", "V4"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  if (computed) {
    int64_t m1[1] = {-1}, m2[1] = {-2}, zero[1] = {0}, big[1] = {INT64_MAX};
    mb_init(g, "m1", KEEL_INT64, 1, (int64_t[]){1}, m1);
    mb_init(g, "m2", KEEL_INT64, 1, (int64_t[]){1}, m2);
    mb_init(g, "zero", KEEL_INT64, 1, (int64_t[]){1}, zero);
    mb_init(g, "big", KEEL_INT64, 1, (int64_t[]){1}, big);
    mb_add(g, "Shape", "K4", "ks");
    mb_add(g, "Slice", "ks,m1,big", "k_last");
    mb_add(g, "Slice", "ks,m2,m1", "k_second");
    mb_add(g, "Slice", "ks,zero,m2", "k_first");
    mb_attr_i(mb_add(g, "Concat", "m1,k_second,k_last", "sq"), "axis", 0);
    mb_attr_i(mb_add(g, "Concat", "k_first,k_last,k_second", "tr"), "axis", 0);
  } else {
    mb_init(g, "sq", KEEL_INT64, 1, (int64_t[]){3}, sq);
    mb_init(g, "tr", KEEL_INT64, 1, (int64_t[]){4}, tr);
  }
  mb_add(g, "Reshape", "K4,sq", "K3");
  mb_attr_ints(mb_add(g, "Transpose", "K3", "K3t"), "perm", 3, (int64_t[]){0, 2, 1});
  mb_add(g, "Reshape", "K3t,tr", "Kt0");
  mb_add(g, "Mul", "Q0,root", "Q4");
  mb_add(g, "Mul", "Kt0,root", "Kt");
}

/* The causal condition as torch writes it: true above the diagonal. */
static void causal_cond(mb_graph *g) {
  static uint8_t ones[S * S];
  memset(ones, 1, sizeof ones);
  int64_t zero = 0;
  mb_init(g, "ones", KEEL_BOOL, 2, (int64_t[]){S, S}, ones);
  mb_init(g, "kdiag", KEEL_INT64, 0, NULL, &zero);
  mb_attr_i(mb_add(g, "Trilu", "ones,kdiag", "tri"), "upper", 0);
  mb_add(g, "Not", "tri", "ntri");
  mb_attr_i(mb_add(g, "Cast", "ntri", "cond"), "to", KEEL_BOOL);
}

/* mask = Trilu(ConstantOfShape([len(q), len(other)], fill), k) with the
 * Trilu's upper attribute, as torch.triu(torch.full((T, T), fill), k)
 * exports it from the input length (dim 1 of q, which the computed
 * Reshapes give K and V too; for the columns, or dim 3 of the graph input
 * "mask"). */
static void length_mask(mb_graph *g, bool other, float fill, int64_t k, int64_t upper) {
  int64_t one = 1, three = 3, zero[1] = {0};
  mb_init(g, "one", KEEL_INT64, 0, NULL, &one);
  mb_init(g, "three", KEEL_INT64, 0, NULL, &three);
  mb_init(g, "ax0", KEEL_INT64, 1, (int64_t[]){1}, zero);
  mb_init(g, "kd", KEEL_INT64, 0, NULL, &k);
  mb_add(g, "Shape", "q", "mq");
  mb_attr_i(mb_add(g, "Gather", "mq,one", "tq"), "axis", 0);
  mb_add(g, "Unsqueeze", "tq,ax0", "tq1");
  mb_add(g, "Shape", other ? "mask" : "q", "mo");
  mb_attr_i(mb_add(g, "Gather", other ? "mo,three" : "mo,one", "to"), "axis", 0);
  mb_add(g, "Unsqueeze", "to,ax0", "to1");
  mb_attr_i(mb_add(g, "Concat", "tq1,to1", "mshape"), "axis", 0);
  mb_attr_t(mb_add(g, "ConstantOfShape", "mshape", "full"), "value", KEEL_FLOAT, 1,
            (int64_t[]){1}, &fill);
  mb_attr_i(mb_add(g, "Trilu", "full,kd", "tri"), "upper", upper);
}

static mb_graph *model(int form, int opset) {
  float c = 0.5f, inv = 2.0f, ninf = -INFINITY, big = -1e9f;
  mb_graph *g = mb_graph_new("main");
  /* F_DYNAMO_SYM: batch and length as symbols (d0, d1), as a dynamic
   * export declares them */
  const int64_t qd[3] = {form == F_DYNAMO_SYM ? -1 : B, form == F_DYNAMO_SYM ? -1 : S, E};
  mb_input(g, "q", KEEL_FLOAT, 3, qd);
  mb_input(g, "k", KEEL_FLOAT, 3, qd);
  mb_input(g, "v", KEEL_FLOAT, 3, qd);
  mb_input(g, "mask", KEEL_FLOAT, 4, (int64_t[]){B, 1, 1, S});
  mb_init(g, "c", KEEL_FLOAT, 0, NULL, &c);
  mb_init(g, "inv", KEEL_FLOAT, 1, (int64_t[]){1}, &inv);
  bool dynamo = form >= F_DYNAMO;
  bool tri = form >= F_TRI;
  if (dynamo) heads_dynamo(g, form == F_DYNAMO_SHAPES || form == F_DYNAMO_SYM || tri,
                           form == F_DYNAMO_BAD);
  else heads(g);
  mb_add(g, "MatMul", "Q4,Kt", "s");
  const char *x = "x";
  switch (form) {
    case F_DYNAMO:
    case F_DYNAMO_SHAPES:
    case F_DYNAMO_SYM:
    case F_DYNAMO_BAD: mb_add(g, "Add", "s,mask", "x"); break;
    case F_TRI:
    case F_TRI_MIN:
    case F_TRI_K0:
    case F_TRI_FILL:
    case F_TRI_LOWER:
    case F_TRI_OTHER:
      length_mask(g, form == F_TRI_OTHER,
                  form == F_TRI_MIN ? -3.4028234663852886e38f : form == F_TRI_FILL ? -1e4f : ninf,
                  form == F_TRI_K0 ? 0 : 1, form == F_TRI_LOWER ? 0 : 1);
      mb_add(g, "Add", form == F_TRI_MIN ? "tri,s" : "s,tri", "x");
      break;
    case F_ADD_REV:
      mb_add(g, "Div", "s,inv", "s2");
      mb_add(g, "Add", "mask,s2", "x");
      break;
    case F_CAUSAL:
      mb_init(g, "ninf", KEEL_FLOAT, 0, NULL, &ninf);
      causal_cond(g);
      mb_add(g, "Mul", "c,s", "s2");
      mb_add(g, "Where", "cond,ninf,s2", "x");
      break;
    case F_GAPS: { /* causal, and every 7th key masked too: rows whose kept keys
                      are not one run */
      static uint8_t gap[S * S];
      for (int i = 0; i < S; i++)
        for (int x = 0; x < S; x++) gap[i * S + x] = x > i || (x % 7 == 3 && x != i);
      mb_init(g, "ninf", KEEL_FLOAT, 0, NULL, &ninf);
      mb_init(g, "gap", KEEL_BOOL, 2, (int64_t[]){S, S}, gap);
      mb_add(g, "Mul", "c,s", "s2");
      mb_add(g, "Where", "gap,ninf,s2", "x");
      break;
    }
    case F_WHERE_NOT:
      mb_init(g, "big", KEEL_FLOAT, 0, NULL, &big);
      causal_cond(g);
      mb_add(g, "Where", "cond,s,big", "x");
      break;
    case F_NONE: x = "s"; break;
    default:
      mb_add(g, "Mul", "s,c", "s2");
      mb_add(g, "Add", "s2,mask", "x");
  }
  mb_node *sm = mb_add(g, "Softmax", x, "p");
  if (form == F_AXIS) mb_attr_i(sm, "axis", 2);
  else if (opset < 13) mb_attr_i(sm, "axis", 3);
  /* Y back to [B, S, H, D] as torch does (a Transpose the pass folds),
   * or Y itself as the output */
  bool yt = form == F_ADD || form == F_CAUSAL || form == F_KEEP_T;
  mb_add(g, "MatMul", "p,V4", yt ? "y4" : "y");
  if (yt) mb_attr_ints(mb_add(g, "Transpose", "y4", "y"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  if (form == F_TWICE) mb_output(g, "s2", KEEL_FLOAT, -1, NULL);
  if (form == F_KEEP_T) { /* the Transposes have other readers: not folded */
    mb_output(g, "Q4", KEEL_FLOAT, -1, NULL);
    mb_output(g, "Kt", KEEL_FLOAT, -1, NULL);
    mb_output(g, "V4", KEEL_FLOAT, -1, NULL);
  }
  return g;
}

static bool has_fused(keel_session_t *s) {
  char *d = NULL;
  if (keel_session_describe(s, 1, &d)) return false;
  bool yes = strstr(d, "FusedAttention") != NULL;
  keel_free(d);
  return yes;
}

static void run(keel_session_t *s, float *y) {
  const int64_t qd[3] = {B, S, E};
  keel_value_t *in[4] = {mb_tensor(s, KEEL_FLOAT, 3, qd, g_q), mb_tensor(s, KEEL_FLOAT, 3, qd, g_k),
                         mb_tensor(s, KEEL_FLOAT, 3, qd, g_v),
                         mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){B, 1, 1, S}, g_mask)};
  keel_value_t *out[4] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"q", "k", "v", "mask"}, in, 4, out));
  if (out[0]) {
    CHECK(keel_value_numel(out[0]) == B * H * S * D);
    memcpy(y, keel_value_data(out[0]), sizeof(float) * B * H * S * D);
  }
  for (int i = 0; i < 4; i++) keel_value_release(in[i]);
  for (int i = 0; i < 4; i++) keel_value_release(out[i]);
}

/* The number of masks the causal-mask pass made the attention's flag. */
static int causal_masks(keel_session_t *s) {
  char *d = NULL;
  if (keel_session_describe(s, KEEL_DESCRIBE_JSON, &d)) return -1;
  const char *p = strstr(d, "\"causal_masks\": ");
  int n = p ? atoi(p + strlen("\"causal_masks\": ")) : -1;
  keel_free(d);
  return n;
}

static void one(const char *what, int form, int opset, bool want_fused) {
  static float y0[B * H * S * D], y1[B * H * S * D];
  keel_options plain = {.size = sizeof plain, .flags = KEEL_OPT_NO_GRAPH_PASSES};
  keel_session_t *s0 = mb_session_opts(model(form, opset), opset, &plain);
  CHECK(s0 != NULL);
  if (!s0) return;
  run(s0, y0);
  CHECK(!has_fused(s0));
  static const int thread_counts[3] = {1, 2, 8}; /* 8: more threads than the B * H heads,
                                                    so query blocks are the tasks */
  for (int ti = 0; ti < 3; ti++) {
    int threads = thread_counts[ti];
    keel_options o = {.size = sizeof o, .threads = threads};
    keel_session_t *s1 = mb_session_opts(model(form, opset), opset, &o);
    CHECK(s1 != NULL);
    if (!s1) break;
    if (has_fused(s1) != want_fused) fprintf(stderr, "%s: fused %d\n", what, !want_fused);
    CHECK(has_fused(s1) == want_fused);
    if (form >= F_TRI) {
      int want = form == F_TRI || form == F_TRI_MIN;
      if (causal_masks(s1) != want) fprintf(stderr, "%s: causal masks %d\n", what, causal_masks(s1));
      CHECK(causal_masks(s1) == want);
    }
    memset(y1, 0, sizeof y1);
    run(s1, y1);
    double worst = 0;
    for (int i = 0; i < B * H * S * D; i++)
      worst = fmax(worst, fabs((double)y0[i] - y1[i]) / (1.0 + fabs((double)y0[i])));
    if (!(worst <= 1e-5)) fprintf(stderr, "%s (%d threads): worst %g\n", what, threads, worst);
    CHECK(worst <= 1e-5);
    keel_session_destroy(s1);
  }
  keel_session_destroy(s0);
}

/* ------------------------------------------- rank 3 (nn.MultiheadAttention) */

#define N (B * H)
enum { M3_DIV_Q, M3_MUL_Q_NO_YT, M3_MASK, M3_SCALE_K, M3_INPUT_MASK };

static mb_graph *mha3(int form) {
  mb_graph *g = mb_graph_new("main");
  const int64_t qd[3] = {S, N, D};
  mb_input(g, "q", KEEL_FLOAT, 3, qd);
  mb_input(g, "k", KEEL_FLOAT, 3, qd);
  mb_input(g, "v", KEEL_FLOAT, 3, qd);
  if (form == M3_INPUT_MASK) mb_input(g, "m", KEEL_FLOAT, 3, (int64_t[]){N, S, S});
  float c = 2.0f, r = 0.5f;
  mb_init(g, "c", KEEL_FLOAT, 0, NULL, &c);
  mb_init(g, "r", KEEL_FLOAT, 0, NULL, &r);
  mb_attr_ints(mb_add(g, "Transpose", "q", "q3"), "perm", 3, (int64_t[]){1, 0, 2});
  mb_attr_ints(mb_add(g, "Transpose", "k", "kt"), "perm", 3, (int64_t[]){1, 2, 0});
  mb_attr_ints(mb_add(g, "Transpose", "v", "v3"), "perm", 3, (int64_t[]){1, 0, 2});
  const char *q = "qs", *k = "kt";
  if (form == M3_MUL_Q_NO_YT) mb_add(g, "Mul", "r,q3", "qs");
  else if (form == M3_SCALE_K) q = "q3", k = "ks", mb_add(g, "Mul", "kt,r", "ks");
  else mb_add(g, "Div", "q3,c", "qs");
  char in[32];
  snprintf(in, sizeof in, "%s,%s", q, k);
  mb_add(g, "MatMul", in, "s");
  const char *x = "s";
  if (form == M3_MASK) {
    static float mask[S * S];
    for (int i = 0; i < S; i++)
      for (int j = 0; j < S; j++) mask[i * S + j] = j > i ? -10000.0f : 0.0f;
    mb_init(g, "cm", KEEL_FLOAT, 2, (int64_t[]){S, S}, mask);
    mb_add(g, "Add", "s,cm", "x"), x = "x";
  } else if (form == M3_INPUT_MASK) {
    mb_add(g, "Add", "s,m", "x"), x = "x";
  }
  mb_attr_i(mb_add(g, "Softmax", x, "p"), "axis", -1);
  bool yt = form != M3_MUL_Q_NO_YT;
  mb_add(g, "MatMul", "p,v3", yt ? "o" : "y");
  if (yt) mb_attr_ints(mb_add(g, "Transpose", "o", "y"), "perm", 3, (int64_t[]){1, 0, 2});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void run3(keel_session_t *s, int form, float *y) {
  static float m[N * S * S];
  for (int i = 0; i < N * S * S; i++) m[i] = (i % 7 == 3) ? -10000.0f : 0.0f;
  const int64_t qd[3] = {S, N, D};
  keel_value_t *in[4] = {mb_tensor(s, KEEL_FLOAT, 3, qd, g_q), mb_tensor(s, KEEL_FLOAT, 3, qd, g_k),
                         mb_tensor(s, KEEL_FLOAT, 3, qd, g_v),
                         mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){N, S, S}, m)};
  int nin = form == M3_INPUT_MASK ? 4 : 3;
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"q", "k", "v", "m"}, in, (size_t)nin, out));
  if (out[0]) {
    CHECK(keel_value_numel(out[0]) == N * S * D && keel_value_rank(out[0]) == 3);
    memcpy(y, keel_value_data(out[0]), sizeof(float) * N * S * D);
  }
  for (int i = 0; i < 4; i++) keel_value_release(in[i]);
  keel_value_release(out[0]);
}

static void one3(const char *what, int form, bool want_fused) {
  static float y0[N * S * D], y1[N * S * D];
  keel_options plain = {.size = sizeof plain, .flags = KEEL_OPT_NO_GRAPH_PASSES};
  keel_session_t *s0 = mb_session_opts(mha3(form), 14, &plain);
  CHECK(s0 != NULL);
  if (!s0) return;
  run3(s0, form, y0);
  for (int threads = 1; threads <= 8; threads *= 8) {
    keel_options o = {.size = sizeof o, .threads = threads};
    keel_session_t *s1 = mb_session_opts(mha3(form), 14, &o);
    CHECK(s1 != NULL);
    if (!s1) break;
    char *d = NULL;
    CHECK_OK(keel_session_describe(s1, 0, &d));
    bool fused = d && strstr(d, "FusedAttention");
    if (fused != want_fused) fprintf(stderr, "%s: fused %d\n", what, fused);
    CHECK(fused == want_fused);
    if (want_fused) CHECK(d && !strstr(d, "Transpose")); /* every Transpose folded */
    keel_free(d);
    memset(y1, 0, sizeof y1);
    run3(s1, form, y1);
    double worst = 0;
    for (int i = 0; i < N * S * D; i++)
      worst = fmax(worst, fabs((double)y0[i] - y1[i]) / (1.0 + fabs((double)y0[i])));
    if (!(worst <= 1e-5)) fprintf(stderr, "%s (%d threads): worst %g\n", what, threads, worst);
    CHECK(worst <= 1e-5);
    keel_session_destroy(s1);
  }
  keel_session_destroy(s0);
}

/* ------------------------------------------- attention-qkv (one projection) */

enum { Q_SPLIT, Q_SPLIT_EQUAL_ZERO, Q_SLICES, Q_SPLIT_READ, Q_SPLIT_ROWS };

static float g_x[B * S * E], g_w[E * 3 * E];

/* X = MatMul(x, Wqkv) [B, S, 3E] (rows: [3B, S, E] by a Transpose), cut
 * into q, k, v by `form`. */
static mb_graph *qkv_model(int form) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "xin", KEEL_FLOAT, 3, (int64_t[]){-1, -1, E});
  float c = 0.5f;
  mb_init(g, "c", KEEL_FLOAT, 0, NULL, &c);
  mb_init(g, "wqkv", KEEL_FLOAT, 2, (int64_t[]){E, 3 * E}, g_w);
  if (form == Q_SPLIT_ROWS) { /* [B, S, 3E] -> [B, 3, S, E] -> [3B, S, E] */
    int64_t r4[4] = {-1, S, 3, E}, r3[3] = {3 * B, S, E};
    mb_init(g, "r4", KEEL_INT64, 1, (int64_t[]){4}, r4);
    mb_init(g, "r3", KEEL_INT64, 1, (int64_t[]){3}, r3);
    mb_add(g, "MatMul", "xin,wqkv", "x0");
    mb_add(g, "Reshape", "x0,r4", "x1");
    mb_attr_ints(mb_add(g, "Transpose", "x1", "xt"), "perm", 4, (int64_t[]){0, 2, 1, 3});
    mb_add(g, "Reshape", "xt,r3", "x");
  } else {
    mb_add(g, "MatMul", "xin,wqkv", "x");
  }
  int64_t sizes[3] = {E, E, E}, shp[4] = {B, S, H, D}, zshp[4] = {0, 0, H, D};
  bool zero = form == Q_SPLIT_EQUAL_ZERO || form == Q_SLICES;
  mb_init(g, "shp", KEEL_INT64, 1, (int64_t[]){4}, zero ? zshp : shp);
  if (form == Q_SLICES) {
    int64_t st[3] = {0, E, 2 * E}, en[3] = {E, 2 * E, 3 * E}, ax = -1;
    mb_init(g, "ax", KEEL_INT64, 1, (int64_t[]){1}, &ax);
    for (int i = 0; i < 3; i++) {
      char n1[8], n2[8], in[40], out[4] = {"qkv"[i], 0};
      snprintf(n1, sizeof n1, "st%d", i), snprintf(n2, sizeof n2, "en%d", i);
      mb_init(g, n1, KEEL_INT64, 1, (int64_t[]){1}, &st[i]);
      mb_init(g, n2, KEEL_INT64, 1, (int64_t[]){1}, &en[i]);
      snprintf(in, sizeof in, "x,%s,%s,ax", n1, n2);
      mb_add(g, "Slice", in, out);
    }
  } else if (form == Q_SPLIT_ROWS) { /* X [3B, S, E] cut by rows, then heads */
    mb_attr_i(mb_add(g, "Split", "x", "q,k,v"), "axis", 0);
  } else {
    mb_init(g, "sizes", KEEL_INT64, 1, (int64_t[]){3}, sizes);
    mb_attr_i(mb_add(g, "Split", form == Q_SPLIT_EQUAL_ZERO ? "x" : "x,sizes", "q,k,v"), "axis", 2);
  }
  heads_by(g);
  mb_add(g, "MatMul", "Q4,Kt", "s");
  mb_add(g, "Mul", "s,c", "x2");
  mb_attr_i(mb_add(g, "Softmax", "x2", "p"), "axis", -1);
  mb_add(g, "MatMul", "p,V4", "y4");
  mb_attr_ints(mb_add(g, "Transpose", "y4", "y"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  if (form == Q_SPLIT_READ) mb_output(g, "k", KEEL_FLOAT, -1, NULL);
  return g;
}

/* Runs x of dims xd; y (B H S D floats) from the first output. */
static void qkv_run(keel_session_t *s, const int64_t xd[3], float *y) {
  keel_value_t *in[1] = {mb_tensor(s, KEEL_FLOAT, 3, xd, g_x)}, *out[2] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"xin"}, in, 1, out));
  if (out[0]) {
    CHECK(keel_value_numel(out[0]) == B * H * S * D);
    memcpy(y, keel_value_data(out[0]), sizeof(float) * B * H * S * D);
  }
  keel_value_release(in[0]), keel_value_release(out[0]), keel_value_release(out[1]);
}

static void qkv_one(const char *what, int form, bool want_packed) {
  static float y0[B * H * S * D], y1[B * H * S * D];
  memcpy(g_x, g_q, sizeof g_x);
  for (int i = 0; i < E * 3 * E; i++) g_w[i] = g_k[i] * 0.5f;
  /* x as [B, S, E], and (constant Reshape shapes) as one batch of 2S rows
   * that the Reshapes make B x S */
  int64_t xd[2][3] = {{B, S, E}, {1, B * S, E}};
  int nx = form == Q_SPLIT ? 2 : 1;
  keel_options plain = {.size = sizeof plain, .flags = KEEL_OPT_NO_GRAPH_PASSES};
  keel_session_t *s0 = mb_session_opts(qkv_model(form), 13, &plain);
  CHECK(s0 != NULL);
  for (int threads = 1; s0 && threads <= 8; threads *= 2) {
    if (threads == 4) continue;
    keel_options o = {.size = sizeof o, .threads = threads};
    keel_session_t *s1 = mb_session_opts(qkv_model(form), 13, &o);
    CHECK(s1 != NULL);
    if (!s1) break;
    char *d = NULL;
    CHECK_OK(keel_session_describe(s1, 0, &d));
    bool packed = d && strstr(d, "FusedAttention") && !strstr(d, "Split") && !strstr(d, "Slice");
    if (packed != want_packed) fprintf(stderr, "%s: packed %d\n%s\n", what, packed, d ? d : "");
    CHECK(packed == want_packed);
    keel_free(d);
    for (int k = 0; k < nx; k++) {
      qkv_run(s0, xd[k], y0);
      memset(y1, 0, sizeof y1);
      qkv_run(s1, xd[k], y1);
      double worst = 0;
      for (int i = 0; i < B * H * S * D; i++)
        worst = fmax(worst, fabs((double)y0[i] - y1[i]) / (1.0 + fabs((double)y0[i])));
      if (!(worst <= 1e-5)) fprintf(stderr, "%s (%d threads, x %d): worst %g\n", what, threads, k, worst);
      CHECK(worst <= 1e-5);
    }
    keel_session_destroy(s1);
  }
  keel_session_destroy(s0);
}

/* nn.MultiheadAttention's rank-3 form of one batch, as torchvision's ViT
 * exports it: X = MatMul(x [S, 1, E], Wqkv) [S, 1, 3E], three Slices,
 * each Reshaped to [S, H, D] (the heads joined with the batch of one),
 * Transposes 1,0,2 / 1,2,0, Div by sqrt(D), Softmax, MatMul, Transpose
 * back: packed (no Slice left) with Y of rank 3, within 1e-5 of the
 * unfused graph at 1 and 2 threads; with an additive mask it is left
 * alone (a mask may bring batches to a rank-3 attention). */
static mb_graph *mha3_qkv_graph(bool masked) {
  static float mask[S * S];
  for (int i = 0; i < S * S; i++) mask[i] = (i % 11 == 4) ? -10000.0f : 0.0f;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "xin", KEEL_FLOAT, 3, (int64_t[]){S, 1, E});
  float c = sqrtf((float)D);
  int64_t st[3] = {0, E, 2 * E}, en[3] = {E, 2 * E, 3 * E}, ax = 2, shp[3] = {S, H, D};
  mb_init(g, "c", KEEL_FLOAT, 0, NULL, &c);
  mb_init(g, "wqkv", KEEL_FLOAT, 2, (int64_t[]){E, 3 * E}, g_w);
  mb_init(g, "ax", KEEL_INT64, 1, (int64_t[]){1}, &ax);
  mb_init(g, "shp", KEEL_INT64, 1, (int64_t[]){3}, shp);
  if (masked) mb_init(g, "m", KEEL_FLOAT, 2, (int64_t[]){S, S}, mask);
  mb_add(g, "MatMul", "xin,wqkv", "x");
  for (int i = 0; i < 3; i++) {
    char n1[8], n2[8], in[40], out[4] = {"qkv"[i], 0}, r[8];
    snprintf(n1, sizeof n1, "st%d", i), snprintf(n2, sizeof n2, "en%d", i);
    mb_init(g, n1, KEEL_INT64, 1, (int64_t[]){1}, &st[i]);
    mb_init(g, n2, KEEL_INT64, 1, (int64_t[]){1}, &en[i]);
    snprintf(in, sizeof in, "x,%s,%s,ax", n1, n2);
    mb_add(g, "Slice", in, out);
    snprintf(in, sizeof in, "%s,shp", out), snprintf(r, sizeof r, "%s3", out);
    mb_add(g, "Reshape", in, r);
  }
  mb_attr_ints(mb_add(g, "Transpose", "q3", "qt"), "perm", 3, (int64_t[]){1, 0, 2});
  mb_attr_ints(mb_add(g, "Transpose", "k3", "kt"), "perm", 3, (int64_t[]){1, 2, 0});
  mb_attr_ints(mb_add(g, "Transpose", "v3", "vt"), "perm", 3, (int64_t[]){1, 0, 2});
  mb_add(g, "Div", "qt,c", "qs");
  mb_add(g, "MatMul", "qs,kt", "s");
  if (masked) mb_add(g, "Add", "s,m", "sm");
  mb_attr_i(mb_add(g, "Softmax", masked ? "sm" : "s", "p"), "axis", -1);
  mb_add(g, "MatMul", "p,vt", "o");
  mb_attr_ints(mb_add(g, "Transpose", "o", "y"), "perm", 3, (int64_t[]){1, 0, 2});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void qkv_mha3(bool masked) {
  const int64_t xd[3] = {S, 1, E};
  static float y0[S * E], y1[S * E];
  keel_options plain = {.size = sizeof plain, .flags = KEEL_OPT_NO_GRAPH_PASSES};
  keel_session_t *s0 = mb_session_opts(mha3_qkv_graph(masked), 14, &plain);
  CHECK(s0 != NULL);
  for (int threads = 1; s0 && threads <= 2; threads++) {
    keel_options o = {.size = sizeof o, .threads = threads};
    keel_session_t *s1 = mb_session_opts(mha3_qkv_graph(masked), 14, &o);
    CHECK(s1 != NULL);
    if (!s1) break;
    char *d = NULL;
    CHECK_OK(keel_session_describe(s1, 0, &d));
    bool packed = d && strstr(d, "FusedAttention") && !strstr(d, "Slice");
    if (packed == masked)
      fprintf(stderr, "attention-qkv rank 3%s: packed %d\n%s\n", masked ? " masked" : "", packed, d ? d : "");
    CHECK(packed == !masked);
    keel_free(d);
    float *ys[2] = {y0, y1};
    keel_session_t *ss[2] = {s0, s1};
    for (int k = 0; k < 2; k++) {
      keel_value_t *in[1] = {mb_tensor(ss[k], KEEL_FLOAT, 3, xd, g_x)}, *out[1] = {0};
      CHECK_OK(keel_run(ss[k], (const char *[]){"xin"}, in, 1, out));
      CHECK(out[0] && keel_value_rank(out[0]) == 3 && keel_value_numel(out[0]) == S * E);
      if (out[0]) memcpy(ys[k], keel_value_data(out[0]), sizeof(float) * S * E);
      keel_value_release(in[0]), keel_value_release(out[0]);
    }
    double worst = 0;
    for (int i = 0; i < S * E; i++)
      worst = fmax(worst, fabs((double)y0[i] - y1[i]) / (1.0 + fabs((double)y0[i])));
    if (!(worst <= 1e-5)) fprintf(stderr, "attention-qkv rank 3: worst %g\n", worst);
    CHECK(worst <= 1e-5);
    keel_session_destroy(s1);
  }
  keel_session_destroy(s0);
}

int main(void) {
  fill();
  memcpy(g_x, g_q, sizeof g_x);
  for (int i = 0; i < E * 3 * E; i++) g_w[i] = g_k[i] * 0.5f;
  qkv_mha3(false);
  qkv_mha3(true);
  qkv_one("attention-qkv: Split with sizes, Reshape to constant [B, S, H, D]", Q_SPLIT, true);
  qkv_one("attention-qkv: Split in equal parts, Reshape [0, 0, H, D]", Q_SPLIT_EQUAL_ZERO, true);
  qkv_one("attention-qkv: three Slices of the last axis", Q_SLICES, true);
  qkv_one("attention-qkv near miss: a part also a graph output", Q_SPLIT_READ, false);
  qkv_one("attention-qkv near miss: a Split of the rows", Q_SPLIT_ROWS, false);
  one3("rank 3: Div on Q, Y transposed back", M3_DIV_Q, true);
  one3("rank 3: Mul(c, Q), Y as [N, S, D]", M3_MUL_Q_NO_YT, true);
  one3("rank 3: constant 2-D mask", M3_MASK, true);
  one3("rank 3: scale on Kt", M3_SCALE_K, true);
  one3("rank 3: a computed mask (rank unknown to the pass)", M3_INPUT_MASK, false);
  one("add", F_ADD, 14, true);
  one("add, mask first, Div scale", F_ADD_REV, 14, true);
  one("causal Where -inf", F_CAUSAL, 14, true);
  one("Where -inf with gaps", F_GAPS, 14, true);
  one("Where keeping where true, finite fill", F_WHERE_NOT, 14, true);
  one("no mask, no scale (no float32 constant)", F_NONE, 14, false);
  one("Transposes read elsewhere too", F_KEEP_T, 14, true);
  one("opset 12 Softmax axis 3", F_ADD, 12, true);
  one("Softmax over axis 2", F_AXIS, 14, false);
  one("scores read twice", F_TWICE, 14, false);
  one("dynamo: K^T by Reshape/Transpose/Reshape, sqrt(scale) on Q and K", F_DYNAMO, 18, true);
  one("dynamo: the same, Reshape shapes from Shape/Slice/Concat", F_DYNAMO_SHAPES, 18, true);
  one("dynamo: the same, batch and length symbolic", F_DYNAMO_SYM, 18, true);
  one("dynamo near miss: the heads merged into the rows", F_DYNAMO_BAD, 18, false);
  one("causal-mask: triu(full((T, T), -inf), 1) from the length", F_TRI, 18, true);
  one("causal-mask: the same with finfo.min, mask first", F_TRI_MIN, 18, true);
  one("causal-mask near miss: k = 0 (the diagonal masked too)", F_TRI_K0, 18, true);
  one("causal-mask near miss: a fill of -1e4", F_TRI_FILL, 18, true);
  one("causal-mask near miss: the lower triangle", F_TRI_LOWER, 18, true);
  one("causal-mask near miss: columns from another tensor's length", F_TRI_OTHER, 18, true);
  return check_report();
}

/* flex_attention.c: FlexAttention (domain ai.onnx.preview, opset 1):
 * scaled-dot-product attention over rank-4 inputs whose scores and
 * probabilities pass through user sub-graphs:
 *
 *     scores = scale * Q K^T              (B, Hq, L, S), GQA by head groups
 *     scores = score_mod(scores)          when the attribute is given
 *     probs  = softmax(scores)            over the keys
 *     probs  = prob_mod(probs)            when the attribute is given
 *     Y      = probs V                    in V's type
 *
 * The sub-graphs see one tensor of the softmax precision (float for
 * float/float16/bfloat16 inputs, double for double, or as the
 * softmax_precision attribute says; float and double are supported) and
 * run in this node's frame through the executor's keel_exec_graph, the way
 * If runs a branch: the score tensor is moved in, the result moved out and
 * released here. The products and the softmax are the attention core's
 * stages over whole heads (attention.h: keel_sdpa_scores, _softmax,
 * _values; sgemm/dgemm per head, keel_vm_softmax_row or its double form).
 * A row whose scores are all -inf gives NaN, as the reference's softmax
 * does (this op has no fully-masked-row rule).
 */
#include <math.h>

#include "ops/nn/attention/attention.h"
#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"

typedef struct flex {
  int64_t B, Hq, Hkv, L, S, E, Dv;
  int ct;                       /* compute type: KEEL_FLOAT or KEEL_DOUBLE  */
  double scale;
} flex;

static keel_status flex_shapes(keel_kctx *k, const keel_tensor *q, const keel_tensor *kk,
                               const keel_tensor *v, flex *f) {
  char s1[96], s2[96], s3[96];
  bool ok = q->rank == 4 && kk->rank == 4 && v->rank == 4 && kk->dtype == q->dtype &&
            v->dtype == q->dtype;
  if (ok) {
    f->B = q->shape[0], f->Hq = q->shape[1], f->L = q->shape[2], f->E = q->shape[3];
    f->Hkv = kk->shape[1], f->S = kk->shape[2], f->Dv = v->shape[3];
    ok = kk->shape[0] == f->B && v->shape[0] == f->B && kk->shape[3] == f->E &&
         v->shape[1] == f->Hkv && v->shape[2] == f->S && f->Hkv > 0 && f->Hq % f->Hkv == 0;
  }
  if (!ok)
    return keel_err(KEEL_ERR_SHAPE,
                    "Q %s, K %s, V %s must be rank 4 of one type, with matching batch, "
                    "head size and keys, and query heads a multiple of kv heads",
                    keel_shape_str(q->rank, q->shape, s1, sizeof s1),
                    keel_shape_str(kk->rank, kk->shape, s2, sizeof s2),
                    keel_shape_str(v->rank, v->shape, s3, sizeof s3));
  if (!keel_dtype_is_float(q->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "FlexAttention does not support %s",
                    keel_dtype_name((keel_dtype)q->dtype));
  int64_t sp = keel_k_attr_i(k, "softmax_precision", q->dtype == KEEL_DOUBLE ? KEEL_DOUBLE : KEEL_FLOAT);
  if (sp != KEEL_FLOAT && sp != KEEL_DOUBLE)
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "FlexAttention (ai.onnx.preview, opset 1): softmax_precision %lld "
                    "(only float and double are supported)", (long long)sp);
  f->ct = (int)sp;
  f->scale = keel_k_attr(k, "scale") ? keel_k_attr_f(k, "scale", 1)
                                     : 1.0 / sqrt((double)f->E);
  return KEEL_OK;
}

/* t in the compute type: its own data, or a converted scratch copy. */
static keel_status staged(keel_kctx *k, const keel_tensor *t, int ct, const void **p) {
  if (t->dtype == ct) {
    *p = t->data;
    return KEEL_OK;
  }
  int64_t n = keel_tensor_numel(t);
  void *d;
  KEEL_TRY(keel_k_scratch_n(k, n, keel_dtype_size((keel_dtype)ct), &d));
  for (int64_t i = 0; i < n; i++)
    keel_elem_set_f64(ct, d, (size_t)i, keel_elem_get_f64(t->dtype, t->data, (size_t)i));
  *p = d;
  return KEEL_OK;
}

/* Runs the modifier `name` (if the node has it) on *v (moved in), leaving
 * its result in *v: a tensor of v's type and shape. */
static keel_status run_mod(keel_kctx *k, const char *name, keel_val *v) {
  const keel_attr *a = keel_k_attr(k, name);
  if (!a) return KEEL_OK;
  const keel_graph *g = a->type == KEEL_ATTR_GRAPH ? a->g : NULL;
  if (!g || g->n_in != 1 || g->n_out != 1)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s must be a graph of one input and one output",
                    name);
  if (!k->svc || !k->svc->subgraph)
    return keel_err(KEEL_ERR_INTERNAL, "%s: no executor to run the graph", name);
  keel_tensor want = v->t;
  keel_val in;
  keel_val_move(&in, v);
  keel_status st = k->svc->subgraph(k, g, &in, v);
  keel_val_clear(&in);
  if (st) return keel_err_prefix(st, "%s", name);
  bool ok = v->kind == KEEL_V_TENSOR && v->t.dtype == want.dtype && v->t.rank == want.rank &&
            !memcmp(v->t.shape, want.shape, sizeof(int64_t) * (size_t)want.rank);
  if (!ok) {
    keel_val_clear(v);
    return keel_err(KEEL_ERR_SHAPE, "%s must return a tensor of its input's type and shape",
                    name);
  }
  return KEEL_OK;
}

/* The part that holds sub-graph values: scores and probabilities. */
static keel_status flex_body(keel_kctx *k, const flex *f, const void *q, const void *kk,
                             const void *v, keel_val *sc, keel_val *pr, void *y) {
  int64_t shape[4] = {f->B, f->Hq, f->L, f->S};
  keel_sdpa_heads h = {f->ct, f->B, f->Hq, f->Hkv, f->L, f->S, f->E, f->Dv, f->scale};
  KEEL_TRY(keel_tensor_alloc(k->heap, f->ct, 4, shape, k->owner, &sc->t));
  sc->kind = KEEL_V_TENSOR;
  keel_sdpa_scores(&h, q, kk, sc->t.data);
  KEEL_TRY(run_mod(k, "score_mod", sc));
  KEEL_TRY(keel_tensor_alloc(k->heap, f->ct, 4, shape, k->owner, &pr->t));
  pr->kind = KEEL_V_TENSOR;
  keel_sdpa_softmax(&h, sc->t.data, pr->t.data);
  keel_val_clear(sc);
  KEEL_TRY(run_mod(k, "prob_mod", pr));
  keel_sdpa_values(&h, pr->t.data, v, y);
  return KEEL_OK;
}

static keel_status op_flex_attention(keel_kctx *k) {
  const keel_tensor *q, *kk, *v;
  KEEL_TRY(keel_k_in(k, 0, &q));
  KEEL_TRY(keel_k_in(k, 1, &kk));
  KEEL_TRY(keel_k_in(k, 2, &v));
  flex f;
  KEEL_TRY(flex_shapes(k, q, kk, v, &f));
  const int64_t big[] = {f.L, f.S, f.E, f.Dv};
  for (int i = 0; i < 4; i++) KEEL_TRY(keel_blas_fits(big[i]));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, v->dtype, 4, (int64_t[]){f.B, f.Hq, f.L, f.Dv}, &y));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  if (f.S == 0 || f.E == 0)
    return keel_err(KEEL_ERR_UNSUPPORTED, "FlexAttention over %lld keys of head size %lld",
                    (long long)f.S, (long long)f.E);
  const void *qc, *kc, *vc;
  KEEL_TRY(staged(k, q, f.ct, &qc));
  KEEL_TRY(staged(k, kk, f.ct, &kc));
  KEEL_TRY(staged(k, v, f.ct, &vc));
  void *yc = y->data;
  if (y->dtype != f.ct)
    KEEL_TRY(keel_k_scratch_n(k, keel_tensor_numel(y), keel_dtype_size((keel_dtype)f.ct), &yc));
  keel_val sc = {0}, pr = {0};
  keel_status st = flex_body(k, &f, qc, kc, vc, &sc, &pr, yc);
  keel_val_clear(&sc);
  keel_val_clear(&pr);
  if (st || yc == y->data) return st;
  int64_t n = keel_tensor_numel(y);
  for (int64_t i = 0; i < n; i++)
    keel_elem_set_f64(y->dtype, y->data, (size_t)i, keel_elem_get_f64(f.ct, yc, (size_t)i));
  return KEEL_OK;
}

const keel_opdef keel_ops_flex_attention[] = {
    {"ai.onnx.preview", "FlexAttention", 1, KEEL_OPSET_MAX, op_flex_attention, 0, KEEL_TS_FLOAT},
    {0},
};

/* rnn_gpu.c: LSTM and GRU on a device, for the nodes the place pass put
 * there (passes/pass_place.c, gpu_takes_rnn: float32, the default
 * activations, no clip, no sequence_lens, layout 0, LSTM without peepholes
 * or input_forget).
 *
 * Per direction (forward, then backwards for a bidirectional node; a
 * reverse node backwards): the
 * input projection of every step in one product of the blas group,
 * XW = X W^T ([T * B, G * H]); then per step H R^T by another product
 * (none on a first step from zeros) and the rnn group's cell
 * (device/dev_rnn.h) with both biases; GRU with linear_before_reset 0
 * makes its r * H first, then (r * H) Rh^T, then its output. Each step's
 * H goes straight into Y's slice for that step and direction (or a
 * scratch row when Y is not asked for), where the next step reads it;
 * Y_h and Y_c are the last ones, copied. The checks and errors are the
 * CPU kernel's where the CPU accepts the node (rnn.c); what this path
 * does not take is refused UNSUPPORTED, naming the attribute. */
#include "base/status.h"
#include "device/dev_blas.h"
#include "device/dev_move.h"
#include "device/dev_rnn.h"
#include "ops/nn/rnn/select.h"

typedef struct gpu_rnn {
  bool lstm;
  int64_t T, B, I, H, G, D;    /* steps, batch, input, hidden, gates, dirs */
  int lbr;
  bool reverse;                /* one direction, backwards                */
  const keel_tensor *x, *w, *r, *bias, *h0, *c0;
} gpu_rnn;

static keel_status unsupported(const keel_kctx *k, const char *what) {
  return keel_err(KEEL_ERR_UNSUPPORTED, "GPU %s: %s (the CPU kernel takes it)", k->node->op_type,
                  what);
}

static keel_status check_dims(const keel_tensor *t, const char *name, int rank, const int64_t *want) {
  char s1[96], s2[96];
  bool ok = t->rank == rank;
  for (int i = 0; ok && i < rank; i++) ok = t->shape[i] == want[i];
  if (!ok)
    return keel_err(KEEL_ERR_SHAPE, "%s has shape %s, expected %s", name,
                    keel_shape_str(t->rank, t->shape, s1, sizeof s1),
                    keel_shape_str(rank, want, s2, sizeof s2));
  if (t->dtype != KEEL_FLOAT) return keel_err(KEEL_ERR_UNSUPPORTED, "%s is not float32", name);
  return KEEL_OK;
}

static keel_status read_node(keel_kctx *k, gpu_rnn *p) {
  p->lstm = !strcmp(k->node->op_type, "LSTM");
  p->G = p->lstm ? 4 : 3;
  const char *dir = keel_k_attr_s(k, "direction", "forward");
  if (strcmp(dir, "forward") && strcmp(dir, "reverse") && strcmp(dir, "bidirectional"))
    return keel_err(KEEL_ERR_INVALID_MODEL, "direction '%s'", dir);
  p->D = strcmp(dir, "bidirectional") ? 1 : 2;
  p->reverse = !strcmp(dir, "reverse");
  if (keel_k_attr(k, "activations") || keel_k_attr(k, "clip"))
    return unsupported(k, "activations or clip");
  if (keel_k_attr_i(k, "layout", 0)) return unsupported(k, "layout 1");
  if (p->lstm && keel_k_attr_i(k, "input_forget", 0)) return unsupported(k, "input_forget");
  if (keel_k_has_in(k, 4)) return unsupported(k, "sequence_lens");
  if (p->lstm && keel_k_has_in(k, 7)) return unsupported(k, "peepholes (P)");
  p->lbr = !p->lstm && keel_k_attr_i(k, "linear_before_reset", 0) != 0;
  KEEL_TRY(keel_k_in(k, 0, &p->x));
  KEEL_TRY(keel_k_in(k, 1, &p->w));
  KEEL_TRY(keel_k_in(k, 2, &p->r));
  if (p->x->rank != 3) return keel_err(KEEL_ERR_SHAPE, "X must be [seq, batch, input], rank %d", p->x->rank);
  p->T = p->x->shape[0], p->B = p->x->shape[1], p->I = p->x->shape[2];
  p->H = keel_k_attr_i(k, "hidden_size", p->r->rank == 3 ? p->r->shape[2] : 0);
  if (p->H <= 0) return keel_err(KEEL_ERR_INVALID_MODEL, "hidden_size %lld", (long long)p->H);
  int64_t GH = p->G * p->H;
  KEEL_TRY(check_dims(p->x, "X", 3, (int64_t[]){p->T, p->B, p->I}));
  KEEL_TRY(check_dims(p->w, "W", 3, (int64_t[]){p->D, GH, p->I}));
  KEEL_TRY(check_dims(p->r, "R", 3, (int64_t[]){p->D, GH, p->H}));
  p->bias = p->h0 = p->c0 = NULL;
  if (keel_k_has_in(k, 3)) {
    KEEL_TRY(keel_k_in(k, 3, &p->bias));
    KEEL_TRY(check_dims(p->bias, "B", 2, (int64_t[]){p->D, 2 * GH}));
  }
  if (keel_k_has_in(k, 5)) {
    KEEL_TRY(keel_k_in(k, 5, &p->h0));
    KEEL_TRY(check_dims(p->h0, "initial_h", 3, (int64_t[]){p->D, p->B, p->H}));
  }
  if (p->lstm && keel_k_has_in(k, 6)) {
    KEEL_TRY(keel_k_in(k, 6, &p->c0));
    KEEL_TRY(check_dims(p->c0, "initial_c", 3, (int64_t[]){p->D, p->B, p->H}));
  }
  return KEEL_OK;
}

/* C [M, N] = A [M, K] op(Bm) (+ C when acc), Bm [N, K] read transposed */
static keel_status gemm_nt(keel_kctx *k, int64_t M, int64_t N, int64_t K, const float *a,
                           const float *b, float *c) {
  keel_dev_gemm g = {.ta = false, .tb = true, .M = M, .N = N, .K = K, .lda = K, .ldb = K,
                     .ldc = N, .batch = 1, .alpha = 1.0f, .beta = 0.0f};
  return k->dev->blas->sgemm(k->dev, &g, a, b, c);
}

static keel_status gpu_rnn_run(keel_kctx *k) {
  gpu_rnn p;
  KEEL_TRY(read_node(k, &p));
  int64_t T = p.T, B = p.B, H = p.H, GH = p.G * p.H, BH = B * H;
  keel_tensor *y = NULL, *yh = NULL, *yc = NULL;
  if (keel_k_has_out(k, 0))
    KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 4, (int64_t[]){T, p.D, B, H}, &y));
  if (keel_k_has_out(k, 1)) KEEL_TRY(keel_k_out(k, 1, KEEL_FLOAT, 3, (int64_t[]){p.D, B, H}, &yh));
  if (p.lstm && keel_k_has_out(k, 2))
    KEEL_TRY(keel_k_out(k, 2, KEEL_FLOAT, 3, (int64_t[]){p.D, B, H}, &yc));
  if (T == 0 || BH == 0) return KEEL_OK; /* the outputs are empty, or zeros below */
  if (!k->dev || !k->dev->blas || !k->dev->rnn || !k->dev->move)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s: %s has no recurrence kernels", k->node->op_type,
                    k->dev ? k->dev->name : "no device");
  /* scratch: XW [T*B, GH], HR [B, GH], states; GRU: z, rh, hrh */
  int64_t n = T * B * GH + B * GH + 4 * BH + (y ? 0 : T * BH);
  float *s;
  KEEL_TRY(keel_k_scratch_n(k, n, sizeof(float), (void **)&s));
  float *xw = s, *hr = xw + T * B * GH, *c = hr + B * GH, *z = c + BH, *rh = z + BH,
        *hrh = rh + BH, *hs = hrh + BH;
  for (int64_t d = 0; d < p.D; d++) {
    const float *w = (const float *)p.w->data + d * GH * p.I;
    const float *r = (const float *)p.r->data + d * GH * H;
    const float *wb = p.bias ? (const float *)p.bias->data + d * 2 * GH : NULL;
    KEEL_TRY(gemm_nt(k, T * B, GH, p.I, p.x->data, w, xw));
    const float *h_prev = p.h0 ? (const float *)p.h0->data + d * BH : NULL;
    const float *c_prev = p.c0 ? (const float *)p.c0->data + d * BH : NULL;
    for (int64_t i = 0; i < T; i++) {
      int64_t t = d || p.reverse ? T - 1 - i : i;
      float *h = y ? (float *)y->data + (t * p.D + d) * BH : hs + t * BH;
      const float *xwt = xw + t * B * GH;
      if (h_prev) KEEL_TRY(gemm_nt(k, B, GH, H, h_prev, r, hr));
      const float *hrt = h_prev ? hr : NULL;
      if (p.lstm) {
        /* c in place: the cell reads c_prev's element before writing c's */
        KEEL_TRY(k->dev->rnn->lstm_cell(k->dev, B, H, xwt, hrt, wb, c_prev, c, h));
        c_prev = c;
      } else {
        KEEL_TRY(k->dev->rnn->gru_gates(k->dev, B, H, xwt, hrt, wb, h_prev, p.lbr, z, rh));
        const float *hrht = NULL;
        if (!p.lbr && h_prev) { /* (r * H) Rh^T: Rh is R's last H rows */
          KEEL_TRY(gemm_nt(k, B, H, H, rh, r + 2 * H * H, hrh));
          hrht = hrh;
        }
        KEEL_TRY(k->dev->rnn->gru_out(k->dev, B, H, xwt, hrt, hrht, wb, z, rh, h_prev, p.lbr, h));
      }
      h_prev = h;
    }
    if (yh) KEEL_TRY(keel_dev_copy_run(k->dev, sizeof(float), BH, h_prev, (float *)yh->data + d * BH));
    if (yc) KEEL_TRY(keel_dev_copy_run(k->dev, sizeof(float), BH, c_prev, (float *)yc->data + d * BH));
  }
  return KEEL_OK;
}

const keel_impl keel_gpu_rnn = {"gpu", keel_prep_on_gpu, NULL, NULL, gpu_rnn_run,
                                "placed on the GPU (LSTM, GRU: default activations, float32)",
                                KEEL_NODE_GPU};

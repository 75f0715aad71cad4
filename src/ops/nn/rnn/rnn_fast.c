/* rnn_fast.c: the prepared implementation of RNN, GRU and LSTM (kernel.h's
 * keel_impl) for float nodes whose W and R are constants (initializers),
 * which is every exported model.
 *
 * At bind each direction's W (G*hid, in) and R (G*hid, hid) are stored
 * transposed in panels of 128 gate columns, each K rows of 128 floats, so
 * that a step's product of the batch's hidden state with Rᵀ, and the
 * projection of all time steps with Wᵀ, walk the weights front to back:
 * one broadcast of an input element and a run of vector multiply-adds over
 * the panel's columns: keel_panel_gemm (panel_gemm.h), as on the tiny M
 * of a recurrence (the batch) a general GEMM's packing and dispatch cost
 * more than the arithmetic.
 *
 * rnn.c's driver runs the node either way; with this state it takes the
 * packed products and the vectorized tanh of vmath.c. Without it
 * (KEEL_OPT_REFERENCE_KERNELS, other types, computed weights) it runs its
 * reference path: keel_gemm_f32 on the weights as given and libm's tanh.
 */
#include "ops/nn/rnn/rnn_fast.h"
#include "ops/nn/rnn/select.h"

#include <string.h>

#include "ops/common/panel_gemm.h"

#define NP KEEL_PANEL_NP

/* ==================================================== prepared state */

static const keel_tensor *const_float3(const keel_prep_ctx *p, int i) {
  const keel_tensor *t = p->node->n_in > i ? p->consts[i] : NULL;
  return t && t->dtype == KEEL_FLOAT && t->rank == 3 ? t : NULL;
}

/* float W and R, constants of rank 3 with the same directions and rows
 * (the run still checks them against X and the attributes). */
static bool rf_supports(const keel_prep_ctx *p) {
  const keel_tensor *w = const_float3(p, 1), *r = const_float3(p, 2);
  if (!w || !r || w->shape[0] != r->shape[0] || w->shape[1] != r->shape[1]) return false;
  if (w->shape[0] < 1 || w->shape[0] > 2 || w->shape[1] < 1 || r->shape[2] < 1) return false;
  if (w->shape[1] > (int64_t)1 << 26 || w->shape[2] > (int64_t)1 << 26 ||
      r->shape[2] > (int64_t)1 << 26)
    return false;
  /* the packed copies, each part's columns padded to whole panels: at most 1 GiB */
  double bytes = 4.0 * (double)w->shape[0] * (double)(w->shape[1] + 2 * NP) *
                 ((double)w->shape[2] + (double)r->shape[2]);
  if (bytes > (double)(1u << 30)) return false;
  keel_panel_gemm_init();
  return true;
}

/* GRU's product of r ⊙ H with Rh comes after the gate math of z and r,
 * so its columns (2*hid ..) are a part of their own; others have one. */
static void plan_parts(const keel_node *n, int64_t gh, keel_rnn_prep *s) {
  bool gru = !strcmp(n->op_type, "GRU") && gh % 3 == 0;
  s->nparts = gru ? 2 : 1;
  s->part_col[0] = 0;
  s->part_n[0] = gru ? gh / 3 * 2 : gh;
  s->part_col[1] = s->part_n[0];
  s->part_n[1] = gh - s->part_n[0];
}

static keel_status rf_prepare(const keel_prep_ctx *p, void **state) {
  const keel_tensor *w = p->consts[1], *r = p->consts[2];
  int64_t dirs = w->shape[0], gh = w->shape[1], in = w->shape[2], hid = r->shape[2];
  keel_rnn_prep t = {dirs, gh, in, hid, 0, {0}, {0}, {{0}}, {{0}}};
  plan_parts(p->node, gh, &t);
  size_t total = (sizeof t + 63) & ~(size_t)63, off[2][2][2];
  for (int64_t d = 0; d < dirs; d++)
    for (int q = 0; q < t.nparts; q++) {
      off[d][q][0] = total;
      total += (size_t)keel_panel_floats(t.part_n[q], in) * sizeof(float);
      off[d][q][1] = total;
      total += (size_t)keel_panel_floats(t.part_n[q], hid) * sizeof(float);
    }
  total += NP * sizeof(float); /* what keel_panel_gemm_cols may read past the end */
  void *blk;
  KEEL_TRY(keel_prep_alloc(p, total, &blk));
  for (int64_t d = 0; d < dirs; d++)
    for (int q = 0; q < t.nparts; q++) {
      float *wp = (float *)(void *)((char *)blk + off[d][q][0]);
      float *rp = (float *)(void *)((char *)blk + off[d][q][1]);
      int64_t j0 = t.part_col[q], n = t.part_n[q];
      keel_panel_pack((const float *)w->data + d * gh * in, in, j0, n, wp);
      keel_panel_pack((const float *)r->data + d * gh * hid, hid, j0, n, rp);
      t.w[d][q] = wp, t.r[d][q] = rp;
    }
  memcpy(blk, &t, sizeof t);
  *state = blk;
  return KEEL_OK;
}

const keel_impl keel_rnn_packed = {
    "packed", rf_supports, rf_prepare, keel_prep_block_release, NULL,
    "W and R float constants of rank 3 (packed copies up to 1 GiB); each run: both directions "
    "at once for a small cell, else steps cut by units (ops/nn/rnn/select.c)"};

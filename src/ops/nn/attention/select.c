/* select.c: how the attention core runs, and why (select.h).
 *
 * Two decisions, both from the shapes of one call and the pool's splits
 * (never its threads, so that KEEL_OPT_DETERMINISTIC holds): whether the
 * call runs whole heads on packed panels, and otherwise how many query
 * rows one task takes. The numbers are measured, each beside its rule. */
#include "ops/nn/attention/select.h"

#include "ops/common/panel_gemm.h"

/* Panels pay for packing K and V once per head only with the AVX-512 panel
 * kernel; Dv must fit one panel's width; D and Skv bound the packed copy
 * (at most 1024 x 8192 floats per head: beyond that it leaves the worker's
 * cache and the sgemm blocks win). Fewer heads than splits would leave
 * threads idle, since a head is one task. */
bool keel_attention_panels(const keel_attn_facts *f, int splits) {
  return keel_panel_gemm_avx512() && f->Dv <= KEEL_PANEL_NP && f->D <= 1024 && f->Skv <= 8192 &&
         f->B * f->H >= splits;
}

/* 32 rows, doubled while a block's scores (qb x Skv floats) stay within
 * 128 KB, the block still has rows to take, and every split still gets at
 * least four tasks; 32 where the rows cut their keys (a causal block
 * skips the keys above its diagonal, which a taller block would not). */
int64_t keel_attention_block_rows(const keel_attn_facts *f, int splits, int64_t Sq) {
  int64_t qb = 32;
  if (f->cut) return qb;
  while (qb < KEEL_ATTN_QB_MAX && qb < Sq && 2 * qb * f->Skv * (int64_t)sizeof(float) <= ((int64_t)128 << 10) &&
         f->B * f->H * ((Sq + 2 * qb - 1) / (2 * qb)) >= 4 * (int64_t)splits)
    qb *= 2;
  return qb;
}

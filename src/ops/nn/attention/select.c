/* select.c: how the attention core runs, and why (select.h). */
#include "ops/nn/attention/select.h"

#include "ops/common/panel_gemm.h"

bool keel_attention_panels(const keel_attn_facts *f, int splits) {
  return keel_panel_gemm_avx512() && f->Dv <= KEEL_PANEL_NP && f->D <= 1024 && f->Skv <= 8192 &&
         f->B * f->H >= splits;
}

int64_t keel_attention_block_rows(const keel_attn_facts *f, int splits, int64_t Sq) {
  int64_t qb = 32;
  if (f->cut) return qb;
  while (qb < KEEL_ATTN_QB_MAX && qb < Sq && 2 * qb * f->Skv * (int64_t)sizeof(float) <= ((int64_t)128 << 10) &&
         f->B * f->H * ((Sq + 2 * qb - 1) / (2 * qb)) >= 4 * (int64_t)splits)
    qb *= 2;
  return qb;
}

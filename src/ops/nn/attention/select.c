/* select.c: how FusedAttention runs, and why (select.h). */
#include "ops/nn/attention/select.h"

#include "ops/common/panel_gemm.h"

bool keel_attention_panels(const keel_attn_facts *f, int splits) {
  return keel_panel_gemm_avx512() && f->Dv <= KEEL_PANEL_NP && f->D <= 1024 && f->Skv <= 8192 &&
         f->B * f->H >= splits;
}

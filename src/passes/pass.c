/* pass.c: the pass pipeline (pass.h): the list, in order, and its runner. */
#include "passes/pass.h"

#include "base/status.h"
#include "ir/scope.h"
#include "passes/shard.h"

static const keel_pass g_passes[] = {
    {"train", keel_pass_train, false},
    {"autodiff", keel_ir_autodiff, false},
    {"shard", keel_pass_shard, false}, /* a no-op unless m->shard is set */
    {"fold-identity", keel_pass_fold_identity, true},
    {"fold-batchnorm", keel_pass_fold_batchnorm, true},
    {"canon-activation", keel_pass_canon_activation, true},
    {"fuse-layernorm", keel_pass_fuse_layernorm, true},
    {"fuse-gelu", keel_pass_fuse_gelu, true},
    {"fuse-attention", keel_pass_fuse_attention, true},
    {"fuse-matmul", keel_pass_fuse_matmul, true},
    {"layout", keel_pass_layout, true},
    {"fuse-activation", keel_pass_fuse_activation, true},
};

keel_status keel_ir_passes(keel_model *m, bool optimize) {
  for (size_t i = 0; i < KEEL_COUNTOF(g_passes); i++) {
    if (g_passes[i].optimizing && !optimize) continue;
    keel_status st = g_passes[i].run(m);
    if (st) return keel_err_prefix(st, "pass %s", g_passes[i].name);
  }
  return KEEL_OK;
}

keel_status keel_ir_passes_through(keel_model *m, const char *last) {
  for (size_t i = 0; i < KEEL_COUNTOF(g_passes); i++) {
    if (g_passes[i].optimizing) continue;
    keel_status st = g_passes[i].run(m);
    if (st) return keel_err_prefix(st, "pass %s", g_passes[i].name);
    if (!strcmp(g_passes[i].name, last)) break;
  }
  return KEEL_OK;
}

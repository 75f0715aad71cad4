/* registry.c: the kernel tables of every op family, and lookup by
 * (domain, op_type, opset). Lookup runs once per node at session creation.
 *
 * Each family file owns its table (keel_ops_<family>[]) so families grow
 * independently; this file only lists them. */
#include "../exec/exec.h"
#include "families.h"

typedef struct family {
  const char *name;
  const keel_opdef *ops;
  size_t n;
} family;

#define KEEL_FAMILY(f) {#f, keel_ops_##f, 0},
static family g_families[] = {KEEL_FAMILIES(KEEL_FAMILY)};
#undef KEEL_FAMILY

static size_t family_count(const keel_opdef *ops) {
  size_t n = 0;
  while (ops[n].name) n++;
  return n;
}

static const keel_opdef *find(const char *domain, const char *name, int64_t opset,
                              bool any_version) {
  for (size_t f = 0; f < KEEL_COUNTOF(g_families); f++) {
    if (!g_families[f].n) g_families[f].n = family_count(g_families[f].ops);
    for (size_t i = 0; i < g_families[f].n; i++) {
      const keel_opdef *d = &g_families[f].ops[i];
      if (strcmp(d->name, name) || strcmp(d->domain, domain)) continue;
      if (any_version || (opset >= d->since && opset <= d->until)) return d;
    }
  }
  return NULL;
}

const keel_opdef *keel_ops_find(const char *domain, const char *name, int64_t opset) {
  return find(domain, name, opset, false);
}

keel_status keel_ops_unsupported(const keel_node *n) {
  const char *dom = n->domain[0] ? n->domain : "ai.onnx";
  const char *who = n->name[0] ? n->name : "";
  if (n->opset == 0)
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "unsupported: node '%s' uses op %s from domain '%s', which the model "
                    "does not import",
                    who, n->op_type, dom);
  if (find(n->domain, n->op_type, 0, true))
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "unsupported: op %s (domain %s) at opset %lld: keel implements other "
                    "versions of it only",
                    n->op_type, dom, (long long)n->opset);
  return keel_err(KEEL_ERR_UNSUPPORTED, "unsupported: op %s (domain %s, opset %lld)",
                  n->op_type, dom, (long long)n->opset);
}

size_t keel_ops_list(const keel_opdef **out, size_t cap) {
  size_t k = 0;
  for (size_t f = 0; f < KEEL_COUNTOF(g_families); f++)
    for (const keel_opdef *d = g_families[f].ops; d->name; d++) {
      if (k < cap) out[k] = d;
      k++;
    }
  return k;
}

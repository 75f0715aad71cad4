/* registry.c: the kernel tables of every op family, and lookup by
 * (domain, op_type, opset). Lookup runs once per node at session creation.
 *
 * Each family file owns its table (keel_ops_<family>[]) so families grow
 * independently; this file only lists them. */
#include "ops/registry.h"

#include "base/status.h"
#include "ops/families.h"

typedef struct family {
  const char *name;
  const keel_opdef *ops;       /* ends with a row whose name is NULL      */
} family;

#define KEEL_FAMILY(f) {#f, keel_ops_##f},
static const family g_families[] = {KEEL_FAMILIES(KEEL_FAMILY)};
#undef KEEL_FAMILY

static const keel_opdef *find(const char *domain, const char *name, int64_t opset,
                              bool any_version) {
  for (size_t f = 0; f < KEEL_COUNTOF(g_families); f++) {
    for (const keel_opdef *d = g_families[f].ops; d->name; d++) {
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

size_t keel_op_count(void) { return keel_ops_list(NULL, 0); }

keel_status keel_op_get(size_t i, keel_op_desc *d) {
  const keel_opdef *all[4096];
  size_t n = keel_ops_list(all, 4096);
  if (!d || i >= n || i >= 4096) return keel_err(KEEL_ERR_INVALID_ARG, "no operator row %zu", i);
  const keel_opdef *o = all[i];
  *d = (keel_op_desc){o->domain, o->name, o->since, o->until, o->types, (o->flags & KEEL_OPF_RANDOM) != 0};
  return KEEL_OK;
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

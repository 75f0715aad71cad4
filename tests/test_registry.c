/* test_registry.c: the kernel registry as keel_op_count / keel_op_get list
 * it. Every row names an op and a domain, has since <= until, and states
 * its element types (no row leaves `types` at 0, and no row claims a type
 * keel has no tensors of: undefined, complex, or beyond bfloat16); rows of
 * one (domain, op) do not overlap in opset versions, so a lookup never
 * depends on table order. */
#include <stdbool.h>
#include <string.h>

#include "check.h"

/* Element types a keel tensor can have: every ONNX type up to bfloat16
 * except undefined and the complex types. */
static uint64_t tensor_types(void) {
  uint64_t m = 0;
  for (int d = KEEL_FLOAT; d <= KEEL_INT2; d++)
    if (d != KEEL_COMPLEX64 && d != KEEL_COMPLEX128) m |= 1ull << d;
  return m;
}

static const char *dom_of(const keel_op_desc *d) { return d->domain[0] ? d->domain : "ai.onnx"; }

int main(void) {
  size_t n = keel_op_count();
  CHECK(n > 0);
  keel_op_desc *rows = calloc(n ? n : 1, sizeof *rows);
  const uint64_t valid = tensor_types();
  for (size_t i = 0; i < n; i++) {
    keel_op_desc *d = &rows[i];
    CHECK_OK(keel_op_get(i, d));
    CHECK(d->domain != NULL && d->name != NULL && d->name[0] != 0);
    if (!d->domain || !d->name) continue;
    if (d->types == 0) fprintf(stderr, "row %zu: %s (%s) states no types\n", i, d->name, dom_of(d));
    CHECK(d->types != 0);
    if (d->types & ~valid)
      fprintf(stderr, "row %zu: %s (%s) has types 0x%llx outside 0x%llx\n", i, d->name, dom_of(d),
              (unsigned long long)d->types, (unsigned long long)valid);
    CHECK((d->types & ~valid) == 0);
    if (!(d->since >= 1 && d->since <= d->until))
      fprintf(stderr, "row %zu: %s (%s) has opsets %d..%d\n", i, d->name, dom_of(d), d->since,
              d->until);
    CHECK(d->since >= 1 && d->since <= d->until);
  }
  /* rows of one (domain, op) cover disjoint opset ranges */
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++) {
      const keel_op_desc *a = &rows[i], *b = &rows[j];
      if (!a->name || !b->name || strcmp(a->name, b->name) || strcmp(a->domain, b->domain)) continue;
      bool overlap = a->since <= b->until && b->since <= a->until;
      if (overlap)
        fprintf(stderr, "%s (%s): opsets %d..%d and %d..%d overlap\n", a->name, dom_of(a),
                a->since, a->until, b->since, b->until);
      CHECK(!overlap);
    }
  keel_op_desc past;
  CHECK_STATUS(keel_op_get(n, &past), KEEL_ERR_INVALID_ARG);
  CHECK_STATUS(keel_op_get(0, NULL), KEEL_ERR_INVALID_ARG);
  free(rows);
  return check_report();
}

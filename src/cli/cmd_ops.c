/* cmd_ops.c: `keel ops`: the kernel registry as a table (plain or
 * Markdown; docs/operators.md is this command's output). */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* "float32, float64, ..." for a type mask; named groups where whole. */
static void types_text(uint64_t m, char *buf, size_t cap) {
  buf[0] = 0;
  if (!m) {
    snprintf(buf, cap, "(not stated)");
    return;
  }
  for (int d = 1; d <= KEEL_INT2; d++) {
    if (!(m >> d & 1)) continue;
    size_t at = strlen(buf);
    snprintf(buf + at, cap - at, "%s%s", at ? ", " : "", keel_dtype_name((keel_dtype)d));
  }
}

static int by_name(const void *a, const void *b) {
  const keel_op_desc *x = a, *y = b;
  int c = strcmp(x->domain, y->domain);
  if (c) return c;
  c = strcmp(x->name, y->name);
  return c ? c : x->since - y->since;
}

int cmd_ops(int argc, char **argv) {
  bool md = false;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--markdown")) md = true;
    else return cli_usage("ops", "unknown option");
  }
  size_t n = keel_op_count();
  keel_op_desc *d = calloc(n + 1, sizeof *d);
  for (size_t i = 0; i < n; i++) keel_op_get(i, &d[i]);
  qsort(d, n, sizeof *d, by_name);
  size_t distinct = 0;
  for (size_t i = 0; i < n; i++)
    distinct += !i || strcmp(d[i].name, d[i - 1].name) || strcmp(d[i].domain, d[i - 1].domain);
  if (md) {
    printf("# Operators\n\nGenerated from keel's kernel registry by `keel ops --markdown`; do not edit\n"
           "(a test checks this file against the command's output).\n\n"
           "%zu operators in %zu rows. *Opsets* is the range of operator-set versions a row\n"
           "serves; *types* are the element types of the main input(s) the kernel accepts.\n\n"
           "| op | domain | opsets | types |\n|---|---|---|---|\n", distinct, n);
  }
  for (size_t i = 0; i < n; i++) {
    char types[512], opsets[32];
    types_text(d[i].types, types, sizeof types);
    if (d[i].until >= 1000) snprintf(opsets, sizeof opsets, "%d+", d[i].since);
    else snprintf(opsets, sizeof opsets, "%d-%d", d[i].since, d[i].until);
    const char *dom = d[i].domain[0] ? d[i].domain : "ai.onnx";
    if (md) printf("| %s%s | %s | %s | %s |\n", d[i].name, d[i].random ? " (random)" : "", dom, opsets, types);
    else printf("%-28s %-26s %-8s %s\n", d[i].name, dom, opsets, types);
  }
  free(d);
  return 0;
}

/* shapecheck.c: the session's shape check (shapecheck.h). */
#include "exec/shapecheck.h"

#include <stdatomic.h>
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "exec/session.h"
#include "ir/shapes.h"

typedef struct keel_shapecheck {
  keel_shapes *shapes;
  int32_t n_syms;
  _Atomic uint64_t checked, cls[3], runs_off;
} keel_shapecheck;

keel_status keel_shapecheck_create(struct keel_session_s *s) {
  keel_shapecheck *c = keel_sys_calloc(1, sizeof *c);
  if (!c) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shape check");
  keel_status st = keel_shapes_infer(s->m, &c->shapes);
  if (st) {
    keel_sys_free(c, sizeof *c);
    return keel_err_prefix(st, "shape check");
  }
  c->n_syms = keel_shapes_n_syms(c->shapes);
  s->shapecheck = c;
  return KEEL_OK;
}

void keel_shapecheck_free(keel_shapecheck *c) {
  if (!c) return;
  keel_shapes_free(c->shapes);
  keel_sys_free(c, sizeof *c);
}

size_t keel_shapecheck_bind_bytes(const struct keel_session_s *s) {
  return s->shapecheck ? sizeof(int64_t) * (size_t)(s->shapecheck->n_syms + 1) : 0;
}

void keel_shapecheck_begin(keel_runctx *R) {
  const keel_shapecheck *c = R->s->shapecheck;
  if (!c || !R->bind) return;
  R->shapes_off = false;
  for (int32_t i = 0; i < c->n_syms; i++) R->bind[i] = -1;
}

static void dims_text(const keel_tensor *t, char *buf, size_t cap) {
  size_t at = (size_t)snprintf(buf, cap, "[");
  for (int32_t i = 0; i < t->rank && at < cap; i++)
    at += (size_t)snprintf(buf + at, cap - at, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  if (at < cap) snprintf(buf + at, cap - at, "]");
}

static keel_status check_value(keel_runctx *R, const keel_frame *f, const keel_node *n, const char *name,
                               const keel_val *v, bool is_input) {
  keel_shapecheck *c = R->s->shapecheck;
  if (!v || v->kind != KEEL_V_TENSOR || !name[0] || R->shapes_off) return KEEL_OK;
  const keel_sshape *sh = keel_shapes_find(c->shapes, f->g, name);
  if (!sh) return KEEL_OK;
  atomic_fetch_add_explicit(&c->checked, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->cls[keel_sshape_class(sh)], 1, memory_order_relaxed);
  if (keel_sshape_agrees(c->shapes, sh, v->t.rank, v->t.shape, R->bind)) return KEEL_OK;
  char lb[256], want[512], got[256];
  keel_sshape_text(c->shapes, sh, want, sizeof want);
  dims_text(&v->t, got, sizeof got);
  const keel_graph *g = f->g, *main = R->s->m->main;
  bool declared = false; /* a main-graph input, read here or in a sub-graph */
  for (int32_t i = 0; i < main->n_in && !declared; i++)
    declared = !strcmp(main->in_names[i], name) && sh == keel_shapes_find(c->shapes, main, name);
  if (declared) { /* not what the inference describes: the rest of the run is not checked */
    R->shapes_off = true;
    atomic_fetch_add_explicit(&c->runs_off, 1, memory_order_relaxed);
    return KEEL_OK;
  }
  return keel_err(KEEL_ERR_INTERNAL, "shape check: graph '%s': %s '%s' of node %s: inferred %s, ran with %s",
                  g->path, is_input ? "input" : "output", name, keel_node_label(n, lb, sizeof lb), want, got);
}

keel_status keel_shapecheck_node(keel_runctx *R, const keel_frame *f, const keel_node *n) {
  if (!R->bind || R->shapes_off) return KEEL_OK;
  for (int32_t i = 0; i < n->n_in; i++)
    KEEL_TRY(check_value(R, f, n, n->in_names[i], f->in[i], true));
  for (int32_t k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0) KEEL_TRY(check_value(R, f, n, n->out_names[k], f->out[k], false));
  return KEEL_OK;
}

keel_shapecheck_counts keel_shapecheck_get(const struct keel_session_s *s) {
  keel_shapecheck_counts r = {0};
  const keel_shapecheck *c = s->shapecheck;
  if (!c) return r;
  r.checked = atomic_load(&c->checked);
  r.known = atomic_load(&c->cls[0]);
  r.symbolic = atomic_load(&c->cls[1]);
  r.unknown = atomic_load(&c->cls[2]);
  r.runs_off = atomic_load(&c->runs_off);
  return r;
}

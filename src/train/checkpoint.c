/* checkpoint.c: a trainer's state in a folder, DIR/trainer.ckpt, so that a
 * run can stop and go on bit for bit: N steps + save + load + M steps gives
 * the parameters N + M steps give.
 *
 * The file (little-endian):
 *   "KEELCKPT" u32 version=2  u32 optimizer  u32 n_state  u32 n_params
 *   i64 steps  f64 lr, momentum, beta1, beta2, eps, weight_decay
 *   u32 zero_grad (a record, like the hyperparameters)
 *   per parameter: u32 name length, name bytes, u32 rank, i64 dims[rank],
 *                  i64 its own steps, u32 flags (1: it had a gradient),
 *                  the parameter's floats, then each state buffer's floats.
 * Version 1 (keel before per-parameter steps) had neither zero_grad nor
 * the two per-parameter fields: it loads with every parameter's steps the
 * trainer's, and "had a gradient" after its first step.
 * Loading checks everything against the trainer first (optimizer, buffer
 * count, parameter names and shapes, the file's length) and changes
 * nothing unless all of it fits. The hyperparameters in the file are a
 * record; the trainer's own are used after loading.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/prim.h"
#include "base/status.h"
#include "base/sysmem.h"
#include "train/train.h"

#define CKPT_MAGIC "KEELCKPT"
#define CKPT_VERSION 2u
#define CKPT_FILE "trainer.ckpt"

/* ============================================================== write */

typedef struct wbuf {
  uint8_t *p;
  size_t n, cap;
  bool failed;
} wbuf;

static void put(wbuf *b, const void *src, size_t n) {
  if (b->failed || !n) return;
  if (b->n + n > b->cap) {
    size_t cap = KEEL_MAX(b->cap * 2, b->n + n + 4096);
    uint8_t *q = realloc(b->p, cap);
    if (!q) {
      b->failed = true;
      return;
    }
    b->p = q, b->cap = cap;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}
static void put_u32(wbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_i64(wbuf *b, int64_t v) { put(b, &v, 8); }
static void put_f64(wbuf *b, double v) { put(b, &v, 8); }

static void put_header(wbuf *b, const keel_trainer_t *t) {
  const keel_train_options *o = &t->o;
  put(b, CKPT_MAGIC, 8);
  put_u32(b, CKPT_VERSION);
  put_u32(b, (uint32_t)o->optimizer);
  put_u32(b, (uint32_t)keel_optim_n_state(o));
  put_u32(b, (uint32_t)t->n_params);
  put_i64(b, t->steps);
  double hp[6] = {o->lr, o->momentum, o->beta1, o->beta2, o->eps, o->weight_decay};
  for (int i = 0; i < 6; i++) put_f64(b, hp[i]);
  put_u32(b, (uint32_t)o->zero_grad);
}

static void put_param(wbuf *b, const keel_trainer_t *t, const train_param *p, float *const *state) {
  const keel_value_t *v = p->value;
  put_u32(b, (uint32_t)strlen(p->name));
  put(b, p->name, strlen(p->name));
  put_u32(b, (uint32_t)keel_value_rank(v));
  for (int d = 0; d < keel_value_rank(v); d++) put_i64(b, keel_value_shape(v)[d]);
  put_i64(b, p->steps);
  put_u32(b, p->had_grad ? 1u : 0u);
  size_t nb = sizeof(float) * (size_t)p->numel;
  put(b, p->w, nb);
  for (int k = 0; k < keel_optim_n_state(&t->o); k++) put(b, state[k], nb);
}

keel_status keel_trainer_checkpoint_save(const keel_trainer_t *t, const char *dir) {
  if (!t || !dir) return keel_err(KEEL_ERR_INVALID_ARG, "keel_trainer_checkpoint_save: NULL argument");
  /* data-parallel: every rank takes part (a sharded optimizer's state
   * comes from its owners), rank 0 writes */
  bool writer = keel_train_dp_rank(t) == 0;
  wbuf b = {0};
  put_header(&b, t);
  int n_state = keel_optim_n_state(&t->o);
  keel_status st = KEEL_OK;
  for (int32_t i = 0; !st && i < t->n_params; i++) {
    float *tmp, *state[KEEL_OPTIM_MAX_STATE] = {0};
    st = keel_train_dp_state(t, i, n_state, &tmp, state);
    if (!st && writer) put_param(&b, t, &t->p[i], state);
    if (tmp) keel_sys_free(tmp, ((size_t)n_state * (size_t)t->p[i].numel + 1) * sizeof(float));
  }
  if (st || !writer) {
    free(b.p);
    return st;
  }
  st = keel_prim_mkdir(dir);
  if (st) {
    free(b.p);
    return st;
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, CKPT_FILE);
  st = b.failed ? keel_err(KEEL_ERR_OUT_OF_MEMORY, "checkpoint %s", path)
                            : keel_prim_write_file(path, b.p, b.n);
  free(b.p);
  return st;
}

/* =============================================================== read */

typedef struct rbuf {
  const uint8_t *p, *end;
  const char *path;
} rbuf;

static keel_status get(rbuf *r, void *dst, size_t n) {
  if ((size_t)(r->end - r->p) < n)
    return keel_err(KEEL_ERR_INVALID_ARG, "checkpoint %s: truncated", r->path);
  if (dst) memcpy(dst, r->p, n);
  r->p += n;
  return KEEL_OK;
}

/* The header, checked against the trainer. */
static keel_status check_header(rbuf *r, const keel_trainer_t *t, int64_t *steps, uint32_t *version) {
  char magic[8];
  uint32_t ver, opt, nst, np;
  KEEL_TRY(get(r, magic, 8));
  if (memcmp(magic, CKPT_MAGIC, 8))
    return keel_err(KEEL_ERR_INVALID_ARG, "checkpoint %s: not a keel trainer checkpoint", r->path);
  KEEL_TRY(get(r, &ver, 4));
  KEEL_TRY(get(r, &opt, 4));
  KEEL_TRY(get(r, &nst, 4));
  KEEL_TRY(get(r, &np, 4));
  KEEL_TRY(get(r, steps, 8));
  KEEL_TRY(get(r, NULL, 6 * 8));
  if (ver != 1 && ver != CKPT_VERSION)
    return keel_err(KEEL_ERR_INVALID_ARG, "checkpoint %s: version %u, this keel reads 1 to %u", r->path, ver,
                    CKPT_VERSION);
  if (ver >= 2) KEEL_TRY(get(r, NULL, 4));
  *version = ver;
  if (opt != (uint32_t)t->o.optimizer || nst != (uint32_t)keel_optim_n_state(&t->o))
    return keel_err(KEEL_ERR_INVALID_ARG, "checkpoint %s: written for optimizer %u with %u state buffer(s), "
                    "this trainer uses optimizer %d with %d", r->path, opt, nst, (int)t->o.optimizer,
                    keel_optim_n_state(&t->o));
  if (np != (uint32_t)t->n_params || *steps < 0)
    return keel_err(KEEL_ERR_INVALID_ARG, "checkpoint %s: %u parameters, the model trains %d", r->path, np, t->n_params);
  return KEEL_OK;
}

/* One parameter's record: name and shape checked; *data points at its
 * floats (parameter, then state buffers) in the file. */
typedef struct ckpt_param {
  const uint8_t *data;         /* the parameter's floats, then the state's */
  int64_t steps;
  uint32_t flags;
} ckpt_param;

static keel_status check_param(rbuf *r, const train_param *p, int n_state, uint32_t version,
                               int64_t steps, ckpt_param *out) {
  uint32_t len, rank;
  KEEL_TRY(get(r, &len, 4));
  const uint8_t *name = r->p;
  KEEL_TRY(get(r, NULL, len));
  if (len != strlen(p->name) || memcmp(name, p->name, len))
    return keel_err(KEEL_ERR_INVALID_ARG, "checkpoint %s: parameter '%.*s' where the model has '%s'", r->path,
                    (int)KEEL_MIN(len, 200u), (const char *)name, p->name);
  KEEL_TRY(get(r, &rank, 4));
  if ((int)rank != keel_value_rank(p->value))
    return keel_err(KEEL_ERR_INVALID_ARG, "checkpoint %s: parameter '%s' has rank %u, the model's %d", r->path,
                    p->name, rank, keel_value_rank(p->value));
  for (uint32_t d = 0; d < rank; d++) {
    int64_t dim;
    KEEL_TRY(get(r, &dim, 8));
    if (dim != keel_value_shape(p->value)[d])
      return keel_err(KEEL_ERR_INVALID_ARG, "checkpoint %s: parameter '%s' dimension %u is %lld, the model's %lld",
                      r->path, p->name, d, (long long)dim, (long long)keel_value_shape(p->value)[d]);
  }
  out->steps = steps;
  out->flags = steps > 0;
  if (version >= 2) {
    KEEL_TRY(get(r, &out->steps, 8));
    KEEL_TRY(get(r, &out->flags, 4));
    if (out->steps < 0 || out->steps > steps || out->flags > 1)
      return keel_err(KEEL_ERR_INVALID_ARG, "checkpoint %s: parameter '%s' has %lld steps of %lld (flags %u)",
                      r->path, p->name, (long long)out->steps, (long long)steps, out->flags);
  }
  out->data = r->p;
  return get(r, NULL, sizeof(float) * (size_t)p->numel * (size_t)(1 + n_state));
}

static keel_status load(rbuf *r, keel_trainer_t *t) {
  int64_t steps;
  uint32_t version;
  KEEL_TRY(check_header(r, t, &steps, &version));
  int n_state = keel_optim_n_state(&t->o);
  ckpt_param *data = calloc((size_t)t->n_params + 1, sizeof *data);
  if (!data) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "reading a checkpoint");
  keel_status st = KEEL_OK;
  for (int32_t i = 0; !st && i < t->n_params; i++)
    st = check_param(r, &t->p[i], n_state, version, steps, &data[i]);
  if (!st && r->p != r->end) st = keel_err(KEEL_ERR_INVALID_ARG, "checkpoint %s: bytes after the last parameter", r->path);
  for (int32_t i = 0; !st && i < t->n_params; i++) {
    size_t nb = sizeof(float) * (size_t)t->p[i].numel;
    memcpy(t->p[i].w, data[i].data, nb);
    for (int k = 0; k < n_state; k++) /* a sharded optimizer holds some parameters' state only */
      if (t->p[i].st[k]) memcpy(t->p[i].st[k], data[i].data + nb * (size_t)(k + 1), nb);
    t->p[i].steps = data[i].steps;
    t->p[i].had_grad = data[i].flags & 1u;
  }
  if (!st) t->steps = steps;
  free(data);
  return st;
}

keel_status keel_trainer_checkpoint_load(keel_trainer_t *t, const char *dir) {
  if (!t || !dir) return keel_err(KEEL_ERR_INVALID_ARG, "keel_trainer_checkpoint_load: NULL argument");
  keel_err_clear();
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, CKPT_FILE);
  keel_mapping m;
  KEEL_TRY(keel_prim_map_file(path, &m));
  rbuf r = {m.addr, m.addr + m.size, path};
  if (!m.addr) r.end = r.p;
  keel_status st = load(&r, t);
  keel_prim_unmap(&m);
  return st;
}

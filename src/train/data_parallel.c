/* data_parallel.c: a trainer that is one rank of a data-parallel job
 * (keel_train_options.data_parallel; the collectives are dist/dp.c's).
 *
 * Creation: the ranks agree on the parameter set (names and sizes) and
 * on the optimizer's settings, rank 0's parameters are broadcast, and the
 * ranks compare a checksum of the weights. The gradients are laid out in
 * buckets of at most o.bucket_mb (one parameter larger than that gets a
 * bucket of its own), from the last parameter to the first: the order in
 * which the backward produces them, so a later version can start a
 * bucket's all-reduce while the backward still runs.
 *
 * A step: every rank, whether its run succeeded or not, takes part in one
 * small all-reduce (MAX) of [failed rank + 1, the inputs' signature in
 * four 31-bit halves and their complements, one reach flag per
 * parameter]. A failure anywhere fails the step everywhere, naming the
 * rank; a signature that differs (a batch of another dtype or rank) stops
 * every rank with that message; otherwise the reach flags come back OR-ed
 * (a parameter any rank reached is updated on all). Then each bucket, a
 * block of the session's allocator tagged "allreduce bucket B" with the
 * step as its iteration, is filled (zeros for a parameter this rank did
 * not reach), the buckets' non-blocking all-reduces are started and
 * awaited, and the sums are scaled by 1/N; bucket 0 carries the loss too.
 * The optimizer reads the averaged gradients from the buckets, which are
 * freed before the step returns.
 */
#include <stdio.h>
#include <string.h>

#include "base/prim.h"
#include "base/sysmem.h"
#include "dist/dp.h"
#include "train/train.h"

typedef struct train_dp {
  int rank, size;
  int n_buckets;
  int64_t *bucket_floats;    /* floats (bucket 0: + 1 for the loss)         */
  uint32_t *bucket_site;
  int32_t *param_bucket;     /* per parameter                               */
  int64_t *param_off;        /* its offset in its bucket                    */
  bool *local;               /* this step: reached by this rank's backward  */
  keel_val *vals;            /* this step's bucket blocks                   */
  float **data;
  const float **grads;       /* per parameter: its averaged gradient        */
  int32_t *vec;              /* the status exchange                         */
  int n_vec;
  /* --shard-optimizer */
  bool shard;
  int32_t *owner;            /* per parameter: the rank that updates it     */
  int64_t *counts, *displs;  /* per rank: floats it owns, their place       */
  uint32_t gather_site;
  uint64_t ns;
} train_dp;

#define SIG_WORDS 8 /* a 64-bit value in 4 words of at most 31 bits, and their complements */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}
#define FNV0 0xcbf29ce484222325ull

/* Buckets over the parameters from the last to the first. */
static keel_status lay_out(keel_trainer_t *t, train_dp *d) {
  double mb = t->o.bucket_mb > 0 ? t->o.bucket_mb : 25.0;
  int64_t cap = (int64_t)(mb * 1048576.0 / sizeof(float));
  if (cap < 1) cap = 1;
  int32_t n = t->n_params;
  d->param_bucket = keel_sys_calloc((size_t)n + 1, sizeof(int32_t));
  d->param_off = keel_sys_calloc((size_t)n + 1, sizeof(int64_t));
  d->grads = keel_sys_calloc((size_t)n + 1, sizeof(float *));
  d->local = keel_sys_calloc((size_t)n + 1, sizeof(bool));
  /* at most one bucket per parameter, and one when there is none */
  d->bucket_floats = keel_sys_calloc((size_t)n + 1, sizeof(int64_t));
  d->bucket_site = keel_sys_calloc((size_t)n + 1, sizeof(uint32_t));
  d->vals = keel_sys_calloc((size_t)n + 1, sizeof(keel_val));
  d->data = keel_sys_calloc((size_t)n + 1, sizeof(float *));
  d->n_vec = 1 + SIG_WORDS + n;
  d->vec = keel_sys_calloc((size_t)d->n_vec, sizeof(int32_t));
  if (!d->param_bucket || !d->param_off || !d->grads || !d->local ||
      !d->bucket_floats || !d->bucket_site || !d->vals || !d->data || !d->vec)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "data-parallel buckets");
  int b = 0;
  d->bucket_floats[0] = 1; /* the loss */
  for (int32_t i = n - 1; i >= 0; i--) {
    int64_t k = t->p[i].numel;
    if (d->bucket_floats[b] > (b == 0) && d->bucket_floats[b] + k > cap) {
      b++;
      d->bucket_floats[b] = 0;
    }
    d->param_bucket[i] = b;
    d->param_off[i] = d->bucket_floats[b];
    d->bucket_floats[b] += k;
  }
  d->n_buckets = b + 1;
  for (b = 0; b < d->n_buckets; b++) {
    char label[64];
    snprintf(label, sizeof label, "allreduce bucket %d", b);
    KEEL_TRY(keel_session_label_site(t->s, label, &d->bucket_site[b]));
  }
  return KEEL_OK;
}

/* The parameter set and the optimizer's settings, as hashes the ranks compare. */
static uint64_t param_signature(const keel_trainer_t *t) {
  uint64_t h = fnv(FNV0, &t->n_params, sizeof t->n_params);
  for (int32_t i = 0; i < t->n_params; i++) {
    h = fnv(h, t->p[i].name, strlen(t->p[i].name) + 1);
    h = fnv(h, &t->p[i].numel, sizeof t->p[i].numel);
  }
  return h;
}

static uint64_t optim_signature(const keel_train_options *o) {
  double f[] = {o->lr, o->momentum, o->beta1, o->beta2, o->eps, o->weight_decay, o->bucket_mb};
  int32_t k[] = {(int32_t)o->optimizer, (int32_t)o->zero_grad, o->shard_optimizer};
  return fnv(fnv(FNV0, f, sizeof f), k, sizeof k);
}

/* ZeRO stage 1: owners by size, largest first to the least loaded rank
 * (ties: the lower rank); the others' optimizer buffers are released. */
static keel_status shard(keel_trainer_t *t, train_dp *d) {
  int32_t n = t->n_params;
  d->shard = true;
  d->owner = keel_sys_calloc((size_t)n + 1, sizeof(int32_t));
  d->counts = keel_sys_calloc((size_t)d->size * 2 + 1, sizeof(int64_t));
  if (!d->owner || !d->counts) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "data-parallel: optimizer shards");
  d->displs = d->counts + d->size;
  for (int32_t left = n; left > 0; left--) {
    int32_t big = -1; /* the largest parameter not yet placed */
    for (int32_t i = 0; i < n; i++)
      if (d->owner[i] == 0 && (big < 0 || t->p[i].numel > t->p[big].numel)) big = i;
    int least = 0;
    for (int r = 1; r < d->size; r++)
      if (d->counts[r] < d->counts[least]) least = r;
    d->owner[big] = least + 1; /* 0 = not placed yet */
    d->counts[least] += t->p[big].numel;
  }
  for (int r = 1; r < d->size; r++) d->displs[r] = d->displs[r - 1] + d->counts[r - 1];
  for (int32_t i = 0; i < n; i++) {
    train_param *p = &t->p[i];
    if (--d->owner[i] == d->rank) continue;
    for (int k = 0; k < KEEL_OPTIM_MAX_STATE; k++) {
      if (!p->state[k]) continue;
      const keel_val *v = keel_value_val(p->state[k]);
      if (v->t.buf) t->state_bytes -= v->t.buf->block->size;
      keel_value_release(p->state[k]);
      p->state[k] = NULL, p->st[k] = NULL;
    }
  }
  return keel_session_label_site(t->s, "updated parameters gathered", &d->gather_site);
}

bool keel_train_dp_owns(const keel_trainer_t *t, int32_t i) {
  return !t->dp || !t->dp->shard || t->dp->owner[i] == t->dp->rank;
}

int keel_train_dp_rank(const keel_trainer_t *t) { return t->dp ? t->dp->rank : 0; }

/* Every rank's updated parameters to every rank: each packs its own at
 * its place in one block, one MPI_Allgatherv, each unpacks the others'. */
keel_status keel_train_dp_gather(keel_trainer_t *t, uint32_t step) {
  train_dp *d = t->dp;
  if (!d || !d->shard) return KEEL_OK;
  uint64_t t0 = keel_prim_now_ns();
  keel_session_t *s = t->s;
  int64_t total = d->displs[d->size - 1] + d->counts[d->size - 1];
  keel_val v = {.kind = KEEL_V_TENSOR};
  KEEL_TRY(keel_tensor_alloc(s->heap, KEEL_FLOAT, 1, (int64_t[]){total},
                             (keel_owner){d->gather_site & s->owner_mask, step}, &v.t));
  float *buf = v.t.data;
  int64_t *at = keel_sys_calloc((size_t)d->size + 1, sizeof(int64_t));
  keel_status st = at ? KEEL_OK : keel_err(KEEL_ERR_OUT_OF_MEMORY, "data-parallel: gather");
  for (int r = 0; !st && r < d->size; r++) at[r] = d->displs[r];
  for (int32_t i = 0; !st && i < t->n_params; i++) { /* each rank's parameters in index order */
    int r = d->owner[i];
    if (r == d->rank) memcpy(buf + at[r], t->p[i].w, sizeof(float) * (size_t)t->p[i].numel);
    at[r] += t->p[i].numel;
  }
  if (!st) st = keel_dp_allgather_f32(t->o.comm, buf, d->counts, d->displs, d->size);
  for (int r = 0; !st && r < d->size; r++) at[r] = d->displs[r];
  for (int32_t i = 0; !st && i < t->n_params; i++) {
    int r = d->owner[i];
    if (r != d->rank) memcpy(t->p[i].w, buf + at[r], sizeof(float) * (size_t)t->p[i].numel);
    at[r] += t->p[i].numel;
  }
  keel_sys_free(at, ((size_t)d->size + 1) * sizeof(int64_t));
  keel_val_clear(&v);
  d->ns += keel_prim_now_ns() - t0;
  return st;
}

keel_status keel_train_dp_state(const keel_trainer_t *t, int32_t i, int n_state, float **tmp, float **st) {
  const train_param *p = &t->p[i];
  const train_dp *d = t->dp;
  for (int k = 0; k < n_state; k++) st[k] = p->st[k];
  *tmp = NULL;
  if (!d || !d->shard) return KEEL_OK;
  size_t nb = sizeof(float) * (size_t)p->numel;
  if (d->owner[i] != d->rank) {
    *tmp = keel_sys_calloc((size_t)n_state * (size_t)p->numel + 1, sizeof(float));
    if (!*tmp) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "checkpoint: the state of '%s'", p->name);
    for (int k = 0; k < n_state; k++) st[k] = *tmp + (size_t)k * (size_t)p->numel;
  }
  for (int k = 0; k < n_state; k++) KEEL_TRY(keel_dp_bcast(t->o.comm, st[k], nb, d->owner[i]));
  return KEEL_OK;
}

keel_status keel_train_dp_setup(keel_trainer_t *t) {
  train_dp *d = keel_sys_calloc(1, sizeof *d);
  if (!d) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "data-parallel trainer");
  t->dp = d;
  KEEL_TRY(keel_dp_world(t->o.comm, &d->rank, &d->size));
  KEEL_TRY(lay_out(t, d));
  KEEL_TRY(keel_dp_agree(t->o.comm, param_signature(t), "the trainable parameters (names and sizes)"));
  KEEL_TRY(keel_dp_agree(t->o.comm, optim_signature(&t->o), "the optimizer and its settings"));
  uint64_t sum = FNV0;
  for (int32_t i = 0; i < t->n_params; i++) {
    KEEL_TRY(keel_dp_bcast(t->o.comm, t->p[i].w, sizeof(float) * (size_t)t->p[i].numel, 0));
    sum = fnv(sum, t->p[i].w, sizeof(float) * (size_t)t->p[i].numel);
  }
  KEEL_TRY(keel_dp_agree(t->o.comm, sum, "the parameters' checksum after rank 0's broadcast"));
  return t->o.shard_optimizer ? shard(t, d) : KEEL_OK;
}

/* v as four 31-bit words and their complements: equal on every rank iff
 * each word's maximum is this rank's word and each complement's too. */
static void put_sig(int32_t *w, uint64_t v) {
  for (int k = 0; k < 3; k++) {
    int32_t x = (int32_t)((v >> (31 * k)) & 0x7fffffff);
    w[k] = x, w[4 + k] = 0x7fffffff - x;
  }
  w[3] = (int32_t)(v >> 62), w[7] = 3 - w[3];
}

static bool same_sig(const int32_t *all, const int32_t *mine) {
  for (int k = 0; k < SIG_WORDS; k++)
    if (all[k] != mine[k]) return false;
  return true;
}

static keel_status fill_and_sum(keel_trainer_t *t, train_dp *d, uint32_t step, float *loss) {
  keel_session_t *s = t->s;
  for (int b = 0; b < d->n_buckets; b++) {
    int64_t shape[1] = {d->bucket_floats[b]};
    d->vals[b] = (keel_val){.kind = KEEL_V_TENSOR};
    KEEL_TRY(keel_tensor_alloc(s->heap, KEEL_FLOAT, 1, shape, (keel_owner){d->bucket_site[b] & s->owner_mask, step},
                               &d->vals[b].t));
    d->data[b] = d->vals[b].t.data;
  }
  for (int32_t i = 0; i < t->n_params; i++) {
    float *dst = d->data[d->param_bucket[i]] + d->param_off[i];
    size_t bytes = sizeof(float) * (size_t)t->p[i].numel;
    if (d->local[i]) memcpy(dst, keel_value_data(t->out[t->spec->first_grad_output + i]), bytes);
    else memset(dst, 0, bytes);
  }
  d->data[0][0] = *loss;
  KEEL_TRY(keel_dp_sum_f32(t->o.comm, d->data, d->bucket_floats, d->n_buckets));
  float inv = 1.0f / (float)d->size;
  for (int b = 0; b < d->n_buckets; b++)
    for (int64_t j = 0; j < d->bucket_floats[b]; j++) d->data[b][j] *= inv;
  *loss = d->data[0][0];
  for (int32_t i = 0; i < t->n_params; i++) d->grads[i] = d->data[d->param_bucket[i]] + d->param_off[i];
  return KEEL_OK;
}

keel_status keel_train_dp_exchange(keel_trainer_t *t, keel_status st, uint64_t in_sig, uint32_t step,
                                   float *loss, const float ***grads) {
  train_dp *d = t->dp;
  uint64_t t0 = keel_prim_now_ns();
  int32_t mine[SIG_WORDS];
  put_sig(mine, in_sig);
  d->vec[0] = st ? d->rank + 1 : 0;
  memcpy(d->vec + 1, mine, sizeof mine);
  for (int32_t i = 0; i < t->n_params; i++)
    d->local[i] = !st && t->reached[i], d->vec[1 + SIG_WORDS + i] = d->local[i];
  keel_status xs = keel_dp_max_i32(t->o.comm, d->vec, d->n_vec);
  if (!xs && !st && d->vec[0])
    xs = keel_err(KEEL_ERR_INVALID_ARG, "data-parallel: rank %d of %d failed this step (its error is on its "
                  "standard error); every rank stops", d->vec[0] - 1, d->size);
  if (!xs && !st && !same_sig(d->vec + 1, mine))
    xs = keel_err(KEEL_ERR_INVALID_ARG, "data-parallel: the ranks' batches differ in the number, element type "
                  "or rank of their inputs (rank %d's signature %016llx)", d->rank, (unsigned long long)in_sig);
  if (st) xs = keel_err_prefix(st, "rank %d of %d", d->rank, d->size);
  if (!xs) {
    for (int32_t i = 0; i < t->n_params; i++) t->reached[i] = d->vec[1 + SIG_WORDS + i] != 0;
    xs = fill_and_sum(t, d, step, loss);
  }
  d->ns += keel_prim_now_ns() - t0;
  if (!xs) *grads = d->grads;
  return xs;
}

void keel_train_dp_release(keel_trainer_t *t) {
  train_dp *d = t->dp;
  for (int b = 0; d && b < d->n_buckets; b++) keel_val_clear(&d->vals[b]), d->data[b] = NULL;
}

void keel_train_dp_free(keel_trainer_t *t) {
  train_dp *d = t->dp;
  if (!d) return;
  keel_train_dp_release(t);
  size_t n = (size_t)t->n_params + 1;
  keel_sys_free(d->param_bucket, n * sizeof(int32_t));
  keel_sys_free(d->param_off, n * sizeof(int64_t));
  keel_sys_free(d->grads, n * sizeof(float *));
  keel_sys_free(d->local, n * sizeof(bool));
  keel_sys_free(d->bucket_floats, n * sizeof(int64_t));
  keel_sys_free(d->bucket_site, n * sizeof(uint32_t));
  keel_sys_free(d->vals, n * sizeof(keel_val));
  keel_sys_free(d->data, n * sizeof(float *));
  keel_sys_free(d->vec, (size_t)d->n_vec * sizeof(int32_t));
  keel_sys_free(d->owner, ((size_t)t->n_params + 1) * sizeof(int32_t));
  keel_sys_free(d->counts, ((size_t)d->size * 2 + 1) * sizeof(int64_t));
  keel_sys_free(d, sizeof *d);
  t->dp = NULL;
}

void keel_train_dp_stats(const keel_trainer_t *t, int *rank, int *size, int *buckets, uint64_t *ns) {
  const train_dp *d = t->dp;
  *rank = d ? d->rank : 0, *size = d ? d->size : 1;
  *buckets = d ? d->n_buckets : 0, *ns = d ? d->ns : 0;
}

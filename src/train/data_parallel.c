/* data_parallel.c: a trainer that is one rank of a data-parallel job
 * (keel_train_options.data_parallel; the collectives are dist/dp.c's).
 *
 * Creation: the ranks agree on the parameter set (names and sizes) and
 * on the optimizer's settings, rank 0's parameters are broadcast, and the
 * ranks compare a checksum of the weights. The gradients are laid out in
 * buckets of at most o.bucket_mb (one parameter larger than that gets a
 * bucket of its own), from the last parameter to the first, the order in
 * which the backward produces them; bucket 0 also carries the loss.
 *
 * A step. Before the run, each bucket gets a block of the session's
 * allocator tagged "allreduce bucket B" (the step as its iteration). The
 * run tells us after each main-graph node (exec.h, keel_main_watch); the
 * loss and the gradients that node produced are copied into their
 * buckets, and once a bucket is complete its non-blocking all-reduce
 * starts, in bucket order (every rank starts the same sums in the same
 * order), while the backward goes on. After the run whatever was not yet
 * copied is (outputs that no node produces), the remaining sums start and
 * all are awaited: also on a rank whose run failed, so that no rank waits
 * for a sum another never starts. Then one small all-reduce (MAX) of
 * [failed rank + 1, the inputs' signature in four 31-bit words and their
 * complements, one reach flag per parameter]: a failure anywhere fails the
 * step everywhere, naming the rank; a signature that differs (a batch of
 * another dtype or rank) stops every rank; otherwise the reach flags come
 * back OR-ed (a parameter any rank reached is updated on all; a gradient
 * the backward did not reach is zeros, as autodiff makes it). The sums are
 * scaled by 1/N, the optimizer reads the averaged gradients from the
 * buckets, and the buckets are freed before the step returns.
 */
#include <stdio.h>
#include <string.h>

#include "base/prim.h"
#include "base/sysmem.h"
#include "dist/dp.h"
#include "keel_dist.h"
#include "train/train.h"

typedef struct train_dp {
  int rank, size;
  int n_buckets;
  int64_t *bucket_floats;    /* floats (bucket 0: + 1 for the loss)         */
  uint32_t *bucket_site;
  int32_t *param_bucket;     /* per parameter                               */
  int64_t *param_off;        /* its offset in its bucket                    */
  uint64_t sig;              /* this step's inputs: count, dtypes, ranks    */
  keel_val *vals;            /* this step's bucket blocks                   */
  float **data;
  bool *spare;               /* per bucket: data is system memory (the
                                allocator refused; the sums must go on)     */
  /* the loss (item n_params) and the gradients (items 0..n_params-1) as
   * the backward produces them */
  int32_t *node_start;       /* per main-graph node: its items, CSR         */
  int32_t *node_items;
  int32_t *item_out;         /* per item: its main-graph output             */
  bool *copied;              /* per item, this step                         */
  int32_t *members;          /* per bucket: its items                       */
  int32_t *remaining;        /* per bucket, this step: items not yet copied */
  int started;               /* buckets whose sum has started               */
  int early;                 /* of those, started while the run went on     */
  keel_status watch_err;     /* a sum that failed to start, in node_done    */
  bool ready;                /* set up: the ranks step in lockstep          */
  bool broken;               /* a rank left, or MPI failed: no more
                                collectives (they could never complete)     */
  keel_dp_reqs *reqs;
  keel_main_watch watch;
  int64_t early_sum;         /* buckets started during the run, all steps    */
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
/* the status exchange: [failed rank + 1, left rank + 1, signature, reach flags] */
enum { VEC_FAILED = 0, VEC_LEFT = 1, VEC_SIG = 2, VEC_REACH = 2 + SIG_WORDS };

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
  /* at most one bucket per parameter, and one when there is none */
  d->bucket_floats = keel_sys_calloc((size_t)n + 1, sizeof(int64_t));
  d->bucket_site = keel_sys_calloc((size_t)n + 1, sizeof(uint32_t));
  d->vals = keel_sys_calloc((size_t)n + 1, sizeof(keel_val));
  d->data = keel_sys_calloc((size_t)n + 1, sizeof(float *));
  d->spare = keel_sys_calloc((size_t)n + 1, sizeof(bool));
  d->members = keel_sys_calloc((size_t)n + 1, sizeof(int32_t));
  d->remaining = keel_sys_calloc((size_t)n + 1, sizeof(int32_t));
  d->n_vec = VEC_REACH + n;
  d->vec = keel_sys_calloc((size_t)d->n_vec, sizeof(int32_t));
  if (!d->param_bucket || !d->param_off || !d->grads || !d->bucket_floats || !d->bucket_site ||
      !d->vals || !d->data || !d->vec || !d->spare || !d->members || !d->remaining)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "data-parallel buckets");
  int b = 0;
  d->bucket_floats[0] = 1; /* the loss: item n, bucket 0, offset 0 */
  d->members[0] = 1;
  for (int32_t i = n - 1; i >= 0; i--) {
    int64_t k = t->p[i].numel;
    if (d->bucket_floats[b] > (b == 0) && d->bucket_floats[b] + k > cap) {
      b++;
      d->bucket_floats[b] = 0;
    }
    d->param_bucket[i] = b;
    d->param_off[i] = d->bucket_floats[b];
    d->bucket_floats[b] += k;
    d->members[b]++;
  }
  d->n_buckets = b + 1;
  int pieces = 0; /* pending sums: a bucket over INT_MAX floats takes several */
  for (b = 0; b < d->n_buckets; b++) pieces += (int)(d->bucket_floats[b] / 2147483647 + 1);
  KEEL_TRY(keel_dp_reqs_new(pieces, &d->reqs));
  for (b = 0; b < d->n_buckets; b++) {
    char label[64];
    snprintf(label, sizeof label, "allreduce bucket %d", b);
    KEEL_TRY(keel_session_label_site(t->s, label, &d->bucket_site[b]));
  }
  return KEEL_OK;
}

/* Which main-graph node produces each item (the loss: item n_params; the
 * gradients), as lists per node; items no node produces (an output that
 * is an input or a constant) are copied after the run. */
static keel_status map_items(keel_trainer_t *t, train_dp *d) {
  const keel_graph *g = t->s->m->main;
  int32_t n = t->n_params, nn = g->n_nodes;
  d->node_start = keel_sys_calloc((size_t)nn + 2, sizeof(int32_t));
  d->node_items = keel_sys_calloc((size_t)n + 2, sizeof(int32_t));
  d->item_out = keel_sys_calloc((size_t)n + 2, sizeof(int32_t));
  d->copied = keel_sys_calloc((size_t)n + 2, sizeof(bool));
  int32_t *prod = keel_sys_calloc((size_t)n + 2, sizeof(int32_t));
  int32_t *cursor = keel_sys_calloc((size_t)nn + 2, sizeof(int32_t));
  keel_status st = KEEL_OK;
  if (!d->node_start || !d->node_items || !d->item_out || !d->copied || !prod || !cursor)
    st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "data-parallel: gradient producers");
  for (int32_t j = 0; !st && j <= n; j++) {
    d->item_out[j] = j < n ? t->spec->first_grad_output + j : t->spec->loss_output;
    prod[j] = keel_ir_producer(g, g->out_names[d->item_out[j]]);
    if (prod[j] >= 0) d->node_start[prod[j] + 1]++;
  }
  for (int32_t k = 0; !st && k < nn; k++) d->node_start[k + 1] += d->node_start[k];
  for (int32_t k = 0; !st && k < nn; k++) cursor[k] = d->node_start[k];
  for (int32_t j = 0; !st && j <= n; j++)
    if (prod[j] >= 0) d->node_items[cursor[prod[j]]++] = j;
  keel_sys_free(prod, ((size_t)n + 2) * sizeof(int32_t));
  keel_sys_free(cursor, ((size_t)nn + 2) * sizeof(int32_t));
  d->watch.ctx = t;
  return st;
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
  KEEL_TRY(map_items(t, d));
  KEEL_TRY(keel_dp_agree(t->o.comm, param_signature(t), "the trainable parameters (names and sizes)"));
  KEEL_TRY(keel_dp_agree(t->o.comm, optim_signature(&t->o), "the optimizer and its settings"));
  uint64_t sum = FNV0;
  for (int32_t i = 0; i < t->n_params; i++) {
    KEEL_TRY(keel_dp_bcast(t->o.comm, t->p[i].w, sizeof(float) * (size_t)t->p[i].numel, 0));
    sum = fnv(sum, t->p[i].w, sizeof(float) * (size_t)t->p[i].numel);
  }
  KEEL_TRY(keel_dp_agree(t->o.comm, sum, "the parameters' checksum after rank 0's broadcast"));
  if (t->o.shard_optimizer) KEEL_TRY(shard(t, d));
  d->ready = true;
  return KEEL_OK;
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

/* Item j (a gradient, or the loss: j == n_params) into its bucket: v's
 * floats, or zeros when v is not what it should be (take_outputs then
 * fails the step on this rank, and the exchange on every rank). */
static void copy_item(const keel_trainer_t *t, train_dp *d, int32_t j, const keel_val *v) {
  int32_t b = d->param_bucket[j];
  int64_t want = j < t->n_params ? t->p[j].numel : 1;
  float *dst = d->data[b] + d->param_off[j];
  if (v && v->kind == KEEL_V_TENSOR && v->t.dtype == KEEL_FLOAT && keel_tensor_numel(&v->t) == want && v->t.data)
    memcpy(dst, v->t.data, sizeof(float) * (size_t)want);
  else if (want)
    memset(dst, 0, sizeof(float) * (size_t)want);
  d->copied[j] = true;
  d->remaining[b]--;
}

/* Starts the sums of the complete buckets, in bucket order. */
static void start_ready(const keel_trainer_t *t, train_dp *d, bool during_run) {
  int before = d->started;
  while (d->started < d->n_buckets && d->remaining[d->started] == 0 && !d->watch_err) {
    d->watch_err = keel_dp_sum_start(t->o.comm, d->reqs, d->data[d->started], d->bucket_floats[d->started]);
    d->started++;
    d->early += during_run;
  }
  if (d->started != before) keel_dp_progress(d->reqs);
}

static void node_done(void *ctx, keel_runctx *R, int32_t node) {
  keel_trainer_t *t = ctx;
  train_dp *d = t->dp;
  int32_t a = d->node_start[node], z = d->node_start[node + 1];
  if (a == z) return;
  for (int32_t k = a; k < z; k++) {
    int32_t j = d->node_items[k];
    if (!d->copied[j]) copy_item(t, d, j, keel_exec_main_output(R, d->item_out[j]));
  }
  start_ready(t, d, true);
}

/* The data inputs' count, element types and ranks, as a hash (batch sizes
 * may differ between the ranks, these may not). */
static uint64_t input_signature(keel_value_t *const *in, size_t n) {
  uint64_t h = fnv(FNV0, &n, sizeof n);
  for (size_t i = 0; in && i < n; i++) {
    int32_t k[3] = {(int32_t)keel_value_kind_of(in[i]), (int32_t)keel_value_dtype(in[i]),
                    (int32_t)keel_value_rank(in[i])};
    h = fnv(h, k, sizeof k);
  }
  return in ? h : 0;
}

keel_status keel_train_dp_begin(keel_trainer_t *t, uint32_t step, keel_value_t *const *inputs, size_t n,
                                const keel_main_watch **watch) {
  train_dp *d = t->dp;
  d->sig = input_signature(inputs, n);
  keel_session_t *s = t->s;
  keel_status st = KEEL_OK;
  for (int b = 0; b < d->n_buckets; b++) {
    int64_t shape[1] = {d->bucket_floats[b]};
    d->vals[b] = (keel_val){.kind = KEEL_V_TENSOR};
    keel_status bs = keel_tensor_alloc(s->heap, KEEL_FLOAT, 1, shape,
                                       (keel_owner){d->bucket_site[b] & s->owner_mask, step}, &d->vals[b].t);
    d->spare[b] = bs != KEEL_OK;
    if (!bs) {
      d->data[b] = d->vals[b].t.data;
      continue;
    }
    /* the allocator refused (a cap): the step fails, but this rank's sums
     * must still match its peers' */
    if (!st) st = bs;
    d->vals[b] = (keel_val){0};
    d->data[b] = keel_sys_calloc((size_t)d->bucket_floats[b] + 1, sizeof(float));
    if (!d->data[b]) {
      fprintf(stderr, "keel: data-parallel rank %d: no memory for gradient bucket %d; ending the job\n", d->rank, b);
      keel_dist_abort(1);
      return keel_err(KEEL_ERR_OUT_OF_MEMORY, "data-parallel: gradient bucket %d", b);
    }
  }
  memset(d->copied, 0, ((size_t)t->n_params + 1) * sizeof(bool));
  memcpy(d->remaining, d->members, (size_t)d->n_buckets * sizeof(int32_t));
  d->started = d->early = 0;
  d->watch_err = KEEL_OK;
  d->watch.node_done = node_done;
  *watch = &d->watch;
  return st;
}

/* After a step's run (or, leaving, instead of one): the sums, then the
 * status exchange. */
static keel_status settle(keel_trainer_t *t, keel_status st, bool leaving, float *loss, const float ***grads) {
  train_dp *d = t->dp;
  uint64_t t0 = keel_prim_now_ns();
  /* what no node produced, or every item when the run failed (zeros) */
  for (int32_t j = 0; j <= t->n_params; j++) {
    if (d->copied[j]) continue;
    const keel_value_t *o = st || leaving ? NULL : t->out[d->item_out[j]];
    copy_item(t, d, j, o ? keel_value_val(o) : NULL);
  }
  start_ready(t, d, false);
  keel_status ws = keel_dp_wait(t->o.comm, d->reqs);
  if (d->watch_err || ws) {
    d->broken = true;
    return d->watch_err ? d->watch_err : ws;
  }
  int32_t mine[SIG_WORDS];
  put_sig(mine, d->sig);
  d->vec[VEC_FAILED] = st ? d->rank + 1 : 0;
  d->vec[VEC_LEFT] = leaving ? d->rank + 1 : 0;
  memcpy(d->vec + VEC_SIG, mine, sizeof mine);
  for (int32_t i = 0; i < t->n_params; i++)
    d->vec[VEC_REACH + i] = !st && !leaving && t->reached[i];
  keel_status xs = keel_dp_max_i32(t->o.comm, d->vec, d->n_vec);
  if (xs) d->broken = true;
  if (leaving || xs) return xs;
  if (d->vec[VEC_LEFT]) {
    d->broken = true; /* that rank makes no more collective calls */
    xs = keel_err(KEEL_ERR_INVALID_ARG, "data-parallel: rank %d of %d stopped training (its trainer was "
                  "destroyed) while this rank went on to step %lld; every rank stops", d->vec[VEC_LEFT] - 1,
                  d->size, (long long)t->steps + 1);
  } else if (!st && d->vec[VEC_FAILED]) {
    xs = keel_err(KEEL_ERR_INVALID_ARG, "data-parallel: rank %d of %d failed this step (its error is on its "
                  "standard error); every rank stops", d->vec[VEC_FAILED] - 1, d->size);
  } else if (!st && !same_sig(d->vec + VEC_SIG, mine)) {
    xs = keel_err(KEEL_ERR_INVALID_ARG, "data-parallel: the ranks' batches differ in the number, element type "
                  "or rank of their inputs (rank %d's signature %016llx)", d->rank, (unsigned long long)d->sig);
  }
  if (st) xs = keel_err_prefix(st, "rank %d of %d", d->rank, d->size);
  if (!xs) {
    for (int32_t i = 0; i < t->n_params; i++) t->reached[i] = d->vec[VEC_REACH + i] != 0;
    float inv = 1.0f / (float)d->size;
    for (int b = 0; b < d->n_buckets; b++)
      for (int64_t k = 0; k < d->bucket_floats[b]; k++) d->data[b][k] *= inv;
    *loss = d->data[0][0];
    for (int32_t i = 0; i < t->n_params; i++) d->grads[i] = d->data[d->param_bucket[i]] + d->param_off[i];
    *grads = d->grads;
  }
  d->ns += keel_prim_now_ns() - t0;
  d->early_sum += d->early;
  return xs;
}

keel_status keel_train_dp_exchange(keel_trainer_t *t, keel_status st, float *loss, const float ***grads) {
  if (t->dp->broken)
    return keel_err(KEEL_ERR_INVALID_ARG, "data-parallel: a rank stopped training or MPI failed at an earlier "
                    "step; this trainer can take no more steps");
  return settle(t, st, false, loss, grads);
}

/* A rank's trainer goes away: it matches, once, the step its peers may be
 * taking (zeros to the sums, "left" in the exchange), so a peer that steps
 * on gets an error naming this rank instead of waiting for ever. When
 * every rank is leaving, they all match each other. */
static void leave(keel_trainer_t *t) {
  train_dp *d = t->dp;
  if (!d->ready || d->broken) return;
  const keel_main_watch *w;
  float loss = 0;
  const float **g = NULL;
  (void)keel_train_dp_begin(t, 0, NULL, 0, &w); /* on a refusal: system memory, the sums must match */
  (void)settle(t, KEEL_OK, true, &loss, &g);
  keel_train_dp_release(t);
}

void keel_train_dp_release(keel_trainer_t *t) {
  train_dp *d = t->dp;
  for (int b = 0; d && b < d->n_buckets; b++) {
    if (d->spare[b] && d->data[b]) keel_sys_free(d->data[b], ((size_t)d->bucket_floats[b] + 1) * sizeof(float));
    keel_val_clear(&d->vals[b]), d->data[b] = NULL, d->spare[b] = false;
  }
}

void keel_train_dp_free(keel_trainer_t *t) {
  train_dp *d = t->dp;
  if (!d) return;
  keel_train_dp_release(t);
  leave(t);
  size_t n = (size_t)t->n_params + 1;
  keel_sys_free(d->param_bucket, n * sizeof(int32_t));
  keel_sys_free(d->param_off, n * sizeof(int64_t));
  keel_sys_free(d->grads, n * sizeof(float *));
  keel_sys_free(d->bucket_floats, n * sizeof(int64_t));
  keel_sys_free(d->bucket_site, n * sizeof(uint32_t));
  keel_sys_free(d->vals, n * sizeof(keel_val));
  keel_sys_free(d->data, n * sizeof(float *));
  keel_sys_free(d->vec, (size_t)d->n_vec * sizeof(int32_t));
  keel_sys_free(d->spare, n * sizeof(bool));
  keel_sys_free(d->members, n * sizeof(int32_t));
  keel_sys_free(d->remaining, n * sizeof(int32_t));
  keel_sys_free(d->node_start, ((size_t)t->s->m->main->n_nodes + 2) * sizeof(int32_t));
  keel_sys_free(d->node_items, (n + 1) * sizeof(int32_t));
  keel_sys_free(d->item_out, (n + 1) * sizeof(int32_t));
  keel_sys_free(d->copied, (n + 1) * sizeof(bool));
  keel_dp_reqs_free(d->reqs);
  keel_sys_free(d->owner, ((size_t)t->n_params + 1) * sizeof(int32_t));
  keel_sys_free(d->counts, ((size_t)d->size * 2 + 1) * sizeof(int64_t));
  keel_sys_free(d, sizeof *d);
  t->dp = NULL;
}

void keel_train_dp_stats(const keel_trainer_t *t, keel_train_stats *st) {
  const train_dp *d = t->dp;
  st->dp_rank = d ? d->rank : 0, st->dp_size = d ? d->size : 1;
  st->dp_buckets = d ? d->n_buckets : 0, st->allreduce_ns = d ? d->ns : 0;
  st->buckets_overlapped = d ? (uint64_t)d->early_sum : 0;
}

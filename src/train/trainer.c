/* trainer.c: keel_trainer_t (keel_train.h): a session whose model carries a
 * training spec, the parameters as mutable buffers, and the step.
 *
 * Creation loads the model, sets m->train so that the first pass
 * (passes/pass_train.c) turns the trainable initializers into graph inputs and
 * adds the Gradient node the autodiff pass expands, then creates the
 * session on it. Each parameter is then copied once out of the mapped file
 * into a block of the session's allocator tagged "param 'name'", and the
 * mapping's pages under it are given back (the graph no longer reads
 * them). Optimizer buffers are blocks tagged "adam m of 'name'" and so on.
 *
 * A step is one keel_run: the data inputs and the parameters in, the loss,
 * the model's other outputs and one gradient per parameter out. Gradient
 * blocks are re-tagged "grad of 'name'" (so a gradient that outlived its
 * step would be named), checked, applied by the optimizer (optim.c) and
 * released before the step returns: after a step the session holds the
 * parameters, the optimizer state and a constant, nothing else.
 */
#include <math.h>
#include <stdio.h>

#include "base/prim.h"
#include "base/status.h"
#include "base/sysmem.h"
#include "autodiff/autodiff.h"
#include "onnx/onnx.h"
#include "onnx/write.h"
#include "train/train.h"

/* ========================================================== creation */

/* The spec the training pass reads, in the model's arena. */
static keel_status set_spec(keel_model *m, const keel_train_options *o) {
  keel_train_spec *sp = keel_arena_alloc(m->arena, sizeof *sp, 8);
  const char **fr = keel_arena_array(m->arena, o->n_freeze + 1, sizeof(char *));
  if (!sp || !fr) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "training spec");
  memset(sp, 0, sizeof *sp);
  sp->loss = keel_arena_strdup(m->arena, o->loss);
  for (size_t i = 0; i < o->n_freeze; i++) {
    if (!o->freeze[i]) return keel_err(KEEL_ERR_INVALID_ARG, "training: freeze name %zu is NULL", i);
    if (!(fr[i] = keel_arena_strdup(m->arena, o->freeze[i])))
      return keel_err(KEEL_ERR_OUT_OF_MEMORY, "training spec");
  }
  if (!sp->loss) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "training spec");
  sp->freeze = fr;
  sp->n_freeze = (int32_t)o->n_freeze;
  m->train = sp;
  return KEEL_OK;
}

/* A zeroed (or copied) float tensor of the parameter's shape in a block
 * tagged with a new site `label`, wrapped as a value handle. */
static keel_status new_buffer(keel_trainer_t *t, const keel_tensor *like, const char *label,
                              const void *init, bool is_param, keel_value_t **out, float **data) {
  keel_session_t *s = t->s;
  uint32_t site;
  KEEL_TRY(keel_session_label_site(s, label, &site));
  keel_val v = {.kind = KEEL_V_TENSOR};
  KEEL_TRY(keel_tensor_alloc(s->heap, KEEL_FLOAT, like->rank, like->shape,
                             (keel_owner){site & s->owner_mask, 0}, &v.t));
  size_t nb = keel_tensor_nbytes(&v.t);
  if (nb && init) memcpy(v.t.data, init, nb);
  else if (nb) memset(v.t.data, 0, nb);
  *data = v.t.data;
  if (v.t.buf) *(is_param ? &t->param_bytes : &t->state_bytes) += v.t.buf->block->size;
  keel_status st = keel_values_wrap(s, &v, 1, out);
  keel_val_clear(&v);
  return st;
}

static keel_status make_param(keel_trainer_t *t, int32_t i) {
  const keel_train_spec *sp = t->spec;
  train_param *p = &t->p[i];
  p->name = sp->params[i];
  p->input = sp->first_param_input + i;
  p->const_index = sp->param_consts[i];
  const keel_tensor *c = &t->s->m->consts[p->const_index];
  p->numel = keel_tensor_numel(c);
  char label[600];
  snprintf(label, sizeof label, "param '%s'", p->name);
  KEEL_TRY(new_buffer(t, c, label, c->data, true, &p->value, &p->w));
  /* the graph reads the copy now: the file's pages (and the loader's
   * aligned copy's) under the initializer go back */
  keel_model_drop_const(t->s->m, c, &t->mapped_dropped, &t->copy_dropped);
  for (int k = 0; k < keel_optim_n_state(&t->o); k++) {
    snprintf(label, sizeof label, "%s of '%s'", keel_optim_state_name(&t->o, k), p->name);
    KEEL_TRY(new_buffer(t, c, label, NULL, false, &p->state[k], &p->st[k]));
  }
  snprintf(label, sizeof label, "grad of '%s'", p->name);
  return keel_session_label_site(t->s, label, &p->grad_site);
}

/* The data inputs (main inputs before the parameters, without a default)
 * and the name and value arrays of the run. */
static keel_status make_io(keel_trainer_t *t) {
  const keel_graph *g = t->s->m->main;
  int32_t first = t->spec->first_param_input;
  t->data_inputs = keel_sys_calloc((size_t)first + 1, sizeof(int32_t));
  t->n_run = (size_t)first + (size_t)t->n_params;
  t->run_names = keel_sys_calloc(t->n_run + 1, sizeof(char *));
  t->run_in = keel_sys_calloc(t->n_run + 1, sizeof(keel_value_t *));
  t->n_out = (size_t)g->n_out;
  t->out = keel_sys_calloc(t->n_out + 1, sizeof(keel_value_t *));
  if (!t->data_inputs || !t->run_names || !t->run_in || !t->out)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "trainer");
  for (int32_t i = 0; i < first; i++)
    if (g->in_default[i] < 0) t->data_inputs[t->n_data++] = i;
  for (int32_t i = 0; i < t->n_data; i++) t->run_names[i] = g->in_names[t->data_inputs[i]];
  for (int32_t i = 0; i < t->n_params; i++) t->run_names[t->n_data + i] = t->p[i].name;
  return KEEL_OK;
}

/* A loss the model declares as something other than a float scalar is
 * refused at creation (undeclared ones are checked at every step). */
static keel_status check_loss_type(const keel_trainer_t *t) {
  const keel_type *ty = &t->s->m->main->out_types[t->spec->loss_output];
  bool scalar = ty->rank < 0;
  if (ty->rank >= 0) {
    scalar = true;
    for (int32_t d = 0; d < ty->rank; d++) scalar &= ty->dims[d] == 1 && !ty->dim_params[d];
  }
  if ((ty->kind == KEEL_TYPE_TENSOR || ty->kind == KEEL_TYPE_UNKNOWN) &&
      (!ty->dtype || ty->dtype == KEEL_FLOAT) && scalar)
    return KEEL_OK;
  return keel_err(KEEL_ERR_INVALID_ARG, "training: the loss '%s' is declared %s of rank %d, not a float scalar",
                  t->spec->loss, keel_dtype_name((keel_dtype)ty->dtype), ty->rank);
}

/* A gradient output the autodiff pass made as zeros (it found no path
 * from the parameter to the loss) while the training pass found one: the
 * path goes through sub-graphs autodiff does not differentiate. Training
 * would silently leave the parameter as it is; refuse instead. */
static keel_status check_gradients(const keel_trainer_t *t) {
  const keel_graph *g = t->s->m->main;
  for (int32_t i = 0; i < t->spec->n_params; i++) {
    int32_t p = keel_ir_producer(g, g->out_names[t->spec->first_grad_output + i]);
    if (p < 0 || strcmp(g->nodes[p].op_type, "ZerosLike") || strcmp(g->nodes[p].domain, AD_INTERNAL))
      continue;
    const char *via = t->spec->param_via[i];
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "training: no gradient reaches parameter '%s' although the loss '%s' depends on it%s%s%s",
                    t->spec->params[i], t->spec->loss, via ? " through the sub-graphs of node " : "",
                    via ? via : "", via ? ", which autodiff does not differentiate" : "");
  }
  return KEEL_OK;
}

static keel_status setup(keel_trainer_t *t) {
  t->spec = t->s->m->train;
  t->n_params = t->spec->n_params;
  KEEL_TRY(check_loss_type(t));
  KEEL_TRY(check_gradients(t));
  t->p = keel_sys_calloc((size_t)t->n_params + 1, sizeof *t->p);
  t->reached = keel_sys_calloc((size_t)t->n_params + 1, sizeof *t->reached);
  if (!t->p || !t->reached) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "trainer");
  for (int32_t i = 0; i < t->n_params; i++) KEEL_TRY(make_param(t, i));
  return make_io(t);
}

static keel_status check_options(const keel_train_options *o) {
  if (!o || o->size < offsetof(keel_train_options, session) + sizeof(void *))
    return keel_err(KEEL_ERR_INVALID_ARG, "training: options missing or unsized (keel_train_options_init)");
  if (!o->loss || !o->loss[0]) return keel_err(KEEL_ERR_INVALID_ARG, "training: no loss output named");
  if (o->n_freeze && !o->freeze) return keel_err(KEEL_ERR_INVALID_ARG, "training: n_freeze without names");
  return keel_optim_check(o);
}

/* Takes m over. */
static keel_status create(keel_model *m, const keel_train_options *o, keel_trainer_t **out) {
  keel_trainer_t *t = keel_sys_calloc(1, sizeof *t);
  keel_status st = t ? set_spec(m, o) : keel_err(KEEL_ERR_OUT_OF_MEMORY, "trainer");
  if (st) {
    keel_onnx_free(m);
    keel_sys_free(t, sizeof *t);
    return st;
  }
  memcpy(&t->o, o, KEEL_MIN(o->size, sizeof t->o));
  t->o.size = sizeof t->o;
  t->o.loss = NULL, t->o.freeze = NULL, t->o.n_freeze = 0, t->o.session = NULL;
  st = keel_session_create_model(m, o->session, &t->s);
  if (!st) st = setup(t);
  if (!st && t->o.data_parallel) st = keel_train_dp_setup(t);
  if (st) {
    keel_trainer_destroy(t);
    return st;
  }
  *out = t;
  return KEEL_OK;
}

keel_status keel_trainer_create(const char *path, const keel_train_options *o,
                                keel_trainer_t **out) {
  if (!path || !out) return keel_err(KEEL_ERR_INVALID_ARG, "keel_trainer_create: NULL argument");
  keel_err_clear();
  KEEL_TRY(check_options(o));
  keel_model *m;
  KEEL_TRY(keel_onnx_load_file(path, &m));
  return create(m, o, out);
}

keel_status keel_trainer_create_from_memory(const void *bytes, size_t len, const char *base_dir,
                                            const keel_train_options *o, keel_trainer_t **out) {
  if ((!bytes && len) || !out)
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_trainer_create_from_memory: NULL argument");
  keel_err_clear();
  KEEL_TRY(check_options(o));
  keel_model *m;
  KEEL_TRY(keel_onnx_load_memory(bytes, len, base_dir, &m));
  return create(m, o, out);
}

void keel_trainer_destroy(keel_trainer_t *t) {
  if (!t) return;
  keel_train_dp_free(t);
  for (int32_t i = 0; t->p && i < t->n_params; i++) {
    keel_value_release(t->p[i].value);
    for (int k = 0; k < KEEL_OPTIM_MAX_STATE; k++) keel_value_release(t->p[i].state[k]);
  }
  keel_sys_free(t->p, ((size_t)t->n_params + 1) * sizeof *t->p);
  keel_sys_free(t->reached, ((size_t)t->n_params + 1) * sizeof *t->reached);
  keel_sys_free(t->data_inputs, ((size_t)(t->spec ? t->spec->first_param_input : 0) + 1) * sizeof(int32_t));
  keel_sys_free(t->run_names, (t->n_run + 1) * sizeof(char *));
  keel_sys_free(t->run_in, (t->n_run + 1) * sizeof(keel_value_t *));
  keel_sys_free(t->out, (t->n_out + 1) * sizeof(keel_value_t *));
  keel_session_destroy(t->s);
  keel_sys_free(t, sizeof *t);
}

/* ============================================================== step */

/* The loss as a float (it must be a float tensor of one element). */
static keel_status read_loss(const keel_trainer_t *t, const keel_value_t *v, float *loss) {
  if (keel_value_kind_of(v) == KEEL_KIND_TENSOR && keel_value_dtype(v) == KEEL_FLOAT &&
      keel_value_numel(v) == 1) {
    *loss = *(const float *)keel_value_data(v);
    return KEEL_OK;
  }
  char sh[128] = "?";
  if (keel_value_rank(v) >= 0) keel_shape_str(keel_value_rank(v), keel_value_shape(v), sh, sizeof sh);
  return keel_err(KEEL_ERR_INVALID_ARG, "training: the loss '%s' is a %s tensor of shape %s, not a float scalar",
                  t->spec->loss, keel_dtype_name(keel_value_dtype(v)), sh);
}

/* True when buf is one of the trainer's own (parameter, state). */
static bool owned_by_trainer(const keel_trainer_t *t, const keel_buffer *buf) {
  for (int32_t i = 0; i < t->n_params; i++) {
    if (keel_value_val(t->p[i].value)->t.buf == buf) return true;
    for (int k = 0; k < KEEL_OPTIM_MAX_STATE; k++)
      if (t->p[i].state[k] && keel_value_val(t->p[i].state[k])->t.buf == buf) return true;
  }
  return false;
}

/* Gradient i: checked against its parameter, its block re-tagged. */
static keel_status take_grad(const keel_trainer_t *t, int32_t i, const keel_value_t *g) {
  const train_param *p = &t->p[i];
  if (keel_value_kind_of(g) != KEEL_KIND_TENSOR || keel_value_dtype(g) != KEEL_FLOAT ||
      keel_value_numel(g) != p->numel)
    return keel_err(KEEL_ERR_INTERNAL, "training: the gradient of '%s' has %lld elements of %s, the parameter %lld",
                    p->name, (long long)keel_value_numel(g), keel_dtype_name(keel_value_dtype(g)),
                    (long long)p->numel);
  /* the block holds the gradient now (also when a reference to it was
   * kept elsewhere: that is what a report should then name) */
  const keel_val *v = keel_value_val(g);
  if (v->t.buf && !keel_buffer_exclusive(v->t.buf) && owned_by_trainer(t, v->t.buf))
    return keel_err(KEEL_ERR_INTERNAL, "training: the gradient of '%s' shares the bytes of a parameter or "
                    "optimizer buffer; updating would read what it writes", p->name);
  if (v->t.buf && v->t.buf->kind == KEEL_BUF_HEAP)
    keel_heap_retag(v->t.buf->block, (keel_owner){p->grad_site & t->s->owner_mask,
                                                  keel_block_owner(v->t.buf->block).iter});
  return KEEL_OK;
}

static keel_status check_inputs(const keel_trainer_t *t, keel_value_t *const *in, size_t n) {
  if (n != (size_t)t->n_data) {
    char list[512] = "";
    for (int32_t i = 0; i < t->n_data; i++) {
      size_t l = strlen(list);
      snprintf(list + l, sizeof list - l, "%s'%s'", i ? ", " : "", t->run_names[i]);
    }
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_trainer_step: %zu inputs given, the model takes %d data input(s): %s",
                    n, t->n_data, list);
  }
  for (size_t i = 0; i < n; i++)
    if (!in || !in[i]) return keel_err(KEEL_ERR_INVALID_ARG, "keel_trainer_step: input %zu ('%s') is NULL", i, t->run_names[i]);
  return KEEL_OK;
}

/* Which parameters this step's backward reached: all, except those whose
 * gradient exists only on some steps (behind an If) and did not now. */
static keel_status read_reach(keel_trainer_t *t) {
  for (int32_t i = 0; i < t->n_params; i++) {
    int32_t o = t->spec->reach_output ? t->spec->reach_output[i] : -1;
    t->reached[i] = true;
    if (o < 0) continue;
    const keel_value_t *v = t->out[o];
    if (keel_value_kind_of(v) != KEEL_KIND_TENSOR || keel_value_dtype(v) != KEEL_BOOL || keel_value_numel(v) != 1)
      return keel_err(KEEL_ERR_INTERNAL, "training: the reach flag of '%s' is not one bool", t->p[i].name);
    t->reached[i] = *(const uint8_t *)keel_value_data(v) != 0;
  }
  return KEEL_OK;
}

/* Reads the run's outputs: the loss and every gradient, or an error. */
static keel_status take_outputs(keel_trainer_t *t, float *loss) {
  KEEL_TRY(read_loss(t, t->out[t->spec->loss_output], loss));
  for (int32_t i = 0; i < t->n_params; i++)
    KEEL_TRY(take_grad(t, i, t->out[t->spec->first_grad_output + i]));
  return KEEL_OK;
}

keel_status keel_trainer_step(keel_trainer_t *t, keel_value_t *const *inputs, size_t n, float *loss) {
  if (!t) return keel_err(KEEL_ERR_INVALID_ARG, "keel_trainer_step: NULL trainer");
  keel_err_clear();
  /* main-graph blocks carry the step number (from 1) as their iteration */
  uint32_t step = (uint32_t)KEEL_MIN(t->steps + 1, (int64_t)UINT32_MAX);
  keel_status st = check_inputs(t, inputs, n);
  const keel_main_watch *watch = NULL; /* data-parallel: gradient sums start during the backward */
  if (t->dp) {
    keel_status bs = keel_train_dp_begin(t, step, st ? NULL : inputs, n, &watch);
    if (!st) st = bs;
  }
  if (!st) {
    for (size_t i = 0; i < n; i++) t->run_in[i] = inputs[i];
    for (int32_t i = 0; i < t->n_params; i++) t->run_in[n + (size_t)i] = t->p[i].value;
    keel_stats_reset_peaks(t->s);
    st = keel_run_tagged(t->s, t->run_names, t->run_in, t->n_run, t->out, NULL, step, watch);
  }
  float l = NAN;
  if (!st) st = take_outputs(t, &l);
  if (!st) st = read_reach(t);
  const float **avg = NULL; /* data-parallel: the gradients averaged over the ranks */
  if (t->dp) st = keel_train_dp_exchange(t, st, &l, &avg);
  if (!st) {
    t->steps++;
    for (int32_t i = 0; i < t->n_params; i++) {
      train_param *p = &t->p[i];
      p->had_grad |= t->reached[i];
      if (!keel_optim_applies(t->o.zero_grad, t->reached[i], p->had_grad)) continue;
      int64_t k = ++p->steps; /* counted on every rank, also where another rank updates it */
      if (!keel_train_dp_owns(t, i)) continue;
      const float *g = avg ? avg[i] : keel_value_data(t->out[t->spec->first_grad_output + i]);
      keel_optim_update(&t->o, k, p->w, g, p->st[0], p->st[1], p->numel);
    }
    st = keel_train_dp_gather(t, step);
  }
  keel_stats ks = {.size = sizeof ks};
  keel_stats_get(t->s, &ks);
  keel_train_dp_release(t);
  for (size_t i = 0; i < t->n_out; i++) keel_value_release(t->out[i]), t->out[i] = NULL;
  if (st) return keel_err_prefix(st, "training step %lld", (long long)t->steps + 1);
  t->peak = ks.allocated_peak;
  t->last_loss = l;
  if (loss) *loss = l;
  return KEEL_OK;
}

/* ============================================================ queries */

keel_session_t *keel_trainer_session(keel_trainer_t *t) { return t ? t->s : NULL; }
size_t keel_trainer_input_count(const keel_trainer_t *t) { return t ? (size_t)t->n_data : 0; }

keel_status keel_trainer_input(const keel_trainer_t *t, size_t i, keel_io_info *info) {
  if (!t || i >= (size_t)t->n_data)
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_trainer_input: no data input %zu", i);
  return keel_session_input(t->s, (size_t)t->data_inputs[i], info);
}

int64_t keel_trainer_steps(const keel_trainer_t *t) { return t ? t->steps : 0; }

size_t keel_trainer_param_count(const keel_trainer_t *t) { return t ? (size_t)t->n_params : 0; }
const char *keel_trainer_param_name(const keel_trainer_t *t, size_t i) {
  return t && i < (size_t)t->n_params ? t->p[i].name : NULL;
}

static const train_param *find_param(const keel_trainer_t *t, const char *name) {
  for (int32_t i = 0; t && name && i < t->n_params; i++)
    if (!strcmp(t->p[i].name, name)) return &t->p[i];
  return NULL;
}

int64_t keel_trainer_param_steps(const keel_trainer_t *t, const char *name) {
  const train_param *p = find_param(t, name);
  return p ? p->steps : -1;
}

keel_status keel_trainer_param(const keel_trainer_t *t, const char *name, const keel_value_t **out) {
  const train_param *p = find_param(t, name);
  if (!p || !out) return keel_err(KEEL_ERR_INVALID_ARG, "no trained parameter named '%s'", name ? name : "(null)");
  *out = p->value;
  return KEEL_OK;
}

keel_status keel_trainer_param_copy(const keel_trainer_t *t, const char *name, float *dst, size_t cap) {
  const train_param *p = find_param(t, name);
  if (!p || !dst) return keel_err(KEEL_ERR_INVALID_ARG, "no trained parameter named '%s'", name ? name : "(null)");
  if (cap < (size_t)p->numel)
    return keel_err(KEEL_ERR_INVALID_ARG, "parameter '%s' has %lld elements, the buffer room for %zu", name,
                    (long long)p->numel, cap);
  if (p->numel) memcpy(dst, p->w, sizeof(float) * (size_t)p->numel);
  return KEEL_OK;
}

keel_status keel_trainer_stats(const keel_trainer_t *t, keel_train_stats *st) {
  if (!t || !st || st->size < sizeof(size_t))
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_trainer_stats: NULL or unsized struct");
  keel_stats ks = {.size = sizeof ks};
  keel_stats_get(t->s, &ks);
  keel_train_stats full = {.size = sizeof full, .steps = t->steps, .allocated = ks.allocated,
                           .reserved = ks.reserved, .peak = t->peak, .param_bytes = t->param_bytes,
                           .state_bytes = t->state_bytes, .mapped_dropped = t->mapped_dropped,
                           .copy_dropped = t->copy_dropped,
                           .last_loss = t->last_loss};
  keel_train_dp_stats(t, &full);
  size_t n = KEEL_MIN(st->size, sizeof full);
  memcpy((uint8_t *)st + sizeof(size_t), (uint8_t *)&full + sizeof(size_t), n - sizeof(size_t));
  return KEEL_OK;
}

/* ============================================================== save */

/* The model file loaded again as the loader leaves it (the session's copy
 * went through the passes), written by the ONNX writer (onnx/write.h) with
 * each parameter's constant replaced by its current value: the same graph,
 * the same names. */
static keel_status save_with(const keel_trainer_t *t, keel_model *fresh, const char *path) {
  keel_tensor *vals = keel_sys_calloc((size_t)t->n_params + 1, sizeof *vals);
  const keel_tensor **rep = keel_sys_calloc((size_t)fresh->n_consts + 1, sizeof *rep);
  keel_status st = vals && rep ? KEEL_OK : keel_err(KEEL_ERR_OUT_OF_MEMORY, "saving the model");
  for (int32_t i = 0; !st && i < t->n_params; i++) {
    const train_param *p = &t->p[i];
    int32_t c = -1;
    for (int32_t k = 0; k < fresh->main->ld.n_init && c < 0; k++)
      if (!fresh->main->ld.init_is_node[k] && !strcmp(fresh->main->ld.init_names[k], p->name))
        c = fresh->main->ld.init_consts[k];
    if (c < 0) {
      st = keel_err(KEEL_ERR_INTERNAL, "initializer '%s' is not in the file any more", p->name);
      break;
    }
    vals[i] = keel_value_val(p->value)->t; /* a borrowed copy of the header: no reference */
    rep[c] = &vals[i];
  }
  if (!st) st = keel_onnx_write_file(fresh, rep, path);
  keel_sys_free(rep, ((size_t)fresh->n_consts + 1) * sizeof *rep);
  keel_sys_free(vals, ((size_t)t->n_params + 1) * sizeof *vals);
  return st;
}

keel_status keel_trainer_save(const keel_trainer_t *t, const char *path) {
  if (!t || !path) return keel_err(KEEL_ERR_INVALID_ARG, "keel_trainer_save: NULL argument");
  keel_err_clear();
  const keel_model *m = t->s->m;
  keel_model *fresh;
  keel_status st = m->map_is_copy ? keel_onnx_load_memory(m->map.addr, m->map.size, m->base_dir, &fresh)
                                  : keel_onnx_load_file(m->path, &fresh);
  if (!st) {
    st = save_with(t, fresh, path);
    keel_onnx_free(fresh);
  }
  return st ? keel_err_prefix(st, "saving the trained model to %s", path) : KEEL_OK;
}

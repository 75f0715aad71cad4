/* train.h: what the files of the trainer's room share (src/train/):
 * the trainer itself (trainer.c, which writes the trained model through
 * the ONNX writer, onnx/write.h), the optimizers (optim.c) and
 * checkpoints (checkpoint.c). */
#ifndef KEEL_TRAIN_INTERNAL_H
#define KEEL_TRAIN_INTERNAL_H

#include "exec/session.h"
#include "keel_train.h"

#define KEEL_OPTIM_MAX_STATE 2

/* One trainable parameter: its mutable buffer (fed as a graph input at
 * every step), the optimizer's buffers, and the owner-tag site of its
 * gradient. Every buffer is a block of the session's allocator. */
typedef struct train_param {
  const char *name;            /* borrowed from the model                 */
  int32_t input;               /* its graph input                         */
  int32_t const_index;         /* the initializer it was loaded from      */
  keel_value_t *value;         /* the parameter (one reference, ours)     */
  float *w;                    /* its bytes                               */
  int64_t numel;
  keel_value_t *state[KEEL_OPTIM_MAX_STATE]; /* optimizer buffers, or NULL */
  float *st[KEEL_OPTIM_MAX_STATE];
  uint32_t grad_site;
  int64_t steps;               /* updates applied (torch's state['step'])  */
  bool had_grad;               /* a step's backward reached it once (with
                                  KEEL_ZERO_GRAD_ZEROS it is updated from
                                  then on, with zeros when not reached)    */
} train_param;

struct keel_trainer_s {
  keel_session_t *s;
  keel_train_options o;        /* as given (loss and freeze not kept)      */
  const keel_train_spec *spec; /* in the model's arena                     */
  int32_t n_params;
  train_param *p;
  bool *reached;               /* per parameter, this step                 */
  int32_t n_data;
  int32_t *data_inputs;        /* main-graph input index of each data input */
  size_t n_run;                /* data inputs + parameters                 */
  const char **run_names;
  keel_value_t **run_in;
  size_t n_out;
  keel_value_t **out;
  int64_t steps;
  uint64_t peak, param_bytes, state_bytes, mapped_dropped;
  uint64_t copy_dropped;        /* of the loader's aligned copies           */
  double last_loss;
  struct train_dp *dp;          /* data-parallel state, or NULL             */
};

/* ------------------------------------------------------------ optim.c */

/* Buffers the optimizer keeps per parameter (0, 1 or 2) and their names
 * for owner tags ("momentum buffer", "adam m", "adam v"). */
KEEL_INTERNAL int keel_optim_n_state(const keel_train_options *o);
KEEL_INTERNAL const char *keel_optim_state_name(const keel_train_options *o, int k);
/* Checks the hyperparameters; KEEL_ERR_INVALID_ARG naming the bad one. */
KEEL_INTERNAL keel_status keel_optim_check(const keel_train_options *o);
/* One update of w (n floats) with gradient g at step `step` (1 for the
 * parameter's first update), state buffers s0, s1 as keel_optim_n_state
 * says (zero at first). */
/* Whether a parameter gets an update this step, as torch.optim decides
 * after zero_grad in mode `zg`: when its gradient exists (`reached`), or,
 * with zeros, once it has had one (`had_grad`: a zero tensor then). */
KEEL_INTERNAL bool keel_optim_applies(keel_zero_grad zg, bool reached, bool had_grad);
KEEL_INTERNAL void keel_optim_update(const keel_train_options *o, int64_t step, float *w,
                                     const float *g, float *s0, float *s1, int64_t n);

/* ---------------------------------------------------- data_parallel.c */

/* With o.data_parallel: the world, the checks across ranks and the
 * parameters broadcast from rank 0, the gradient buckets laid out. */
KEEL_INTERNAL keel_status keel_train_dp_setup(keel_trainer_t *t);
/* Before a step's run: the step's data inputs' signature noted (NULL
 * inputs: they were refused), the buckets allocated, and the watch to pass to
 * keel_run_tagged (each bucket's sum starts once the run has produced it).
 * An error (the allocator's cap) fails the step, but the run and
 * keel_train_dp_exchange must still follow, as on every rank. */
KEEL_INTERNAL keel_status keel_train_dp_begin(keel_trainer_t *t, uint32_t step, keel_value_t *const *inputs,
                                              size_t n, const keel_main_watch **watch);
/* After the run, on every rank whatever `st` is: the remaining sums
 * started and all awaited, the ranks' status and input signatures
 * compared, the reach flags OR-ed into t->reached, the sums divided by N,
 * the loss averaged. On KEEL_OK, *grads[i] points at parameter i's
 * averaged gradient (valid until keel_train_dp_release). */
KEEL_INTERNAL keel_status keel_train_dp_exchange(keel_trainer_t *t, keel_status st, float *loss,
                                                 const float ***grads);
/* Whether this rank updates parameter i (always, unless the optimizer
 * state is sharded and another rank holds its state). */
KEEL_INTERNAL bool keel_train_dp_owns(const keel_trainer_t *t, int32_t i);
/* This rank (0 outside a data-parallel job). */
KEEL_INTERNAL int keel_train_dp_rank(const keel_trainer_t *t);
/* With a sharded optimizer, after the updates: every rank gets every
 * updated parameter (a no-op otherwise). */
KEEL_INTERNAL keel_status keel_train_dp_gather(keel_trainer_t *t, uint32_t step);
/* For a checkpoint: st[k] points at parameter i's state buffers. With a
 * sharded optimizer this is collective (every rank, every parameter, in
 * order): the owner sends them, the others receive them into *tmp (free
 * with keel_sys_free, n_state * numel + 1 floats), else *tmp is NULL. */
KEEL_INTERNAL keel_status keel_train_dp_state(const keel_trainer_t *t, int32_t i, int n_state, float **tmp,
                                              float **st);
/* Frees the step's buckets. */
KEEL_INTERNAL void keel_train_dp_release(keel_trainer_t *t);
KEEL_INTERNAL void keel_train_dp_free(keel_trainer_t *t);
/* The data-parallel fields of keel_train_stats. */
KEEL_INTERNAL void keel_train_dp_stats(const keel_trainer_t *t, keel_train_stats *st);

#endif

/* keel_train.h: training an ONNX model with keel: a trainer beside the
 * session (keel.h).
 *
 * The model is an ordinary ONNX model whose output `loss` is a float scalar
 * computed from its inputs (as torch.onnx.export writes a module whose
 * forward returns the loss). Its trainable parameters are every float
 * initializer of the main graph that the loss depends on through
 * differentiable ops, minus a freeze list. At load, a graph pass makes the
 * parameters graph inputs and adds the backward graph (reverse-mode
 * autodiff); each step runs forward and backward in one keel_run and then
 * updates the parameters with the optimizer, exactly as torch.optim does.
 *
 *   keel_train_options o;
 *   keel_train_options_init(&o, KEEL_OPTIM_ADAM, 1e-3);
 *   o.loss = "loss";
 *   keel_trainer_t *t;
 *   if (keel_trainer_create("model.onnx", &o, &t)) { puts(keel_last_error()); ... }
 *   keel_session_t *s = keel_trainer_session(t);   // to make input tensors
 *   for (...) { keel_trainer_step(t, inputs, n, &loss); }
 *   keel_trainer_save(t, "trained.onnx");
 *   keel_trainer_destroy(t);
 *
 * Memory: parameters, optimizer state and (during a step) gradients live in
 * the session's allocator, each block tagged with the parameter it belongs
 * to ("param 'fc.weight'", "grad of 'fc.weight'", "adam m of 'fc.weight'"),
 * so keel_mem_live_report on keel_trainer_session() names them. Parameters
 * are copied out of the mapped model file once, at creation, and the
 * mapping's pages of those initializers are given back. After every step
 * the allocated bytes are the parameters plus the optimizer state plus a
 * constant: gradients and activations are freed before the step returns.
 *
 * Conventions are keel.h's: keel_status returns, the message in
 * keel_last_error(), out-parameters written only on success, destroy
 * accepts NULL. A trainer is used by one thread at a time.
 */
#ifndef KEEL_TRAIN_H
#define KEEL_TRAIN_H

#include "keel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct keel_trainer_s keel_trainer_t;

typedef enum keel_optimizer {
  KEEL_OPTIM_SGD = 0,        /* torch.optim.SGD (momentum, weight_decay)        */
  KEEL_OPTIM_MOMENTUM = 1,   /* torch.optim.SGD with momentum (default 0.9)     */
  KEEL_OPTIM_ADAM = 2,       /* torch.optim.Adam                                */
  KEEL_OPTIM_ADAMW = 3       /* torch.optim.AdamW                               */
} keel_optimizer;

/* How to train. Fill with keel_train_options_init, then set `loss` and
 * whatever differs from the defaults. The fields are used as given (a 0 is
 * a 0), so the struct may grow at its end: set size. */
/* What a parameter without a gradient at a step gets (zero_grad below). */
typedef enum keel_zero_grad { KEEL_ZERO_GRAD_NONE = 0, KEEL_ZERO_GRAD_ZEROS = 1 } keel_zero_grad;

/* "none", "zeros" -> *out; KEEL_ERR_INVALID_ARG otherwise. */
KEEL_API keel_status keel_zero_grad_parse(const char *name, keel_zero_grad *out);

typedef struct keel_train_options {
  size_t size;               /* sizeof(keel_train_options)                       */
  const char *loss;          /* the model output to minimize (a float scalar)    */
  keel_optimizer optimizer;
  double lr;
  /* SGD: buf = momentum * buf + g (buf = g at the first step), no dampening,
   * no Nesterov; 0 = plain SGD. MOMENTUM is SGD with this set (default 0.9). */
  double momentum;
  double beta1, beta2, eps;  /* Adam, AdamW: defaults 0.9, 0.999, 1e-8           */
  /* SGD, Adam: added to the gradient (g + wd * p); AdamW: decoupled, the
   * parameter is scaled by 1 - lr * wd before the update. Default 0, and
   * 0.01 for AdamW. */
  double weight_decay;
  const char *const *freeze; /* initializers not to train (names); may be NULL   */
  size_t n_freeze;
  const keel_options *session; /* the session's options (threads, mem_limit...); may be NULL */
  /* A parameter a step's backward does not reach (it is used only in an If
   * branch the step did not take) has no gradient, as in PyTorch, where its
   * .grad is None after optimizer.zero_grad(set_to_none=...):
   *   KEEL_ZERO_GRAD_NONE  (default; set_to_none=True, PyTorch >= 2.0): the
   *     optimizer skips it at every such step: no step counted, no moment,
   *     momentum or weight decay applied;
   *   KEEL_ZERO_GRAD_ZEROS (set_to_none=False, PyTorch 1.x): skipped until
   *     its first gradient; after that it is updated with zeros.
   * Steps are counted per parameter (keel_trainer_param_steps). */
  keel_zero_grad zero_grad;
  /* Data-parallel training over MPI (keel_dist.h; mpirun -np N). Every
   * rank of the communicator creates its trainer with the same model and
   * options and steps on its own batches, the same number of steps. At
   * creation rank 0's parameters are broadcast and the ranks compare the
   * parameter set, the optimizer's settings and a checksum of the weights.
   * At every step the ranks exchange their status (a rank whose step
   * failed makes the step fail on every rank, naming it), then sum their
   * gradients in buckets (non-blocking all-reduces, started in the
   * backward's order: last parameters first, each as soon as the backward
   * has produced it) and divide by N, so N ranks
   * with equal batches b1..bN step as one process on their concatenation
   * when the loss is a mean over the batch. The loss a step returns is
   * the mean of the ranks' losses. A parameter is updated when any rank's
   * backward reached it. BatchNormalization in training mode keeps
   * per-rank statistics (as DDP without SyncBatchNorm). */
  int data_parallel;         /* 1: on; 0: one process (default)               */
  const void *comm;          /* a const MPI_Comm *, or NULL: MPI_COMM_WORLD   */
  double bucket_mb;          /* gradient bucket size in MB (2^20 B); 0: 25    */
  /* With data_parallel (ZeRO stage 1): each rank keeps the optimizer state
   * of about 1/N of the parameters (by size, largest first to the least
   * loaded rank), updates those, and the updated parameters are gathered
   * by every rank (one MPI_Allgatherv a step). Results are the same as
   * without. keel_trainer_checkpoint_save is then collective (every rank
   * calls it, rank 0 writes the whole state), so a checkpoint resumes at
   * any number of ranks, sharded or not. */
  int shard_optimizer;
} keel_train_options;

/* The defaults of torch.optim for `opt` with learning rate lr; loss NULL. */
KEEL_API void keel_train_options_init(keel_train_options *o, keel_optimizer opt, double lr);

/* "sgd", "momentum", "adam", "adamw" -> *out; KEEL_ERR_INVALID_ARG otherwise. */
KEEL_API keel_status keel_optimizer_parse(const char *name, keel_optimizer *out);

/* Loads the model (mapped, as keel_session_create), builds the training
 * graph and the parameters. Errors: no output named `loss`, a freeze name
 * that is no initializer, nothing to train, an op on the path from a
 * parameter to the loss without a derivative rule (KEEL_ERR_UNSUPPORTED
 * naming it), bad hyperparameters. */
KEEL_API keel_status keel_trainer_create(const char *path, const keel_train_options *o,
                                         keel_trainer_t **out);
/* The same from bytes in memory (copied; external data from base_dir). */
KEEL_API keel_status keel_trainer_create_from_memory(const void *bytes, size_t len,
                                                     const char *base_dir,
                                                     const keel_train_options *o,
                                                     keel_trainer_t **out);
/* Frees the parameters, the state and the session. Values made from the
 * session stay valid (keel.h). */
KEEL_API void keel_trainer_destroy(keel_trainer_t *t);

/* The trainer's session (borrowed): make input tensors with it, read its
 * statistics and live reports. Do not run it or destroy it. */
KEEL_API keel_session_t *keel_trainer_session(keel_trainer_t *t);

/* The data inputs a step takes, in graph-input order: the model's inputs
 * that are neither parameters nor initializers. */
KEEL_API size_t keel_trainer_input_count(const keel_trainer_t *t);
KEEL_API keel_status keel_trainer_input(const keel_trainer_t *t, size_t i, keel_io_info *info);

/* One step: forward and backward on `inputs` (n of them, the data inputs in
 * order; borrowed), then the optimizer's update of every parameter. Updates
 * are dense: a parameter no path of this step reached (read only in the
 * If branch that did not run) has a zero gradient and is still updated
 * (momentum, Adam's moments, the global step count), as tests/train's
 * PyTorch references do; torch.optim on its own would skip a .grad of None.
 * *loss (may be NULL) receives the loss before the update. On error
 * (wrong input count, type or shape, a loss that is not a float scalar,
 * out of memory) nothing is updated and the trainer stays usable. */
KEEL_API keel_status keel_trainer_step(keel_trainer_t *t, keel_value_t *const *inputs, size_t n,
                                       float *loss);

/* Steps taken (including those of a loaded checkpoint). */
KEEL_API int64_t keel_trainer_steps(const keel_trainer_t *t);

/* Parameters, in the file's initializer order. Names are borrowed. */
KEEL_API size_t keel_trainer_param_count(const keel_trainer_t *t);
KEEL_API const char *keel_trainer_param_name(const keel_trainer_t *t, size_t i);
/* The parameter `name` (borrowed: valid until the next step or destroy;
 * do not modify it), or KEEL_ERR_INVALID_ARG when there is none. */
KEEL_API keel_status keel_trainer_param(const keel_trainer_t *t, const char *name,
                                        const keel_value_t **out);
/* Copies parameter `name` (float32, numel elements) into dst (cap floats). */
KEEL_API keel_status keel_trainer_param_copy(const keel_trainer_t *t, const char *name, float *dst,
                                             size_t cap);
/* The updates the optimizer applied to parameter `name` (its own step count,
 * as torch.optim keeps state['step']: behind keel_trainer_steps when some
 * steps did not reach it), or -1 when there is no such parameter. */
KEEL_API int64_t keel_trainer_param_steps(const keel_trainer_t *t, const char *name);

/* Writes the model with every trained initializer replaced by its current
 * value, the graph and names unchanged: loadable by keel_session_create and
 * by ONNX Runtime. The file is loaded again and written by keel's ONNX
 * writer: every tensor comes back inline (external data included) and
 * model-local functions inlined. */
KEEL_API keel_status keel_trainer_save(const keel_trainer_t *t, const char *path);

/* In a data-parallel job (keel_train_options.data_parallel) every rank
 * calls checkpoint_save (rank 0 writes the file, the others send it the
 * optimizer state they hold) and checkpoint_load (each reads the file).
 * Writes (creating the folder) / reads a checkpoint: parameters, optimizer
 * state and hyperparameters, the step count and each parameter's own
 * (format version 2; version 1 files, which had no per-parameter counts,
 * load as if every step had reached every parameter). A trainer made from the same
 * model and options that loads it continues bit for bit where the saved one
 * stopped. Loading checks names, shapes and the optimizer. */
KEEL_API keel_status keel_trainer_checkpoint_save(const keel_trainer_t *t, const char *dir);
KEEL_API keel_status keel_trainer_checkpoint_load(keel_trainer_t *t, const char *dir);

/* Memory figures of the trainer's session. */
typedef struct keel_train_stats {
  size_t size;               /* sizeof(keel_train_stats)                         */
  int64_t steps;
  uint64_t allocated;        /* bytes in live blocks now                         */
  uint64_t reserved;         /* bytes held from the system now                   */
  uint64_t peak;             /* highest allocated during the last step           */
  uint64_t param_bytes;      /* of allocated: the parameters' blocks             */
  uint64_t state_bytes;      /* of allocated: the optimizer state's blocks       */
  uint64_t mapped_dropped;   /* bytes of the model mapping given back at creation */
  uint64_t copy_dropped;     /* bytes of the loader's aligned copies of the
                                parameters given back at creation            */
  double last_loss;
  /* data-parallel training (1 and 0 in one process) */
  int dp_rank, dp_size;
  int dp_buckets;            /* gradient buckets per step                       */
  uint64_t allreduce_ns;     /* summed over steps: the time a step spent after
                                its run waiting for the gradient sums, in the
                                status exchange and (sharded) the gather      */
  uint64_t buckets_overlapped; /* summed over steps: buckets whose sum started
                                while the run (the backward) went on          */
} keel_train_stats;
KEEL_API keel_status keel_trainer_stats(const keel_trainer_t *t, keel_train_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* KEEL_TRAIN_H */

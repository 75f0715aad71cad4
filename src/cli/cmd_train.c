/* cmd_train.c: `keel train`: train a model whose output NAME is its loss
 * on test_data_set-style folders, through the trainer API (keel_train.h).
 *
 * Step k (counted from 1 over resumed runs too) reads the data inputs of
 * folder (k - 1) mod D (input_K.pb in graph-input order, parameters not
 * among them), steps, releases them, and prints
 *   step 3/100: loss 0.693147  allocated 1.2 MB  reserved 4.0 MB  peak 3.1 MB
 * (allocated and reserved after the step, peak during it); --log adds one
 * JSON object per step. At the end: --checkpoint, --save, then a verdict:
 * allocated bytes after step 2 and after the last step must be equal; when
 * they are not, the blocks allocated since step 2 that survive are named
 * by owner (graph path, node, value) as `keel memcheck` names them, and
 * the exit status is 1.
 *
 * --data-parallel (under mpirun -np N): rank r takes folders r, r + N,
 * r + 2N ... of the --data list (or its own, --rank-data r:DIR); gradients are averaged over the ranks
 * (keel_train_options.data_parallel), the printed loss is the ranks' mean.
 * Rank 0 prints the steps and writes --log, --save and --checkpoint; each
 * rank prints its own memory verdict (other ranks' --log: FILE.rank<R>).
 * A rank that fails ends every rank of the job.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "keel_train.h"

#define MAX_DATA 1024
#define MAX_FREEZE 256

typedef struct train_args {
  const char *model, *loss, *save, *checkpoint, *resume, *log, *plant;
  const char *data[MAX_DATA];
  int n_data;
  const char *rank_data[MAX_DATA]; /* --rank-data R:DIR, as given           */
  int n_rank_data;
  const char *mine[MAX_DATA];  /* the folders this process trains on      */
  int n_mine;
  long steps;
  keel_train_options o;
  char *freeze_buf;
  const char *freeze[MAX_FREEZE];
  keel_options so;
  bool has_opt, has_lr, has_momentum, has_wd;
  bool leak_subgraphs;         /* test-only: If/Loop results kept alive */
  bool data_parallel;
  int rank, size;              /* data-parallel: this rank, the ranks      */
  int plant_rank;              /* --debug-plant-rank, or -1: every rank    */
  double momentum, wd;
} train_args;

static bool parse_double(const char *s, double *out) {
  char *end;
  *out = strtod(s, &end);
  return end != s && !*end;
}

/* --freeze a,b,c into a->freeze (names point into a->freeze_buf). */
static int parse_freeze(train_args *a, const char *list) {
  free(a->freeze_buf);
  a->freeze_buf = strdup(list);
  a->o.n_freeze = 0;
  for (char *tok = strtok(a->freeze_buf, ","); tok; tok = strtok(NULL, ",")) {
    if (a->o.n_freeze == MAX_FREEZE) return cli_usage("train", "too many --freeze names");
    a->freeze[a->o.n_freeze++] = tok;
  }
  return 0;
}

/* One option with a value; 0, or the usage exit status. */
static int parse_value(train_args *a, const char *opt, const char *v) {
  double d = 0;
  bool num = parse_double(v, &d);
  if (!strcmp(opt, "--loss")) a->loss = v;
  else if (!strcmp(opt, "--data")) {
    if (a->n_data == MAX_DATA) return cli_usage("train", "too many --data folders");
    if (!cli_is_dir(v)) return cli_usage("train", "--data is not a folder");
    a->data[a->n_data++] = v;
  } else if (!strcmp(opt, "--rank-data")) {
    char *end;
    long r = strtol(v, &end, 10);
    if (end == v || *end != ':' || r < 0 || !cli_is_dir(end + 1))
      return cli_usage("train", "--rank-data takes RANK:FOLDER (an existing folder)");
    if (a->n_rank_data == MAX_DATA) return cli_usage("train", "too many --rank-data folders");
    a->rank_data[a->n_rank_data++] = v;
  } else if (!strcmp(opt, "--steps")) {
    char *end;
    a->steps = strtol(v, &end, 10);
    if (*end || a->steps < 1) return cli_usage("train", "--steps needs a positive number");
  } else if (!strcmp(opt, "--optimizer")) {
    if (keel_optimizer_parse(v, &a->o.optimizer)) return cli_usage("train", "--optimizer: sgd, momentum, adam or adamw");
    a->has_opt = true;
  } else if (!strcmp(opt, "--lr") && num) a->o.lr = d, a->has_lr = true;
  else if (!strcmp(opt, "--momentum") && num) a->momentum = d, a->has_momentum = true;
  else if (!strcmp(opt, "--beta1") && num) a->o.beta1 = d;
  else if (!strcmp(opt, "--beta2") && num) a->o.beta2 = d;
  else if (!strcmp(opt, "--eps") && num) a->o.eps = d;
  else if (!strcmp(opt, "--weight-decay") && num) a->wd = d, a->has_wd = true;
  else if (!strcmp(opt, "--zero-grad")) {
    if (keel_zero_grad_parse(v, &a->o.zero_grad)) return cli_usage("train", "--zero-grad: none or zeros");
  }
  else if (!strcmp(opt, "--freeze")) return parse_freeze(a, v);
  else if (!strcmp(opt, "--save")) a->save = v;
  else if (!strcmp(opt, "--checkpoint")) a->checkpoint = v;
  else if (!strcmp(opt, "--resume")) a->resume = v;
  else if (!strcmp(opt, "--log")) a->log = v;
  else if (!strcmp(opt, "--bucket-mb") && num && d > 0) a->o.bucket_mb = d;
  else if (!strcmp(opt, "--debug-plant-leak")) a->plant = v; /* test-only */
  else if (!strcmp(opt, "--debug-plant-rank") && num) a->plant_rank = (int)d; /* test-only: that rank alone */
  else if (!strcmp(opt, "--mem-limit")) {
    if (!cli_parse_size(v, &a->so.mem_limit)) return cli_usage("train", "bad --mem-limit");
  } else if (!strcmp(opt, "--threads")) {
    if (!cli_parse_threads(v, &a->so.threads)) return cli_usage("train", "bad --threads");
  } else if (!strcmp(opt, "--device")) {
    a->so.device = v;
  } else return cli_usage("train", "unknown option or bad number");
  return 0;
}

static int parse(int argc, char **argv, train_args *a) {
  memset(a, 0, sizeof *a);
  a->size = 1;
  a->plant_rank = -1;
  keel_train_options_init(&a->o, KEEL_OPTIM_SGD, 0);
  a->so.size = sizeof a->so;
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--debug-leak-subgraphs")) a->leak_subgraphs = true; /* test-only */
    else if (!strcmp(s, "--data-parallel")) a->data_parallel = true;
    else if (!strcmp(s, "--shard-optimizer")) a->o.shard_optimizer = 1;
    else if (s[0] == '-' && s[1]) {
      if (i + 1 >= argc) return cli_usage("train", "an option lacks its value");
      int rc = parse_value(a, s, argv[++i]);
      if (rc) return rc;
    } else if (!a->model) a->model = s;
    else return cli_usage("train", "more than one model given");
  }
  if (!a->model || !cli_is_file(a->model)) return cli_usage("train", "no model file given");
  if (a->n_rank_data && !a->data_parallel) return cli_usage("train", "--rank-data needs --data-parallel");
  if (a->n_rank_data && a->n_data) return cli_usage("train", "give --data or --rank-data, not both");
  if (!a->loss || !(a->n_data || a->n_rank_data) || !a->steps || !a->has_opt || !a->has_lr)
    return cli_usage("train", "--loss, --data, --steps, --optimizer and --lr are required");
  if (a->resume && !cli_is_dir(a->resume)) return cli_usage("train", "--resume is not a folder");
  /* the optimizer's defaults, then what was given */
  keel_train_options o = a->o;
  keel_train_options_init(&a->o, o.optimizer, o.lr);
  a->o.beta1 = o.beta1, a->o.beta2 = o.beta2, a->o.eps = o.eps;
  a->o.zero_grad = o.zero_grad;
  a->o.bucket_mb = o.bucket_mb;
  a->o.data_parallel = a->data_parallel;
  a->o.shard_optimizer = o.shard_optimizer;
  if (a->o.shard_optimizer && !a->data_parallel) return cli_usage("train", "--shard-optimizer needs --data-parallel");
  if (a->has_momentum) a->o.momentum = a->momentum;
  if (a->has_wd) a->o.weight_decay = a->wd;
  a->o.loss = a->loss;
  a->o.freeze = a->freeze;
  a->o.n_freeze = o.n_freeze;
  a->o.session = &a->so;
  return 0;
}

static int fail(const char *what, keel_status st) {
  fprintf(stderr, "keel: %s%s: %s: %s\n", cli_dist_tag(), what, keel_status_str(st), keel_last_error());
  return 1;
}

/* The data inputs of one folder, in order. */
static keel_status load_batch(keel_trainer_t *t, const char *dir, cli_inputs *in) {
  memset(in, 0, sizeof *in);
  keel_status st = cli_load_data_dir(keel_trainer_session(t), dir, in);
  if (st) return st;
  if (in->n != keel_trainer_input_count(t)) {
    fprintf(stderr, "keel: %s: %zu input_K.pb file(s) where the model takes %zu data input(s)\n", dir,
            in->n, keel_trainer_input_count(t));
    return KEEL_ERR_INVALID_ARG;
  }
  return KEEL_OK;
}

/* `dev` names the session's device when it has one; `ds` is then its
 * heap's figures (the peak: during the step). */
static void print_step(FILE *log, bool show, int64_t k, int64_t total, float loss, double took,
                       const keel_train_stats *st, const char *dev, const keel_stats *ds) {
  char a[32], r[32], p[32], da[32], dr[32], dp[32];
  if (show) {
    printf("step %lld/%lld: loss %.6f  allocated %s  reserved %s  peak %s", (long long)k,
           (long long)total, (double)loss, cli_bytes(st->allocated, a, sizeof a),
           cli_bytes(st->reserved, r, sizeof r), cli_bytes(st->peak, p, sizeof p));
    if (dev)
      printf("  %s: allocated %s  reserved %s  peak %s", dev, cli_bytes(ds->allocated, da, sizeof da),
             cli_bytes(ds->reserved, dr, sizeof dr), cli_bytes(ds->allocated_peak, dp, sizeof dp));
    printf("\n");
  }
  char l[32] = "null"; /* JSON has no NaN or infinity */
  if (isfinite(loss)) snprintf(l, sizeof l, "%.9g", (double)loss);
  if (log) {
    fprintf(log, "{\"step\": %lld, \"loss\": %s, \"allocated\": %llu, \"reserved\": %llu, \"peak\": %llu, "
            "\"param_bytes\": %llu, \"state_bytes\": %llu, \"allreduce_ns\": %llu, \"step_ms\": %.4f",
            (long long)k, l, (unsigned long long)st->allocated, (unsigned long long)st->reserved,
            (unsigned long long)st->peak, (unsigned long long)st->param_bytes, (unsigned long long)st->state_bytes,
            (unsigned long long)st->allreduce_ns, took * 1e3);
    if (dev) /* the device's figures, its peak during the step */
      fprintf(log, ", \"device\": \"%s\", \"device_allocated\": %llu, \"device_reserved\": %llu, "
              "\"device_peak\": %llu", dev, (unsigned long long)ds->allocated,
              (unsigned long long)ds->reserved, (unsigned long long)ds->allocated_peak);
    fprintf(log, "}\n");
  }
  if (log) fflush(log); /* whole lines, for whoever follows the run */
  fflush(stdout);
}

/* The run's memory figures for the verdict. */
typedef struct steady {
  int64_t second, grew_at;    /* the step of the reference figure; first growth */
  uint64_t alloc2, last, mark;
  uint64_t dev_alloc2, dev_last; /* the same on the session's device        */
  uint64_t max_peak;          /* the highest peak of any step               */
  uint64_t seed_live;         /* last step: allocated when the backward began */
  uint64_t last_peak;         /* last step: its peak                         */
} steady;

/* Allocated bytes when the backward of the step began: the peak live of
 * the main graph's OnesLike (the seed dy/dy = 1, the first backward node;
 * every forward value the backward does not read is freed by then). From
 * a memory profile of one step; 0 when there is none. */
static uint64_t backward_start(keel_session_t *s) {
  size_t n = keel_profile_nodes(s, NULL, 0);
  keel_node_mem *m = calloc(n + 1, sizeof *m);
  uint64_t at = 0;
  if (m) n = keel_profile_nodes(s, m, n);
  for (size_t i = 0; m && i < n; i++)
    if (!strcmp(m[i].op, "OnesLike") && !strcmp(m[i].path, "main") && m[i].peak_live > at) at = m[i].peak_live;
  free(m);
  return at;
}

static keel_status steps(keel_trainer_t *t, const train_args *a, FILE *log, steady *m) {
  int64_t first = keel_trainer_steps(t) + 1, total = keel_trainer_steps(t) + a->steps;
  m->second = first + 1;
  for (int64_t k = first; k <= total; k++) {
    cli_inputs in;
    keel_status st = load_batch(t, a->mine[(k - 1) % a->n_mine], &in);
    float loss = 0;
    keel_session_t *s = keel_trainer_session(t);
    bool last = k == total; /* profiled: the memory bound below */
    if (!st && last) st = keel_profile_start(s, KEEL_PROFILE_MEMORY);
    double t0 = cli_now();
    if (!st) st = keel_trainer_step(t, in.values, in.n, &loss);
    double took = cli_now() - t0;
    if (!st && last) m->seed_live = backward_start(s);
    if (last) keel_profile_stop(s);
    cli_inputs_free(&in);
    if (st) return st;
    keel_train_stats ts = {.size = sizeof ts};
    keel_trainer_stats(t, &ts);
    keel_stats ds = {.size = sizeof ds};
    const char *dev = NULL;
    if (keel_stats_get_device(s, &ds, &dev) != KEEL_OK) dev = NULL; /* a CPU session */
    print_step(log, a->rank == 0, k, total, loss, took, &ts, dev, &ds);
    /* steady means steady on the device too */
    if (k == m->second) {
      m->alloc2 = ts.allocated, m->dev_alloc2 = ds.allocated;
      m->mark = keel_mem_mark(keel_trainer_session(t));
    } else if (k > m->second && (ts.allocated != m->alloc2 || ds.allocated != m->dev_alloc2) && !m->grew_at) {
      m->grew_at = k;
    }
    m->last = ts.allocated, m->dev_last = ds.allocated;
    m->last_peak = ts.peak;
    if (ts.peak > m->max_peak) m->max_peak = ts.peak;
  }
  return KEEL_OK;
}

static int verdict(keel_trainer_t *t, const train_args *a, const steady *m) {
  char b1[32], b2[32], b3[32];
  keel_train_stats ts = {.size = sizeof ts};
  keel_trainer_stats(t, &ts);
  if (ts.dp_size > 1) {
    char b4[32];
    printf("%sdata-parallel: %d ranks, %d gradient bucket(s) of at most %s, %.2f of them a step started "
           "during the backward; after it, %.3f ms a step waiting for the sums and the status exchange\n",
           cli_dist_tag(), ts.dp_size, ts.dp_buckets,
           cli_bytes((uint64_t)((a->o.bucket_mb > 0 ? a->o.bucket_mb : 25) * 1048576), b4, sizeof b4),
           a->steps ? (double)ts.buckets_overlapped / (double)a->steps : 0.0,
           a->steps ? (double)ts.allreduce_ns / 1e6 / (double)a->steps : 0.0);
  }
  printf("%smemory parameters %s, optimizer state %s; peak during a step at most %s\n", cli_dist_tag(),
         cli_bytes(ts.param_bytes, b1, sizeof b1), cli_bytes(ts.state_bytes, b2, sizeof b2),
         cli_bytes(m->max_peak, b3, sizeof b3));
  /* The bound: a step's peak against what it must hold at once:
   * the activations kept for the backward (allocated when the backward
   * began, less parameters and state: the step's inputs count as kept),
   * the parameters, their gradients (one per parameter float) and the
   * optimizer state. */
  uint64_t held = ts.param_bytes + ts.state_bytes;
  if (m->seed_live >= held) {
    uint64_t kept = m->seed_live - held, need = kept + 2 * ts.param_bytes + ts.state_bytes;
    char b4[32], b5[32];
    printf("%smemory peak of the last step %s = %.3f x (activations kept for the backward %s + "
           "parameters %s + gradients %s + optimizer state %s)\n",
           cli_dist_tag(), cli_bytes(m->last_peak, b1, sizeof b1), need ? (double)m->last_peak / (double)need : 0.0,
           cli_bytes(kept, b4, sizeof b4), cli_bytes(ts.param_bytes, b2, sizeof b2),
           cli_bytes(ts.param_bytes, b5, sizeof b5), cli_bytes(ts.state_bytes, b3, sizeof b3));
  }
  if (a->steps < 3) {
    printf("%sverdict: steady: too few steps to compare (allocated %s)\n", cli_dist_tag(), cli_bytes(m->last, b1, sizeof b1));
    return 0;
  }
  if (m->last == m->alloc2 && m->dev_last == m->dev_alloc2 && !m->grew_at) {
    printf("%sverdict: steady: allocated %s after step %lld and after every step to the last\n",
           cli_dist_tag(), cli_bytes(m->alloc2, b1, sizeof b1), (long long)m->second);
    return 0;
  }
  char why[256], since[64];
  snprintf(why, sizeof why, "allocated memory moved from %s after step %lld to %s after the last step "
           "(first at step %lld)", cli_bytes(m->alloc2, b1, sizeof b1), (long long)m->second,
           cli_bytes(m->last, b2, sizeof b2), (long long)m->grew_at);
  snprintf(since, sizeof since, "step %lld", (long long)m->second);
  int rc = cli_leak_report(keel_trainer_session(t), m->mark, why, since);
  printf("(a block of the main graph gives the training step it was made in as its iteration)\n");
  return rc;
}

static void print_header(keel_trainer_t *t, const train_args *a) {
  size_t floats = 0;
  for (size_t i = 0; i < keel_trainer_param_count(t); i++) {
    const keel_value_t *v;
    if (!keel_trainer_param(t, keel_trainer_param_name(t, i), &v)) floats += (size_t)keel_value_numel(v);
  }
  char b[32];
  static const char *names[] = {"sgd", "momentum", "adam", "adamw"};
  printf("train  %s: loss '%s', %zu parameter(s) (%zu floats, %s), optimizer %s, lr %g\n", a->model,
         a->loss, keel_trainer_param_count(t), floats, cli_bytes(floats * 4, b, sizeof b),
         names[a->o.optimizer], a->o.lr);
  if (a->size > 1)
    printf("data-parallel over %d ranks: rank r trains on --data folders r, r+%d, ...; the loss printed is "
           "the ranks' mean\n", a->size, a->size);
  if (a->resume) printf("resume %s: from step %lld\n", a->resume, (long long)keel_trainer_steps(t));
}

static int finish(keel_trainer_t *t, const train_args *a) {
  keel_status st;
  if (a->checkpoint && (st = keel_trainer_checkpoint_save(t, a->checkpoint))) return fail("checkpoint", st);
  if (a->rank != 0) return 0;
  if (a->checkpoint) printf("checkpoint %s: step %lld\n", a->checkpoint, (long long)keel_trainer_steps(t));
  if (a->save && (st = keel_trainer_save(t, a->save))) return fail("save", st);
  if (a->save) printf("saved  %s\n", a->save);
  return 0;
}

/* The folders this process trains on: every --data folder in one
 * process; with --data-parallel rank r's are folders r, r + N, r + 2N ...
 * of --data, or the --rank-data folders given for r. */
static int pick_data(train_args *a) {
  for (int i = 0; i < a->n_data; i++)
    if (i % a->size == a->rank) a->mine[a->n_mine++] = a->data[i];
  for (int i = 0; i < a->n_rank_data; i++)
    if (strtol(a->rank_data[i], NULL, 10) == a->rank) a->mine[a->n_mine++] = strchr(a->rank_data[i], ':') + 1;
  if (a->n_mine) return 0;
  if (a->n_rank_data)
    fprintf(stderr, "keel: %s--rank-data names no folder for rank %d (of %d)\n", cli_dist_tag(), a->rank, a->size);
  else
    fprintf(stderr, "keel: %s--data-parallel over %d ranks needs at least %d --data folders (one per rank), "
            "%d given\n", cli_dist_tag(), a->size, a->size, a->n_data);
  return 2;
}

/* --data-parallel: MPI up, this rank and the ranks; every rank keeps its
 * stdout (its verdict), rank 0 alone prints the steps. */
static int start_ranks(train_args *a) {
  if (a->data_parallel) {
    cli_dist_keep_stdout();
    if (cli_dist_start()) return 1;
    a->rank = keel_dist_rank(), a->size = keel_dist_size();
  }
  return pick_data(a);
}

/* --log FILE: rank 0 writes FILE, rank R > 0 FILE.rank<R>. */
static FILE *open_log(const train_args *a) {
  char path[4200];
  if (a->rank == 0) snprintf(path, sizeof path, "%s", a->log);
  else snprintf(path, sizeof path, "%s.rank%d", a->log, a->rank);
  FILE *f = fopen(path, "w");
  if (!f) fprintf(stderr, "keel: %scannot write %s\n", cli_dist_tag(), path);
  return f;
}

static int train(train_args *a) {
  int rc = start_ranks(a);
  if (rc) return rc;
  keel_trainer_t *t;
  keel_status st = keel_trainer_create(a->model, &a->o, &t);
  if (st) return fail(a->model, st);
  if (a->resume && (st = keel_trainer_checkpoint_load(t, a->resume))) rc = fail("resume", st);
  bool plant = a->plant && (a->plant_rank < 0 || a->plant_rank == a->rank);
  if (!rc && plant && (st = keel_debug_plant_leak(keel_trainer_session(t), a->plant)))
    rc = fail("--debug-plant-leak", st);
  keel_debug_leak_subgraph_results(keel_trainer_session(t), a->leak_subgraphs);
  FILE *log = NULL;
  if (!rc && a->log && !(log = open_log(a))) rc = 1;
  steady m = {0};
  if (!rc && a->rank == 0) print_header(t, a);
  if (!rc && (st = steps(t, a, log, &m))) rc = fail("train", st);
  if (log) fclose(log);
  if (!rc) rc = finish(t, a); /* every rank: a checkpoint gathers sharded state */
  if (!rc) rc = verdict(t, a, &m);
  keel_debug_plant_leak(keel_trainer_session(t), NULL);
  keel_trainer_destroy(t);
  return rc;
}

int cmd_train(int argc, char **argv) {
  train_args a;
  int rc = parse(argc, argv, &a);
  if (!rc) rc = train(&a);
  free(a.freeze_buf);
  return a.data_parallel ? cli_dist_end(rc) : rc;
}

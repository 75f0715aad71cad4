/* test_stress.c: many clients at once. Eight threads share one session of
 * a Loop model (v += x, trip count from the request, every v stacked as a
 * scan output) under a 32 MB cap, each sending requests with
 *   - a random width (1 .. 1000 floats) and trip count (1 .. 500, or one
 *     that never finishes: 2^40),
 *   - at random a deadline (1-20 ms) and/or a cancel flag that a chaos
 *     thread sets at random moments,
 * so that some requests finish, some time out, some are cancelled and some
 * exceed the cap. Every request must end in a correct result (checked
 * element by element) or a clean error (KEEL_ERR_TIMEOUT, _CANCELLED or
 * _OUT_OF_MEMORY with a message); nothing may leak; after the storm
 * allocated is back at zero and, a trim window of small runs later (the
 * window the policy has learnt by then), reserved is within 1.5x of what
 * the small request alone keeps. Runs
 * under ThreadSanitizer and ASan in CI (label "thread").
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "mb.h"

#define THREADS 8
#define REQUESTS 30
#define CAP (32u << 20)
#define NEVER (1ll << 40)

static keel_session_t *stress_model(const keel_options *o) {
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "i", KEEL_INT64, 0, NULL);
  mb_input(b, "c", KEEL_BOOL, 0, NULL);
  mb_input(b, "v", KEEL_FLOAT, 1, (int64_t[]){-1});
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "v_out", KEEL_FLOAT, 1, (int64_t[]){-1});
  mb_output(b, "s", KEEL_FLOAT, 1, (int64_t[]){-1});
  mb_add(b, "Add", "v,x", "v_out");
  mb_add(b, "Less", "i,trips", "c_out"); /* true until M stops it: not a pass-through */
  mb_add(b, "Identity", "v_out", "s");
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){-1});
  mb_input(g, "trips", KEEL_INT64, 0, NULL);
  mb_output(g, "v", KEEL_FLOAT, 1, (int64_t[]){-1});
  mb_output(g, "stack", KEEL_FLOAT, 2, (int64_t[]){-1, -1});
  bool t = true;
  mb_init(g, "go", KEEL_BOOL, 0, NULL, &t);
  mb_add(g, "Mul", "x,zero", "v0");
  float zero = 0;
  mb_init(g, "zero", KEEL_FLOAT, 0, NULL, &zero);
  mb_node *n = mb_add(g, "Loop", "trips,go,v0", "v,stack");
  mb_name(n, "acc");
  mb_attr_g(n, "body", b);
  return mb_session_opts(g, 13, o);
}

typedef struct worker {
  keel_session_t *s;
  unsigned seed;
  keel_cancel_flag flag;
  int ok, timeout, cancelled, oom, bad;
} worker;

static _Atomic int storm_over;
static const int64_t WIDTHS[] = {1, 3, 8, 17, 64, 200, 1000};
static const int64_t TRIPS[] = {1, 5, 50, 500, 10000, NEVER}; /* 1000 x 10000: 40 MB */

/* x[j] = (j % 5) - 2: sums stay exact in float. */
static bool result_ok(keel_value_t **out, int64_t w, int64_t trips) {
  if (keel_value_numel(out[0]) != w || keel_value_rank(out[1]) != 2 ||
      keel_value_shape(out[1])[0] != trips || keel_value_shape(out[1])[1] != w)
    return false;
  for (int64_t j = 0; j < w; j++)
    if (keel_value_at(out[0], j) != (double)((j % 5) - 2) * (double)trips) return false;
  for (int64_t i = 0; i < trips; i += 1 + trips / 7)
    for (int64_t j = 0; j < w; j++)
      if (keel_value_at(out[1], i * w + j) != (double)((j % 5) - 2) * (double)(i + 1)) return false;
  return true;
}

static void one_request(worker *wk) {
  int64_t w = WIDTHS[rand_r(&wk->seed) % 7], trips = TRIPS[rand_r(&wk->seed) % 6];
  int r = rand_r(&wk->seed) % 10;
  keel_run_opts o = {.size = sizeof o};
  if (r < 4 || trips == NEVER) o.deadline_ms = 1 + (uint64_t)(rand_r(&wk->seed) % 20);
  if (r >= 6) o.cancel = &wk->flag;
  atomic_store(&wk->flag, 0);
  float *x = malloc((size_t)w * sizeof *x);
  for (int64_t j = 0; j < w; j++) x[j] = (float)((j % 5) - 2);
  keel_value_t *in[2] = {mb_tensor(wk->s, KEEL_FLOAT, 1, &w, x),
                         mb_tensor(wk->s, KEEL_INT64, 0, NULL, &trips)};
  free(x);
  keel_value_t *out[2] = {0};
  keel_status st = keel_run_ex(wk->s, (const char *[]){"x", "trips"}, in, 2, out, &o);
  bool said = keel_last_error()[0] != 0;
  if (st == KEEL_OK) {
    if (trips == NEVER || !result_ok(out, w, trips)) wk->bad++;
    else wk->ok++;
  } else if (st == KEEL_ERR_TIMEOUT && said && o.deadline_ms) {
    wk->timeout++;
  } else if (st == KEEL_ERR_CANCELLED && said && o.cancel) {
    wk->cancelled++;
  } else if (st == KEEL_ERR_OUT_OF_MEMORY && said) {
    wk->oom++;
  } else {
    fprintf(stderr, "unexpected: %s: %s\n", keel_status_str(st), keel_last_error());
    wk->bad++;
  }
  if (st && (out[0] || out[1])) wk->bad++; /* outputs are written only on success */
  for (int k = 0; k < 2; k++) keel_value_release(out[k]), keel_value_release(in[k]);
}

static void *client(void *arg) {
  worker *wk = arg;
  for (int r = 0; r < REQUESTS; r++) one_request(wk);
  return NULL;
}

/* Sets a random worker's flag every 0-4 ms until the storm is over. */
static void *chaos(void *arg) {
  worker *w = arg;
  unsigned seed = 77;
  while (!atomic_load(&storm_over)) {
    atomic_store(&w[rand_r(&seed) % THREADS].flag, 1);
    struct timespec ts = {0, (long)(rand_r(&seed) % 4000) * 1000L};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static uint64_t small_reserved(keel_session_t *s, int runs) {
  int64_t w = 8, trips = 5;
  float x[8] = {0};
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 1, &w, x), mb_tensor(s, KEEL_INT64, 0, NULL, &trips)};
  for (int r = 0; r < runs; r++) {
    keel_value_t *out[2] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"x", "trips"}, in, 2, out));
    keel_value_release(out[0]), keel_value_release(out[1]);
  }
  keel_value_release(in[0]), keel_value_release(in[1]);
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  return st.reserved;
}

int main(void) {
  keel_options o = {.size = sizeof o, .mem_limit = CAP, .run_pool_cap = 4};
  keel_session_t *alone = stress_model(&o);
  CHECK(alone != NULL);
  if (!alone) return check_report();
  uint64_t small = small_reserved(alone, 20);
  keel_session_destroy(alone);

  keel_session_t *s = stress_model(&o);
  worker wk[THREADS];
  pthread_t th[THREADS], ch;
  for (int t = 0; t < THREADS; t++) {
    memset(&wk[t], 0, sizeof wk[t]);
    wk[t].s = s;
    wk[t].seed = 1000u + (unsigned)t;
    atomic_init(&wk[t].flag, 0);
    pthread_create(&th[t], NULL, client, &wk[t]);
  }
  pthread_create(&ch, NULL, chaos, wk);
  int ok = 0, timeout = 0, cancelled = 0, oom = 0, bad = 0;
  for (int t = 0; t < THREADS; t++) {
    pthread_join(th[t], NULL);
    ok += wk[t].ok, timeout += wk[t].timeout, cancelled += wk[t].cancelled;
    oom += wk[t].oom, bad += wk[t].bad;
  }
  atomic_store(&storm_over, 1);
  pthread_join(ch, NULL);
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  fprintf(stderr,
          "%d requests: %d correct, %d timed out, %d cancelled, %d over the cap, %d bad; "
          "reserved %llu (peak %llu), run contexts %llu made, %llu evicted, %llu pooled; trim "
          "window %llu after %llu regrets\n",
          THREADS * REQUESTS, ok, timeout, cancelled, oom, bad, (unsigned long long)st.reserved,
          (unsigned long long)st.reserved_peak, (unsigned long long)st.run_ctx_created,
          (unsigned long long)st.run_ctx_evicted, (unsigned long long)st.run_ctx_pooled,
          (unsigned long long)st.trim_window, (unsigned long long)st.n_trim_regret);
  CHECK(bad == 0);
  CHECK(ok + timeout + cancelled + oom == THREADS * REQUESTS);
  CHECK(ok > 0 && timeout > 0 && cancelled > 0 && oom > 0); /* the storm had every kind */
  CHECK(st.allocated == 0 && st.n_alloc == st.n_free);
  CHECK(st.reserved_peak <= CAP);
  CHECK(st.run_ctx_in_use == 0 && st.run_ctx_pooled <= 4 && st.run_pool_cap == 4);
  CHECK(st.run_ctx_created == st.run_ctx_pooled + st.run_ctx_evicted);
  /* the policy's window may have grown in the storm (regrets): the storm's
   * segments go once no run has used them for that many runs */
  int quiet = (int)st.trim_window + 2;
  CHECK(st.trim_window >= KEEL_DEFAULT_TRIM_WINDOW && st.trim_window <= 1024);
  uint64_t after = small_reserved(s, quiet);
  fprintf(stderr, "after the storm and %d small runs: reserved %llu; the small request alone %llu\n",
          quiet, (unsigned long long)after, (unsigned long long)small);
  CHECK(after * 2 <= small * 3);
  keel_stats_get(s, &st);
  CHECK(st.allocated == 0);
  keel_session_destroy(s);
  return check_report();
}

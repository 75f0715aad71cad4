/* test_threads.c: eight threads run one shared session of a Loop model 200
 * times each, at once. Every output must equal the single-threaded one, and
 * the run must be clean under ThreadSanitizer (ctest label "thread"). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define THREADS 8
#define RUNS 200

typedef struct job {
  keel_session_t *s;
  const double *want;
  int64_t n_want;
  int mismatches, errors;
} job;

static keel_value_t *inputs[3];
static const char *names[3] = {"x", "n", "m"};

/* acc grows through a Loop > Loop > If model (tests/models/nested_loop_if). */
static void *worker(void *arg) {
  job *j = arg;
  for (int r = 0; r < RUNS; r++) {
    keel_value_t *out[1] = {0};
    if (keel_run(j->s, names, inputs, 3, out)) {
      j->errors++;
      continue;
    }
    if (keel_value_numel(out[0]) != j->n_want) j->mismatches++;
    for (int64_t i = 0; i < j->n_want && i < keel_value_numel(out[0]); i++)
      if (keel_value_at(out[0], i) != j->want[i]) j->mismatches++;
    keel_value_release(out[0]);
  }
  return NULL;
}

int main(void) {
  keel_session_t *s = NULL;
  CHECK_OK(keel_session_create("tests/models/nested_loop_if/model.onnx", NULL, &s));
  if (!s) return check_report();
  float x[6] = {0.25f, -1, 2, 3, -0.5f, 1};
  int64_t n = 6, m = 5;
  inputs[0] = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, x);
  inputs[1] = mb_tensor(s, KEEL_INT64, 0, NULL, &n);
  inputs[2] = mb_tensor(s, KEEL_INT64, 0, NULL, &m);
  keel_value_t *ref[1] = {0};
  CHECK_OK(keel_run(s, names, inputs, 3, ref));
  int64_t nw = keel_value_numel(ref[0]);
  double *want = calloc((size_t)nw + 1, sizeof *want);
  for (int64_t i = 0; i < nw; i++) want[i] = keel_value_at(ref[0], i);
  keel_value_release(ref[0]);
  job jobs[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    jobs[t] = (job){s, want, nw, 0, 0};
    pthread_create(&th[t], NULL, worker, &jobs[t]);
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_join(th[t], NULL);
    CHECK(jobs[t].errors == 0);
    CHECK(jobs[t].mismatches == 0);
  }
  for (int i = 0; i < 3; i++) keel_value_release(inputs[i]);
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  CHECK(st.allocated == 0 && st.n_alloc == st.n_free);
  CHECK(st.n_alloc > (uint64_t)THREADS * RUNS); /* they really ran */
  keel_session_destroy(s);
  free(want);
  return check_report();
}

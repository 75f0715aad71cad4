/* test_lib_threads.c: a session at one thread leaves the process with one
 * thread. Debian's default OpenBLAS (the pthread build) starts its server
 * threads when the library loads, and they spin in sched_yield for about
 * 0.2 s before they sleep; keel sets OpenBLAS to one thread and shuts them
 * down at the first session (keel_blas_init), so keel's pool is the only
 * source of threads. A float64 MatMul (cblas_dgemm) then runs, checked
 * against a plain loop, and still no thread is added. Under ThreadSanitizer,
 * whose runtime may keep a thread of its own, the counts are printed, not
 * checked. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>

#include "check.h"
#include "mb.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

static int threads_now(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int main(void) {
  int before = threads_now();
  enum { K = 48 };
  static double a[K * K], b[K * K], want[K * K];
  for (int i = 0; i < K * K; i++) a[i] = (i % 7) - 3.0, b[i] = (i % 5) * 0.5;
  for (int i = 0; i < K; i++)
    for (int j = 0; j < K; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += a[i * K + k] * b[k * K + j];
      want[i * K + j] = s;
    }
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "A", KEEL_DOUBLE, 2, (int64_t[]){K, K});
  mb_init(g, "B", KEEL_DOUBLE, 2, (int64_t[]){K, K}, b);
  mb_add(g, "MatMul", "A,B", "Y");
  mb_output(g, "Y", KEEL_DOUBLE, -1, NULL);
  keel_options o = {.size = sizeof o, .threads = 1};
  keel_session_t *s = mb_session_opts(g, 13, &o);
  CHECK(s != NULL);
  int after_create = threads_now();
  keel_value_t *in = mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){K, K}, a);
  keel_value_t *out[1] = {0};
  for (int r = 0; r < 3; r++) {
    keel_value_release(out[0]);
    out[0] = NULL;
    CHECK_OK(keel_run(s, (const char *[]){"A"}, &in, 1, out));
  }
  const double *y = out[0] ? keel_value_data(out[0]) : NULL;
  int bad = 0;
  for (int i = 0; y && i < K * K; i++) bad += fabs(y[i] - want[i]) > 1e-9 * (1 + fabs(want[i]));
  CHECK(y != NULL && bad == 0);
  int after_run = threads_now();
  fprintf(stderr, "threads: %d at start (the libraries' own), %d after the session, %d after its runs\n",
          before, after_create, after_run);
#ifndef UNDER_TSAN
  CHECK(after_create == 1);
  CHECK(after_run == 1);
#endif
  keel_value_release(out[0]);
  keel_value_release(in);
  keel_session_destroy(s);
  return check_report();
}

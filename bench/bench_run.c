/* bench_run.c: the C side of bench_python.py. Times keel_run on a model
 * whose inputs are float tensors (symbolic dimensions 1), the way the
 * Python binding calls it: inputs wrapped over caller memory each call
 * (keel_tensor_wrap), outputs released. Prints the median nanoseconds per
 * call over N calls, after a warm-up.
 *
 *   ./build/bench_run MODEL.onnx [N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "keel.h"

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_run MODEL.onnx [N]\n");
    return 2;
  }
  long n = argc > 2 ? strtol(argv[2], NULL, 10) : 20000;
  keel_session_t *s;
  if (n < 1 || keel_session_create(argv[1], NULL, &s)) {
    fprintf(stderr, "bench_run: %s\n", keel_last_error());
    return 1;
  }
  size_t nin = keel_session_input_count(s), nout = keel_session_output_count(s);
  const char *names[16];
  float *data[16];
  int64_t shapes[16][KEEL_MAX_RANK];
  int ranks[16];
  keel_value_t *in[16], *out[16];
  if (nin > 16 || nout > 16) return 1;
  for (size_t i = 0; i < nin; i++) {
    keel_io_info io;
    keel_session_input(s, i, &io);
    names[i] = io.name;
    ranks[i] = io.rank;
    int64_t numel = 1;
    for (int d = 0; d < io.rank; d++) numel *= shapes[i][d] = io.dims[d] < 0 ? 1 : io.dims[d];
    data[i] = calloc((size_t)numel + 1, sizeof(float));
  }
  double *t = calloc((size_t)n, sizeof *t);
  for (long k = -n / 10; k < n; k++) { /* the first tenth warms up */
    double t0 = now_ns();
    for (size_t i = 0; i < nin; i++)
      keel_tensor_wrap(s, KEEL_FLOAT, ranks[i], shapes[i], data[i], NULL, NULL, &in[i]);
    if (keel_run(s, names, in, nin, out)) {
      fprintf(stderr, "bench_run: %s\n", keel_last_error());
      return 1;
    }
    for (size_t i = 0; i < nout; i++) keel_value_release(out[i]);
    for (size_t i = 0; i < nin; i++) keel_value_release(in[i]);
    if (k >= 0) t[k] = now_ns() - t0;
  }
  qsort(t, (size_t)n, sizeof *t, by_value);
  printf("%.0f\n", t[n / 2]);
  free(t);
  for (size_t i = 0; i < nin; i++) free(data[i]);
  keel_session_destroy(s);
  return 0;
}

/* hello.c: a program built against an installed keel (pkg-config or
 * find_package): load the model named on the command line, feed ones to
 * every tensor input (unknown dimensions set to 1), run, print each output's
 * shape and first value, and check that keel holds no bytes at the end. */
#include <stdio.h>
#include <stdlib.h>

#include <keel.h>
#include <keel_stats.h>

static int fail(const char *what) {
  fprintf(stderr, "hello: %s: %s\n", what, keel_last_error());
  return 1;
}

/* A tensor of ones shaped like input i. */
static keel_status make_input(keel_session_t *s, const keel_io_info *io, keel_value_t **out) {
  int64_t shape[KEEL_MAX_RANK];
  int64_t n = 1;
  int rank = io->rank < 0 ? 0 : io->rank;
  for (int d = 0; d < rank; d++) n *= shape[d] = io->dims[d] < 0 ? 1 : io->dims[d];
  size_t es = keel_dtype_size(io->dtype);
  unsigned char *buf = calloc((size_t)n + 1, es);
  if (!buf) return KEEL_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < n; i++) {
    if (io->dtype == KEEL_FLOAT) ((float *)buf)[i] = 1.0f;
    else if (io->dtype == KEEL_INT64) ((int64_t *)buf)[i] = 1;
  }
  keel_status st = keel_tensor_create(s, io->dtype, rank, shape, buf, out);
  free(buf);
  return st;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: hello MODEL.onnx\n");
    return 2;
  }
  printf("keel %d.%d.%d\n", KEEL_VERSION_MAJOR, KEEL_VERSION_MINOR, KEEL_VERSION_PATCH);
  keel_session_t *s;
  if (keel_session_create(argv[1], NULL, &s)) return fail("load");
  size_t nin = keel_session_input_count(s), nout = keel_session_output_count(s);
  const char **names = calloc(nin + 1, sizeof *names);
  keel_value_t **in = calloc(nin + 1, sizeof *in), **out = calloc(nout + 1, sizeof *out);
  int rc = 0;
  for (size_t i = 0; i < nin && !rc; i++) {
    keel_io_info io;
    if (keel_session_input(s, i, &io) || make_input(s, &io, &in[i])) rc = fail("input");
    names[i] = io.name;
  }
  if (!rc && keel_run(s, names, in, nin, out)) rc = fail("run");
  for (size_t i = 0; i < nout && !rc; i++) {
    keel_io_info io;
    keel_session_output(s, i, &io);
    printf("output %s: rank %d, %lld elements, first %g\n", io.name, keel_value_rank(out[i]),
           (long long)keel_value_numel(out[i]), keel_value_at(out[i], 0));
  }
  for (size_t i = 0; i < nout; i++) keel_value_release(out[i]);
  for (size_t i = 0; i < nin; i++) keel_value_release(in[i]);
  free(names), free(in), free(out);
  keel_session_destroy(s);
  if (keel_process_bytes()) {
    fprintf(stderr, "hello: keel still holds %llu bytes\n", (unsigned long long)keel_process_bytes());
    rc = 1;
  }
  return rc;
}

/* fuzz_run.c: a libFuzzer target that loads a model and runs it on inputs
 * made from its declared types (unknown dimensions = 2, at most 4096
 * elements each, values from the input bytes), under a 256 MB cap and a
 * deadline (KEEL_FUZZ_DEADLINE_MS, default 1000): a model that legitimately
 * loops for hours (a nested Loop whose trip counts come from the input
 * bytes) ends as a clean KEEL_ERR_TIMEOUT instead of a fuzzer hang. Kernels
 * must answer every attribute and shape with a result or an error, never a
 * crash, a sanitizer report or a leak.
 *
 * fuzz/replay.c gives the target a main() (no libFuzzer): ctest replays
 * inputs through it, e.g. tests/data/endless_loop.onnx, which must end by
 * the deadline.
 *
 *   make -C build-fuzz fuzz_run && ./build-fuzz/fuzz_run -max_total_time=600 CORPUS_DIR
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keel.h"
#include "keel_stats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An input from its declared type, or NULL when it cannot be made. */
static keel_value_t *make_input(keel_session_t *s, const keel_io_info *io, const uint8_t *data,
                                size_t size) {
  if (io->kind != KEEL_KIND_TENSOR || io->optional || io->dtype == KEEL_STRING || io->rank < 0 ||
      !keel_dtype_size(io->dtype) || io->rank > 6)
    return NULL;
  int64_t shape[8], n = 1;
  for (int d = 0; d < io->rank; d++) {
    shape[d] = io->dims[d] >= 0 && io->dims[d] <= 64 ? io->dims[d] : 2;
    n *= shape[d];
  }
  if (n > 4096) return NULL;
  keel_value_t *v = NULL;
  if (keel_tensor_create(s, io->dtype, io->rank, shape, NULL, &v)) return NULL;
  uint8_t *p = (uint8_t *)keel_value_data(v);
  size_t bytes = (size_t)n * keel_dtype_size(io->dtype);
  for (size_t i = 0; p && i < bytes; i++) p[i] = size ? data[i % size] : 0;
  if (io->dtype == KEEL_BOOL)
    for (size_t i = 0; p && i < bytes; i++) p[i] &= 1;
  return v;
}

static uint64_t deadline_ms(void) {
  static uint64_t ms;
  if (!ms) {
    const char *e = getenv("KEEL_FUZZ_DEADLINE_MS");
    ms = e && atoll(e) > 0 ? (uint64_t)atoll(e) : 1000;
  }
  return ms;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  keel_options o = {.size = sizeof o, .mem_limit = 256u << 20};
  keel_run_opts ro = {.size = sizeof ro, .deadline_ms = deadline_ms()};
  keel_session_t *s = NULL;
  if (keel_session_create_from_memory(data, size, NULL, &o, &s) == KEEL_OK) {
    size_t nin = keel_session_input_count(s), nout = keel_session_output_count(s), k = 0;
    const char **names = calloc(nin + 1, sizeof *names);
    keel_value_t **in = calloc(nin + 1, sizeof *in), **out = calloc(nout + 1, sizeof *out);
    for (size_t i = 0; i < nin; i++) {
      keel_io_info io;
      keel_session_input(s, i, &io);
      if (io.has_default) continue;
      if ((in[k] = make_input(s, &io, data, size))) names[k++] = io.name;
    }
    if (keel_run_ex(s, names, in, k, out, &ro) == KEEL_OK)
      for (size_t i = 0; i < nout; i++) keel_value_release(out[i]);
    else if (!keel_last_error()[0])
      abort(); /* every error says what went wrong */
    for (size_t i = 0; i < k; i++) keel_value_release(in[i]);
    free(names), free(in), free(out);
  }
  keel_session_destroy(s);
  if (keel_process_bytes() != 0) abort();
  return 0;
}

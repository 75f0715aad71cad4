/* fuzz_load.c: a libFuzzer target over model loading: protobuf decoding,
 * the IR translation, name resolution, planning and kernel binding. Any
 * input must give a session or an error with a message, never a crash, a
 * sanitizer report or a leak (keel's own byte count is checked too).
 *
 *   cmake -B build-fuzz -DCMAKE_C_COMPILER=clang -DKEEL_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
 *   make -C build-fuzz fuzz_load
 *   ./build-fuzz/fuzz_load -max_total_time=60 fuzz/corpus  (seed: any .onnx files)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "keel.h"
#include "keel_stats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(data, size, NULL, NULL, &s);
  if (st == KEEL_OK) {
    char *text = NULL;
    if (keel_session_describe(s, 0, &text) == KEEL_OK) keel_free(text);
  } else if (!keel_last_error()[0]) {
    abort(); /* every error says what went wrong */
  }
  keel_session_destroy(s);
  if (keel_process_bytes() != 0) abort(); /* nothing may stay behind */
  return 0;
}

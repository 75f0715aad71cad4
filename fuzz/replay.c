/* replay.c: a main() for a libFuzzer target, without libFuzzer: runs the
 * target once on each file named on the command line, and prints how long
 * each took. ctest uses it to replay inputs that once hung or crashed.
 *
 *   fuzz_run_replay FILE...
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) {
      fprintf(stderr, "replay: cannot open %s\n", argv[i]);
      return 2;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
    fclose(f);
    double t0 = now_s();
    LLVMFuzzerTestOneInput(buf, got);
    printf("%s: %.3f s\n", argv[i], now_s() - t0);
    free(buf);
  }
  return 0;
}

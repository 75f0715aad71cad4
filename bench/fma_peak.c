/* fma_peak.c: the machine's float32 FMA peak in GFLOP/s, measured: a loop
 * of independent fused multiply-adds (enough accumulators to cover the FMA
 * latency on every port) with AVX2+FMA and with AVX-512F, on 1 thread and on
 * N threads at once. Each ISA is compiled with a target attribute and run
 * only where __builtin_cpu_supports says the CPU has it, so the binary runs
 * on AVX2-only (or older) machines. Prints the CPU model and its SIMD flags.
 *
 *   build/fma_peak [--threads N] [--ms MS] [--json]
 *
 * The figure is what `keel bench --flops --peak GFLOPS` compares a kernel's
 * achieved GFLOP/s with (2 FLOPs per multiply-add). Not run by ctest.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 4096 /* FMAs per accumulator per timed block */

typedef double (*kernel_fn)(long blocks, float seed); /* returns a sink value */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 12 accumulators x 8 lanes: covers 2 ports x 4-5 cycles of latency. */
__attribute__((target("avx2,fma"))) static double kernel_avx2(long blocks, float seed) {
  __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  /* distinct starting values: equal ones would let the compiler merge them */
#define S(i) _mm256_set1_ps(seed + 0.01f * i)
  __m256 c0 = S(0), c1 = S(1), c2 = S(2), c3 = S(3), c4 = S(4), c5 = S(5);
  __m256 c6 = S(6), c7 = S(7), c8 = S(8), c9 = S(9), c10 = S(10), c11 = S(11);
#undef S
  for (long k = 0; k < blocks; k++)
    for (int r = 0; r < ROUNDS; r++) {
      c0 = _mm256_fmadd_ps(c0, a, b), c1 = _mm256_fmadd_ps(c1, a, b);
      c2 = _mm256_fmadd_ps(c2, a, b), c3 = _mm256_fmadd_ps(c3, a, b);
      c4 = _mm256_fmadd_ps(c4, a, b), c5 = _mm256_fmadd_ps(c5, a, b);
      c6 = _mm256_fmadd_ps(c6, a, b), c7 = _mm256_fmadd_ps(c7, a, b);
      c8 = _mm256_fmadd_ps(c8, a, b), c9 = _mm256_fmadd_ps(c9, a, b);
      c10 = _mm256_fmadd_ps(c10, a, b), c11 = _mm256_fmadd_ps(c11, a, b);
    }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                           _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}

/* 16 accumulators x 16 lanes. */
__attribute__((target("avx512f"))) static double kernel_avx512(long blocks, float seed) {
  __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
#define S(i) _mm512_set1_ps(seed + 0.01f * i)
  __m512 c0 = S(0), c1 = S(1), c2 = S(2), c3 = S(3), c4 = S(4), c5 = S(5), c6 = S(6);
  __m512 c7 = S(7), c8 = S(8), c9 = S(9), c10 = S(10), c11 = S(11), c12 = S(12);
  __m512 c13 = S(13), c14 = S(14), c15 = S(15);
#undef S
  for (long k = 0; k < blocks; k++)
    for (int r = 0; r < ROUNDS; r++) {
      c0 = _mm512_fmadd_ps(c0, a, b), c1 = _mm512_fmadd_ps(c1, a, b);
      c2 = _mm512_fmadd_ps(c2, a, b), c3 = _mm512_fmadd_ps(c3, a, b);
      c4 = _mm512_fmadd_ps(c4, a, b), c5 = _mm512_fmadd_ps(c5, a, b);
      c6 = _mm512_fmadd_ps(c6, a, b), c7 = _mm512_fmadd_ps(c7, a, b);
      c8 = _mm512_fmadd_ps(c8, a, b), c9 = _mm512_fmadd_ps(c9, a, b);
      c10 = _mm512_fmadd_ps(c10, a, b), c11 = _mm512_fmadd_ps(c11, a, b);
      c12 = _mm512_fmadd_ps(c12, a, b), c13 = _mm512_fmadd_ps(c13, a, b);
      c14 = _mm512_fmadd_ps(c14, a, b), c15 = _mm512_fmadd_ps(c15, a, b);
    }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                           _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c12, c13), _mm512_add_ps(c14, c15)));
  return (double)_mm512_reduce_add_ps(s);
}

typedef struct isa {
  const char *name;
  kernel_fn fn;
  int lanes, accs;
  int supported;
} isa;

typedef struct job {
  const isa *k;
  long blocks;
  double secs, cpu_secs, sink;
  pthread_barrier_t *start;
} job;

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
  job *j = arg;
  pthread_barrier_wait(j->start);
  double t0 = now(), c0 = thread_cpu();
  j->sink = j->k->fn(j->blocks, 1.0f);
  j->secs = now() - t0;
  j->cpu_secs = thread_cpu() - c0;
  return NULL;
}

typedef struct rate {
  double wall, cpu; /* GFLOP/s over wall time; per thread-CPU second x threads */
} rate;

/* GFLOP/s of `threads` threads running `blocks` blocks each at once: total
 * FLOPs over the slowest thread's wall time, and over its CPU time (what
 * the cores deliver while the thread is on them: steadier on a shared
 * machine). */
static rate measure(const isa *k, int threads, long blocks) {
  pthread_t tid[256];
  job jobs[256];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)threads);
  for (int t = 0; t < threads; t++) {
    jobs[t] = (job){.k = k, .blocks = blocks, .start = &start};
    if (t) pthread_create(&tid[t], NULL, worker, &jobs[t]);
  }
  worker(&jobs[0]);
  double worst = jobs[0].secs, worst_cpu = jobs[0].cpu_secs, sink = jobs[0].sink;
  for (int t = 1; t < threads; t++) {
    pthread_join(tid[t], NULL);
    if (jobs[t].secs > worst) worst = jobs[t].secs;
    if (jobs[t].cpu_secs > worst_cpu) worst_cpu = jobs[t].cpu_secs;
    sink += jobs[t].sink;
  }
  pthread_barrier_destroy(&start);
  if (sink == 12345.678) printf(" "); /* keeps the results alive */
  double flops = 2.0 * k->lanes * k->accs * (double)ROUNDS * (double)blocks * threads;
  return (rate){flops / worst / 1e9, worst_cpu > 0 ? flops / worst_cpu / 1e9 : 0};
}

/* Best of 5 timed repeats, each ~ms milliseconds, after a calibration. */
static rate peak(const isa *k, int threads, double ms) {
  long blocks = 1;
  for (;;) { /* calibrate on one thread */
    double t0 = now();
    k->fn(blocks, 1.0f);
    double dt = now() - t0;
    if (dt > 0.01 || blocks > (1L << 30)) {
      blocks = (long)((double)blocks * (ms / 1e3) / dt) + 1;
      break;
    }
    blocks *= 2;
  }
  rate best = {0, 0};
  for (int rep = 0; rep < 5; rep++) {
    rate g = measure(k, threads, blocks);
    if (g.wall > best.wall) best.wall = g.wall;
    if (g.cpu > best.cpu) best.cpu = g.cpu;
  }
  return best;
}

static void cpu_model(char *buf, size_t cap) {
  snprintf(buf, cap, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *c = strchr(line, ':');
    if (!strncmp(line, "model name", 10) && c) {
      snprintf(buf, cap, "%s", c + 2);
      buf[strcspn(buf, "\n")] = 0;
      break;
    }
  }
  fclose(f);
}

static void cpu_flags(char *buf, size_t cap) {
  static const char *names[] = {"sse4.2", "avx", "avx2", "fma", "avx512f", "avx512dq",
                                "avx512bw", "avx512vl", "avx512vnni", "avx512bf16"};
  __builtin_cpu_init();
  size_t len = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    int has = 0;
#define FLAG(s) else if (!strcmp(names[i], s)) has = __builtin_cpu_supports(s)
    if (0) {}
    FLAG("sse4.2"); FLAG("avx"); FLAG("avx2"); FLAG("fma"); FLAG("avx512f");
    FLAG("avx512dq"); FLAG("avx512bw"); FLAG("avx512vl"); FLAG("avx512vnni");
    FLAG("avx512bf16");
#undef FLAG
    if (has && len + strlen(names[i]) + 2 < cap)
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? " " : "", names[i]);
  }
}

int main(int argc, char **argv) {
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), json = 0;
  double ms = 200;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ms") && i + 1 < argc) ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--json")) json = 1;
    else {
      fprintf(stderr, "usage: fma_peak [--threads N] [--ms MS] [--json]\n");
      return 2;
    }
  }
  if (threads < 1 || threads > 256 || ms <= 0) {
    fprintf(stderr, "fma_peak: --threads must be 1..256, --ms positive\n");
    return 2;
  }
  char model[256], flags[256];
  cpu_model(model, sizeof model);
  cpu_flags(flags, sizeof flags);
  isa isas[] = {{"avx2+fma", kernel_avx2, 8, 12, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")},
                {"avx512f", kernel_avx512, 16, 16, __builtin_cpu_supports("avx512f")}};
  if (!json) printf("cpu      %s\nflags    %s\n", model, flags);
  else printf("{\"cpu\": \"%s\", \"flags\": \"%s\", \"threads\": %d, \"peaks\": [", model, flags, threads);
  int first = 1;
  rate best1 = {0, 0}, bestn = {0, 0};
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
    if (!isas[i].supported) {
      if (!json) printf("%-9s not supported by this CPU\n", isas[i].name);
      continue;
    }
    rate one = peak(&isas[i], 1, ms), many = threads > 1 ? peak(&isas[i], threads, ms) : one;
    if (one.wall > best1.wall) best1.wall = one.wall;
    if (one.cpu > best1.cpu) best1.cpu = one.cpu;
    if (many.wall > bestn.wall) bestn.wall = many.wall;
    if (many.cpu > bestn.cpu) bestn.cpu = many.cpu;
    if (json)
      printf("%s{\"isa\": \"%s\", \"gflops_1\": %.1f, \"gflops_n\": %.1f, \"gflops_1_cpu\": %.1f, "
             "\"gflops_n_cpu\": %.1f}", first ? "" : ", ", isas[i].name, one.wall, many.wall, one.cpu, many.cpu);
    else
      printf("%-9s %8.1f GFLOP/s float32 on 1 thread, %8.1f on %d thread(s); on CPU time %.1f and %.1f\n",
             isas[i].name, one.wall, many.wall, threads, one.cpu, many.cpu);
    first = 0;
  }
  if (json)
    printf("], \"peak_1\": %.1f, \"peak_n\": %.1f, \"peak_1_cpu\": %.1f, \"peak_n_cpu\": %.1f}\n",
           best1.wall, bestn.wall, best1.cpu, bestn.cpu);
  else
    printf("peak     %.1f GFLOP/s on 1 thread, %.1f on %d (best ISA, wall time; keel bench --peak)\n"
           "         %.1f and %.1f on CPU time (what the cores give while the threads run)\n",
           best1.wall, bestn.wall, threads, best1.cpu, bestn.cpu);
  return 0;
}

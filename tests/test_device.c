/* test_device.c: nodes run on a device (issue 25), on any machine: the
 * emulated device ("emu", src/device/emu.c) is keel's device layer with
 * host memory behind pointers the host cannot dereference and the GPU
 * kernels' C reference. What it proves holds for every backend, since the
 * session, the executor, the allocator and the copies are the same code:
 *   - a placed graph runs on the device and gives the CPU session's
 *     outputs (the same arithmetic: bit for bit but for exp-based ops,
 *     which use the C library's expf there and keel's vector exp here);
 *   - device memory: the constants GPU nodes read are on the device once;
 *     allocated device bytes are identical from run 2 (a graph, and a
 *     Loop whose body runs on the device); zero device bytes after
 *     destroy; keel_stats_get_device says which device;
 *   - a device pointer read on the host faults (in a child process);
 *   - a cap on device memory: a clean KEEL_ERR_OUT_OF_MEMORY naming the
 *     node and the device; the session runs again once the cap is raised;
 *   - an input the device's kernel cannot take (rank 9): a clean error
 *     naming the node, nothing left on the device, the session usable;
 *   - a planted leak on the device is named in graph terms, "on emu:0";
 *   - four callers running one session on the device at once each get
 *     their own results (and, under TSan, no race);
 *   - after a burst of wide inputs the device's reserved bytes come back to
 *     within 1.2x of a calm session's in 10 runs;
 *   - "emu:1" does not exist; a CPU session has no device statistics.
 * KEEL_TEST_DEVICE=cuda:0 runs the same checks on a GPU (tools/
 * gpu_check.sh), but the fault (device pointers there are not the
 * host's to fault on) and the exact bits of exp-based outputs.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "devcase.h"
#include "device/device.h"
#include "keel_stats.h"
#include "mb.h"
#include "mem/alloc.h"

/* x [2, 8] -> Add(x, b) -> Relu -> MatMul(w) -> Softmax(last) -> Sigmoid
 * -> y; Mul(x, x) -> Sub(., b) -> z; Shape(x) -> n (int64, CPU). The GPU
 * nodes read a constant (b) twice and an input (x) twice. */
static mb_graph *graph(void) {
  static float b[8], w[64];
  for (int i = 0; i < 8; i++) b[i] = 0.25f * (float)i - 1.0f;
  for (int i = 0; i < 64; i++) w[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){2, 8});
  mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){8}, b);
  mb_init(g, "w", KEEL_FLOAT, 2, (int64_t[]){8, 8}, w);
  mb_name(mb_add(g, "Add", "x,b", "a"), "add");
  mb_name(mb_add(g, "Relu", "a", "r"), "relu");
  mb_name(mb_add(g, "MatMul", "r,w", "m"), "matmul");
  mb_name(mb_add(g, "Softmax", "m", "p"), "softmax");
  mb_name(mb_add(g, "Sigmoid", "p", "y"), "sigmoid");
  mb_name(mb_add(g, "Mul", "x,x", "sq"), "square");
  mb_name(mb_add(g, "Sub", "sq,b", "z"), "sub");
  mb_name(mb_add(g, "Shape", "x", "n"), "shape");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_output(g, "z", KEEL_FLOAT, -1, NULL);
  mb_output(g, "n", KEEL_INT64, -1, NULL);
  return g;
}

/* The device under test: "emu:0", or KEEL_TEST_DEVICE. */
static const char *g_dev = "emu:0";

static keel_stats dev_stats(keel_session_t *s) {
  keel_stats st = {.size = sizeof st};
  const char *name = NULL;
  CHECK_OK(keel_stats_get_device(s, &st, &name));
  CHECK(name && !strcmp(name, g_dev));
  return st;
}

static bool has(const char *text, const char *a, const char *b) {
  char want[256];
  snprintf(want, sizeof want, "%s%s", a, b);
  return text && strstr(text, want) != NULL;
}

static void check_graph(void) {
  keel_options o = {.size = sizeof o, .device = g_dev};
  keel_session_t *s = mb_session_opts(graph(), 13, &o);
  keel_session_t *plain = mb_session(graph(), 13);
  CHECK(s && plain);
  if (!s || !plain) {
    keel_session_destroy(s), keel_session_destroy(plain);
    return;
  }
  char *t = NULL;
  CHECK_OK(keel_session_describe(s, KEEL_DESCRIBE_NODES, &t));
  CHECK(has(t, "placement  ", g_dev) && strstr(t, ": 7 of 8 nodes on the GPU") && strstr(t, "gpu 'relu' (Relu)  [gpu]") &&
        strstr(t, "gpu 'matmul' (FusedMatMul)  [gpu]"));
  keel_free(t);
  /* b (32 bytes, once for both readers) and w (256 bytes, the product's
   * B) are on the device before any run, and so is the BLAS's workspace
   * (the product runs on the device): a block of the device heap, named */
  keel_stats d0 = dev_stats(s);
  uint64_t ws = strncmp(g_dev, "emu", 3) ? 0 : 64 << 10; /* cuBLAS's: 32 MiB, or none if too old */
  CHECK(d0.allocated >= 288 + ws && (ws == 0 || d0.allocated <= 512 + ws));
  {
    char *rep = NULL;
    CHECK_OK(keel_mem_live_report(s, NULL, 0, &rep, NULL));
    CHECK(has(rep, "BLAS workspace on ", g_dev) || !ws);
    keel_free(rep);
  }
  float x[16];
  uint64_t dev_after[20] = {0}, host_after[20] = {0};
  for (int run = 0; run < 20; run++) {
    for (int i = 0; i < 16; i++) x[i] = (float)(((i + run) * 5) % 9) / 3.0f - 1.2f;
    keel_session_t *ss[2] = {s, plain};
    keel_value_t *outs[2][3] = {{0}};
    for (int k = 0; k < 2; k++) {
      keel_value_t *in = mb_tensor(ss[k], KEEL_FLOAT, 2, (int64_t[]){2, 8}, x);
      CHECK_OK(keel_run(ss[k], (const char *[]){"x"}, &in, 1, outs[k]));
      keel_value_release(in);
    }
    for (int i = 0; i < 3; i++) {
      CHECK(outs[0][i] && outs[1][i]);
      if (!outs[0][i] || !outs[1][i]) continue;
      int64_t n = keel_value_numel(outs[0][i]);
      CHECK(n == keel_value_numel(outs[1][i]) && keel_value_dtype(outs[0][i]) == keel_value_dtype(outs[1][i]));
      if (i == 0) { /* through Softmax and Sigmoid: expf against the vector exp */
        const float *a = keel_value_data(outs[0][i]), *b = keel_value_data(outs[1][i]);
        double worst = 0;
        for (int64_t j = 0; j < n; j++) worst = fmax(worst, fabs((double)a[j] - (double)b[j]));
        CHECK(worst < 1e-5);
      } else {
        size_t bytes = (size_t)n * keel_dtype_size(keel_value_dtype(outs[0][i]));
        CHECK(!memcmp(keel_value_data(outs[0][i]), keel_value_data(outs[1][i]), bytes));
      }
      keel_value_release(outs[0][i]), keel_value_release(outs[1][i]);
    }
    keel_stats hs = {.size = sizeof hs};
    CHECK_OK(keel_stats_get(s, &hs));
    dev_after[run] = dev_stats(s).allocated, host_after[run] = hs.allocated;
  }
  for (int run = 1; run < 20; run++) CHECK(dev_after[run] == dev_after[0] && host_after[run] == host_after[0]);
  CHECK(dev_after[0] == d0.allocated); /* runs leave only the constants on the device */
  /* the profiler: what each node made on the device, in the memory report's
   * own column, and a device counter in the trace */
  CHECK_OK(keel_profile_start(s, KEEL_PROFILE_MEMORY | KEEL_PROFILE_TRACE));
  {
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 8}, x), *outs[3] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, outs));
    keel_value_release(in);
    for (int i = 0; i < 3; i++) keel_value_release(outs[i]);
  }
  keel_profile_stop(s);
  char *rep = NULL, *trace = NULL;
  CHECK_OK(keel_profile_mem_report(s, 20, &rep));
  CHECK_OK(keel_profile_trace_json(s, &trace));
  /* relu's output (2 x 8 floats) is on the device: 64 bytes there, none on
   * the host */
  const char *row = rep ? strstr(rep, "relu (main)") : NULL;
  CHECK(has(rep, " on ", g_dev) && row && strstr(row, "Relu                  0 B") &&
        strstr(row, "     64 B\n"));
  if (!row || !strstr(row, "     64 B\n")) fprintf(stderr, "%s", rep ? rep : "");
  CHECK(has(trace, "\"name\": \"memory ", g_dev));
  keel_free(rep), keel_free(trace);
  keel_stats ds = dev_stats(s);
  CHECK(ds.allocated_peak > d0.allocated && ds.reserved > 0);
  keel_session_destroy(s);
  keel_session_destroy(plain);
  CHECK(keel_process_device_bytes() == 0);
}

/* A Loop whose body runs on the device: memory steady from run 2 on both
 * heaps over 200 runs. */
static mb_graph *loop_graph(void) {
  static float two[1] = {2.0f};
  mb_graph *body = mb_graph_new("body");
  mb_input(body, "i", KEEL_INT64, 0, NULL);
  mb_input(body, "c", KEEL_BOOL, 0, NULL);
  mb_input(body, "v", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_init(body, "two", KEEL_FLOAT, 1, (int64_t[]){1}, two);
  mb_name(mb_add(body, "Mul", "v,two", "v2"), "double");
  mb_name(mb_add(body, "Tanh", "v2", "vo"), "tanh");
  mb_add(body, "Identity", "c", "co");
  mb_output(body, "co", KEEL_BOOL, 0, NULL);
  mb_output(body, "vo", KEEL_FLOAT, 1, (int64_t[]){4});
  static int64_t trips[1] = {7};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "v0", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_init(g, "trips", KEEL_INT64, 0, NULL, trips);
  mb_node *l = mb_add(g, "Loop", "trips,,v0", "vf");
  mb_name(l, "loop");
  mb_attr_g(l, "body", body);
  mb_output(g, "vf", KEEL_FLOAT, -1, NULL);
  return g;
}

static void run_loop(keel_session_t *s, float *out) {
  float v0[4] = {0.1f, -0.2f, 0.3f, 0.05f};
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){4}, v0), *r = NULL;
  CHECK_OK(keel_run(s, (const char *[]){"v0"}, &in, 1, &r));
  keel_value_release(in);
  if (r && out) memcpy(out, keel_value_data(r), 4 * sizeof(float));
  keel_value_release(r);
}

static void check_loop(void) {
  keel_options o = {.size = sizeof o, .device = g_dev};
  keel_session_t *s = mb_session_opts(loop_graph(), 13, &o);
  keel_session_t *plain = mb_session(loop_graph(), 13);
  CHECK(s && plain);
  if (!s || !plain) {
    keel_session_destroy(s), keel_session_destroy(plain);
    return;
  }
  float a[4] = {0}, b[4] = {1};
  run_loop(s, a);
  run_loop(plain, b);
  for (int i = 0; i < 4; i++) CHECK(fabsf(a[i] - b[i]) < 1e-5f);
  uint64_t first_dev = 0, first_host = 0;
  int unsteady = 0;
  for (int run = 1; run <= 200; run++) {
    run_loop(s, NULL);
    keel_stats hs = {.size = sizeof hs};
    CHECK_OK(keel_stats_get(s, &hs));
    uint64_t d = dev_stats(s).allocated;
    if (run == 1) first_dev = d, first_host = hs.allocated;
    else unsteady += d != first_dev || hs.allocated != first_host;
  }
  CHECK(unsteady == 0);
  /* a planted leak inside the body, on the device, is named */
  CHECK_OK(keel_debug_plant_leak(s, "v2"));
  uint64_t mark = keel_mem_mark(s);
  run_loop(s, NULL);
  keel_live_filter f = {.size = sizeof f, .since = mark};
  char *rep = NULL;
  uint64_t bytes = 0;
  CHECK_OK(keel_mem_live_report(s, &f, 0, &rep, &bytes));
  CHECK(has(rep, "node 'double' (Mul) value 'v2' iteration 6 on ", g_dev));
  CHECK(bytes >= 7 * 16);
  if (!has(rep, " on ", g_dev)) fprintf(stderr, "%s", rep ? rep : "(no report)\n");
  keel_free(rep);
  keel_session_destroy(s);
  keel_session_destroy(plain);
  CHECK(keel_process_device_bytes() == 0);
}

/* Bad input at run time on the device: x declared [2, 8] (shapes are hints)
 * fed as a rank-9 tensor reaches the element-wise kernel, which takes rank
 * 8 at most: a clean error naming the node and the device, nothing left on
 * the device, and the session runs the declared shape next. */
static void check_bad_input(void) {
  static float b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){2, 8});
  mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){8}, b);
  mb_name(mb_add(g, "Add", "x,b", "y"), "add");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  keel_options o = {.size = sizeof o, .device = g_dev};
  keel_session_t *s = mb_session_opts(g, 13, &o);
  CHECK(s != NULL);
  if (!s) return;
  uint64_t consts = dev_stats(s).allocated;
  float x[16] = {0};
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 2, 8}, x), *y = NULL;
  keel_status st = keel_run(s, (const char *[]){"x"}, &in, 1, &y);
  CHECK(st == KEEL_ERR_UNSUPPORTED && !y);
  CHECK(strstr(keel_last_error(), "'add'") && strstr(keel_last_error(), "rank 9"));
  if (st != KEEL_ERR_UNSUPPORTED) fprintf(stderr, "bad input: %s\n", keel_last_error());
  keel_value_release(in);
  CHECK(dev_stats(s).allocated == consts);
  in = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 8}, x);
  CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, &y));
  CHECK(y && ((const float *)keel_value_data(y))[15] == 8.0f);
  keel_value_release(y), keel_value_release(in);
  keel_session_destroy(s);
  CHECK(keel_process_device_bytes() == 0);
}

/* x [512, 512] -> Relu -> Exp -> y: 1 MB per value on the device. */
static void check_cap(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){512, 512});
  mb_name(mb_add(g, "Relu", "x", "r"), "relu");
  mb_name(mb_add(g, "Exp", "r", "y"), "exp");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  keel_options o = {.size = sizeof o, .device = g_dev};
  keel_session_t *s = mb_session_opts(g, 13, &o);
  CHECK(s != NULL);
  if (!s) return;
  float *x = calloc(512 * 512, sizeof(float));
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){512, 512}, x), *y = NULL;
  /* the copy of x (1 MB) fits under 1.5 MB, relu's output does not */
  keel_mem_set_limit(s, 3u << 19);
  keel_status st = keel_run(s, (const char *[]){"x"}, &in, 1, &y);
  CHECK(st == KEEL_ERR_OUT_OF_MEMORY && !y);
  CHECK(strstr(keel_last_error(), "'relu'") && has(keel_last_error(), "on ", g_dev));
  if (st != KEEL_ERR_OUT_OF_MEMORY) fprintf(stderr, "%s\n", keel_last_error());
  CHECK(dev_stats(s).allocated == 0);
  keel_mem_set_limit(s, 0);
  CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, &y));
  CHECK(y && ((const float *)keel_value_data(y))[12345] == 1.0f); /* exp(relu(0)) */
  keel_value_release(y);
  keel_value_release(in);
  free(x);
  CHECK(dev_stats(s).allocated == 0);
  keel_session_destroy(s);
  CHECK(keel_process_device_bytes() == 0);
}

/* x [1, W] -> Relu -> Exp -> Add(., x) -> y, all on the device. */
static mb_graph *wide_graph(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){1, -1});
  mb_add(g, "Relu", "x", "r");
  mb_add(g, "Exp", "r", "e");
  mb_add(g, "Add", "e,x", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static uint64_t run_wide(keel_session_t *s, int64_t w, float *x) {
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){1, w}, x), *y = NULL;
  CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, &y));
  CHECK(y && keel_value_numel(y) == w);
  keel_value_release(y), keel_value_release(in);
  return dev_stats(s).reserved;
}

/* The burst rule on the device (the host's: test_burst.c): 20 runs at
 * W = 2M (8 MB a value) then runs at W = 1000: within 10 of them the
 * device's reserved bytes are at most 1.2x what a session that only ran
 * W = 1000 keeps (the automatic trim, per device heap). */
static void check_burst(void) {
  enum { BIG = 2 << 20, SMALL = 1000 };
  float *x = calloc(BIG, sizeof(float));
  keel_options o = {.size = sizeof o, .device = g_dev};
  keel_session_t *calm = mb_session_opts(wide_graph(), 13, &o), *s = mb_session_opts(wide_graph(), 13, &o);
  CHECK(calm && s && x);
  if (!calm || !s || !x) {
    keel_session_destroy(calm), keel_session_destroy(s), free(x);
    return;
  }
  uint64_t steady = 0;
  for (int i = 0; i < 10; i++) steady = run_wide(calm, SMALL, x);
  uint64_t peak = 0;
  for (int i = 0; i < 20; i++) peak = run_wide(s, BIG, x);
  CHECK(peak >= 3ull * BIG * sizeof(float)); /* the burst's values were on the device */
  int back = -1;
  for (int i = 1; i <= 10 && back < 0; i++)
    if ((double)run_wide(s, SMALL, x) <= 1.2 * (double)steady) back = i;
  fprintf(stderr, "device burst: steady %llu B, burst %llu B, back within 1.2x after %d small run(s)\n",
          (unsigned long long)steady, (unsigned long long)peak, back);
  CHECK(back >= 1);
  keel_session_destroy(calm), keel_session_destroy(s);
  free(x);
  CHECK(keel_process_device_bytes() == 0);
}

/* Four callers run one session on the device at once (the graph of
 * check_graph: products, Softmax, element-wise ops, copies both ways), each
 * with inputs of its own: every output must be its own input's, computed
 * alone first; the device holds only the constants afterwards. Under
 * ThreadSanitizer (ctest label "thread"), the device heap, the copies and
 * the device constants shared by the runs must show no race. */
enum { CC_THREADS = 4, CC_RUNS = 25 };
typedef struct cc_job {
  keel_session_t *s;
  float x[16];
  float want[3][16];
  int bad;
} cc_job;

static void cc_run(keel_session_t *s, const float *x, float out[3][16], int *bad) {
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 8}, x), *outs[3] = {0};
  if (keel_run(s, (const char *[]){"x"}, &in, 1, outs)) (*bad)++;
  for (int i = 0; i < 3; i++) {
    if (outs[i] && i < 2) memcpy(out[i], keel_value_data(outs[i]), 16 * sizeof(float));
    keel_value_release(outs[i]);
  }
  keel_value_release(in);
}

static void *cc_worker(void *arg) {
  cc_job *j = arg;
  for (int r = 0; r < CC_RUNS; r++) {
    float got[3][16] = {{0}};
    cc_run(j->s, j->x, got, &j->bad);
    j->bad += memcmp(got, j->want, 2 * 16 * sizeof(float)) != 0;
  }
  return NULL;
}

static void check_concurrent(void) {
  keel_options o = {.size = sizeof o, .device = g_dev};
  keel_session_t *s = mb_session_opts(graph(), 13, &o);
  CHECK(s != NULL);
  if (!s) return;
  uint64_t consts = dev_stats(s).allocated;
  static cc_job jobs[CC_THREADS];
  for (int t = 0; t < CC_THREADS; t++) {
    jobs[t] = (cc_job){.s = s};
    for (int i = 0; i < 16; i++) jobs[t].x[i] = (float)((i * 7 + t * 3) % 11) / 4.0f - 1.3f;
    cc_run(s, jobs[t].x, jobs[t].want, &jobs[t].bad);
  }
  pthread_t th[CC_THREADS];
  for (int t = 0; t < CC_THREADS; t++) pthread_create(&th[t], NULL, cc_worker, &jobs[t]);
  int bad = 0;
  for (int t = 0; t < CC_THREADS; t++) pthread_join(th[t], NULL), bad += jobs[t].bad;
  CHECK(bad == 0);
  CHECK(dev_stats(s).allocated == consts);
  keel_session_destroy(s);
  CHECK(keel_process_device_bytes() == 0);
}

/* The emulated device's memory is not the host's to read. */
static void check_fault(void) {
  keel_device *d = NULL;
  CHECK_OK(keel_device_open(KEEL_DEVICE_EMU, 0, &d));
  if (!d) return;
  keel_heap *h = keel_heap_create_on(0, keel_device_provider(d));
  keel_block *b = keel_heap_alloc(h, 4096, (keel_owner){0, 0});
  CHECK(b != NULL);
  float one = 1.0f, back = 0.0f;
  CHECK_OK(keel_device_to_device(d, b->ptr, &one, sizeof one));
  CHECK_OK(keel_device_to_host(d, &back, b->ptr, sizeof back));
  CHECK(back == 1.0f);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    volatile float v = *(volatile float *)b->ptr; /* must fault */
    (void)v;
    _exit(0);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
  keel_heap_free(h, b);
  keel_heap_release(h);
  keel_device_close(d);
  CHECK(keel_process_device_bytes() == 0);
}

static void check_refusals(void) {
  size_t len;
  uint8_t *bytes = mb_model(graph(), 13, &len);
  keel_session_t *s = NULL;
  keel_options o = {.size = sizeof o, .device = "emu:1"};
  CHECK(keel_session_create_from_memory(bytes, len, NULL, &o, &s) == KEEL_ERR_UNSUPPORTED && !s);
  CHECK(strstr(keel_last_error(), "device emu:1: there is one emulated device"));
  o.device = "cpu";
  CHECK_OK(keel_session_create_from_memory(bytes, len, NULL, &o, &s));
  keel_stats st = {.size = sizeof st};
  CHECK(s && keel_stats_get_device(s, &st, NULL) == KEEL_ERR_INVALID_ARG);
  keel_session_destroy(s);
  free(bytes);
}

int main(void) {
  g_dev = devcase_device();
  fprintf(stderr, "test_device: on %s\n", g_dev);
  check_graph();
  check_loop();
  check_cap();
  check_bad_input();
  check_burst();
  check_concurrent();
  if (!strncmp(g_dev, "emu", 3)) check_fault();
  check_refusals();
  CHECK(keel_process_device_bytes() == 0);
  return check_report();
}

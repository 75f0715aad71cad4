/* cmd_memcheck.c: `keel memcheck`: run N times, watch allocated bytes. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_memcheck(int argc, char **argv) {
  const char *model = NULL, *data = NULL;
  long iters = 10;
  size_t mem_limit = 0;
  bool leak = false;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
    else if (!strcmp(argv[i], "--debug-leak-subgraphs")) leak = true; /* test-only */
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
      char *end;
      iters = strtol(argv[++i], &end, 10);
      if (*end || iters < 1) return cli_usage("memcheck", "--iters needs a positive number");
    } else if (!strcmp(argv[i], "--mem-limit") && i + 1 < argc) {
      if (!cli_parse_size(argv[++i], &mem_limit)) return cli_usage("memcheck", "bad --mem-limit");
    } else if (argv[i][0] == '-') return cli_usage("memcheck", "unknown or incomplete option");
    else if (!model) model = argv[i];
    else return cli_usage("memcheck", "more than one model given");
  }
  if (!model || !cli_is_file(model)) return cli_usage("memcheck", "no model file given");
  keel_options opts = {.size = sizeof opts, .mem_limit = mem_limit};
  keel_session_t *s;
  keel_status st = keel_session_create(model, &opts, &s);
  if (st) {
    fprintf(stderr, "keel: %s: %s\n", keel_status_str(st), keel_last_error());
    return 1;
  }
  keel_debug_leak_subgraph_results(s, leak);
  cli_inputs in = {0};
  if (data) st = cli_load_data_dir(s, data, &in);
  if (!st) st = cli_generate_missing(s, &in, stdout);
  size_t nout = keel_session_output_count(s);
  keel_value_t **outs = calloc(nout + 1, sizeof *outs);
  uint64_t first = 0, grew_at = 0;
  int rc = 0;
  for (long it = 1; it <= iters && !st; it++) {
    st = keel_run(s, in.names, in.values, in.n, outs);
    for (size_t i = 0; i < nout; i++) keel_value_release(outs[i]), outs[i] = NULL;
    if (st) break;
    keel_stats ks = {.size = sizeof ks};
    keel_stats_get(s, &ks);
    char a[32], r[32];
    printf("run %ld: allocated %s, reserved %s\n", it, cli_bytes(ks.allocated, a, sizeof a),
           cli_bytes(ks.reserved, r, sizeof r));
    if (it == 1) first = ks.allocated;
    else if (ks.allocated > first && !grew_at) grew_at = (uint64_t)it;
  }
  if (st) {
    fprintf(stderr, "keel: %s: %s\n", keel_status_str(st), keel_last_error());
    rc = 1;
  } else if (grew_at) {
    printf("verdict: LEAK: allocated memory grew after the first run (first at run %llu)\n",
           (unsigned long long)grew_at);
    rc = 1;
  } else {
    printf("verdict: steady: allocated memory did not grow after the first run\n");
  }
  free(outs);
  cli_inputs_free(&in);
  keel_session_destroy(s);
  return rc;
}

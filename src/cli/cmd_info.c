/* cmd_info.c: `keel info`: the model's description from the library; for
 * a shard folder (keel shard's rank_R.onnx files), per rank: the
 * parameters kept, their bytes, and where the collectives are. */
#include <string.h>

#include "onnx/onnx.h"
#include "cli/cli.h"

typedef struct rank_figures {
  unsigned long long bytes, params, tensors;
  int n_coll;
} rank_figures;

static bool is_collective(const keel_node *n) {
  return !strcmp(n->domain, "com.microsoft") &&
         (!strcmp(n->op_type, "AllReduce") || !strcmp(n->op_type, "AllGather") ||
          !strcmp(n->op_type, "AllToAll"));
}

/* Initializers and folded Constants of every graph; the collectives,
 * listed (text or JSON) as they are found. */
static void rank_scan(const keel_model *m, int json, rank_figures *f) {
  for (int32_t gi = 0; gi < m->n_graphs; gi++) {
    const keel_graph *g = m->graphs[gi];
    for (int32_t i = 0; i < g->ld.n_init; i++) {
      const keel_tensor *t = &m->consts[g->ld.init_consts[i]];
      f->bytes += keel_tensor_nbytes(t);
      f->params += (unsigned long long)keel_tensor_numel(t);
      f->tensors++;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const keel_node *n = &g->nodes[i];
      if (!is_collective(n)) continue;
      const char *in = n->n_in ? n->in_names[0] : "";
      if (json)
        printf("%s{\"op\": \"%s\", \"graph\": \"%s\", \"node\": \"%s\", \"input\": \"%s\"}",
               f->n_coll ? ", " : "", n->op_type, g->path, n->name, in);
      else printf("    %s in %s: '%s' on '%s'\n", n->op_type, g->path, n->name, in);
      f->n_coll++;
    }
  }
}

static int shard_info(const char *dir, int json) {
  if (json) printf("{\"shard_folder\": \"%s\", \"ranks\": [", dir);
  int r = 0;
  for (;; r++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/rank_%d.onnx", dir, r);
    if (!cli_is_file(path)) break;
    keel_model *m;
    if (keel_onnx_load_file(path, &m)) {
      fprintf(stderr, "keel: %s\n", keel_last_error());
      return 1;
    }
    rank_figures f = {0};
    if (json) printf("%s{\"rank\": %d, \"file\": \"rank_%d.onnx\", \"collectives\": [", r ? ", " : "", r, r);
    else printf("rank %d (rank_%d.onnx): collectives\n", r, r);
    rank_scan(m, json, &f);
    if (json)
      printf("], \"parameter_bytes\": %llu, \"parameters\": %llu, \"tensors\": %llu}", f.bytes,
             f.params, f.tensors);
    else
      printf("  %llu parameters in %llu tensors, %llu bytes (%.2f MB); %d collective(s)\n", f.params,
             f.tensors, f.bytes, (double)f.bytes / 1e6, f.n_coll);
    keel_onnx_free(m);
  }
  if (json) printf("], \"tp\": %d}\n", r);
  else printf("%s: a shard folder of %d rank(s)\n", dir, r);
  return 0;
}

int cmd_info(int argc, char **argv) {
  const char *model = NULL, *device = NULL;
  int json = 0, nodes = 0, shapes = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--nodes")) nodes = 1;
    else if (!strcmp(argv[i], "--shapes")) shapes = 1;
    else if (argv[i][0] == '-') return cli_usage("info", "unknown option");
    else if (!model) model = argv[i];
    else return cli_usage("info", "more than one model given");
  }
  if (!model) return cli_usage("info", "no model given");
  if (cli_is_shard_dir(model)) return shard_info(model, json);
  if (!cli_is_file(model)) return cli_usage("info", "no such model file");
  /* with --device, the placement the session would run with, made
   * without opening the device (KEEL_OPT_PLAN_ONLY): on any machine */
  keel_options o = {.size = sizeof o, .device = device, .flags = device ? KEEL_OPT_PLAN_ONLY : 0};
  keel_session_t *s;
  keel_status st = keel_session_create(model, &o, &s);
  if (st) {
    fprintf(stderr, "keel: %s: %s\n", keel_status_str(st), keel_last_error());
    return 1;
  }
  char *text;
  st = keel_session_describe(s, (json ? KEEL_DESCRIBE_JSON : 0) | (nodes ? KEEL_DESCRIBE_NODES : 0) |
                                    (shapes ? KEEL_DESCRIBE_SHAPES : 0), &text);
  if (!st) {
    fputs(text, stdout);
    keel_free(text);
  }
  keel_session_destroy(s);
  return st ? 1 : 0;
}

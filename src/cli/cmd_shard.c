/* cmd_shard.c: `keel shard MODEL --tp N --out DIR [--split-vocab]`.
 *
 * For each rank R the model is loaded, the shard pass (passes/pass_shard.c)
 * rewrites it into R's part of the N-way tensor-parallel split, and the
 * ONNX writer (onnx/write.c) writes DIR/rank_R.onnx (weights inline, or in
 * DIR/rank_R.data with --external-data, or when a rank's weights pass
 * 1 GiB: protobuf cannot hold 2 GiB; the fusions run later, when each rank
 * loads its file). DIR/manifest.json
 * records tp, the blocks found, per-rank parameter bytes and where the
 * collectives are. A model the pass refuses writes nothing: the message
 * names the node.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "passes/pass.h"
#include "passes/shard.h"
#include "onnx/onnx.h"
#include "onnx/write.h"
#include "cli/cli.h"

typedef struct rank_info {
  uint64_t bytes, params, tensors, sharded_bytes;
} rank_info;

/* What the rank keeps: every graph's initializers and folded Constants. */
static void count_params(const keel_model *m, rank_info *ri) {
  for (int32_t gi = 0; gi < m->n_graphs; gi++) {
    const keel_graph *g = m->graphs[gi];
    for (int32_t i = 0; i < g->ld.n_init; i++) {
      const keel_tensor *t = &m->consts[g->ld.init_consts[i]];
      ri->bytes += keel_tensor_nbytes(t);
      ri->params += (uint64_t)keel_tensor_numel(t);
      ri->tensors++;
    }
  }
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static int write_manifest(const char *dir, const char *model, const keel_shard_cfg *cfg,
                          const rank_info *ri, uint64_t full_bytes) {
  char path[4200];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "keel: %s: cannot create: %s\n", path, strerror(errno));
    return 1;
  }
  fprintf(f, "{\n  \"tp\": %d,\n  \"model\": ", cfg->tp);
  json_str(f, model);
  fprintf(f, ",\n  \"split_vocab\": %s,\n  \"blocks\": %d,\n  \"attention_blocks\": %d,\n"
             "  \"mlp_blocks\": %d,\n  \"vocab_parallel_heads\": %d,\n  \"vocab_parallel_embeddings\": %d,\n  \"unsharded_parameter_bytes\": %llu,\n"
             "  \"sharded_weight_bytes_unsharded\": %llu,\n  \"ranks\": [\n",
          cfg->split_vocab ? "true" : "false", cfg->n_blocks, cfg->n_attention, cfg->n_mlp,
          cfg->n_vocab_heads, cfg->n_vocab_embeddings, (unsigned long long)full_bytes, (unsigned long long)cfg->sharded_full_bytes);
  for (int32_t r = 0; r < cfg->tp; r++)
    fprintf(f, "    {\"rank\": %d, \"file\": \"rank_%d.onnx\", \"parameter_bytes\": %llu, "
               "\"parameters\": %llu, \"tensors\": %llu, \"sharded_weight_bytes\": %llu}%s\n",
            r, r, (unsigned long long)ri[r].bytes, (unsigned long long)ri[r].params,
            (unsigned long long)ri[r].tensors, (unsigned long long)ri[r].sharded_bytes,
            r + 1 < cfg->tp ? "," : "");
  fprintf(f, "  ],\n  \"replicated_projections\": %d,\n  \"collectives\": [\n", cfg->n_replicated);
  for (int32_t i = 0; i < cfg->n_coll; i++) {
    const keel_shard_coll *c = &cfg->coll[i];
    fprintf(f, "    {\"op\": \"%s\", \"graph\": ", c->op);
    json_str(f, c->graph);
    fprintf(f, ", \"node\": ");
    json_str(f, c->node);
    fprintf(f, ", \"after\": ");
    json_str(f, c->after);
    fprintf(f, "}%s\n", i + 1 < cfg->n_coll ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  return fclose(f) ? 1 : 0;
}

/* Rank r's file; its figures in *ri, the pass's in *cfg. */
#define EXTERNAL_AUTO (1ull << 30)

static keel_status shard_rank(const char *model, const char *dir, keel_shard_cfg *cfg, int32_t r,
                              bool external, rank_info *ri, uint64_t *full_bytes) {
  keel_model *m;
  KEEL_TRY(keel_onnx_load_file(model, &m));
  rank_info full = {0};
  count_params(m, &full);
  *full_bytes = full.bytes;
  keel_shard_cfg c = {.tp = cfg->tp, .rank = r, .split_vocab = cfg->split_vocab};
  m->shard = &c;
  keel_status st = keel_ir_passes_through(m, "shard");
  m->shard = NULL;
  if (!st) {
    count_params(m, ri);
    ri->sharded_bytes = c.sharded_bytes;
    char path[4200], data[64];
    snprintf(path, sizeof path, "%s/rank_%d.onnx", dir, r);
    snprintf(data, sizeof data, "rank_%d.data", r);
    keel_onnx_write_opts o = {.external_min = 1024};
    if (external || ri->bytes > EXTERNAL_AUTO) o.external = data;
    st = keel_onnx_write_file_ex(m, &o, path);
  }
  /* collective names point into the model's arena: keep rank 0's copy */
  if (!st && r == 0) {
    *cfg = c;
    for (int32_t i = 0; i < c.n_coll; i++) {
      cfg->coll[i].graph = strdup(c.coll[i].graph);
      cfg->coll[i].node = strdup(c.coll[i].node);
      cfg->coll[i].after = strdup(c.coll[i].after);
    }
    for (int32_t i = 0; i < c.n_replicated && i < (int32_t)KEEL_COUNTOF(c.replicated); i++)
      cfg->replicated[i] = strdup(c.replicated[i]);
  }
  keel_onnx_free(m);
  return st;
}

static void free_cfg(keel_shard_cfg *cfg) {
  for (int32_t i = 0; i < cfg->n_coll; i++) {
    free((char *)cfg->coll[i].graph);
    free((char *)cfg->coll[i].node);
    free((char *)cfg->coll[i].after);
  }
  for (int32_t i = 0; i < cfg->n_replicated && i < (int32_t)KEEL_COUNTOF(cfg->replicated); i++)
    free((char *)cfg->replicated[i]);
}

int cmd_shard(int argc, char **argv) {
  const char *model = NULL, *dir = NULL;
  int tp = 0;
  bool split_vocab = false, external = false;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--tp") && i + 1 < argc) tp = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--out") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--split-vocab")) split_vocab = true;
    else if (!strcmp(argv[i], "--external-data")) external = true;
    else if (argv[i][0] == '-') return cli_usage("shard", "unknown or incomplete option");
    else if (!model) model = argv[i];
    else return cli_usage("shard", "more than one model given");
  }
  if (!model || !cli_is_file(model)) return cli_usage("shard", "no such model file");
  if (tp < 1 || tp > 4096) return cli_usage("shard", "--tp needs a rank count (1..4096)");
  if (!dir) return cli_usage("shard", "no --out folder given");
  if (mkdir(dir, 0777) && errno != EEXIST) {
    fprintf(stderr, "keel: %s: cannot create: %s\n", dir, strerror(errno));
    return 1;
  }
  rank_info *ri = calloc((size_t)tp, sizeof *ri);
  keel_shard_cfg *cfg = calloc(1, sizeof *cfg);
  if (!ri || !cfg) return 1;
  cfg->tp = tp;
  cfg->split_vocab = split_vocab;
  uint64_t full = 0;
  keel_status st = KEEL_OK;
  for (int32_t r = 0; r < tp && !st; r++) st = shard_rank(model, dir, cfg, r, external, &ri[r], &full);
  int rc = 0;
  if (st) {
    fprintf(stderr, "keel: %s: %s\n", keel_status_str(st), keel_last_error());
    rc = 1;
  } else {
    rc = write_manifest(dir, model, cfg, ri, full);
    printf("%s: %d block(s) (%d attention, %d MLP) split %d ways; vocabulary-parallel: %d LM "
           "head(s), %d embedding(s); %d collective(s)\n", model, cfg->n_blocks, cfg->n_attention,
           cfg->n_mlp, tp, cfg->n_vocab_heads, cfg->n_vocab_embeddings, cfg->n_coll);
    for (int32_t r = 0; r < tp; r++)
      printf("  rank_%d.onnx: %llu parameter bytes (of %llu unsharded)\n", r,
             (unsigned long long)ri[r].bytes, (unsigned long long)full);
    if (cfg->n_replicated) printf("  left whole on every rank (in no recognised block): %d projection(s)\n", cfg->n_replicated);
    for (int32_t i = 0; i < cfg->n_replicated && i < (int32_t)KEEL_COUNTOF(cfg->replicated); i++)
      printf("    %s\n", cfg->replicated[i]);
  }
  free_cfg(cfg);
  free(cfg);
  free(ri);
  return rc;
}

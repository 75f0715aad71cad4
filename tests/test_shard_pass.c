/* test_shard_pass.c: the shard pass (src/passes/pass_shard.c) without MPI.
 *
 * Each rank's model is made by the pass, its AllReduce nodes turned into
 * Identity (so one process runs it alone: its output is that rank's
 * partial sum plus the bias), and the ranks' outputs are summed here:
 * sum_r y_r - (tp-1) * bias must equal the unsharded model's output. So
 * the slicing of weights, biases and heads is checked numerically, for
 *  - an attention block with constant Reshape shapes (6 heads, tp 2 and 3),
 *  - the same with q, k, v fused in one weight and a Split (tp 2 and 3),
 *  - an MLP block inside an If branch reading outer weights (tp 2 and 4);
 *  - an MLP of two Gemms on a 2-D input (transB, alpha; tp 2 and 4);
 * and the structure: the AllReduce sits between the row-parallel MatMul
 * and its bias Add, the originals of sliced weights are gone.
 * Refusals name the node: tp not dividing the heads, a block value read
 * outside the block, a Softmax over the heads. Without m->shard (every
 * ordinary load) the pass changes nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "passes/pass.h"
#include "passes/shard.h"
#include "mb.h"
#include "onnx/onnx.h"
#include "onnx/write.h"

#define T 3
#define C 12
#define H 6
#define D (C / H)
#define F 16

static float g_wf[C * 3 * C], g_bf[3 * C], g_w[4][C * C], g_b[4][C], g_w1[C * F], g_b1[F], g_w2[F * C], g_b2[C], g_x[T * C];

static void fill(float *p, int n, uint32_t seed, float scale) {
  for (int i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = scale * ((float)(seed >> 8) / (float)(1 << 24) - 0.5f);
  }
}

/* ============================================================ models */

/* q, k, v projections, heads split by Reshape [1,T,H,D], attention,
 * merge [1,T,C], the output projection + bias. `probs_out`: the attention
 * probabilities are a graph output too (read outside the block). */
static uint8_t *attention_model_ex(size_t *len, bool probs_out, int softmax_axis, bool fused) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){1, T, C});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  if (probs_out) mb_output(g, "p", KEEL_FLOAT, -1, NULL);
  const char *w[4] = {"wq", "wk", "wv", "wo"}, *b[4] = {"bq", "bk", "bv", "bo"};
  for (int i = 0; i < 4; i++) {
    mb_init(g, w[i], KEEL_FLOAT, 2, (int64_t[]){C, C}, g_w[i]);
    mb_init(g, b[i], KEEL_FLOAT, 1, (int64_t[]){C}, g_b[i]);
  }
  int64_t split[4] = {1, T, H, D}, merge[3] = {1, T, C};
  mb_init(g, "split", KEEL_INT64, 1, (int64_t[]){4}, split);
  mb_init(g, "merge", KEEL_INT64, 1, (int64_t[]){3}, merge);
  float scale = 0.5f;
  mb_init(g, "scale", KEEL_FLOAT, 0, NULL, &scale);
  const char *p[3] = {"q", "k", "v"};
  if (fused) { /* one [C, 3C] projection, Split into q, k, v (nanoGPT's c_attn) */
    mb_init(g, "wf", KEEL_FLOAT, 2, (int64_t[]){C, 3 * C}, g_wf);
    mb_init(g, "bf", KEEL_FLOAT, 1, (int64_t[]){3 * C}, g_bf);
    int64_t sizes[3] = {C, C, C};
    mb_init(g, "sizes", KEEL_INT64, 1, (int64_t[]){3}, sizes);
    mb_add(g, "MatMul", "x,wf", "f_mm");
    mb_add(g, "Add", "f_mm,bf", "f_b");
    mb_attr_i(mb_add(g, "Split", "f_b,sizes", "q_b,k_b,v_b"), "axis", 2);
  }
  for (int i = 0; i < 3; i++) {
    char in[64], out[64];
    if (fused) goto reshape;
    snprintf(out, sizeof out, "%s_mm", p[i]);
    snprintf(in, sizeof in, "x,%s", w[i]);
    mb_add(g, "MatMul", in, out);
    snprintf(in, sizeof in, "%s_mm,%s", p[i], b[i]);
    snprintf(out, sizeof out, "%s_b", p[i]);
    mb_add(g, "Add", in, out);
  reshape:
    snprintf(in, sizeof in, "%s_b,split", p[i]);
    snprintf(out, sizeof out, "%s_h", p[i]);
    mb_name(mb_add(g, "Reshape", in, out), i == 0 ? "split_q" : i == 1 ? "split_k" : "split_v");
  }
  mb_attr_ints(mb_add(g, "Transpose", "q_h", "qt"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_attr_ints(mb_add(g, "Transpose", "k_h", "kt"), "perm", 4, (int64_t[]){0, 2, 3, 1});
  mb_attr_ints(mb_add(g, "Transpose", "v_h", "vt"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_add(g, "MatMul", "qt,kt", "s");
  mb_add(g, "Mul", "s,scale", "ss");
  mb_node *sm = mb_add(g, "Softmax", "ss", probs_out ? "p" : "pp");
  mb_name(sm, "softmax");
  mb_attr_i(sm, "axis", softmax_axis);
  mb_add(g, "MatMul", probs_out ? "p,vt" : "pp,vt", "ctx");
  mb_attr_ints(mb_add(g, "Transpose", "ctx", "ctx_t"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_add(g, "Reshape", "ctx_t,merge", "ctx_m");
  mb_name(mb_add(g, "MatMul", "ctx_m,wo", "o"), "proj");
  mb_name(mb_add(g, "Add", "o,bo", "y"), "proj_bias");
  return mb_model(g, 17, len);
}

static uint8_t *attention_model(size_t *len, bool probs_out, int softmax_axis) {
  return attention_model_ex(len, probs_out, softmax_axis, false);
}

/* If(c) then: Relu(x @ w1 + b1) @ w2 + b2 (w1, w2 outer initializers,
 * the biases the branch's own), else: x. */
static uint8_t *mlp_in_if_model(size_t *len) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){1, T, C});
  mb_input(g, "c", KEEL_BOOL, 0, NULL);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_init(g, "w1", KEEL_FLOAT, 2, (int64_t[]){C, F}, g_w1);
  mb_init(g, "w2", KEEL_FLOAT, 2, (int64_t[]){F, C}, g_w2);
  mb_graph *t = mb_graph_new("then");
  mb_output(t, "yt", KEEL_FLOAT, -1, NULL);
  mb_init(t, "b1", KEEL_FLOAT, 1, (int64_t[]){F}, g_b1);
  mb_init(t, "b2", KEEL_FLOAT, 1, (int64_t[]){C}, g_b2);
  mb_add(t, "MatMul", "x,w1", "h");
  mb_add(t, "Add", "b1,h", "hb");
  mb_add(t, "Relu", "hb", "hr");
  mb_name(mb_add(t, "MatMul", "hr,w2", "o"), "fc2");
  mb_add(t, "Add", "o,b2", "yt");
  mb_graph *e = mb_graph_new("else");
  mb_output(e, "ye", KEEL_FLOAT, -1, NULL);
  mb_add(e, "Identity", "x", "ye");
  mb_node *n = mb_add(g, "If", "c", "y");
  mb_attr_g(n, "then_branch", t);
  mb_attr_g(n, "else_branch", e);
  return mb_model(g, 17, len);
}

/* Two Gemms on a 2-D input [T, C]: fc1 (transB, bias [F]) -> Relu -> fc2
 * (bias [C], moved after the AllReduce). */
static uint8_t *gemm_mlp_model(size_t *len) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){T, C});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_init(g, "w1t", KEEL_FLOAT, 2, (int64_t[]){F, C}, g_w1); /* transposed: [F, C] */
  mb_init(g, "b1", KEEL_FLOAT, 1, (int64_t[]){F}, g_b1);
  mb_init(g, "w2", KEEL_FLOAT, 2, (int64_t[]){F, C}, g_w2);
  mb_init(g, "b2", KEEL_FLOAT, 1, (int64_t[]){C}, g_b2);
  mb_node *a = mb_add(g, "Gemm", "x,w1t,b1", "h");
  mb_attr_i(a, "transB", 1);
  mb_attr_f(a, "alpha", 0.5f);
  mb_add(g, "Relu", "h", "hr");
  mb_name(mb_add(g, "Gemm", "hr,w2,b2", "y"), "fc2");
  return mb_model(g, 13, len);
}

/* ============================================================ running */

static int g_x_rank = 3; /* the models' input: [1, T, C], or [T, C] */

static keel_status shard(const uint8_t *bytes, size_t len, int tp, int rank, keel_shard_cfg *cfg,
                         keel_model **out) {
  keel_status ls = keel_onnx_load_memory(bytes, len, NULL, out);
  if (ls) return ls;
  *cfg = (keel_shard_cfg){.tp = tp, .rank = rank};
  (*out)->shard = cfg;
  keel_status st = keel_ir_passes_through(*out, "shard");
  (*out)->shard = NULL;
  return st;
}

static int count_op(const keel_model *m, const char *op) {
  int n = 0;
  for (int32_t g = 0; g < m->n_graphs; g++)
    for (int32_t i = 0; i < m->graphs[g]->n_nodes; i++) n += !strcmp(m->graphs[g]->nodes[i].op_type, op);
  return n;
}

static bool has_init(const keel_model *m, const char *name) {
  for (int32_t g = 0; g < m->n_graphs; g++)
    for (int32_t i = 0; i < m->graphs[g]->ld.n_init; i++)
      if (!strcmp(m->graphs[g]->ld.init_names[i], name)) return true;
  return false;
}

/* Runs bytes on x (and c = true when `with_c`), y into out[T*C]. */
static bool run(const uint8_t *bytes, size_t len, bool with_c, float *out) {
  keel_session_t *s;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, &s);
  CHECK_OK(st);
  if (st) return false;
  uint8_t c = 1;
  keel_value_t *in[2] = {g_x_rank == 3 ? mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, T, C}, g_x)
                                        : mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){T, C}, g_x),
                         mb_tensor(s, KEEL_BOOL, 0, NULL, &c)};
  keel_value_t *y[2] = {0};
  st = keel_run(s, (const char *[]){"x", "c"}, in, with_c ? 2 : 1, y);
  CHECK_OK(st);
  if (!st) memcpy(out, keel_value_data(y[0]), sizeof(float) * T * C);
  keel_value_release(y[0]);
  keel_value_release(y[1]);
  keel_value_release(in[0]);
  keel_value_release(in[1]);
  keel_session_destroy(s);
  return st == KEEL_OK;
}

/* Rank `rank` of tp: its AllReduce made an Identity, run alone. */
static bool run_rank(const uint8_t *bytes, size_t len, int tp, int rank, bool with_c, float *out,
                     keel_shard_cfg *cfg) {
  keel_model *m = NULL;
  keel_status st = shard(bytes, len, tp, rank, cfg, &m);
  CHECK_OK(st);
  bool ok = !st;
  for (int32_t g = 0; ok && g < m->n_graphs; g++)
    for (int32_t i = 0; i < m->graphs[g]->n_nodes; i++) {
      keel_node *n = &m->graphs[g]->nodes[i];
      if (strcmp(n->op_type, "AllReduce")) continue;
      n->op_type = "Identity";
      n->domain = "";
    }
  keel_bytes b = {0};
  if (ok) CHECK_OK(keel_onnx_write(m, NULL, &b));
  ok = ok && run(b.p, b.len, with_c, out);
  free(b.p);
  keel_onnx_free(m);
  return ok;
}

/* sum_r y_r - (tp - 1) * bias == y_full */
static void check_sum(const uint8_t *bytes, size_t len, int tp, bool with_c, const float *bias) {
  float full[T * C], sum[T * C] = {0}, part[T * C];
  if (!run(bytes, len, with_c, full)) return;
  for (int r = 0; r < tp; r++) {
    keel_shard_cfg cfg;
    if (!run_rank(bytes, len, tp, r, with_c, part, &cfg)) return;
    for (int i = 0; i < T * C; i++) sum[i] += part[i];
  }
  double worst = 0;
  for (int i = 0; i < T * C; i++) {
    double d = fabs(sum[i] - (tp - 1) * bias[i % C] - full[i]);
    if (d > worst) worst = d;
  }
  if (worst > 1e-5) fprintf(stderr, "tp %d: worst %g\n", tp, worst);
  CHECK(worst <= 1e-5);
}

/* ============================================================== tests */

static void attention_block(void) {
  size_t len;
  uint8_t *bytes = attention_model(&len, false, -1);
  check_sum(bytes, len, 2, false, g_b[3]);
  check_sum(bytes, len, 3, false, g_b[3]);
  keel_model *m = NULL;
  keel_shard_cfg cfg;
  CHECK_OK(shard(bytes, len, 2, 1, &cfg, &m));
  if (m) {
    CHECK(cfg.n_blocks == 1 && cfg.n_attention == 1 && cfg.n_coll == 1);
    CHECK(count_op(m, "AllReduce") == 1);
    /* the AllReduce reads the projection's output and feeds its bias Add */
    const keel_graph *g = m->main;
    int32_t ar = -1;
    for (int32_t i = 0; i < g->n_nodes; i++)
      if (!strcmp(g->nodes[i].op_type, "AllReduce")) ar = i;
    CHECK(ar > 0 && !strcmp(g->nodes[ar - 1].name, "proj") && !strcmp(g->nodes[ar + 1].name, "proj_bias"));
    CHECK(ar > 0 && !strcmp(g->nodes[ar].in_names[0], g->nodes[ar - 1].out_names[0]));
    /* the originals are gone; the output bias is not sliced */
    CHECK(!has_init(m, "wq") && !has_init(m, "wo") && !has_init(m, "bq") && has_init(m, "bo"));
    int32_t c = keel_ir_const_of(m, g, "wq/tp1_2");
    CHECK(c >= 0 && m->consts[c].shape[0] == C && m->consts[c].shape[1] == C / 2);
    CHECK(c >= 0 && ((const float *)m->consts[c].data)[0] == g_w[0][C / 2]);
    c = keel_ir_const_of(m, g, "wo/tp1_2");
    CHECK(c >= 0 && m->consts[c].shape[0] == C / 2 && ((const float *)m->consts[c].data)[0] == g_w[3][C / 2 * C]);
  }
  keel_onnx_free(m);
  free(bytes);
}

/* q, k, v fused in one weight and Split: each rank keeps its heads of
 * every part (columns sliced part by part), the Split sizes divided. */
static void fused_qkv(void) {
  size_t len;
  uint8_t *bytes = attention_model_ex(&len, false, -1, true);
  check_sum(bytes, len, 2, false, g_b[3]);
  check_sum(bytes, len, 3, false, g_b[3]);
  keel_model *m = NULL;
  keel_shard_cfg cfg;
  CHECK_OK(shard(bytes, len, 3, 2, &cfg, &m));
  if (m) {
    CHECK(cfg.n_attention == 1 && count_op(m, "AllReduce") == 1);
    int32_t c = keel_ir_const_of(m, m->main, "wf/tp2_3g");
    /* row 0: rank 2's block (columns 8..11) of q, then of k, then of v */
    const float *w = c >= 0 ? m->consts[c].data : NULL;
    CHECK(c >= 0 && m->consts[c].shape[1] == C && w[0] == g_wf[8] && w[4] == g_wf[C + 8] && w[8] == g_wf[2 * C + 8]);
    CHECK(c >= 0 && w[C] == g_wf[3 * C + 8]); /* row 1 */
  }
  keel_onnx_free(m);
  free(bytes);
}

static void mlp_in_if(void) {
  size_t len;
  uint8_t *bytes = mlp_in_if_model(&len);
  check_sum(bytes, len, 2, true, g_b2);
  check_sum(bytes, len, 4, true, g_b2);
  keel_model *m = NULL;
  keel_shard_cfg cfg;
  CHECK_OK(shard(bytes, len, 4, 0, &cfg, &m));
  if (m) {
    CHECK(cfg.n_mlp == 1 && cfg.n_attention == 0 && cfg.n_coll == 1);
    CHECK(!strcmp(cfg.coll[0].graph, "main/If/then"));
    CHECK(!has_init(m, "w1") && !has_init(m, "w2") && !has_init(m, "b1") && has_init(m, "b2"));
  }
  keel_onnx_free(m);
  free(bytes);
}

static void gemm_mlp(void) {
  size_t len;
  uint8_t *bytes = gemm_mlp_model(&len);
  g_x_rank = 2;
  check_sum(bytes, len, 2, false, g_b2);
  check_sum(bytes, len, 4, false, g_b2);
  g_x_rank = 3;
  keel_model *m = NULL;
  keel_shard_cfg cfg;
  CHECK_OK(shard(bytes, len, 4, 3, &cfg, &m));
  if (m) {
    const keel_graph *g = m->main;
    CHECK(cfg.n_mlp == 1 && g->n_nodes == 5);
    /* fc2 lost its bias, which is added after the AllReduce */
    CHECK(g->n_nodes == 5 && !strcmp(g->nodes[2].name, "fc2") && g->nodes[2].in_names[2][0] == 0 &&
          !strcmp(g->nodes[3].op_type, "AllReduce") && !strcmp(g->nodes[4].op_type, "Add") &&
          !strcmp(g->nodes[4].in_names[1], "b2") && !strcmp(g->nodes[4].out_names[0], "y"));
    int32_t c = keel_ir_const_of(m, g, "w1t/tp3_4"); /* transB: rows sliced */
    CHECK(c >= 0 && m->consts[c].shape[0] == F / 4 && m->consts[c].shape[1] == C);
  }
  keel_onnx_free(m);
  free(bytes);
}

static void refusals(void) {
  size_t len;
  keel_model *m = NULL;
  keel_shard_cfg cfg;
  uint8_t *bytes = attention_model(&len, false, -1);
  CHECK_STATUS(shard(bytes, len, 4, 0, &cfg, &m), KEEL_ERR_UNSUPPORTED); /* 6 heads, tp 4 */
  CHECK(strstr(keel_last_error(), "node 'split_q' (Reshape): 6 heads do not divide among 4 ranks"));
  keel_onnx_free(m);
  m = NULL;
  free(bytes);
  bytes = attention_model(&len, true, -1);
  CHECK_STATUS(shard(bytes, len, 2, 0, &cfg, &m), KEEL_ERR_UNSUPPORTED);
  CHECK(strstr(keel_last_error(), "node 'softmax' (Softmax)") &&
        strstr(keel_last_error(), "read outside the block"));
  keel_onnx_free(m);
  m = NULL;
  free(bytes);
  bytes = attention_model(&len, false, 1); /* softmax over the head axis */
  CHECK_STATUS(shard(bytes, len, 2, 0, &cfg, &m), KEEL_ERR_UNSUPPORTED);
  CHECK(strstr(keel_last_error(), "node 'softmax' (Softmax): a Softmax over the sharded axis"));
  keel_onnx_free(m);
  m = NULL;
  /* an ordinary load (no m->shard): nothing changes */
  CHECK_OK(keel_onnx_load_memory(bytes, len, NULL, &m));
  if (m) {
    int32_t before = m->main->n_nodes;
    CHECK_OK(keel_ir_passes_through(m, "shard"));
    CHECK(m->main->n_nodes == before && count_op(m, "AllReduce") == 0 && has_init(m, "wq"));
  }
  keel_onnx_free(m);
  free(bytes);
}

int main(void) {
  for (int i = 0; i < 4; i++) {
    fill(g_w[i], C * C, 11u + (uint32_t)i, 1.0f);
    fill(g_b[i], C, 21u + (uint32_t)i, 0.5f);
  }
  fill(g_w1, C * F, 31, 1.0f);
  fill(g_b1, F, 32, 0.5f);
  fill(g_w2, F * C, 33, 1.0f);
  fill(g_b2, C, 34, 0.5f);
  fill(g_x, T * C, 35, 2.0f);
  fill(g_wf, C * 3 * C, 41, 1.0f);
  fill(g_bf, 3 * C, 42, 0.5f);
  attention_block();
  fused_qkv();
  mlp_in_if();
  gemm_mlp();
  refusals();
  return check_report();
}

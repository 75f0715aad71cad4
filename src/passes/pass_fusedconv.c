/* pass_fusedconv.c: canon-fusedconv. ONNX Runtime's optimizer writes a
 * Conv it fused with its activation (and a residual Add) as one
 * com.microsoft FusedConv; a model saved after ORT's optimization carries
 * them. Its kernel (ops/contrib/contrib.c) runs the reference Conv, so
 * such a node would miss every fast convolution keel has. This pass writes
 * it back in the plain form, which the passes after it (layout,
 * fuse-activation) fuse as they fuse an exported Conv:
 *
 *   FusedConv(X, W, B, Z; activation, activation_params)
 *     =>  Conv(X, W, B) [-> Add(., Z)] [-> Relu | Tanh | Sigmoid |
 *         LeakyRelu(alpha) | Clip(min, max) | HardSigmoid(alpha, beta)]
 *
 * The Conv keeps the node's name and attributes (less the two activation
 * ones); the Add and the activation are named after it ("<name>/keel_add",
 * "<name>/keel_act") and the intermediate values get fresh names. Clip
 * takes its bounds as attributes (opset 6). An activation keel's FusedConv
 * kernel does not know is left as written (the kernel reports it).
 */
#include <math.h>
#include <stdio.h>

#include "base/status.h"
#include "passes/pass.h"

typedef struct fc_act {
  const char *op;              /* NULL: no activation                     */
  int nattr;
  const char *names[2];
  float defaults[2];
} fc_act;

/* The FusedConv activation `s`, or false when it is not one of ORT's. */
static bool act_of(const char *s, fc_act *a) {
  static const fc_act acts[] = {
      {NULL, 0, {0}, {0}},
      {"Relu", 0, {0}, {0}},
      {"Tanh", 0, {0}, {0}},
      {"Sigmoid", 0, {0}, {0}},
      {"LeakyRelu", 1, {"alpha"}, {0.01f}},
      {"Clip", 2, {"min", "max"}, {-INFINITY, INFINITY}},
      {"HardSigmoid", 2, {"alpha", "beta"}, {0.2f, 0.5f}},
  };
  if (!s[0] || !strcmp(s, "Identity")) {
    *a = acts[0];
    return true;
  }
  for (size_t i = 1; i < KEEL_COUNTOF(acts); i++)
    if (!strcmp(s, acts[i].op)) {
      *a = acts[i];
      return true;
    }
  return false;
}

static keel_status oom(const keel_graph *g) {
  return keel_err(KEEL_ERR_OUT_OF_MEMORY, "rewriting a FusedConv in graph '%s'", g->path);
}

/* One node of op `op` (opset `opset`) reading ins[0..n_in), writing out,
 * named `name`, with `nattr` float attributes. */
static keel_node plain(const keel_node *like, const char *op, int64_t opset, const char **ins, int n_in,
                       const char **out, const char *name, keel_attr *attrs, int nattr) {
  keel_node n = *like;
  n.op_type = op, n.domain = "", n.opset = opset, n.name = name;
  n.in_names = ins, n.n_in = n_in, n.out_names = out, n.n_out = 1;
  n.attrs = attrs, n.n_attr = nattr;
  n.n_fused = 0, n.fused = NULL, n.n_subs = 0, n.subs = NULL;
  return n;
}

static keel_status rewrite(keel_model *m, keel_graph *g, int32_t at, bool *done) {
  keel_arena *a = m->arena;
  const keel_node *f = &g->nodes[at];
  *done = false;
  const keel_attr *as = keel_node_attr(f, "activation"), *ap = keel_node_attr(f, "activation_params");
  fc_act act;
  if (!act_of(as && as->type == KEEL_ATTR_STRING ? as->s : "", &act)) return KEEL_OK;
  bool z = f->n_in > 3 && f->in_names[3][0];
  int64_t onnx = KEEL_MAX(keel_model_opset(m, ""), 11);
  keel_node with[3];
  int nw = 0;
  const char *name = f->name[0] ? f->name : f->out_names[0];
  char buf[600];
  /* the Conv: the node's attributes less activation and activation_params */
  keel_attr *cattrs = keel_arena_array(a, (size_t)f->n_attr + 1, sizeof(keel_attr));
  const char **cins = keel_arena_array(a, 3, sizeof(char *));
  const char **cout = keel_arena_array(a, 1, sizeof(char *));
  if (!cattrs || !cins || !cout) return oom(g);
  int nc = 0;
  for (int32_t i = 0; i < f->n_attr; i++)
    if (strcmp(f->attrs[i].name, "activation") && strcmp(f->attrs[i].name, "activation_params"))
      cattrs[nc++] = f->attrs[i];
  int n_in = (int)KEEL_MIN(f->n_in, 3);
  for (int i = 0; i < n_in; i++) cins[i] = f->in_names[i];
  bool more = z || act.op;
  cout[0] = more ? keel_pass_fresh(m, g, f->out_names[0], "keel_conv") : f->out_names[0];
  if (!cout[0]) return oom(g);
  with[nw++] = plain(f, "Conv", onnx, cins, n_in, cout, f->name, cattrs, nc);
  const char *last = cout[0];
  if (z) {
    const char **ins = keel_arena_array(a, 2, sizeof(char *)), **out = keel_arena_array(a, 1, sizeof(char *));
    snprintf(buf, sizeof buf, "%s/keel_add", name);
    const char *nm = keel_arena_strdup(a, buf);
    if (!ins || !out || !nm) return oom(g);
    ins[0] = last, ins[1] = f->in_names[3];
    out[0] = act.op ? keel_pass_fresh(m, g, f->out_names[0], "keel_add") : f->out_names[0];
    if (!out[0]) return oom(g);
    with[nw++] = plain(f, "Add", onnx, ins, 2, out, nm, NULL, 0);
    last = out[0];
  }
  if (act.op) {
    const char **ins = keel_arena_array(a, 1, sizeof(char *)), **out = keel_arena_array(a, 1, sizeof(char *));
    keel_attr *at2 = keel_arena_array(a, 2, sizeof(keel_attr));
    snprintf(buf, sizeof buf, "%s/keel_act", name);
    const char *nm = keel_arena_strdup(a, buf);
    if (!ins || !out || !at2 || !nm) return oom(g);
    ins[0] = last, out[0] = f->out_names[0];
    int np = ap && ap->type == KEEL_ATTR_FLOATS ? ap->n : 0;
    for (int i = 0; i < act.nattr; i++)
      at2[i] = (keel_attr){.name = act.names[i], .type = KEEL_ATTR_FLOAT,
                           .f = i < np ? ap->floats[i] : act.defaults[i]};
    /* Clip with attribute bounds is opset 6's */
    with[nw++] = plain(f, act.op, strcmp(act.op, "Clip") ? onnx : 6, ins, 1, out, nm, at2, act.nattr);
  }
  KEEL_TRY(keel_graph_replace_node(a, g, at, with, nw));
  *done = true;
  return KEEL_OK;
}

keel_status keel_pass_canon_fusedconv(keel_model *m) {
  for (int32_t gi = 0; gi < m->n_graphs; gi++) {
    keel_graph *g = m->graphs[gi];
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const keel_node *n = &g->nodes[i];
      if (strcmp(n->op_type, "FusedConv") || strcmp(n->domain, "com.microsoft") || n->n_in < 2 ||
          n->n_out != 1 || n->n_subs)
        continue;
      bool done;
      KEEL_TRY(rewrite(m, g, i, &done));
    }
  }
  return KEEL_OK;
}

/* info.c: keel_session_describe: what a model is, as text or JSON; and
 * keel_session_meta, the model's own metadata as fields. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "exec/exec.h"
#include "ir/shapes.h"

/* A growing text. A failure (out of memory, a bad format) is sticky: every
 * later put is a no-op, so the builders below never check a put and the
 * caller tests `failed` once at the end. The text is malloc'ed because
 * the caller frees it with keel_free (plain free). */
typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool failed;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) KEEL_PRINTF(2, 3);
/* Formats straight into the free tail of the buffer; when it does not
 * fit (or there is no buffer yet, where vsnprintf only measures), the
 * buffer doubles until text and NUL fit and the format runs again. The
 * va_list is restarted on each try: a used one cannot be reused. */
static void put(sbuf *b, const char *fmt, ...) {
  if (b->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = true;
      return;
    }
    if (b->p && (size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap - b->len <= (size_t)n) cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
      b->failed = true;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
}

/* A JSON string: quotes, backslashes and control characters escaped;
 * other bytes (UTF-8 in names) pass through, which JSON allows. NULL
 * prints as "" (a model may lack a producer name). */
static void put_json_str(sbuf *b, const char *s) {
  put(b, "\"");
  for (; s && *s; s++) {
    if (*s == '"' || *s == '\\') put(b, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) put(b, "\\u%04x", *s);
    else put(b, "%c", *s);
  }
  put(b, "\"");
}

/* A declared type as keel info prints it: "float32 [batch,3,?]" (a
 * dim_param by its name, ? for an unknown dim, [?] for an unknown rank),
 * optional<...>, map<key,...>, sequence<...>. Recursive: the element types nest. */
static void put_type(sbuf *b, const keel_type *t) {
  if (t->kind == KEEL_TYPE_OPTIONAL) {
    put(b, "optional<");
    if (t->elem) put_type(b, t->elem);
    put(b, ">");
    return;
  }
  if (t->kind == KEEL_TYPE_MAP) {
    put(b, "map<%s,", keel_dtype_name((keel_dtype)t->key_dtype));
    if (t->elem) put_type(b, t->elem);
    put(b, ">");
    return;
  }
  if (t->kind == KEEL_TYPE_SEQUENCE) {
    put(b, "sequence<");
    if (t->elem) put_type(b, t->elem);
    put(b, ">");
    return;
  }
  put(b, "%s", keel_dtype_name((keel_dtype)t->dtype));
  if (t->rank < 0) {
    put(b, " [?]");
    return;
  }
  put(b, " [");
  for (int32_t i = 0; i < t->rank; i++) {
    if (t->dim_params[i]) put(b, "%s%s", i ? "," : "", t->dim_params[i]);
    else if (t->dims[i] < 0) put(b, "%s?", i ? "," : "");
    else put(b, "%s%lld", i ? "," : "", (long long)t->dims[i]);
  }
  put(b, "]");
}

/* ------------------------------------------------------- op counts */

typedef struct opcount {
  const char *name;
  int64_t n;
} opcount;

/* Nodes per op_type, added into c (one table for every graph). A linear
 * search: a model has tens of op types, not thousands. Past `cap` kinds
 * the rest go uncounted; a description is not worth failing for. The
 * names are borrowed from the model. */
static void count_ops(const keel_graph *g, opcount *c, size_t *nc, size_t cap) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const char *op = g->nodes[i].op_type;
    size_t k = 0;
    while (k < *nc && strcmp(c[k].name, op)) k++;
    if (k == *nc && *nc < cap) c[(*nc)++] = (opcount){op, 0};
    if (k < cap) c[k].n++;
  }
}

/* "Conv onednn" keys for nodes bound to a faster implementation. A key is
 * built on the stack, so each new one is copied into `names`; when that
 * or the table is full, further kinds go uncounted, and their nodes then
 * count as "reference" in the text's total (nodes minus these). */
static void count_impls(const keel_graph *g, opcount *c, size_t *nc, size_t cap, char *names,
                        size_t name_cap, size_t *used) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    if (!n->impl) continue;
    char key[128];
    snprintf(key, sizeof key, "%s %s", n->op_type, n->impl->name);
    size_t k = 0;
    while (k < *nc && strcmp(c[k].name, key)) k++;
    if (k == *nc && *nc < cap && *used + strlen(key) + 1 <= name_cap) {
      c[*nc] = (opcount){names + *used, 0};
      memcpy(names + *used, key, strlen(key) + 1);
      *used += strlen(key) + 1;
      (*nc)++;
    }
    if (k < *nc) c[k].n++;
  }
}

/* Most frequent first; equal counts by name, so the order does not depend
 * on the order the graphs were walked in. */
static int by_count(const void *a, const void *b) {
  const opcount *x = a, *y = b;
  return x->n != y->n ? (y->n > x->n ? 1 : -1) : strcmp(x->name, y->name);
}

/* ---------------------------------------------------------- tree */

/* The control-flow tree: only nodes that hold sub-graphs appear, each
 * sub-graph with its path and size, its own sub-graphs indented below. */
static void tree_text(sbuf *b, const keel_graph *g, int indent) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_subs; k++) {
      const keel_graph *s = n->subs[k];
      put(b, "%*s%s '%s' %s -> %s (depth %d, %d nodes)\n", indent, "", n->op_type, n->name,
          s->owner_attr ? s->owner_attr : "", s->path, s->depth, s->n_nodes);
      tree_text(b, s, indent + 2);
    }
  }
}

/* The same tree as nested objects: a graph's "subgraphs" lists, per node
 * attribute that holds one, the node and the sub-graph's own object. */
static void tree_json(sbuf *b, const keel_graph *g) {
  put(b, "{\"path\": ");
  put_json_str(b, g->path);
  put(b, ", \"depth\": %d, \"nodes\": %d, \"subgraphs\": [", g->depth, g->n_nodes);
  bool first = true;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_subs; k++) {
      put(b, "%s{\"node\": ", first ? "" : ", ");
      put_json_str(b, n->name);
      put(b, ", \"op\": ");
      put_json_str(b, n->op_type);
      put(b, ", \"attribute\": ");
      put_json_str(b, n->subs[k]->owner_attr);
      put(b, ", \"graph\": ");
      tree_json(b, n->subs[k]);
      put(b, "}");
      first = false;
    }
  }
  put(b, "]}");
}

/* ---------------------------------------------------------- whole */

/* The placement of a session made for a GPU (passes/pass_place.c): nodes
 * on the GPU, nodes of the model on the CPU (the copies apart), copies. */
typedef struct placement {
  int64_t gpu, cpu, to_gpu, to_host;
} placement;

static placement placement_of(const keel_model *m) {
  placement p = {0};
  for (int32_t i = 0; i < m->n_graphs; i++)
    for (int32_t k = 0; k < m->graphs[i]->n_nodes; k++) {
      const keel_node *n = &m->graphs[i]->nodes[k];
      if (!n->domain[0] && !strcmp(n->op_type, "MemcpyFromHost")) p.to_gpu++;
      else if (!n->domain[0] && !strcmp(n->op_type, "MemcpyToHost")) p.to_host++;
      else if (n->device == KEEL_NODE_GPU) p.gpu++;
      else p.cpu++;
    }
  return p;
}

static void placement_text(sbuf *b, const keel_model *m) {
  if (!m->gpu) return;
  placement p = placement_of(m);
  int64_t all = p.gpu + p.cpu;
  put(b, "placement  %s: %lld of %lld nodes on the GPU (%.1f%%), %lld on the CPU; copies: %lld "
      "MemcpyFromHost, %lld MemcpyToHost\n",
      m->gpu_name, (long long)p.gpu, (long long)all, all ? 100.0 * (double)p.gpu / (double)all : 0.0,
      (long long)p.cpu, (long long)p.to_gpu, (long long)p.to_host);
}

static void placement_json(sbuf *b, const keel_model *m) {
  if (!m->gpu) return;
  placement p = placement_of(m);
  put(b, ", \"placement\": {\"device\": \"%s\", \"gpu_nodes\": %lld, \"cpu_nodes\": %lld, "
      "\"memcpy_from_host\": %lld, \"memcpy_to_host\": %lld}",
      m->gpu_name, (long long)p.gpu, (long long)p.cpu, (long long)p.to_gpu, (long long)p.to_host);
}

/* The text form. Everything is of the model after the passes (folded
 * constants, removed nodes): what the session runs, not what the file
 * says. The default domain "" is printed as ai.onnx. The last line is
 * what a run in flight costs in bookkeeping (keel_run_ctx_bytes), which
 * grows with the number of graphs and their widest nodes. */
static void describe_text(sbuf *b, const keel_session_t *s, const opcount *c, size_t nc,
                          int64_t nodes, const opcount *ic, size_t nic) {
  const keel_model *m = s->m;
  put(b, "model      %s\n", m->path);
  put(b, "producer   %s %s\n", m->producer_name ? m->producer_name : "(none)",
      m->producer_version ? m->producer_version : "");
  put(b, "ir version %lld\nopsets    ", (long long)m->ir_version);
  for (int32_t i = 0; i < m->n_opsets; i++)
    put(b, " %s %lld%s", m->opsets[i].domain[0] ? m->opsets[i].domain : "ai.onnx",
        (long long)m->opsets[i].version, i + 1 < m->n_opsets ? "," : "");
  const keel_graph *g = m->main;
  put(b, "\ninputs\n");
  for (int32_t i = 0; i < g->n_in; i++) {
    put(b, "  %-24s ", g->in_names[i]);
    put_type(b, &g->in_types[i]);
    put(b, "%s\n", g->in_default[i] >= 0 ? "  (has initializer)" : "");
  }
  put(b, "outputs\n");
  for (int32_t i = 0; i < g->n_out; i++) {
    put(b, "  %-24s ", g->out_names[i]);
    put_type(b, &g->out_types[i]);
    put(b, "\n");
  }
  put(b, "nodes      %lld in %d graph(s):", (long long)nodes, m->n_graphs);
  for (size_t i = 0; i < nc; i++) put(b, "%s %s %lld", i ? "," : "", c[i].name, (long long)c[i].n);
  put(b, "\nkernels   ");
  int64_t fast = 0;
  for (size_t i = 0; i < nic; i++) {
    put(b, "%s %s %lld", i ? "," : "", ic[i].name, (long long)ic[i].n);
    fast += ic[i].n;
  }
  put(b, "%s reference %lld", nic ? ";" : "", (long long)(nodes - fast));
  put(b, "\n");
  placement_text(b, m);
  put(b, "control flow\n  main (%d nodes)\n", g->n_nodes);
  tree_text(b, g, 4);
  put(b, "weights    %llu bytes in %d constants (%llu bytes copied, the rest mapped)\n",
      (unsigned long long)m->weight_bytes, m->n_consts, (unsigned long long)m->weight_bytes_copied);
  put(b, "folding    %d node(s) computed at load into constants (%llu bytes), %d left to run (outputs "
      "over the cap); %d dead node(s) removed, %d duplicate(s) merged, %d causal mask(s) "
      "made the attention's flag\n",
      m->fold.folded, (unsigned long long)m->fold.folded_bytes, m->fold.over_cap, m->fold.dead,
      m->fold.merged, m->fold.causal);
  put(b, "run context %zu bytes per run in flight (frames of %d graphs); at most %zu kept idle\n",
      keel_run_ctx_bytes(m), m->n_graphs, s->pool_cap);
}

/* The object without its closing brace: the caller may add node_list. */
static void describe_json(sbuf *b, const keel_session_t *s, const opcount *c, size_t nc,
                          int64_t nodes, const opcount *ic, size_t nic) {
  const keel_model *m = s->m;
  put(b, "{\"model\": ");
  put_json_str(b, m->path);
  put(b, ", \"producer\": ");
  put_json_str(b, m->producer_name);
  put(b, ", \"producer_version\": ");
  put_json_str(b, m->producer_version);
  put(b, ", \"ir_version\": %lld, \"opsets\": {", (long long)m->ir_version);
  for (int32_t i = 0; i < m->n_opsets; i++) {
    put_json_str(b, m->opsets[i].domain[0] ? m->opsets[i].domain : "ai.onnx");
    put(b, ": %lld%s", (long long)m->opsets[i].version, i + 1 < m->n_opsets ? ", " : "");
  }
  const keel_graph *g = m->main;
  /* inputs, then outputs: each pass closes what the one before opened */
  for (int io = 0; io < 2; io++) {
    put(b, io ? "], \"outputs\": [" : "}, \"inputs\": [");
    int32_t n = io ? g->n_out : g->n_in;
    for (int32_t i = 0; i < n; i++) {
      put(b, "%s{\"name\": ", i ? ", " : "");
      put_json_str(b, io ? g->out_names[i] : g->in_names[i]);
      put(b, ", \"type\": \"");
      put_type(b, io ? &g->out_types[i] : &g->in_types[i]);
      put(b, "\"}");
    }
  }
  put(b, "], \"nodes\": %lld, \"graphs\": %d, \"op_counts\": {", (long long)nodes, m->n_graphs);
  for (size_t i = 0; i < nc; i++) {
    put_json_str(b, c[i].name);
    put(b, ": %lld%s", (long long)c[i].n, i + 1 < nc ? ", " : "");
  }
  put(b, "}, \"kernels\": {");
  for (size_t i = 0; i < nic; i++) {
    put_json_str(b, ic[i].name);
    put(b, ": %lld%s", (long long)ic[i].n, i + 1 < nic ? ", " : "");
  }
  put(b, "}, \"control_flow\": ");
  tree_json(b, g);
  put(b, ", \"weight_bytes\": %llu, \"weight_bytes_copied\": %llu, \"constants\": %d",
      (unsigned long long)m->weight_bytes, (unsigned long long)m->weight_bytes_copied, m->n_consts);
  put(b, ", \"folded_nodes\": %d, \"folded_bytes\": %llu, \"fold_over_cap\": %d, \"dead_nodes\": %d, \"merged_nodes\": %d, \"causal_masks\": %d",
      m->fold.folded, (unsigned long long)m->fold.folded_bytes, m->fold.over_cap, m->fold.dead,
      m->fold.merged, m->fold.causal);
  put(b, ", \"run_context_bytes\": %zu, \"run_pool_cap\": %zu", keel_run_ctx_bytes(m),
      s->pool_cap);
  placement_json(b, m);
}

/* Every node of every graph with the kernel bound to it: an
 * implementation's name, or "reference" (the op's reference kernel), and
 * the rule that chose it (the implementation's own words; the list's
 * order is the family's select.c). */
static void node_list(sbuf *b, const keel_model *m, bool json) {
  put(b, json ? ", \"node_list\": [" : "node list (graph, node, kernel)\n");
  bool first = true;
  for (int32_t i = 0; i < m->n_graphs; i++) {
    const keel_graph *g = m->graphs[i];
    for (int32_t k = 0; k < g->n_nodes; k++) {
      const keel_node *n = &g->nodes[g->order ? g->order[k] : k];
      char lb[512];
      keel_node_label(n, lb, sizeof lb);
      /* a node placed on the device, listed without opening it (keel info
       * --device): the GPU implementation binding will give it */
      const keel_impl *im = n->impl;
      for (const keel_impl *const *l = n->op ? n->op->impls : NULL;
           !im && n->device == KEEL_NODE_GPU && l && *l; l++)
        if ((*l)->device == KEEL_NODE_GPU) im = *l;
      const char *kern = im ? im->name : "reference";
      const char *rule = im ? (im->rule ? im->rule : "")
                         : n->op && n->op->impls && n->op->impls[0]
                             ? "no faster implementation of the op's list takes it"
                             : "the op's kernel";
      const char *dev = n->device == KEEL_NODE_GPU ? "gpu" : "cpu";
      if (!json) {
        if (m->gpu) put(b, "  %-16s %s %s  [%s]%s%s\n", g->path, dev, lb, kern, rule[0] ? ": " : "", rule);
        else put(b, "  %-16s %s  [%s]%s%s\n", g->path, lb, kern, rule[0] ? ": " : "", rule);
        continue;
      }
      put(b, "%s{\"graph\": ", first ? "" : ", ");
      put_json_str(b, g->path);
      put(b, ", \"node\": ");
      put_json_str(b, lb);
      put(b, ", \"kernel\": ");
      put_json_str(b, kern);
      put(b, ", \"rule\": ");
      put_json_str(b, rule);
      if (m->gpu) put(b, ", \"device\": \"%s\"", dev);
      put(b, "}");
      first = false;
    }
  }
  if (json) put(b, "]");
}

/* One value's line (text) or object (JSON) of the shape list, and its
 * class counted (known, symbolic, unknown). Omitted outputs ("") have no
 * value to describe. */
static void shape_entry(sbuf *b, const keel_shapes *S, const keel_graph *g, const char *name, bool json,
                        bool *first, int64_t count[3]) {
  static const char *const cls[] = {"known", "symbolic", "unknown"};
  if (!name[0]) return;
  const keel_sshape *sh = keel_shapes_find(S, g, name);
  char text[1024];
  keel_sshape_text(S, sh, text, sizeof text);
  int c = keel_sshape_class(sh);
  count[c]++;
  const char *type = sh && sh->dtype ? keel_dtype_name((keel_dtype)sh->dtype) : "?";
  if (!json) {
    put(b, "  %-16s %-40s %-8s %s\n", g->path, name, type, text);
    return;
  }
  put(b, "%s{\"graph\": ", *first ? "" : ", ");
  put_json_str(b, g->path);
  put(b, ", \"value\": ");
  put_json_str(b, name);
  put(b, ", \"dtype\": ");
  put_json_str(b, type);
  put(b, ", \"shape\": ");
  put_json_str(b, text);
  put(b, ", \"class\": \"%s\"}", cls[c]);
  *first = false;
}

/* Every value's inferred shape (ir/shapes.h), graph by graph: the inputs,
 * then each node's outputs in run order; then the counts. The inference
 * runs here, on the model after the passes, whether or not the session's
 * shape check is on. sbuf has one way to fail, so a failed inference
 * fails the whole description (reported as out of memory). */
static void shape_list(sbuf *b, const keel_model *m, bool json) {
  keel_shapes *S;
  if (keel_shapes_infer(m, &S)) {
    b->failed = true;
    return;
  }
  int64_t count[3] = {0};
  put(b, json ? ", \"shape_list\": [" : "shapes (graph, value, element type, inferred shape)\n");
  bool first = true;
  for (int32_t i = 0; i < m->n_graphs; i++) {
    const keel_graph *g = m->graphs[i];
    for (int32_t k = 0; k < g->n_in; k++) shape_entry(b, S, g, g->in_names[k], json, &first, count);
    for (int32_t k = 0; k < g->n_nodes; k++) {
      const keel_node *n = &g->nodes[g->order ? g->order[k] : k];
      for (int32_t o = 0; o < n->n_out; o++) shape_entry(b, S, g, n->out_names[o], json, &first, count);
    }
  }
  if (json)
    put(b, "], \"shape_counts\": {\"known\": %lld, \"symbolic\": %lld, \"unknown\": %lld}",
        (long long)count[0], (long long)count[1], (long long)count[2]);
  else
    put(b, "shapes     %lld value(s): %lld fully known, %lld symbolic, %lld unknown\n",
        (long long)(count[0] + count[1] + count[2]), (long long)count[0], (long long)count[1],
        (long long)count[2]);
  keel_shapes_free(S);
}

/* `json` is a flag word (KEEL_DESCRIBE_JSON | _NODES | _SHAPES), not a
 * bool. The op counts cover every graph, sub-graphs included. The op
 * table is on the heap (512 kinds); the implementation table and its key
 * strings fit on the stack. */
keel_status keel_session_describe(const keel_session_t *s, int json, char **out) {
  if (!s || !out) return keel_err(KEEL_ERR_INVALID_ARG, "keel_session_describe: NULL argument");
  const keel_model *m = s->m;
  size_t cap = 512, nc = 0;
  opcount *c = calloc(cap, sizeof *c);
  if (!c) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "describe");
  opcount ic[64];
  char names[4096];
  size_t nic = 0, used = 0;
  int64_t nodes = 0;
  for (int32_t i = 0; i < m->n_graphs; i++) {
    count_ops(m->graphs[i], c, &nc, cap);
    count_impls(m->graphs[i], ic, &nic, 64, names, sizeof names, &used);
    nodes += m->graphs[i]->n_nodes;
  }
  qsort(c, nc, sizeof *c, by_count);
  qsort(ic, nic, sizeof *ic, by_count);
  sbuf b = {0};
  bool as_json = json & KEEL_DESCRIBE_JSON;
  if (as_json) describe_json(&b, s, c, nc, nodes, ic, nic);
  else describe_text(&b, s, c, nc, nodes, ic, nic);
  if (json & KEEL_DESCRIBE_NODES) node_list(&b, m, as_json);
  if (json & KEEL_DESCRIBE_SHAPES) shape_list(&b, m, as_json);
  if (as_json) put(&b, "}\n"); /* describe_json leaves the object open for the list */
  free(c);
  if (b.failed || !b.p) {
    free(b.p);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "describe");
  }
  *out = b.p;
  return KEEL_OK;
}

static const char *or_empty(const char *s) { return s ? s : ""; }

/* Unlike keel_stats_get this needs the full size: the whole struct is
 * written at once. Strings are borrowed from the model (alive as long as
 * the session) and never NULL, so callers can print them as they are. */
keel_status keel_session_meta(const keel_session_t *s, keel_model_meta *meta) {
  if (!s || !meta || meta->size < sizeof *meta)
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_session_meta: NULL argument or meta->size not set");
  const keel_model *m = s->m;
  *meta = (keel_model_meta){
      .size = sizeof *meta,
      .producer_name = or_empty(m->producer_name),
      .producer_version = or_empty(m->producer_version),
      .domain = or_empty(m->domain),
      .description = or_empty(m->doc),
      .graph_name = or_empty(m->main->name),
      .graph_description = or_empty(m->main->doc),
      .ir_version = m->ir_version,
      .model_version = m->model_version,
      .n_props = (size_t)m->n_props,
      .prop_keys = m->prop_keys,
      .prop_values = m->prop_values,
  };
  return KEEL_OK;
}

/* test_plan.c: the planner on hand-built graphs: execution order, the
 * release list of every node (last uses), dead outputs, graph outputs,
 * sub-graph captures, and graphs it must refuse. */
#include <string.h>

#include "check.h"
#include "exec/exec.h"
#include "mb.h"

static const keel_graph *main_graph(keel_session_t *s) { return s->m->main; }

static const keel_node *node_named(const keel_graph *g, const char *name) {
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].name, name)) return &g->nodes[i];
  return NULL;
}

/* True when `value` is in node's release list. */
static bool releases(const keel_graph *g, const keel_node *n, const char *value) {
  for (int32_t i = 0; n && i < n->n_release; i++)
    if (!strcmp(g->slot_names[n->release[i]], value)) return true;
  return false;
}

/* Names of every value released anywhere, counted. */
static int times_released(const keel_graph *g, const char *value) {
  int c = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) c += releases(g, &g->nodes[i], value);
  for (int32_t i = 0; i < g->n_drop_in; i++) c += !strcmp(g->slot_names[g->drop_in[i]], value);
  return c;
}

static int position(const keel_graph *g, const char *name) {
  for (int32_t p = 0; p < g->n_nodes; p++)
    if (!strcmp(g->nodes[g->order[p]].name, name)) return p;
  return -1;
}

/* X -> a:Relu -> A; A -> b:Neg -> B; A,B -> c:Add -> C (output);
 * X -> d:Abs -> D (never read); Z is an input nobody reads.
 * Nodes are listed out of order in the file. The graph passes are off:
 * remove-dead would take d away (checked at the end), and the plan must
 * still drop what a kept node writes and nobody reads (a random op, or
 * any node with the passes off). */
static mb_graph *last_uses_model(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_input(g, "Z", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_output(g, "C", KEEL_FLOAT, -1, NULL);
  mb_name(mb_add(g, "Add", "A,B", "C"), "c");
  mb_name(mb_add(g, "Neg", "A", "B"), "b");
  mb_name(mb_add(g, "Relu", "X", "A"), "a");
  mb_name(mb_add(g, "Abs", "X", "D"), "d");
  return g;
}

static void last_uses(void) {
  keel_options plain = {.size = sizeof plain, .flags = KEEL_OPT_NO_GRAPH_PASSES};
  keel_session_t *s = mb_session_opts(last_uses_model(), 13, &plain);
  CHECK(s != NULL);
  if (!s) return;
  const keel_graph *m = main_graph(s);
  /* topological, and stable where the file allows */
  CHECK(position(m, "a") < position(m, "b") && position(m, "b") < position(m, "c"));
  /* X dies after its last reader (a or d, whichever runs last) */
  int pa = position(m, "a"), pd = position(m, "d");
  CHECK(releases(m, node_named(m, pa > pd ? "a" : "d"), "X"));
  CHECK(times_released(m, "X") == 1);
  /* A is read by b and c: released after c only */
  CHECK(releases(m, node_named(m, "c"), "A") && times_released(m, "A") == 1);
  CHECK(releases(m, node_named(m, "c"), "B"));
  /* D is never read: dropped right after its producer */
  CHECK(releases(m, node_named(m, "d"), "D"));
  /* the graph output is moved out, never released by a node */
  CHECK(times_released(m, "C") == 0 && m->out_move[0]);
  /* Z is dropped at entry */
  CHECK(m->n_drop_in == 1 && !strcmp(m->slot_names[m->drop_in[0]], "Z"));
  /* in-place: c may reuse A or B (both die there); b may not reuse A */
  const keel_node *c = node_named(m, "c"), *b = node_named(m, "b");
  CHECK((c->last_use & 3) == 3);
  CHECK((b->last_use & 1) == 0);
  keel_session_destroy(s);
  /* with the passes, remove-dead has taken d away */
  s = mb_session(last_uses_model(), 13);
  CHECK(s != NULL);
  if (!s) return;
  m = main_graph(s);
  CHECK(m->n_nodes == 3 && position(m, "d") < 0);
  keel_session_destroy(s);
}

/* An outer value read inside an If branch stays alive until the If is
 * done, and the branch sees it through an OUTER ref, not a copy. */
static void captures(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_input(g, "C", KEEL_BOOL, 0, NULL);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_name(mb_add(g, "Relu", "X", "R"), "relu");
  mb_graph *t = mb_graph_new("then");
  mb_output(t, "T", KEEL_FLOAT, -1, NULL);
  mb_name(mb_add(t, "Neg", "R", "T"), "neg");
  mb_graph *e = mb_graph_new("else");
  mb_output(e, "R", KEEL_FLOAT, -1, NULL); /* an outer value as a branch output */
  mb_node *n = mb_add(g, "If", "C", "Y");
  mb_name(n, "if");
  mb_attr_g(n, "then_branch", t);
  mb_attr_g(n, "else_branch", e);
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  const keel_graph *m = main_graph(s);
  const keel_node *ifn = node_named(m, "if");
  CHECK(ifn && ifn->n_implicit == 1);
  CHECK(releases(m, ifn, "R") && !releases(m, node_named(m, "relu"), "R"));
  const keel_graph *then = ifn->subs[0];
  CHECK(!strcmp(then->path, "main/if/then"));
  CHECK(keel_ref_kind(then->nodes[0].in[0]) == KEEL_REF_OUTER &&
        keel_ref_levels(then->nodes[0].in[0]) == 1);
  CHECK(keel_ref_kind(ifn->subs[1]->out[0]) == KEEL_REF_OUTER);
  /* and it runs: both branches */
  float x[4] = {-1, 2, -3, 4};
  for (int cond = 0; cond < 2; cond++) {
    uint8_t cv = (uint8_t)cond;
    keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){4}, x),
                           mb_tensor(s, KEEL_BOOL, 0, NULL, &cv)};
    keel_value_t *out[1] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"X", "C"}, in, 2, out));
    CHECK(out[0] && keel_value_at(out[0], 1) == (cond ? -2.0 : 2.0));
    CHECK(out[0] && keel_value_at(out[0], 0) == 0.0);
    keel_value_release(out[0]);
    keel_value_release(in[0]);
    keel_value_release(in[1]);
  }
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  CHECK(st.allocated == 0); /* nothing left behind between runs */
  keel_session_destroy(s);
}

static void refused(void) {
  /* a cycle */
  mb_graph *g = mb_graph_new("main");
  mb_output(g, "A", KEEL_FLOAT, -1, NULL);
  mb_add(g, "Neg", "B", "A");
  mb_add(g, "Neg", "A", "B");
  CHECK(mb_session(g, 13) == NULL);
  CHECK(strstr(keel_last_error(), "cycle") != NULL);
  /* a value defined twice */
  g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){1});
  mb_output(g, "A", KEEL_FLOAT, -1, NULL);
  mb_add(g, "Neg", "X", "A");
  mb_add(g, "Abs", "X", "A");
  CHECK(mb_session(g, 13) == NULL);
  CHECK(strstr(keel_last_error(), "defined twice") != NULL);
  /* an output nobody defines */
  g = mb_graph_new("main");
  mb_output(g, "Q", KEEL_FLOAT, -1, NULL);
  CHECK(mb_session(g, 13) == NULL);
  CHECK(strstr(keel_last_error(), "'Q'") != NULL);
}

int main(void) {
  last_uses();
  captures();
  refused();
  return check_report();
}

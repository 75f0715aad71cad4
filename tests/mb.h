/* mb.h: a small ONNX model builder for tests. It writes ModelProto bytes
 * directly (no protobuf library), so unit tests can build one-node models,
 * hand-made graphs and nested control flow in C.
 *
 *   mb_graph *g = mb_graph_new("main");
 *   mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){2, 3});
 *   mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
 *   mb_node *n = mb_add(g, "Softmax", "X", "Y");
 *   mb_attr_i(n, "axis", 1);
 *   keel_session_t *s = mb_session(g, 13);   // consumes g
 *
 * Names in mb_add are comma-separated; an empty name ("A,,C") is an
 * omitted optional input. dims[i] < 0 writes a symbolic dimension. */
#ifndef KEEL_MB_H
#define KEEL_MB_H

#include <stddef.h>
#include <stdint.h>

#include "keel.h"

typedef struct mb_graph mb_graph;
typedef struct mb_node mb_node;

mb_graph *mb_graph_new(const char *name);
void mb_graph_free(mb_graph *g);
/* rank < 0: no shape given. */
void mb_input(mb_graph *g, const char *name, int dtype, int rank, const int64_t *dims);
void mb_output(mb_graph *g, const char *name, int dtype, int rank, const int64_t *dims);
void mb_input_seq(mb_graph *g, const char *name, int elem_dtype);
void mb_output_seq(mb_graph *g, const char *name, int elem_dtype);
void mb_input_map(mb_graph *g, const char *name, int key_dtype, int value_dtype);
void mb_init(mb_graph *g, const char *name, int dtype, int rank, const int64_t *dims,
             const void *data);
/* An initializer whose bytes live in an external file (location relative
 * to the model's folder). */
void mb_init_external(mb_graph *g, const char *name, int dtype, int rank,
                      const int64_t *dims, const char *location, int64_t offset,
                      int64_t length);
/* A value_info entry (a shape hint). */
void mb_value_info(mb_graph *g, const char *name, int dtype, int rank, const int64_t *dims);

mb_node *mb_add(mb_graph *g, const char *op, const char *inputs, const char *outputs);
void mb_name(mb_node *n, const char *name);
void mb_domain(mb_node *n, const char *domain);
void mb_attr_i(mb_node *n, const char *name, int64_t v);
void mb_attr_f(mb_node *n, const char *name, float v);
void mb_attr_s(mb_node *n, const char *name, const char *v);
void mb_attr_ints(mb_node *n, const char *name, int count, const int64_t *v);
void mb_attr_floats(mb_node *n, const char *name, int count, const float *v);
void mb_attr_strs(mb_node *n, const char *name, int count, const char *const *v);
void mb_attr_t(mb_node *n, const char *name, int dtype, int rank, const int64_t *dims,
               const void *data);
/* Takes ownership of sub. */
void mb_attr_g(mb_node *n, const char *name, mb_graph *sub);

/* ModelProto bytes (malloc'ed) for main (consumed). */
uint8_t *mb_model(mb_graph *main, int opset, size_t *len);
/* Same, importing a second operator-set domain at `domain_opset`. */
uint8_t *mb_model_domains(mb_graph *main, int opset, const char *domain, int domain_opset,
                          size_t *len);
/* Same, loaded into a session; on failure prints the error and returns NULL. */
keel_session_t *mb_session(mb_graph *main, int opset);
keel_session_t *mb_session_opts(mb_graph *main, int opset, const keel_options *opts);

/* Convenience: a float tensor value from an array. */
keel_value_t *mb_tensor(keel_session_t *s, int dtype, int rank, const int64_t *dims,
                        const void *data);

#endif

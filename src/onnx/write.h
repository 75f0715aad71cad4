/* write.h: keel IR -> ONNX ModelProto bytes (write.c), the inverse of
 * model.c.
 *
 * It serializes a model as the loader leaves it (and as the graph passes
 * that rewrite structure leave it, e.g. the shard pass): opsets, metadata,
 * graphs and sub-graphs with their nodes, attributes of every type,
 * inputs / outputs / value_info types, initializers, and folded Constant
 * nodes again as Constant nodes. Every tensor is written inline as
 * raw_data (external data, already mapped in, comes back inline; sparse
 * tensors, densified by the loader, are written dense). Model-local
 * functions come back inlined, as the loader expands them.
 *
 * `replace`, when not NULL, holds m->n_consts entries: entry c, when not
 * NULL, is written instead of model constant c (the graph is unchanged;
 * the trainer's --save writes its updated weights so).
 *
 * keel_onnx_write_file_ex can put initializers of at least external_min
 * bytes into a second file instead (ONNX external data: location, offset,
 * length), each at an offset aligned to 64 bytes so that loading maps them
 * without a copy; a model whose weights exceed protobuf's 2 GiB needs it.
 */
#ifndef KEEL_ONNX_WRITE_H
#define KEEL_ONNX_WRITE_H

#include "ir/ir.h"
#include "onnx/wire.h"

/* Appends the ModelProto to *out (which the caller frees with free()). */
KEEL_INTERNAL keel_status keel_onnx_write(const keel_model *m, const keel_tensor *const *replace,
                                          keel_bytes *out);
/* Same, into the file `path` (created or truncated). */
KEEL_INTERNAL keel_status keel_onnx_write_file(const keel_model *m,
                                               const keel_tensor *const *replace,
                                               const char *path);

typedef struct keel_onnx_write_opts {
  const keel_tensor *const *replace; /* as above, or NULL                  */
  const char *external;        /* data file name, relative to the model's
                                  folder (e.g. "rank_0.data"); NULL: inline */
  size_t external_min;         /* initializers of fewer bytes stay inline  */
} keel_onnx_write_opts;

/* keel_onnx_write_file with options; the data file is written beside
 * `path`. */
KEEL_INTERNAL keel_status keel_onnx_write_file_ex(const keel_model *m,
                                                  const keel_onnx_write_opts *o,
                                                  const char *path);

#endif /* KEEL_ONNX_WRITE_H */

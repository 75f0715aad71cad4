/* onnx.h: loading an ONNX file into keel's IR (model.c). The result still
 * refers to values by name; ir/scope.c resolves them. */
#ifndef KEEL_ONNX_H
#define KEEL_ONNX_H

#include "ir/ir.h"

/* Maps `path` and translates it. Errors name the path and what was read. */
KEEL_INTERNAL keel_status keel_onnx_load_file(const char *path, keel_model **out);
/* Copies `bytes` and translates them; external data is looked up in
 * base_dir (NULL: external data is an error). */
KEEL_INTERNAL keel_status keel_onnx_load_memory(const void *bytes, size_t len,
                                                const char *base_dir,
                                                keel_model **out);
/* Gives back the pages under constant c once nothing will read it again
 * (a trainer copied it into a parameter, a kernel repacked it into its
 * prepared state): the file mapping's (a later read would fault them in
 * again from the file) and those of the loader's own aligned copy (they
 * would read back as zeros: only for a constant nobody else reads). A
 * model read from memory keeps everything (its bytes are one copy).
 * Adds the bytes dropped to *mapped and *copied (either may be NULL). */
KEEL_INTERNAL void keel_model_drop_const(const keel_model *m, const keel_tensor *c,
                                         uint64_t *mapped, uint64_t *copied);
/* Unmaps the files and frees the arena (and with it every graph). */
KEEL_INTERNAL void keel_onnx_free(keel_model *m);

#endif

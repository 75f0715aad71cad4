/* roundtrip.c: `keel test --roundtrip`: the session runs the model as the
 * ONNX writer (onnx/write.c) writes it back, not the file itself.
 *
 * The file is loaded into keel's IR and written to ModelProto bytes; those
 * are loaded and written again, twice: the last two writings must be
 * byte-identical (load -> write is a fixed point; the first writing may
 * differ from the second only where the loader normalizes, e.g. the
 * Constant nodes of an inlined function's body become folded constants
 * when the inlined model is read back). The session is created from the
 * first writing. Running the conformance folders so,
 * against their expected outputs, checks that the rewritten model means
 * what the original did.
 */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "onnx/onnx.h"
#include "onnx/write.h"
#include "cli/cli.h"

static keel_status write_loaded(keel_model *m, keel_bytes *b) {
  keel_status st = keel_onnx_write(m, NULL, b);
  keel_onnx_free(m);
  return st;
}

keel_status cli_roundtrip_session(const char *path, const keel_options *opts, keel_session_t **out) {
  keel_model *m;
  KEEL_TRY(keel_onnx_load_file(path, &m));
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", m->base_dir ? m->base_dir : ".");
  keel_bytes b1 = {0}, b2 = {0}, b3 = {0};
  keel_status st = write_loaded(m, &b1);
  if (!st) st = keel_onnx_load_memory(b1.p, b1.len, dir, &m);
  if (!st) st = write_loaded(m, &b2);
  if (!st) st = keel_onnx_load_memory(b2.p, b2.len, dir, &m);
  if (!st) st = write_loaded(m, &b3);
  if (!st && (b2.len != b3.len || memcmp(b2.p, b3.p, b2.len))) {
    size_t at = 0;
    while (at < b2.len && at < b3.len && b2.p[at] == b3.p[at]) at++;
    st = keel_err(KEEL_ERR_INTERNAL, "%s: written again, the model differs at byte %zu (%zu and %zu bytes)",
                  path, at, b2.len, b3.len);
  }
  if (!st) st = keel_session_create_from_memory(b1.p, b1.len, dir, opts, out);
  free(b1.p);
  free(b2.p);
  free(b3.p);
  return st;
}

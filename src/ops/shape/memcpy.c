/* memcpy.c: MemcpyFromHost and MemcpyToHost, the copies between the host
 * and the session's device, named as ONNX Runtime names them (its saved
 * optimized models hold them; keel's place pass makes them,
 * passes/pass_place.c).
 *
 * With a device (k->dev): FromHost makes a tensor on the device's heap and
 * queues the copy; ToHost makes a tensor on the host's heap and returns
 * once its bytes are there (the run's one kind of wait on the device,
 * besides what a CPU node needs). Without one (a CPU session reading an
 * ONNX Runtime model, or a placed graph run on the host with
 * KEEL_OPT_PLAN_ONLY) the output is the value itself. */
#include "base/status.h"
#include "device/device.h"
#include "ops/kernel.h"

/* The input as a numeric tensor, or the value itself when there is no
 * device (*t NULL then, output done). */
static keel_status copy_input(keel_kctx *k, const keel_tensor **t) {
  *t = NULL;
  if (!keel_k_has_in(k, 0)) return keel_err(KEEL_ERR_INVALID_MODEL, "%s: input is missing", k->node->op_type);
  if (!k->dev) return keel_k_out_ref(k, 0, k->in[0]);
  KEEL_TRY(keel_k_in(k, 0, t));
  if ((*t)->dtype == KEEL_STRING)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s: string tensors do not go to a device", k->node->op_type);
  return KEEL_OK;
}

/* Output 0 allocated on heap h (the other side of the copy). */
static keel_status out_on(keel_kctx *k, keel_heap *h, const keel_tensor *x, keel_tensor **y) {
  keel_heap *own = k->heap;
  k->heap = h;
  keel_status st = keel_k_out(k, 0, x->dtype, x->rank, x->shape, y);
  k->heap = own;
  return st;
}

static keel_status op_from_host(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(copy_input(k, &x));
  if (!x) return KEEL_OK;
  keel_tensor *y;
  KEEL_TRY(out_on(k, k->dev_heap, x, &y));
  return keel_device_to_device(k->dev, y->data, x->data, keel_tensor_nbytes(x));
}

static keel_status op_to_host(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(copy_input(k, &x));
  if (!x) return KEEL_OK;
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &y));
  return keel_device_to_host(k->dev, y->data, x->data, keel_tensor_nbytes(x));
}

const keel_opdef keel_ops_memcpy[] = {
    {"", "MemcpyFromHost", 1, KEEL_OPSET_MAX, op_from_host, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {"", "MemcpyToHost", 1, KEEL_OPSET_MAX, op_to_host, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {0}};

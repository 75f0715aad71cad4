/* cuda_attn.c: the `attn` group (dev_attn.h) on an NVIDIA GPU: launches of
 * kernels/attn.cu (one block of 256 threads per score row). */
#include "base/status.h"
#include "device/cuda.h"
#include "device/dev_attn.h"

static keel_status cu_masked_softmax(keel_device *d, int64_t H, int64_t Sq, int64_t Skv,
                                     const keel_dev_mask *m, float *s) {
  if ((unsigned)m->kind > KEEL_DEV_MASK_WHERE_NOT)
    return keel_err(KEEL_ERR_INTERNAL, "GPU: attention mask kind %d", (int)m->kind);
  int64_t rows = H * Sq;
  if (rows <= 0 || Skv <= 0) return KEEL_OK;
  int32_t kind = (int32_t)m->kind;
  const void *p = m->p;
  int64_t sh = m->sh, ss = m->ss, sk = m->sk;
  float fill = m->fill;
  int32_t causal = m->causal;
  void *args[] = {&rows, &Sq, &Skv, &kind, &p, &sh, &ss, &sk, &fill, &causal, &s};
  unsigned grid = (unsigned)(rows < 65535 ? rows : 65535);
  return keel_cuda_launch((keel_cuda_dev *)d->impl, "keel_attn_masked_softmax", grid, 1, 256, 0, args);
}

const keel_dev_attn keel_cuda_attn = {cu_masked_softmax};

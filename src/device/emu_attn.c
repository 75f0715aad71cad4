/* emu_attn.c: the `attn` group (dev_attn.h) on the emulated device: plain
 * C loops over the host addresses behind the device pointers, the naive
 * reference of kernels/attn.cu (the sum in double: the accurate side). */
#include <math.h>

#include "base/status.h"
#include "device/dev_attn.h"
#include "device/emu.h"

/* x for key j of the row whose mask starts at m (NULL: no mask). */
static float masked(const keel_dev_mask *mk, const char *m, int64_t j, float s) {
  if (!m) return s;
  switch (mk->kind) {
    case KEEL_DEV_MASK_ADD: return s + ((const float *)(const void *)m)[j * mk->sk];
    case KEEL_DEV_MASK_WHERE: return m[j * mk->sk] ? mk->fill : s;
    case KEEL_DEV_MASK_WHERE_NOT: return m[j * mk->sk] ? s : mk->fill;
    default: return s;
  }
}

static keel_status emu_masked_softmax(keel_device *d, int64_t H, int64_t Sq, int64_t Skv,
                                      const keel_dev_mask *mk, float *s) {
  (void)d;
  if ((unsigned)mk->kind > KEEL_DEV_MASK_WHERE_NOT)
    return keel_err(KEEL_ERR_INTERNAL, "emu: attention mask kind %d", (int)mk->kind);
  float *hs = keel_emu_host(s);
  const char *hm = mk->kind != KEEL_DEV_MASK_NONE ? keel_emu_host(mk->p) : NULL;
  size_t es = mk->kind == KEEL_DEV_MASK_ADD ? sizeof(float) : 1;
  for (int64_t h = 0; h < H; h++)
    for (int64_t i = 0; i < Sq; i++) {
      float *x = hs + (h * Sq + i) * Skv, mx = -INFINITY;
      const char *m = hm ? hm + (size_t)(h * mk->sh + i * mk->ss) * es : NULL;
      for (int64_t j = 0; j < Skv; j++) {
        x[j] = mk->causal && j > i ? -INFINITY : masked(mk, m, j, x[j]);
        mx = x[j] > mx ? x[j] : mx; /* a NaN is skipped, as on the CPU */
      }
      if (mx == -INFINITY) { /* fully masked: NaN, as the unfused Softmax */
        for (int64_t j = 0; j < Skv; j++) x[j] = NAN;
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < Skv; j++) sum += x[j] = expf(x[j] - mx);
      float inv = (float)(1.0 / sum);
      for (int64_t j = 0; j < Skv; j++) x[j] *= inv;
    }
  return KEEL_OK;
}

const keel_dev_attn keel_emu_attn = {emu_masked_softmax};

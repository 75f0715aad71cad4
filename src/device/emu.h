/* emu.h: what the emulated device's kernel groups (emu_<group>.c) share
 * with emu.c. */
#ifndef KEEL_DEVICE_EMU_H
#define KEEL_DEVICE_EMU_H

#include <math.h>

#include "device/device.h"

/* The host address behind an emulated device pointer (device.h: the
 * emulated device's pointers fault on the host until turned back). Only
 * the emulated device's own files may call it. */
KEEL_INTERNAL void *keel_emu_host(const void *p);

/* The logistic as ops/common/activation.c writes it (libm's expf of
 * -|x| only): the reference of kernels/fmath.h's f_sigmoid, for the
 * Sigmoid op, the fused activations and the recurrent gates. */
static inline float keel_emu_sigmoid(float x) {
  float t = expf(-fabsf(x));
  return x >= 0 ? 1 / (1 + t) : t / (1 + t);
}

#endif

/* dtype.h: element types. Sizes and names, the float16 / bfloat16
 * conversions (round to nearest even, NaN kept quiet), and a generic
 * "read element i as double / write double" pair for cold paths (printing,
 * test comparison, Cast's reference path). */
#ifndef KEEL_DTYPE_H
#define KEEL_DTYPE_H

#include "base/common.h"

KEEL_INTERNAL bool keel_dtype_valid(int t);
static inline bool keel_dtype_is_float(int t) {
  return t == KEEL_FLOAT || t == KEEL_DOUBLE || t == KEEL_FLOAT16 ||
         t == KEEL_BFLOAT16;
}
static inline bool keel_dtype_is_int(int t) {
  return t == KEEL_INT8 || t == KEEL_INT16 || t == KEEL_INT32 ||
         t == KEEL_INT64 || t == KEEL_UINT8 || t == KEEL_UINT16 ||
         t == KEEL_UINT32 || t == KEEL_UINT64;
}
static inline bool keel_dtype_is_signed(int t) {
  return t == KEEL_INT8 || t == KEEL_INT16 || t == KEEL_INT32 ||
         t == KEEL_INT64;
}

KEEL_INTERNAL float keel_f16_to_f32(uint16_t h);
KEEL_INTERNAL uint16_t keel_f32_to_f16(float f);
static inline float keel_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
KEEL_INTERNAL uint16_t keel_f32_to_bf16(float f);

/* Element i of typed data as double (bool -> 0/1; string -> NaN). */
KEEL_INTERNAL double keel_elem_get_f64(int dtype, const void *data, size_t i);
/* Element i of integer data as int64 exactly (uint64 beyond 2^63 wraps). */
KEEL_INTERNAL int64_t keel_elem_get_i64(int dtype, const void *data, size_t i);
/* Stores v, converted with C's rules (saturating for float -> int is not
 * ONNX's Cast rule; Cast uses its own kernels). */
KEEL_INTERNAL void keel_elem_set_f64(int dtype, void *data, size_t i, double v);

/* Stores an integer, wrapping to the type's width (floats: converted). */
KEEL_INTERNAL void keel_elem_set_i64(int dtype, void *data, size_t i, int64_t v);

#endif /* KEEL_DTYPE_H */

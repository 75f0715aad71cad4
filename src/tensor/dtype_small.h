/* dtype_small.h: the narrow element types ONNX added after opset 18: the
 * float8 formats (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0), FLOAT4E2M1 and
 * the 4- and 2-bit integers.
 *
 * Each element is a small code: a byte for the 8-bit types, a nibble or a
 * 2-bit crumb for the packed ones (element i in byte i*bits/8 at bit
 * (i*bits)%8, low bits first, as ONNX stores them). keel_small_get and
 * keel_small_put read and write codes at an element index; the decoders and
 * encoders map codes to and from double and int64 with ONNX's rules (which
 * are those of ml_dtypes, the library its reference implementation uses):
 *
 *   - float8 from a real (a double is first rounded to float32, as
 *     ml_dtypes does): round to nearest even; out of range saturates to
 *     +-max when `saturate` (also infinities), else becomes NaN (E4M3FN,
 *     the FNUZ types) or infinity (E5M2). FNUZ types have no -0.
 *   - FLOAT4E2M1 (no NaN, no infinity) always saturates to +-6.
 *   - FLOAT8E8M0 follows onnx.numpy_helper.to_float8e8m0 bit for bit
 *     (round_mode up / down / nearest, saturate) on the float32 value.
 *   - 4- and 2-bit integers from a real truncate toward zero and keep the
 *     low bits (NaN, infinities and |x| >= 2^63 give 0), from an integer
 *     they keep the low bits: the wrap of every other integer cast.
 */
#ifndef KEEL_DTYPE_SMALL_H
#define KEEL_DTYPE_SMALL_H

#include "tensor/dtype.h"

enum { KEEL_ROUND_UP = 0, KEEL_ROUND_DOWN = 1, KEEL_ROUND_NEAREST = 2 };

static inline bool keel_dtype_is_small(int t) {
  return t >= KEEL_FLOAT8E4M3FN && t <= KEEL_INT2;
}
static inline bool keel_dtype_is_small_int(int t) {
  return t == KEEL_UINT4 || t == KEEL_INT4 || t == KEEL_UINT2 || t == KEEL_INT2;
}
static inline bool keel_dtype_is_small_float(int t) {
  return keel_dtype_is_small(t) && !keel_dtype_is_small_int(t);
}
static inline bool keel_dtype_is_packed(int t) {
  return t == KEEL_UINT4 || t == KEEL_INT4 || t == KEEL_FLOAT4E2M1 || t == KEEL_UINT2 ||
         t == KEEL_INT2;
}
/* Bits of one code (8, 4 or 2) of a small type. */
static inline int keel_small_bits(int t) {
  return t == KEEL_UINT2 || t == KEEL_INT2 ? 2 : keel_dtype_is_packed(t) ? 4 : 8;
}

/* The code of element i. */
static inline unsigned keel_small_get(int t, const void *data, size_t i) {
  const uint8_t *p = data;
  int b = keel_small_bits(t);
  if (b == 8) return p[i];
  size_t bit = i * (size_t)b;
  return (p[bit >> 3] >> (bit & 7)) & ((1u << b) - 1);
}
/* Stores code c at element i (the other codes of its byte are kept). */
static inline void keel_small_put(int t, void *data, size_t i, unsigned c) {
  uint8_t *p = data;
  int b = keel_small_bits(t);
  if (b == 8) {
    p[i] = (uint8_t)c;
    return;
  }
  size_t bit = i * (size_t)b;
  unsigned m = ((1u << b) - 1) << (bit & 7);
  p[bit >> 3] = (uint8_t)((p[bit >> 3] & ~m) | ((c << (bit & 7)) & m));
}

/* A code's value: the real number of a float type (NaN kept with its sign),
 * the integer of an integer type. */
KEEL_INTERNAL double keel_small_decode(int t, unsigned code);
/* The integer value of a 4- or 2-bit integer code (sign-extended). */
KEEL_INTERNAL int64_t keel_small_decode_int(int t, unsigned code);
/* The code of a real value (rules above). */
KEEL_INTERNAL unsigned keel_small_encode(int t, double v, bool saturate, int round_mode);
/* The code of an integer value: wrapped for integer types, else encoded
 * as the real it is (saturating). */
KEEL_INTERNAL unsigned keel_small_encode_int(int t, int64_t v);

/* FLOAT8E8M0 from a float32 value, as onnx.numpy_helper.to_float8e8m0. */
KEEL_INTERNAL unsigned keel_e8m0_encode(float v, bool saturate, int round_mode);


/* n elements of type `from` at src to type `to` at dst, where either is a
 * narrow type (any numeric type or bool on the other side). `saturate` and
 * `round_mode` apply to float8 destinations as Cast defines them. */
KEEL_INTERNAL void keel_small_convert(int from, const void *src, int to, void *dst, size_t n,
                                      bool saturate, int round_mode);

#endif /* KEEL_DTYPE_SMALL_H */

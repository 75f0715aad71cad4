/* dtype.c: element type table and half-precision conversions. */
#include "tensor/dtype.h"
#include "tensor/dtype_small.h"

#include <math.h>

static const struct {
  const char *name;
  size_t size;
  int bits;
} g_types[] = {
    [KEEL_UNDEFINED] = {"undefined", 0, 0},
    [KEEL_FLOAT] = {"float32", 4, 32},
    [KEEL_UINT8] = {"uint8", 1, 8},
    [KEEL_INT8] = {"int8", 1, 8},
    [KEEL_UINT16] = {"uint16", 2, 16},
    [KEEL_INT16] = {"int16", 2, 16},
    [KEEL_INT32] = {"int32", 4, 32},
    [KEEL_INT64] = {"int64", 8, 64},
    [KEEL_STRING] = {"string", sizeof(keel_string), 8 * (int)sizeof(keel_string)},
    [KEEL_BOOL] = {"bool", 1, 8},
    [KEEL_FLOAT16] = {"float16", 2, 16},
    [KEEL_DOUBLE] = {"float64", 8, 64},
    [KEEL_UINT32] = {"uint32", 4, 32},
    [KEEL_UINT64] = {"uint64", 8, 64},
    [KEEL_COMPLEX64] = {"complex64", 8, 64},
    [KEEL_COMPLEX128] = {"complex128", 16, 128},
    [KEEL_BFLOAT16] = {"bfloat16", 2, 16},
    [KEEL_FLOAT8E4M3FN] = {"float8e4m3fn", 1, 8},
    [KEEL_FLOAT8E4M3FNUZ] = {"float8e4m3fnuz", 1, 8},
    [KEEL_FLOAT8E5M2] = {"float8e5m2", 1, 8},
    [KEEL_FLOAT8E5M2FNUZ] = {"float8e5m2fnuz", 1, 8},
    [KEEL_UINT4] = {"uint4", 0, 4},
    [KEEL_INT4] = {"int4", 0, 4},
    [KEEL_FLOAT4E2M1] = {"float4e2m1", 0, 4},
    [KEEL_FLOAT8E8M0] = {"float8e8m0", 1, 8},
    [KEEL_UINT2] = {"uint2", 0, 2},
    [KEEL_INT2] = {"int2", 0, 2},
};

bool keel_dtype_valid(int t) {
  return t > 0 && t < (int)KEEL_COUNTOF(g_types);
}

const char *keel_dtype_name(keel_dtype t) {
  if ((int)t < 0 || (int)t >= (int)KEEL_COUNTOF(g_types)) return "undefined";
  return g_types[t].name;
}

size_t keel_dtype_size(keel_dtype t) {
  if ((int)t < 0 || (int)t >= (int)KEEL_COUNTOF(g_types)) return 0;
  return g_types[t].size;
}

int keel_dtype_bits(keel_dtype t) {
  if ((int)t < 0 || (int)t >= (int)KEEL_COUNTOF(g_types)) return 0;
  return g_types[t].bits;
}

size_t keel_dtype_nbytes(keel_dtype t, int64_t n) {
  int b = keel_dtype_bits(t);
  if (n <= 0 || b == 0) return 0;
  if (b >= 8) return (size_t)n * (size_t)(b / 8);
  return ((size_t)n * (size_t)b + 7) / 8;
}

float keel_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu, u;
  if (exp == 0x1F) {
    u = sign | 0x7F800000u | (man << 13); /* inf / nan */
  } else if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else { /* subnormal: normalize */
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while (!(man & 0x400u));
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3FFu) << 13);
    }
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t keel_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t aexp = (u >> 23) & 0xFFu;
  uint32_t man = u & 0x7FFFFFu;
  if (aexp == 0xFF) /* inf or nan (keep nan quiet) */
    return (uint16_t)(sign | 0x7C00u | (man ? 0x200u | (man >> 13) : 0));
  int e = (int)aexp - 127 + 15;
  if (e >= 0x1F) return (uint16_t)(sign | 0x7C00u); /* overflow -> inf */
  if (e <= 0) {                                       /* subnormal or zero */
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000u;
    int shift = 14 - e;
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++; /* may carry into exp: correct */
  return (uint16_t)half;
}

uint16_t keel_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* v as an integer in [lo, hi]: truncated toward zero, saturated, NaN -> 0
 * (a plain C cast of an out-of-range double is undefined behaviour). */
static int64_t sat_i64(double v, double lo, double hi) {
  if (!(v == v)) return 0;
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return (int64_t)hi;
  return (int64_t)v;
}

static uint64_t sat_u64(double v) {
  if (!(v == v) || v <= 0) return 0;
  if (v >= 18446744073709551615.0) return UINT64_MAX;
  return (uint64_t)v;
}

double keel_elem_get_f64(int dtype, const void *d, size_t i) {
  switch (dtype) {
    case KEEL_FLOAT: return ((const float *)d)[i];
    case KEEL_DOUBLE: return ((const double *)d)[i];
    case KEEL_FLOAT16: return keel_f16_to_f32(((const uint16_t *)d)[i]);
    case KEEL_BFLOAT16: return keel_bf16_to_f32(((const uint16_t *)d)[i]);
    case KEEL_INT8: return ((const int8_t *)d)[i];
    case KEEL_INT16: return ((const int16_t *)d)[i];
    case KEEL_INT32: return ((const int32_t *)d)[i];
    case KEEL_INT64: return (double)((const int64_t *)d)[i];
    case KEEL_UINT8: return ((const uint8_t *)d)[i];
    case KEEL_UINT16: return ((const uint16_t *)d)[i];
    case KEEL_UINT32: return ((const uint32_t *)d)[i];
    case KEEL_UINT64: return (double)((const uint64_t *)d)[i];
    case KEEL_BOOL: return ((const uint8_t *)d)[i] ? 1.0 : 0.0;
    default:
      if (keel_dtype_is_small(dtype)) return keel_small_decode(dtype, keel_small_get(dtype, d, i));
      return NAN;
  }
}

int64_t keel_elem_get_i64(int dtype, const void *d, size_t i) {
  switch (dtype) {
    case KEEL_INT8: return ((const int8_t *)d)[i];
    case KEEL_INT16: return ((const int16_t *)d)[i];
    case KEEL_INT32: return ((const int32_t *)d)[i];
    case KEEL_INT64: return ((const int64_t *)d)[i];
    case KEEL_UINT8: return ((const uint8_t *)d)[i];
    case KEEL_UINT16: return ((const uint16_t *)d)[i];
    case KEEL_UINT32: return ((const uint32_t *)d)[i];
    case KEEL_UINT64: return (int64_t)((const uint64_t *)d)[i];
    case KEEL_BOOL: return ((const uint8_t *)d)[i] != 0;
    case KEEL_INT4: case KEEL_UINT4: case KEEL_INT2: case KEEL_UINT2:
      return keel_small_decode_int(dtype, keel_small_get(dtype, d, i));
    default: return sat_i64(keel_elem_get_f64(dtype, d, i), -9223372036854775808.0,
                            9223372036854774784.0);
  }
}

void keel_elem_set_f64(int dtype, void *d, size_t i, double v) {
  switch (dtype) {
    case KEEL_FLOAT: ((float *)d)[i] = (float)v; break;
    case KEEL_DOUBLE: ((double *)d)[i] = v; break;
    case KEEL_FLOAT16: ((uint16_t *)d)[i] = keel_f32_to_f16((float)v); break;
    case KEEL_BFLOAT16: ((uint16_t *)d)[i] = keel_f32_to_bf16((float)v); break;
    case KEEL_INT8: ((int8_t *)d)[i] = (int8_t)sat_i64(v, INT8_MIN, INT8_MAX); break;
    case KEEL_INT16: ((int16_t *)d)[i] = (int16_t)sat_i64(v, INT16_MIN, INT16_MAX); break;
    case KEEL_INT32: ((int32_t *)d)[i] = (int32_t)sat_i64(v, INT32_MIN, INT32_MAX); break;
    case KEEL_INT64: ((int64_t *)d)[i] = sat_i64(v, -9223372036854775808.0, 9223372036854774784.0); break;
    case KEEL_UINT8: ((uint8_t *)d)[i] = (uint8_t)KEEL_MIN(sat_u64(v), UINT8_MAX); break;
    case KEEL_UINT16: ((uint16_t *)d)[i] = (uint16_t)KEEL_MIN(sat_u64(v), UINT16_MAX); break;
    case KEEL_UINT32: ((uint32_t *)d)[i] = (uint32_t)KEEL_MIN(sat_u64(v), UINT32_MAX); break;
    case KEEL_UINT64: ((uint64_t *)d)[i] = sat_u64(v); break;
    case KEEL_BOOL: ((uint8_t *)d)[i] = v != 0; break;
    default:
      if (keel_dtype_is_small(dtype))
        keel_small_put(dtype, d, i, keel_small_encode(dtype, v, true, KEEL_ROUND_UP));
      break;
  }
}

void keel_elem_set_i64(int dtype, void *d, size_t i, int64_t v) {
  switch (dtype) {
    case KEEL_INT8: ((int8_t *)d)[i] = (int8_t)v; break;
    case KEEL_INT16: ((int16_t *)d)[i] = (int16_t)v; break;
    case KEEL_INT32: ((int32_t *)d)[i] = (int32_t)v; break;
    case KEEL_INT64: ((int64_t *)d)[i] = v; break;
    case KEEL_UINT8: ((uint8_t *)d)[i] = (uint8_t)v; break;
    case KEEL_UINT16: ((uint16_t *)d)[i] = (uint16_t)v; break;
    case KEEL_UINT32: ((uint32_t *)d)[i] = (uint32_t)v; break;
    case KEEL_UINT64: ((uint64_t *)d)[i] = (uint64_t)v; break;
    case KEEL_BOOL: ((uint8_t *)d)[i] = v != 0; break;
    case KEEL_INT4: case KEEL_UINT4: case KEEL_INT2: case KEEL_UINT2:
      keel_small_put(dtype, d, i, keel_small_encode_int(dtype, v));
      break;
    default: keel_elem_set_f64(dtype, d, i, (double)v); break;
  }
}

/* dtype_small.c: codes of the float8 / float4 / 4- and 2-bit integer types
 * to and from double and int64 (rules in dtype_small.h).
 *
 * The minifloats share one description: exponent and mantissa widths, the
 * bias, the largest finite value and how NaN and infinity are spelled. A
 * value is encoded by scaling it to an integer count of the quantum of its
 * binade (the subnormal quantum below the smallest normal), rounding that
 * count once with rint (round half to even) and re-reading the exponent,
 * so a carry into the next binade needs no special case. */
#include "tensor/dtype_small.h"

#include <math.h>

typedef enum {
  MF_FN,     /* no infinity; S.1111.111 is NaN (E4M3FN)            */
  MF_FNUZ,   /* no infinity, no -0; 0x80 is NaN                    */
  MF_IEEE,   /* all-ones exponent: infinity or NaN (E5M2)          */
  MF_FINITE  /* no infinity, no NaN (E2M1)                         */
} mf_kind;

typedef struct minifloat {
  int ebits, mbits, bias;
  mf_kind kind;
  double max;
} minifloat;

static const minifloat *mf_of(int t) {
  static const minifloat e4m3fn = {4, 3, 7, MF_FN, 448.0};
  static const minifloat e4m3fnuz = {4, 3, 8, MF_FNUZ, 240.0};
  static const minifloat e5m2 = {5, 2, 15, MF_IEEE, 57344.0};
  static const minifloat e5m2fnuz = {5, 2, 16, MF_FNUZ, 57344.0};
  static const minifloat e2m1 = {2, 1, 1, MF_FINITE, 6.0};
  switch (t) {
    case KEEL_FLOAT8E4M3FN: return &e4m3fn;
    case KEEL_FLOAT8E4M3FNUZ: return &e4m3fnuz;
    case KEEL_FLOAT8E5M2: return &e5m2;
    case KEEL_FLOAT8E5M2FNUZ: return &e5m2fnuz;
    case KEEL_FLOAT4E2M1: return &e2m1;
    default: return NULL;
  }
}

/* ============================================================ decoding */

static double mf_decode(const minifloat *f, unsigned code) {
  unsigned sign = (code >> (f->ebits + f->mbits)) & 1u;
  unsigned e = (code >> f->mbits) & ((1u << f->ebits) - 1);
  unsigned m = code & ((1u << f->mbits) - 1);
  unsigned emax = (1u << f->ebits) - 1, mmax = (1u << f->mbits) - 1;
  double s = sign ? -1.0 : 1.0;
  if (f->kind == MF_FNUZ && sign && e == 0 && m == 0) return NAN;
  if (f->kind == MF_FN && e == emax && m == mmax) return copysign(NAN, s);
  if (f->kind == MF_IEEE && e == emax) return m ? copysign(NAN, s) : s * INFINITY;
  if (e == 0) return s * ldexp((double)m, 1 - f->bias - f->mbits);
  return s * ldexp((double)(m | (1u << f->mbits)), (int)e - f->bias - f->mbits);
}

int64_t keel_small_decode_int(int t, unsigned code) {
  switch (t) {
    case KEEL_INT4: return (int64_t)(code & 0xFu) - (code & 0x8u ? 16 : 0);
    case KEEL_INT2: return (int64_t)(code & 0x3u) - (code & 0x2u ? 4 : 0);
    case KEEL_UINT4: return code & 0xFu;
    case KEEL_UINT2: return code & 0x3u;
    default: return 0;
  }
}

double keel_small_decode(int t, unsigned code) {
  if (keel_dtype_is_small_int(t)) return (double)keel_small_decode_int(t, code);
  if (t == KEEL_FLOAT8E8M0) return (code & 0xFFu) == 0xFFu ? NAN : ldexp(1.0, (int)(code & 0xFFu) - 127);
  const minifloat *f = mf_of(t);
  return f ? mf_decode(f, code) : NAN;
}

/* ============================================================ encoding */

static unsigned mf_nan(const minifloat *f, bool neg) {
  unsigned sbit = 1u << (f->ebits + f->mbits);
  switch (f->kind) {
    case MF_FN: return (neg ? sbit : 0) | (sbit - 1);
    case MF_FNUZ: return sbit;
    case MF_IEEE: return (neg ? sbit : 0) | (sbit - 1 - 1); /* quiet: S.11111.10 */
    default: return neg ? 0 : sbit; /* ml_dtypes' E2M1: NaN gives the zero of the other sign */
  }
}

/* Out of range (or infinite): +-max when saturating, else NaN / infinity. */
static unsigned mf_overflow(const minifloat *f, bool neg, bool saturate) {
  unsigned sbit = 1u << (f->ebits + f->mbits), s = neg ? sbit : 0;
  if (saturate || f->kind == MF_FINITE) {
    unsigned maxcode = f->kind == MF_FN ? sbit - 2 : f->kind == MF_IEEE ? sbit - 1 - (1u << f->mbits)
                                                                        : sbit - 1;
    return s | maxcode;
  }
  if (f->kind == MF_IEEE) return s | (((1u << f->ebits) - 1) << f->mbits);
  return mf_nan(f, neg);
}

static unsigned mf_encode(const minifloat *f, double v, bool saturate) {
  bool neg = signbit(v) != 0;
  unsigned sbit = 1u << (f->ebits + f->mbits);
  if (isnan(v)) return mf_nan(f, neg);
  double a = fabs(v);
  if (isinf(a)) return mf_overflow(f, neg, saturate);
  int e2;
  (void)frexp(a, &e2);             /* a = [0.5, 1) * 2^e2 */
  int emin = 1 - f->bias, E = e2 - 1 < emin ? emin : e2 - 1;
  if (a == 0) E = emin;
  double r = rint(ldexp(a, f->mbits - E)); /* count of quanta, half to even */
  double q = ldexp(r, E - f->mbits);
  if (q > f->max) return mf_overflow(f, neg, saturate);
  unsigned s = neg ? sbit : 0;
  if (r == 0) return f->kind == MF_FNUZ ? 0 : s;
  unsigned one = 1u << f->mbits;
  if (r < one) return s | (unsigned)r; /* subnormal */
  if (r >= 2 * one) r /= 2, E++;       /* the carry made it the next binade */
  return s | ((unsigned)(E + f->bias) << f->mbits) | ((unsigned)r - one);
}

unsigned keel_e8m0_encode(float v, bool saturate, int round_mode) {
  uint32_t u;
  memcpy(&u, &v, 4);
  unsigned e = (u >> 23) & 0xFFu;
  if (e == 0xFFu) return 0xFFu;
  bool up = false;
  if (round_mode == KEEL_ROUND_NEAREST) {
    bool g = u & 0x400000u, r = u & 0x200000u, s = u & 0x1FFFFFu, lsb = e > 0;
    up = g && (r || s || lsb);
  } else if (round_mode == KEEL_ROUND_UP) {
    up = (u & 0x7FFFFFu) != 0;
  }
  if (up && saturate && e == 0xFEu) up = false;
  return (e + (up ? 1u : 0u)) & 0xFFu;
}

/* Truncated toward zero, low bits kept; NaN, infinities and values beyond
 * int64 give 0 (what the x86 conversion ml_dtypes relies on leaves there:
 * INT64_MIN, whose low bits are all zero). */
static unsigned int_encode_real(int t, double v) {
  int64_t i = 0;
  if (v == v && fabs(v) < 9223372036854775808.0) i = (int64_t)v;
  return keel_small_encode_int(t, i);
}

unsigned keel_small_encode_int(int t, int64_t v) {
  switch (t) {
    case KEEL_INT4: case KEEL_UINT4: return (unsigned)((uint64_t)v & 0xFu);
    case KEEL_INT2: case KEEL_UINT2: return (unsigned)((uint64_t)v & 0x3u);
    default: return keel_small_encode(t, (double)v, true, KEEL_ROUND_UP);
  }
}

unsigned keel_small_encode(int t, double v, bool saturate, int round_mode) {
  if (keel_dtype_is_small_int(t)) return int_encode_real(t, v);
  if (t == KEEL_FLOAT8E8M0) return keel_e8m0_encode((float)v, saturate, round_mode);
  const minifloat *f = mf_of(t);
  /* through float32 first, as ml_dtypes (the reference) converts a double:
   * 1.0625 + 2^-40 becomes the tie 1.0625 and then 1.0 in E4M3FN */
  return f ? mf_encode(f, (double)(float)v, saturate) : 0;
}

/* Elementwise conversion where either side is a narrow type. Integers
 * (and bool) travel as int64, so they wrap exactly; reals as double. The
 * standard side is read and written with keel_elem_* (float to integer
 * saturates there, as Cast's own loops do). */
/* From a narrow type to a standard one: each code decoded once. */
static void convert_from_small(int from, const void *src, int to, void *dst, size_t n) {
  double lut[256];
  bool int_src = keel_dtype_is_small_int(from);
  for (unsigned c = 0; c < (1u << keel_small_bits(from)); c++) lut[c] = keel_small_decode(from, c);
  if (to == KEEL_FLOAT) {
    float *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = (float)lut[keel_small_get(from, src, i)];
    return;
  }
  for (size_t i = 0; i < n; i++) {
    double v = lut[keel_small_get(from, src, i)];
    if (int_src) keel_elem_set_i64(to, dst, i, (int64_t)v);
    else keel_elem_set_f64(to, dst, i, v);
  }
}

void keel_small_convert(int from, const void *src, int to, void *dst, size_t n, bool saturate,
                        int round_mode) {
  if (keel_dtype_is_small(from) && !keel_dtype_is_small(to)) {
    convert_from_small(from, src, to, dst, n);
    return;
  }
  bool int_src = keel_dtype_is_int(from) || from == KEEL_BOOL || keel_dtype_is_small_int(from);
  bool small_to = keel_dtype_is_small(to), small_int_to = keel_dtype_is_small_int(to);
  for (size_t i = 0; i < n; i++) {
    if (int_src) {
      int64_t v = keel_dtype_is_small(from) ? keel_small_decode_int(from, keel_small_get(from, src, i))
                                            : keel_elem_get_i64(from, src, i);
      if (small_int_to) keel_small_put(to, dst, i, keel_small_encode_int(to, v));
      else if (small_to) keel_small_put(to, dst, i, keel_small_encode(to, (double)v, saturate, round_mode));
      else keel_elem_set_i64(to, dst, i, v);
    } else {
      double v = keel_dtype_is_small(from) ? keel_small_decode(from, keel_small_get(from, src, i))
                                           : keel_elem_get_f64(from, src, i);
      if (small_to) keel_small_put(to, dst, i, keel_small_encode(to, v, saturate, round_mode));
      else keel_elem_set_f64(to, dst, i, v);
    }
  }
}

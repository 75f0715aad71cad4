/* signal.c: the signal-processing family: DFT and STFT on one FFT engine,
 * the cosine-sum windows (HannWindow, HammingWindow, BlackmanWindow) and
 * MelWeightMatrix.
 *
 * Everything is computed in double whatever the tensor type and rounded
 * once on store. The reference results are numpy's double FFT rounded to
 * float; a float FFT of a signal whose spectrum reaches ~1e4 is off by
 * ~1e-3 in bins that should be 0, far outside the suite's 1e-5 absolute
 * tolerance. Twiddles come from cos/sin of exact angles, never from a
 * running product, so their error does not grow with the length.
 *
 * The engine picks one of three paths by length n:
 *   - n a power of two: iterative radix-2 (in place, bit reversal first);
 *   - n <= FFT_DIRECT_MAX otherwise: a direct O(n^2) sum whose twiddle
 *     index (j*k mod n) is exact;
 *   - longer n: Bluestein's chirp-z transform, a circular convolution done
 *     with radix-2 FFTs of the next power of two >= 2n-1.
 * An inverse transform is conj(FFT(conj(x))) / n.
 *
 * All scratch for a call (plan tables, one line of n complex values) is
 * one keel_k_scratch block; complex values are interleaved (re, im).
 */
#include <math.h>

#include "ops/kernel.h"

/* Non-power-of-two lengths up to this use the direct sum: cheaper than
 * Bluestein's three FFTs of length >= 2n there, and exact in its twiddles. */
#define FFT_DIRECT_MAX 64
/* Longest transform keel plans: keeps every size product below 2^62. */
#define FFT_MAX_LEN ((int64_t)1 << 40)

static const double PI = 3.14159265358979323846;

/* ======================================================= FFT engine */

typedef struct fft_plan {
  int64_t n;       /* transform length                                  */
  int64_t m;       /* radix-2 length: n, the Bluestein length, or 0      */
  double *tw;      /* radix-2: m/2 values exp(-2 pi i j/m);
                      direct: n values exp(-2 pi i j/n)                  */
  double *chirp;   /* Bluestein: n values exp(-pi i j^2/n)               */
  double *chirp_f; /* Bluestein: FFT of the conjugate chirp, m values    */
  double *work;    /* direct: n values; Bluestein: m values              */
} fft_plan;

static bool is_pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

static int64_t bluestein_len(int64_t n) {
  int64_t m = 1;
  while (m < 2 * n - 1) m <<= 1;
  return m;
}

/* Doubles a plan of length n needs (1 <= n <= FFT_MAX_LEN). */
static int64_t fft_plan_doubles(int64_t n) {
  if (is_pow2(n)) return n;                  /* n/2 complex twiddles   */
  if (n <= FFT_DIRECT_MAX) return 4 * n;     /* twiddles + work        */
  int64_t m = bluestein_len(n);
  return m + 2 * n + 4 * m;                  /* tw, chirp, chirp_f, work */
}

static void twiddles(double *tw, int64_t count, int64_t len) {
  for (int64_t j = 0; j < count; j++) {
    double a = -2.0 * PI * (double)j / (double)len;
    tw[2 * j] = cos(a);
    tw[2 * j + 1] = sin(a);
  }
}

static void bit_reverse(double *a, int64_t m) {
  for (int64_t i = 1, j = 0; i < m; i++) {
    int64_t bit = m >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      double r = a[2 * i], im = a[2 * i + 1];
      a[2 * i] = a[2 * j], a[2 * i + 1] = a[2 * j + 1];
      a[2 * j] = r, a[2 * j + 1] = im;
    }
  }
}

/* In-place forward FFT of m (a power of two) values; tw holds m/2. */
static void radix2(double *a, int64_t m, const double *tw) {
  bit_reverse(a, m);
  for (int64_t len = 2; len <= m; len <<= 1) {
    int64_t half = len >> 1, step = m / len;
    for (int64_t i = 0; i < m; i += len)
      for (int64_t j = 0; j < half; j++) {
        double wr = tw[2 * j * step], wi = tw[2 * j * step + 1];
        double *u = a + 2 * (i + j), *v = a + 2 * (i + j + half);
        double vr = v[0] * wr - v[1] * wi, vi = v[0] * wi + v[1] * wr;
        v[0] = u[0] - vr, v[1] = u[1] - vi;
        u[0] += vr, u[1] += vi;
      }
  }
}

static void conj_scale(double *a, int64_t n, double s) {
  for (int64_t i = 0; i < n; i++) a[2 * i] *= s, a[2 * i + 1] *= -s;
}

/* The chirp exp(-pi i j^2/n), with j^2 reduced mod 2n in integers so the
 * angle stays exact for long transforms. */
static void bluestein_init(fft_plan *p) {
  int64_t n = p->n, m = p->m, sq = 0; /* sq = j^2 mod 2n */
  for (int64_t j = 0; j < n; j++) {
    double a = -PI * (double)sq / (double)n;
    p->chirp[2 * j] = cos(a), p->chirp[2 * j + 1] = sin(a);
    sq += 2 * j + 1;
    while (sq >= 2 * n) sq -= 2 * n;
  }
  memset(p->chirp_f, 0, (size_t)m * 2 * sizeof(double));
  for (int64_t j = 0; j < n; j++) { /* b_j = b_{m-j} = conj(chirp_j) */
    p->chirp_f[2 * j] = p->chirp[2 * j], p->chirp_f[2 * j + 1] = -p->chirp[2 * j + 1];
    if (j) {
      p->chirp_f[2 * (m - j)] = p->chirp[2 * j];
      p->chirp_f[2 * (m - j) + 1] = -p->chirp[2 * j + 1];
    }
  }
  radix2(p->chirp_f, m, p->tw);
}

/* Carves the plan out of mem (fft_plan_doubles(n) doubles) and fills its
 * tables. */
static void fft_plan_init(fft_plan *p, int64_t n, double *mem) {
  memset(p, 0, sizeof *p);
  p->n = n;
  if (is_pow2(n)) {
    p->m = n, p->tw = mem;
    twiddles(p->tw, n / 2, n);
  } else if (n <= FFT_DIRECT_MAX) {
    p->tw = mem, p->work = mem + 2 * n;
    twiddles(p->tw, n, n);
  } else {
    int64_t m = bluestein_len(n);
    p->m = m, p->tw = mem, p->chirp = mem + m;
    p->chirp_f = p->chirp + 2 * n, p->work = p->chirp_f + 2 * m;
    twiddles(p->tw, m / 2, m);
    bluestein_init(p);
  }
}

static void direct_dft(const fft_plan *p, double *x) {
  int64_t n = p->n;
  for (int64_t k = 0; k < n; k++) {
    double re = 0, im = 0;
    for (int64_t j = 0, t = 0; j < n; j++) { /* t = j*k mod n */
      double wr = p->tw[2 * t], wi = p->tw[2 * t + 1];
      re += x[2 * j] * wr - x[2 * j + 1] * wi;
      im += x[2 * j] * wi + x[2 * j + 1] * wr;
      t += k;
      if (t >= n) t -= n;
    }
    p->work[2 * k] = re, p->work[2 * k + 1] = im;
  }
  memcpy(x, p->work, (size_t)n * 2 * sizeof(double));
}

/* X_k = chirp_k * sum_j (x_j chirp_j) conj(chirp_{k-j}): the sum is a
 * circular convolution of length m, done as IFFT(FFT(a) * FFT(b)). */
static void bluestein(const fft_plan *p, double *x) {
  int64_t n = p->n, m = p->m;
  double *w = p->work;
  const double *c = p->chirp, *f = p->chirp_f;
  memset(w, 0, (size_t)m * 2 * sizeof(double));
  for (int64_t j = 0; j < n; j++) {
    w[2 * j] = x[2 * j] * c[2 * j] - x[2 * j + 1] * c[2 * j + 1];
    w[2 * j + 1] = x[2 * j] * c[2 * j + 1] + x[2 * j + 1] * c[2 * j];
  }
  radix2(w, m, p->tw);
  for (int64_t j = 0; j < m; j++) { /* times FFT(b), conjugated for the inverse */
    double re = w[2 * j] * f[2 * j] - w[2 * j + 1] * f[2 * j + 1];
    double im = w[2 * j] * f[2 * j + 1] + w[2 * j + 1] * f[2 * j];
    w[2 * j] = re, w[2 * j + 1] = -im;
  }
  radix2(w, m, p->tw);
  conj_scale(w, m, 1.0 / (double)m);
  for (int64_t k = 0; k < n; k++) {
    x[2 * k] = w[2 * k] * c[2 * k] - w[2 * k + 1] * c[2 * k + 1];
    x[2 * k + 1] = w[2 * k] * c[2 * k + 1] + w[2 * k + 1] * c[2 * k];
  }
}

/* In-place DFT of p->n complex values: forward, or inverse (scaled 1/n). */
static void fft_run(const fft_plan *p, double *x, bool inverse) {
  if (inverse) conj_scale(x, p->n, 1.0);
  if (is_pow2(p->n)) radix2(x, p->n, p->tw);
  else if (p->n <= FFT_DIRECT_MAX) direct_dft(p, x);
  else bluestein(p, x);
  if (inverse) conj_scale(x, p->n, 1.0 / (double)p->n);
}

/* A plan for length n plus one line of n complex values, in one scratch
 * block. */
static keel_status fft_setup(keel_kctx *k, const char *op, int64_t n, fft_plan *p,
                             double **line) {
  if (n < 1 || n > FFT_MAX_LEN)
    return keel_err(n < 1 ? KEEL_ERR_SHAPE : KEEL_ERR_UNSUPPORTED,
                    "%s: transform length %lld is out of range [1, 2^40]", op, (long long)n);
  int64_t doubles = fft_plan_doubles(n) + 2 * n;
  if ((uint64_t)doubles > SIZE_MAX / sizeof(double))
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "%s: transform length %lld is too large", op,
                    (long long)n);
  void *mem;
  KEEL_TRY(keel_k_scratch(k, (size_t)doubles * sizeof(double), &mem));
  fft_plan_init(p, n, (double *)mem + 2 * n);
  *line = mem;
  return KEEL_OK;
}

/* ================================================ element access */

static bool is_float_type(int dt) {
  return dt == KEEL_FLOAT || dt == KEEL_DOUBLE || dt == KEEL_FLOAT16 || dt == KEEL_BFLOAT16;
}

/* Element i of float-typed data (the kernels check the type first). */
static inline double ld(const void *p, int dt, int64_t i) {
  switch (dt) {
    case KEEL_FLOAT: return ((const float *)p)[i];
    case KEEL_DOUBLE: return ((const double *)p)[i];
    case KEEL_FLOAT16: return keel_f16_to_f32(((const uint16_t *)p)[i]);
    default: return keel_bf16_to_f32(((const uint16_t *)p)[i]);
  }
}

static inline void st(void *p, int dt, int64_t i, double v) {
  if (dt == KEEL_FLOAT) ((float *)p)[i] = (float)v;
  else if (dt == KEEL_DOUBLE) ((double *)p)[i] = v;
  else keel_elem_set_f64(dt, p, (size_t)i, v);
}

static keel_status check_float(const keel_tensor *t, const char *op, const char *what) {
  if (!is_float_type(t->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s: %s must be a float type, got %s", op, what,
                    keel_dtype_name((keel_dtype)t->dtype));
  return KEEL_OK;
}

static keel_status check_flag(keel_kctx *k, const char *op, const char *name, int64_t def,
                              bool *out) {
  int64_t v = keel_k_attr_i(k, name, def);
  if (v != 0 && v != 1)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: attribute '%s' must be 0 or 1, got %lld", op,
                    name, (long long)v);
  *out = v != 0;
  return KEEL_OK;
}

/* =============================================================== DFT */

typedef struct dft_args {
  int axis;
  int64_t n;        /* transform length (dft_length or the axis dim)   */
  int64_t nout;     /* bins written: n, or n/2+1 when onesided         */
  bool inverse, onesided, irfft; /* irfft: inverse and onesided */
} dft_args;

/* The axis: the attribute up to opset 19, the optional input 2 (default
 * -2, the last signal axis) from opset 20. Negative counts from the back;
 * the last dim holds (re, im) and cannot be transformed. */
static keel_status dft_axis(keel_kctx *k, int rank, int *axis) {
  int64_t a = keel_k_opset(k) >= 20 ? -2 : keel_k_attr_i(k, "axis", 1);
  if (keel_k_opset(k) >= 20 && keel_k_has_in(k, 2)) KEEL_TRY(keel_k_in_scalar_i64(k, 2, &a));
  int64_t norm = a < 0 ? a + rank : a;
  if (norm < 0 || norm > rank - 2)
    return keel_err(KEEL_ERR_SHAPE, "DFT: axis %lld is out of range for an input of rank %d "
                    "(the last dim holds the real and imaginary parts)", (long long)a, rank);
  *axis = (int)norm;
  return KEEL_OK;
}

static keel_status dft_args_get(keel_kctx *k, const keel_tensor *x, dft_args *d) {
  KEEL_TRY(check_float(x, "DFT", "input"));
  if (x->rank < 2 || (x->shape[x->rank - 1] != 1 && x->shape[x->rank - 1] != 2))
    return keel_err(KEEL_ERR_SHAPE, "DFT: input must be [batch, signal..., 1 or 2], got rank "
                    "%d with last dim %lld", x->rank,
                    (long long)(x->rank ? x->shape[x->rank - 1] : 0));
  KEEL_TRY(check_flag(k, "DFT", "inverse", 0, &d->inverse));
  KEEL_TRY(check_flag(k, "DFT", "onesided", 0, &d->onesided));
  KEEL_TRY(dft_axis(k, x->rank, &d->axis));
  /* inverse + onesided is irfft: one-sided bins in, a real signal of
   * dft_length (default 2 * (bins - 1)) out, as numpy.fft.irfft */
  d->irfft = d->inverse && d->onesided;
  d->n = d->irfft ? 2 * (x->shape[d->axis] - 1) : x->shape[d->axis];
  if (keel_k_has_in(k, 1)) {
    KEEL_TRY(keel_k_in_scalar_i64(k, 1, &d->n));
    if (d->n < 1)
      return keel_err(KEEL_ERR_SHAPE, "DFT: dft_length must be positive, got %lld",
                      (long long)d->n);
  }
  if (d->n < 1)
    return keel_err(KEEL_ERR_SHAPE, "DFT: an inverse one-sided transform of %lld bins needs "
                    "dft_length", (long long)x->shape[d->axis]);
  d->nout = d->onesided && !d->irfft ? d->n / 2 + 1 : d->n;
  return KEEL_OK;
}

/* irfft: bins n/2+1 .. n-1 are the conjugates of n-1 .. 1 (the real
 * part of the inverse then ignores the imaginary parts of the DC and
 * Nyquist bins, as numpy's c2r transform does). */
static void hermitian_fill(double *line, int64_t n) {
  for (int64_t j = n / 2 + 1; j < n; j++) {
    line[2 * j] = line[2 * (n - j)];
    line[2 * j + 1] = -line[2 * (n - j) + 1];
  }
}

/* One line: gather (zero-padded or truncated to n), transform, scatter. */
static keel_status op_dft(keel_kctx *k) {
  const keel_tensor *x;
  dft_args d;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(dft_args_get(k, x, &d));
  int r = x->rank;
  int64_t shape[KEEL_MAX_RANK], outer = 1, inner = 1, len = x->shape[d.axis];
  int64_t comp = x->shape[r - 1];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)r);
  shape[d.axis] = d.nout, shape[r - 1] = d.irfft ? 1 : 2;
  for (int i = 0; i < d.axis; i++) outer *= x->shape[i];
  for (int i = d.axis + 1; i < r - 1; i++) inner *= x->shape[i];
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, r, shape, &y));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  fft_plan p;
  double *line;
  KEEL_TRY(fft_setup(k, "DFT", d.n, &p, &line));
  int64_t used = KEEL_MIN(len, d.irfft ? d.n / 2 + 1 : d.n);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      memset(line, 0, (size_t)d.n * 2 * sizeof(double));
      for (int64_t j = 0; j < used; j++) {
        int64_t at = ((o * len + j) * inner + i) * comp;
        line[2 * j] = ld(x->data, x->dtype, at);
        if (comp == 2) line[2 * j + 1] = ld(x->data, x->dtype, at + 1);
      }
      if (d.irfft) hermitian_fill(line, d.n);
      fft_run(&p, line, d.inverse);
      for (int64_t j = 0; j < d.nout; j++) {
        int64_t at = ((o * d.nout + j) * inner + i) * (d.irfft ? 1 : 2);
        st(y->data, y->dtype, at, line[2 * j]);
        if (!d.irfft) st(y->data, y->dtype, at + 1, line[2 * j + 1]);
      }
    }
  return KEEL_OK;
}

/* ============================================================== STFT */

typedef struct stft_args {
  int64_t batch, len, comp; /* signal [batch, len, comp]              */
  int64_t step, n, frames, nout;
  const keel_tensor *window; /* [n] or NULL                           */
} stft_args;

static keel_status stft_len(keel_kctx *k, stft_args *s) {
  KEEL_TRY(keel_k_in_opt(k, 2, &s->window));
  s->n = -1;
  if (keel_k_has_in(k, 3)) {
    KEEL_TRY(keel_k_in_scalar_i64(k, 3, &s->n));
    if (s->n < 1)
      return keel_err(KEEL_ERR_SHAPE, "STFT: frame_length must be positive, got %lld",
                      (long long)s->n);
  }
  if (s->window) {
    if (s->window->rank != 1)
      return keel_err(KEEL_ERR_SHAPE, "STFT: window must be 1-D, got rank %d", s->window->rank);
    if (s->n >= 0 && s->window->shape[0] != s->n)
      return keel_err(KEEL_ERR_SHAPE, "STFT: window has %lld values, frame_length is %lld",
                      (long long)s->window->shape[0], (long long)s->n);
    s->n = s->window->shape[0];
  }
  if (s->n < 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "STFT: needs a window or a frame_length");
  if (s->n < 1) return keel_err(KEEL_ERR_SHAPE, "STFT: the window is empty");
  return KEEL_OK;
}

static keel_status stft_args_get(keel_kctx *k, const keel_tensor *x, stft_args *s) {
  bool onesided;
  KEEL_TRY(check_float(x, "STFT", "signal"));
  if (x->rank != 3 || (x->shape[2] != 1 && x->shape[2] != 2))
    return keel_err(KEEL_ERR_SHAPE, "STFT: signal must be [batch, length, 1 or 2], got rank %d",
                    x->rank);
  s->batch = x->shape[0], s->len = x->shape[1], s->comp = x->shape[2];
  KEEL_TRY(check_flag(k, "STFT", "onesided", 1, &onesided));
  KEEL_TRY(keel_k_in_scalar_i64(k, 1, &s->step));
  if (s->step < 1)
    return keel_err(KEEL_ERR_SHAPE, "STFT: frame_step must be positive, got %lld",
                    (long long)s->step);
  KEEL_TRY(stft_len(k, s));
  if (s->window) {
    KEEL_TRY(check_float(s->window, "STFT", "window"));
    if (s->window->dtype != x->dtype)
      return keel_err(KEEL_ERR_SHAPE, "STFT: window is %s, signal is %s",
                      keel_dtype_name((keel_dtype)s->window->dtype),
                      keel_dtype_name((keel_dtype)x->dtype));
  }
  if (s->len < s->n)
    return keel_err(KEEL_ERR_SHAPE, "STFT: signal length %lld is shorter than a frame (%lld)",
                    (long long)s->len, (long long)s->n);
  s->frames = (s->len - s->n) / s->step + 1;
  s->nout = onesided ? s->n / 2 + 1 : s->n;
  return KEEL_OK;
}

/* v rounded to float-typed dt (a T1 product, as the schema computes it). */
static double round_to(int dt, double v) {
  switch (dt) {
    case KEEL_FLOAT: return (float)v;
    case KEEL_FLOAT16: return keel_f16_to_f32(keel_f32_to_f16((float)v));
    case KEEL_BFLOAT16: return keel_bf16_to_f32(keel_f32_to_bf16((float)v));
    default: return v;
  }
}

/* Frame f of batch b: samples [f*step, f*step + n) times the window. The
 * product is rounded to the signal's type: the ONNX definition multiplies
 * two T1 tensors, and the reference data does (float products moved
 * windowed bins by up to 6e-5 against it when kept in double). */
static void stft_frame(const keel_tensor *x, const stft_args *s, int64_t b, int64_t f,
                       double *line) {
  for (int64_t j = 0; j < s->n; j++) {
    int64_t at = (b * s->len + f * s->step + j) * s->comp;
    double re = ld(x->data, x->dtype, at);
    double im = s->comp == 2 ? ld(x->data, x->dtype, at + 1) : 0.0;
    if (s->window) {
      double w = ld(s->window->data, s->window->dtype, j);
      re = round_to(x->dtype, re * w), im = round_to(x->dtype, im * w);
    }
    line[2 * j] = re, line[2 * j + 1] = im;
  }
}

static keel_status op_stft(keel_kctx *k) {
  const keel_tensor *x;
  stft_args s;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(stft_args_get(k, x, &s));
  keel_tensor *y; /* (batch, frames, nout, 2) */
  KEEL_TRY(keel_k_out(k, 0, x->dtype, 4, (int64_t[]){s.batch, s.frames, s.nout, 2}, &y));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  fft_plan p;
  double *line;
  KEEL_TRY(fft_setup(k, "STFT", s.n, &p, &line));
  for (int64_t b = 0; b < s.batch; b++)
    for (int64_t f = 0; f < s.frames; f++) {
      stft_frame(x, &s, b, f, line);
      fft_run(&p, line, false);
      int64_t at = ((b * s.frames + f) * s.nout) * 2;
      for (int64_t j = 0; j < 2 * s.nout; j++) st(y->data, y->dtype, at + j, line[j]);
    }
  return KEEL_OK;
}

/* =========================================================== windows */

/* output_datatype: any real numeric type (T2/T3 of the window and mel
 * schemas). */
static keel_status out_dtype(keel_kctx *k, const char *op, int *dt) {
  int64_t v = keel_k_attr_i(k, "output_datatype", KEEL_FLOAT);
  if (v < 0 || v > KEEL_BFLOAT16 || v == KEEL_UNDEFINED || v == KEEL_STRING || v == KEEL_BOOL ||
      v == KEEL_COMPLEX64 || v == KEEL_COMPLEX128)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: output_datatype %lld is not a real numeric type",
                    op, (long long)v);
  *dt = (int)v;
  return KEEL_OK;
}

/* w[i] = a0 - a1 cos(2 pi i/N) + a2 cos(4 pi i/N), N = size (periodic) or
 * size-1 (symmetric). A symmetric window of one point is [1], as in numpy
 * and PyTorch (the formula would divide by zero). */
static keel_status cosine_window(keel_kctx *k, const char *op, double a0, double a1, double a2) {
  int dt;
  bool periodic;
  int64_t size;
  KEEL_TRY(out_dtype(k, op, &dt));
  KEEL_TRY(check_flag(k, op, "periodic", 1, &periodic));
  KEEL_TRY(keel_k_in_scalar_i64(k, 0, &size));
  if (size < 0)
    return keel_err(KEEL_ERR_SHAPE, "%s: size must not be negative, got %lld", op,
                    (long long)size);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, dt, 1, &size, &y));
  int64_t N = periodic ? size : size - 1;
  for (int64_t i = 0; i < size; i++) {
    double t = N ? 2.0 * PI * (double)i / (double)N : 0.0;
    double w = N ? a0 - a1 * cos(t) + a2 * cos(2.0 * t) : 1.0;
    keel_elem_set_f64(dt, y->data, (size_t)i, w);
  }
  return KEEL_OK;
}

static keel_status op_hann(keel_kctx *k) { return cosine_window(k, "HannWindow", 0.5, 0.5, 0); }

static keel_status op_hamming(keel_kctx *k) {
  return cosine_window(k, "HammingWindow", 25.0 / 46.0, 21.0 / 46.0, 0);
}

static keel_status op_blackman(keel_kctx *k) {
  return cosine_window(k, "BlackmanWindow", 0.42, 0.5, 0.08);
}

/* =================================================== MelWeightMatrix */

typedef struct mel_args {
  int64_t bins, dft_len, rate;
  double lo, hi; /* edges in hertz */
} mel_args;

static keel_status mel_args_get(keel_kctx *k, mel_args *m) {
  KEEL_TRY(keel_k_in_scalar_i64(k, 0, &m->bins));
  KEEL_TRY(keel_k_in_scalar_i64(k, 1, &m->dft_len));
  KEEL_TRY(keel_k_in_scalar_i64(k, 2, &m->rate));
  KEEL_TRY(keel_k_in_scalar_f64(k, 3, &m->lo));
  KEEL_TRY(keel_k_in_scalar_f64(k, 4, &m->hi));
  if (m->bins < 0 || m->dft_len < 1 || m->rate < 1)
    return keel_err(KEEL_ERR_SHAPE, "MelWeightMatrix: needs num_mel_bins >= 0, dft_length >= 1 "
                    "and sample_rate >= 1, got %lld, %lld, %lld", (long long)m->bins,
                    (long long)m->dft_len, (long long)m->rate);
  if (!(m->lo >= 0) || !(m->lo <= m->hi) || !isfinite(m->hi))
    return keel_err(KEEL_ERR_SHAPE, "MelWeightMatrix: needs 0 <= lower_edge_hertz <= "
                    "upper_edge_hertz (finite), got %g and %g", m->lo, m->hi);
  return KEEL_OK;
}

/* The spectrogram bin of each of the bins+2 triangle corners: evenly
 * spaced in mel(f) = 2595 log10(1 + f/700) from lo to hi, then
 * floor((dft_len + 1) * f / rate), as the ONNX reference computes them. */
static void mel_corners(const mel_args *m, int64_t *corner) {
  double lo = 2595.0 * log10(1.0 + m->lo / 700.0);
  double hi = 2595.0 * log10(1.0 + m->hi / 700.0);
  double step = (hi - lo) / (double)(m->bins + 2);
  for (int64_t i = 0; i < m->bins + 2; i++) {
    double f = 700.0 * (pow(10.0, ((double)i * step + lo) / 2595.0) - 1.0);
    double b = floor((double)(m->dft_len + 1) * f / (double)m->rate);
    corner[i] = b > 4e18 ? INT64_MAX / 2 : (int64_t)b;
  }
}

/* Weight of spectrogram bin j in triangle (l, c, h): rising from l to c
 * (a degenerate rise puts 1 at c), falling from c to h; the fall is
 * written after the rise, so it wins at c like in the reference. */
static double mel_weight(int64_t l, int64_t c, int64_t h, int64_t j) {
  double w = 0;
  if (c == l) w = j == c ? 1.0 : 0.0;
  else if (j >= l && j <= c) w = (double)(j - l) / (double)(c - l);
  if (h > c && j >= c && j < h) w = (double)(h - j) / (double)(h - c);
  return w;
}

static keel_status op_mel(keel_kctx *k) {
  int dt;
  mel_args m;
  KEEL_TRY(out_dtype(k, "MelWeightMatrix", &dt));
  KEEL_TRY(mel_args_get(k, &m));
  int64_t spec = m.dft_len / 2 + 1;
  keel_tensor *y; /* (spec, bins) */
  KEEL_TRY(keel_k_out(k, 0, dt, 2, (int64_t[]){spec, m.bins}, &y));
  if ((uint64_t)m.bins + 2 > SIZE_MAX / sizeof(int64_t))
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "MelWeightMatrix: too many bins");
  void *mem;
  KEEL_TRY(keel_k_scratch(k, (size_t)(m.bins + 2) * sizeof(int64_t), &mem));
  int64_t *corner = mem;
  mel_corners(&m, corner);
  if (!y->data) return KEEL_OK;
  /* Zero bits are 0 in every output type; then only each triangle's span
   * [l, max(c, h)] is written (corners never decrease). Visiting all of
   * (spec, bins) took seconds for a large dft_length under the cap. */
  memset(y->data, 0, keel_tensor_nbytes(y));
  for (int64_t i = 0; i < m.bins; i++) {
    int64_t l = corner[i], c = corner[i + 1], h = corner[i + 2];
    for (int64_t j = KEEL_MAX(l, 0); j <= KEEL_MIN(KEEL_MAX(c, h), spec - 1); j++)
      keel_elem_set_f64(dt, y->data, (size_t)(j * m.bins + i), mel_weight(l, c, h, j));
  }
  return KEEL_OK;
}

/* ============================================================= table */

/* types: the signal's for DFT and STFT; the scalar inputs' (size, bins,
 * lengths, rates: any number or bool) for the windows and MelWeightMatrix. */
#define NUM_BOOL (KEEL_TS_NUM | KEEL_T(KEEL_BOOL))
const keel_opdef keel_ops_signal[] = {
    {"", "DFT", 17, KEEL_OPSET_MAX, op_dft, 0, KEEL_TS_FLOAT},
    {"", "STFT", 17, KEEL_OPSET_MAX, op_stft, 0, KEEL_TS_FLOAT},
    {"", "HannWindow", 17, KEEL_OPSET_MAX, op_hann, 0, NUM_BOOL},
    {"", "HammingWindow", 17, KEEL_OPSET_MAX, op_hamming, 0, NUM_BOOL},
    {"", "BlackmanWindow", 17, KEEL_OPSET_MAX, op_blackman, 0, NUM_BOOL},
    {"", "MelWeightMatrix", 17, KEEL_OPSET_MAX, op_mel, 0, NUM_BOOL},
    {0},
};
#undef NUM_BOOL

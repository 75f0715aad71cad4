/* rnn.cu: the `rnn` group (device/dev_rnn.h): LSTM's cell and GRU's two
 * steps, one thread per hidden unit of each row (a grid-stride loop),
 * the formulas of the reference (emu_rnn.c). */
#include "prelude.h"


static __device__ __forceinline__ float pre(const float *xw, const float *hr, const float *wb,
                                            i64 G, i64 H, i64 b, i64 g, i64 j) {
  i64 col = g * H + j;
  float a = xw[b * G * H + col];
  if (hr) a += hr[b * G * H + col];
  if (wb) a += wb[col] + wb[G * H + col];
  return a;
}

extern "C" __global__ void keel_rnn_lstm_cell(i64 B, i64 H, const float *xw, const float *hr,
                                              const float *wb, const float *c_prev, float *c,
                                              float *h) {
  i64 total = B * H;
  for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (i64)gridDim.x * blockDim.x) {
    i64 b = t / H, j = t % H;
    float i = f_sigmoid(pre(xw, hr, wb, 4, H, b, 0, j)), o = f_sigmoid(pre(xw, hr, wb, 4, H, b, 1, j));
    float f = f_sigmoid(pre(xw, hr, wb, 4, H, b, 2, j)), g = f_tanh(pre(xw, hr, wb, 4, H, b, 3, j));
    float cn = f * (c_prev ? c_prev[t] : 0.0f) + i * g;
    c[t] = cn;
    h[t] = o * f_tanh(cn);
  }
}

extern "C" __global__ void keel_rnn_gru_gates(i64 B, i64 H, const float *xw, const float *hr,
                                              const float *wb, const float *h_prev, int lbr,
                                              float *z, float *rh) {
  i64 total = B * H;
  for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (i64)gridDim.x * blockDim.x) {
    i64 b = t / H, j = t % H;
    float zz = f_sigmoid(pre(xw, hr, wb, 3, H, b, 0, j)), rr = f_sigmoid(pre(xw, hr, wb, 3, H, b, 1, j));
    z[t] = zz;
    rh[t] = lbr ? rr : rr * (h_prev ? h_prev[t] : 0.0f);
  }
}

extern "C" __global__ void keel_rnn_gru_out(i64 B, i64 H, const float *xw, const float *hr,
                                            const float *hrh, const float *wb, const float *z,
                                            const float *rh, const float *h_prev, int lbr,
                                            float *h) {
  i64 total = B * H;
  for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (i64)gridDim.x * blockDim.x) {
    i64 b = t / H, j = t % H, col = 2 * H + j;
    float a = xw[b * 3 * H + col] + (wb ? wb[col] : 0.0f), rbh = wb ? wb[3 * H + col] : 0.0f, u;
    if (lbr) u = rh[t] * ((hr ? hr[b * 3 * H + col] : 0.0f) + rbh);
    else u = (hrh ? hrh[t] : 0.0f) + rbh;
    float ht = f_tanh(a + u), zz = z[t];
    h[t] = (1.0f - zz) * ht + zz * (h_prev ? h_prev[t] : 0.0f);
  }
}

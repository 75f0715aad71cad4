/* dev_rnn.h: the `rnn` kernel group (device.h): the element-wise cells of
 * LSTM and GRU on a device, between the blas group's products
 * (ops/nn/rnn/rnn_gpu.c: X W^T for every step in one product, then per
 * step H R^T and this group's cell). ONNX's equations with the default
 * activations (sigmoid, tanh, tanh), float32, one step of a batch of B
 * rows and H hidden units; gate blocks of H columns in ONNX's order (LSTM
 * i, o, f, c; GRU z, r, h). Both backends fill the table: emu_rnn.c (the
 * naive C reference, libm's expf and tanhf) and cuda_rnn.c
 * (kernels/rnn.cu). Pointers are device pointers; a NULL state is zeros. */
#ifndef KEEL_DEVICE_DEV_RNN_H
#define KEEL_DEVICE_DEV_RNN_H

#include "device/device.h"

typedef struct keel_dev_rnn {
  /* LSTM: with a = xw[b, g*H + j] + hr[b, g*H + j] + wb[g*H + j] +
   * rb[g*H + j] for gate g (hr NULL: no recurrent term; wb NULL: no
   * biases, else rb = wb + 4H), i = sigmoid(a_i), o = sigmoid(a_o),
   * f = sigmoid(a_f), c~ = tanh(a_c): c = f * c_prev + i * c~ and
   * h = o * tanh(c), rows of H floats (b * H + j). */
  keel_status (*lstm_cell)(keel_device *d, int64_t B, int64_t H, const float *xw,
                           const float *hr, const float *wb, const float *c_prev, float *c,
                           float *h);
  /* GRU's gates: z = sigmoid(a_z), r = sigmoid(a_r) (a as LSTM's, wb and
   * rb = wb + 3H for 3 gates); z into z, and into rh either r * h_prev
   * (lbr 0: the operand of the second product) or r (lbr 1). */
  keel_status (*gru_gates)(keel_device *d, int64_t B, int64_t H, const float *xw,
                           const float *hr, const float *wb, const float *h_prev, int lbr,
                           float *z, float *rh);
  /* GRU's output: h~ = tanh(xw_h + wb_h + t), t = hrh + rb_h (lbr 0:
   * hrh = (r * h_prev) Rh^T, B rows of H) or r * (hr_h + rb_h) (lbr 1:
   * rh holds r, hr the step's H R^T with its h block); then
   * h = (1 - z) * h~ + z * h_prev. hrh and hr may be NULL (no recurrent
   * term). */
  keel_status (*gru_out)(keel_device *d, int64_t B, int64_t H, const float *xw,
                         const float *hr, const float *hrh, const float *wb, const float *z,
                         const float *rh, const float *h_prev, int lbr, float *h);
} keel_dev_rnn;

KEEL_INTERNAL extern const keel_dev_rnn keel_emu_rnn;
KEEL_INTERNAL extern const keel_dev_rnn keel_cuda_rnn;

#endif /* KEEL_DEVICE_DEV_RNN_H */

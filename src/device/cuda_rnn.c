/* cuda_rnn.c: the `rnn` group (dev_rnn.h) on an NVIDIA GPU: launches of
 * kernels/rnn.cu (one thread per hidden unit of each row). */
#include "base/status.h"
#include "device/cuda.h"
#include "device/dev_rnn.h"

static keel_cuda_dev *dev_of(keel_device *d) { return (keel_cuda_dev *)d->impl; }

static keel_status cu_lstm_cell(keel_device *d, int64_t B, int64_t H, const float *xw,
                                const float *hr, const float *wb, const float *c_prev, float *c,
                                float *h) {
  if (B * H <= 0) return KEEL_OK;
  void *args[] = {&B, &H, &xw, &hr, &wb, &c_prev, &c, &h};
  return keel_cuda_launch(dev_of(d), "keel_rnn_lstm_cell", keel_cuda_grid_for(dev_of(d), B * H), 1,
                          256, 0, args);
}

static keel_status cu_gru_gates(keel_device *d, int64_t B, int64_t H, const float *xw,
                                const float *hr, const float *wb, const float *h_prev, int lbr,
                                float *z, float *rh) {
  if (B * H <= 0) return KEEL_OK;
  int32_t l = lbr;
  void *args[] = {&B, &H, &xw, &hr, &wb, &h_prev, &l, &z, &rh};
  return keel_cuda_launch(dev_of(d), "keel_rnn_gru_gates", keel_cuda_grid_for(dev_of(d), B * H), 1,
                          256, 0, args);
}

static keel_status cu_gru_out(keel_device *d, int64_t B, int64_t H, const float *xw,
                              const float *hr, const float *hrh, const float *wb, const float *z,
                              const float *rh, const float *h_prev, int lbr, float *h) {
  if (B * H <= 0) return KEEL_OK;
  int32_t l = lbr;
  void *args[] = {&B, &H, &xw, &hr, &hrh, &wb, &z, &rh, &h_prev, &l, &h};
  return keel_cuda_launch(dev_of(d), "keel_rnn_gru_out", keel_cuda_grid_for(dev_of(d), B * H), 1,
                          256, 0, args);
}

const keel_dev_rnn keel_cuda_rnn = {cu_lstm_cell, cu_gru_gates, cu_gru_out};

/* test_gpu_rnn.c: the `rnn` kernel group (device/dev_rnn.h) on a GPU
 * (kernels/rnn.cu through cuda_rnn.c) against its naive reference on the
 * emulated device (emu_rnn.c): LSTM's cell and GRU's gates and output,
 * with and without the recurrent term, biases and previous state, both
 * linear_before_reset values, batches 1 and 3, 17 and 64 units; relative
 * agreement 1e-5 (the GPU's exp and tanh against libm's). ctest label
 * `gpu`; without a GPU it says so and exits 77 (skipped). */
#include "device/dev_rnn.h"
#include "gpupair.h"


static void check_rnn(void) {
  static const int64_t shapes[][2] = {{1, 17}, {3, 64}};
  for (int i = 0; i < 2; i++) {
    int64_t B = shapes[i][0], H = shapes[i][1], n4 = B * 4 * H, nh = B * H;
    float *xw = frands(n4), *hr = frands(n4), *wb = frands(8 * H), *hp = frands(nh);
    keel_block *bx[2], *bh[2], *bw[2], *bp[2], *o1[2], *o2[2], *o3[2];
    for (int s = 0; s < 2; s++)
      bx[s] = put(s, xw, (size_t)n4 * 4), bh[s] = put(s, hr, (size_t)n4 * 4), bw[s] = put(s, wb, (size_t)8 * H * 4),
      bp[s] = put(s, hp, (size_t)nh * 4), o1[s] = put(s, NULL, (size_t)nh * 4), o2[s] = put(s, NULL, (size_t)nh * 4),
      o3[s] = put(s, NULL, (size_t)nh * 4);
    for (int v = 0; v < 4; v++) { /* bit 0: recurrent term and state, bit 1: biases */
      bool rec = v & 1, bias = v & 2;
      for (int s = 0; s < 2; s++)
        CHECK_OK(g_d[s]->rnn->lstm_cell(g_d[s], B, H, (float *)bx[s]->ptr, rec ? (float *)bh[s]->ptr : NULL,
                                        bias ? (float *)bw[s]->ptr : NULL, rec ? (float *)bp[s]->ptr : NULL,
                                        (float *)o1[s]->ptr, (float *)o2[s]->ptr));
      close_enough("lstm c", v, o1, nh, 1e-5);
      close_enough("lstm h", v, o2, nh, 1e-5);
      for (int lbr = 0; lbr < 2; lbr++) {
        for (int s = 0; s < 2; s++) {
          CHECK_OK(g_d[s]->rnn->gru_gates(g_d[s], B, H, (float *)bx[s]->ptr, rec ? (float *)bh[s]->ptr : NULL,
                                          bias ? (float *)bw[s]->ptr : NULL, rec ? (float *)bp[s]->ptr : NULL, lbr,
                                          (float *)o1[s]->ptr, (float *)o2[s]->ptr));
          CHECK_OK(g_d[s]->rnn->gru_out(g_d[s], B, H, (float *)bx[s]->ptr, rec ? (float *)bh[s]->ptr : NULL,
                                        rec && !lbr ? (float *)bh[s]->ptr : NULL, bias ? (float *)bw[s]->ptr : NULL,
                                        (float *)o1[s]->ptr, (float *)o2[s]->ptr, rec ? (float *)bp[s]->ptr : NULL,
                                        lbr, (float *)o3[s]->ptr));
        }
        close_enough(lbr ? "gru z (lbr)" : "gru z", v, o1, nh, 1e-5);
        close_enough(lbr ? "gru r (lbr)" : "gru r h", v, o2, nh, 1e-5);
        close_enough(lbr ? "gru h (lbr)" : "gru h", v, o3, nh, 1e-5);
      }
    }
    for (int s = 0; s < 2; s++)
      keel_heap_free(g_h[s], bx[s]), keel_heap_free(g_h[s], bh[s]), keel_heap_free(g_h[s], bw[s]),
      keel_heap_free(g_h[s], bp[s]), keel_heap_free(g_h[s], o1[s]), keel_heap_free(g_h[s], o2[s]),
      keel_heap_free(g_h[s], o3[s]);
    free(xw), free(hr), free(wb), free(hp);
  }
}

int main(void) {
  int rc = gpupair_open();
  if (rc) return rc;
  CHECK(g_d[0]->rnn && g_d[1]->rnn);
  check_rnn();
  return gpupair_close();
}

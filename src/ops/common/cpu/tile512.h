/* tile512.h: the multiply-add tile of keel's own channels-last conv
 * kernels (conv_stream.c, conv_wg.c): up to KEEL_TILE512_PX rows of 64
 * sums, each row the products of one row of inputs (one pixel's channels)
 * by a panel of W (cc rows of 64 output channels), in 28 AVX-512
 * accumulators (x86-64 with gcc or clang; call only where the CPU has
 * AVX-512F). */
#ifndef KEEL_TILE512_H
#define KEEL_TILE512_H

#include "ops/kernel.h"

#define KEEL_TILE512_PX 7

typedef struct keel_tile512 {
  const float *x[KEEL_TILE512_PX]; /* row p's cc inputs                       */
  const float *w;              /* cc rows of 64 floats                     */
  int64_t cc;
  float *acc;                  /* row p's 64 sums at acc + p * rs: read, the
                                  products added, written back            */
  int64_t rs;
  const char *pf;              /* npf cache lines to prefetch (into L2) while
                                  multiplying: one per channel step, the
                                  rest after                              */
  int64_t npf;
} keel_tile512;

/* acc[p] += sum over c < cc of x[p][c] * w[c] for the first n rows
 * (1 <= n <= KEEL_TILE512_PX). */
KEEL_INTERNAL void keel_tile512_run(const keel_tile512 *t, int n);

#endif /* KEEL_TILE512_H */

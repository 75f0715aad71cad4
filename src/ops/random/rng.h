/* rng.h: the pseudo-random generator of keel's random ops (Bernoulli,
 * RandomUniform*, RandomNormal*, Multinomial, Dropout in training mode).
 *
 * MT19937 with numpy's legacy seeding and 53-bit doubles: keel_rng_seed(s)
 * draws the same stream as np.random.seed(s); np.random.uniform, which
 * Dropout's training mode uses so that it reproduces the ONNX test data.
 * The random ops seed through keel_rng_seed_node, which mixes the node's
 * `seed` (same seed, same values, run after run, but not numpy's stream)
 * or takes the clock when the node has none. Kernels keep no state: each
 * call seeds a generator on its stack. */
#ifndef KEEL_RNG_H
#define KEEL_RNG_H

#include "ops/kernel.h"

typedef struct keel_rng {
  uint32_t s[624];
  int i;
  bool has_gauss;   /* numpy's gauss() makes values in pairs */
  double gauss;
} keel_rng;

KEEL_INTERNAL void keel_rng_seed(keel_rng *r, uint32_t seed);
/* Seeds from the node's `seed` attribute (a float in the schema), or from
 * the clock and the node's site when it has none. */
KEEL_INTERNAL void keel_rng_seed_node(keel_rng *r, const keel_kctx *k);
KEEL_INTERNAL uint32_t keel_rng_u32(keel_rng *r);
/* Uniform in [0, 1), 53 bits. */
KEEL_INTERNAL double keel_rng_uniform(keel_rng *r);
/* Standard normal (polar Box-Muller, as numpy's legacy gauss). */
KEEL_INTERNAL double keel_rng_normal(keel_rng *r);

#endif

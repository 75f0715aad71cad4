/* rng.c: MT19937 with numpy-compatible seeding and conversions (rng.h). */
#include "ops/random/rng.h"

#include <math.h>

#include "base/prim.h"

void keel_rng_seed(keel_rng *r, uint32_t seed) {
  r->s[0] = seed;
  for (uint32_t i = 1; i < 624; i++)
    r->s[i] = 1812433253u * (r->s[i - 1] ^ (r->s[i - 1] >> 30)) + i;
  r->i = 624;
  r->has_gauss = false;
}

/* splitmix64's finalizer: spreads a small seed over all bits. */
static uint32_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return (uint32_t)(x ^ (x >> 31));
}

void keel_rng_seed_node(keel_rng *r, const keel_kctx *k) {
  const keel_attr *a = keel_k_attr(k, "seed");
  if (a) { /* mixed: a seeded op must not replay the stream that numpy's
              np.random.seed(s) gives data made with the same seed */
    double s = a->type == KEEL_ATTR_FLOAT ? (double)a->f : (double)a->i;
    /* clamped: casting NaN, inf or a float past int64's range is UB */
    s = isfinite(s) ? fmin(fmax(s, -9.2e18), 9.2e18) : 0;
    keel_rng_seed(r, mix((uint64_t)(int64_t)s + 0x9E3779B97F4A7C15ull));
    return;
  }
  uint64_t t = keel_prim_now_ns() ^ ((uint64_t)k->owner.site << 32) ^ k->owner.iter;
  keel_rng_seed(r, (uint32_t)(t ^ (t >> 32)));
}

uint32_t keel_rng_u32(keel_rng *r) {
  if (r->i >= 624) {
    for (int j = 0; j < 624; j++) {
      uint32_t y = (r->s[j] & 0x80000000u) | (r->s[(j + 1) % 624] & 0x7FFFFFFFu);
      r->s[j] = r->s[(j + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908B0DFu : 0);
    }
    r->i = 0;
  }
  uint32_t y = r->s[r->i++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9D2C5680u;
  y ^= (y << 15) & 0xEFC60000u;
  return y ^ (y >> 18);
}

double keel_rng_uniform(keel_rng *r) {
  uint32_t a = keel_rng_u32(r) >> 5, b = keel_rng_u32(r) >> 6;
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

double keel_rng_normal(keel_rng *r) {
  if (r->has_gauss) {
    r->has_gauss = false;
    return r->gauss;
  }
  double x1, x2, r2;
  do {
    x1 = 2.0 * keel_rng_uniform(r) - 1.0;
    x2 = 2.0 * keel_rng_uniform(r) - 1.0;
    r2 = x1 * x1 + x2 * x2;
  } while (r2 >= 1.0 || r2 == 0.0);
  double f = sqrt(-2.0 * log(r2) / r2);
  r->gauss = f * x1;
  r->has_gauss = true;
  return f * x2;
}

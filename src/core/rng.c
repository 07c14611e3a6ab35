/* xoshiro256** random numbers seeded by splitmix64; normal deviates by Box-Muller. */
#include <math.h>

#include "loom/core.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void loom_rng_seed(loom_rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t loom_rng_u64(loom_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double loom_rng_uniform(loom_rng *r) { return (double)(loom_rng_u64(r) >> 11) * 0x1.0p-53; }

double loom_rng_normal(loom_rng *r) {
  double u1 = loom_rng_uniform(r), u2 = loom_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t loom_rng_below(loom_rng *r, uint64_t n) {
  if (n <= 1) return 0;
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = loom_rng_u64(r);
  while (x >= limit);
  return x % n;
}

/* The precision policy's AdamW (loom_adamw_flat): with bf16 moments and/or bf16 parameters
 * every stored value must be exactly round-to-nearest-even(fp32 value of loom_adamw_f32 run on
 * the widened stored values), the AVX-512 and portable loops bitwise equal, frozen gaps
 * untouched, the bf16 weight copies written in the pass bf16 of each updated parameter (and
 * nothing in the gaps); and against a double-precision AdamW the stored parameters are within
 * half a bf16 ulp plus the fp32 rounding of the update (the only errors the rule allows). */
#include <math.h>
#include <stdlib.h>

#include "ktest.h"

enum { NT = 5 };
static const size_t sizes[NT] = {3, 1000, 20000, 17, 40000};

typedef struct {
  float *p, *g, *m, *v;      /* fp32 state (m, v unused when m16) */
  loom_bf16 *m16, *v16;
  uint16_t *p16;             /* bf16 copies of the parameters written by the pass */
} state;
#define P16_UNSET 0xdeadu    /* what p16 holds before the pass (gaps must keep it) */

static size_t layout(size_t off[NT]) {
  size_t total = 0;
  for (int i = 0; i < NT; i++) off[i] = total, total += sizes[i] + 5; /* gaps: frozen */
  return total;
}

static void fill(state *s, size_t total, bool bf16_moments) {
  s->p = falloc(total), s->g = falloc(total), s->m = falloc(total), s->v = falloc(total);
  s->m16 = bf16_moments ? loom_alloc(2 * total * sizeof(loom_bf16)) : NULL;
  s->v16 = s->m16 ? s->m16 + total : NULL;
  s->p16 = loom_alloc(total * sizeof(uint16_t));
  for (size_t i = 0; i < total; i++) {
    s->p16[i] = P16_UNSET;
    s->p[i] = loom_bf16_round((float)(0.05 * loom_rng_normal(&ktest_rng)));
    s->g[i] = (float)(1e-2 * loom_rng_normal(&ktest_rng));
    s->m[i] = loom_bf16_round((float)(1e-3 * loom_rng_normal(&ktest_rng)));
    s->v[i] = loom_bf16_round((float)(1e-4 * loom_rng_uniform(&ktest_rng)));
    if (s->m16) s->m16[i] = loom_f32_to_bf16(s->m[i]), s->v16[i] = loom_f32_to_bf16(s->v[i]);
  }
}

static void copy(state *d, const state *s, size_t total) {
  d->p = falloc(total), d->g = falloc(total), d->m = falloc(total), d->v = falloc(total);
  memcpy(d->p, s->p, total * 4), memcpy(d->g, s->g, total * 4);
  memcpy(d->m, s->m, total * 4), memcpy(d->v, s->v, total * 4);
  d->m16 = s->m16 ? loom_alloc(2 * total * sizeof(loom_bf16)) : NULL;
  d->v16 = d->m16 ? d->m16 + total : NULL;
  if (d->m16) memcpy(d->m16, s->m16, 2 * total * sizeof(loom_bf16));
  d->p16 = loom_alloc(total * sizeof(uint16_t));
  memcpy(d->p16, s->p16, total * sizeof(uint16_t));
}

static void release(state *s) {
  loom_free(s->p), loom_free(s->g), loom_free(s->m), loom_free(s->v), loom_free(s->m16);
  loom_free(s->p16);
}

static void run_flat(state *s, bool round_p, const loom_adamw_segment *seg, float clip,
                     bool generic) {
  if (generic) setenv("LOOM_ADAMW_GENERIC", "1", 1);
  else unsetenv("LOOM_ADAMW_GENERIC");
  loom_adamw_flat(s->p, s->g, s->m, s->v, s->m16, s->v16, round_p, s->p16, 0, seg, NT, clip, 3e-3,
                  0.9, 0.95, 1e-8, 7);
  unsetenv("LOOM_ADAMW_GENERIC");
}

static void test_policy(bool bf16_moments, bool round_p) {
  size_t off[NT], total = layout(off);
  state a, b, ref, orig;
  fill(&a, total, bf16_moments);
  copy(&b, &a, total);
  copy(&ref, &a, total);
  copy(&orig, &a, total);
  loom_adamw_segment seg[NT];
  float clip = 0.37f;
  for (int i = 0; i < NT; i++) seg[i] = (loom_adamw_segment){off[i], off[i] + sizes[i], i % 2 ? 0.1 : 0.0};
  /* the rule: fp32 loom_adamw_f32 on the widened stored values (clip applied first, as the
   * clip pass would), then each stored value rounded to nearest even once */
  for (int i = 0; i < NT; i++) {
    for (size_t k = off[i]; k < off[i] + sizes[i]; k++) ref.g[k] *= clip;
    loom_adamw_f32(ref.p + off[i], ref.g + off[i], ref.m + off[i], ref.v + off[i], sizes[i], 3e-3,
                   0.9, 0.95, 1e-8, seg[i].weight_decay, 7);
  }
  run_flat(&a, round_p, seg, clip, false);
  run_flat(&b, round_p, seg, clip, true);
  int bad_p = 0, bad_m = 0, bad_gap = 0, bad_p16 = 0;
  for (int i = 0; i < NT; i++) {
    for (size_t k = off[i]; k < off[i] + sizes[i]; k++) {
      float want_p = round_p ? loom_bf16_round(ref.p[k]) : ref.p[k];
      bad_p += memcmp(&a.p[k], &want_p, 4) != 0;
      bad_p16 += a.p16[k] != loom_f32_to_bf16(ref.p[k]); /* bf16 of the updated value */
      if (bf16_moments)
        bad_m += a.m16[k] != loom_f32_to_bf16(ref.m[k]) || a.v16[k] != loom_f32_to_bf16(ref.v[k]);
      else
        bad_m += memcmp(&a.m[k], &ref.m[k], 4) != 0 || memcmp(&a.v[k], &ref.v[k], 4) != 0;
    }
    for (size_t k = off[i] + sizes[i]; k < off[i] + sizes[i] + 5; k++)
      bad_gap += a.p[k] != ref.p[k] || (bf16_moments && a.m16[k] != b.m16[k]) ||
                 a.p16[k] != P16_UNSET;
  }
  CHECK(bad_p == 0, "moments %s, round_p %d: %d parameters differ from the rule",
        bf16_moments ? "bf16" : "fp32", round_p, bad_p);
  CHECK(bad_m == 0, "moments %s: %d moments differ from the rule", bf16_moments ? "bf16" : "fp32",
        bad_m);
  CHECK(bad_p16 == 0, "moments %s, round_p %d: %d bf16 weight copies are not bf16(p)",
        bf16_moments ? "bf16" : "fp32", round_p, bad_p16);
  CHECK(bad_gap == 0, "frozen gaps changed in %d values", bad_gap);
  bool same = !memcmp(a.p, b.p, total * 4) && !memcmp(a.p16, b.p16, total * 2) &&
              (bf16_moments ? !memcmp(a.m16, b.m16, 2 * total * sizeof(loom_bf16))
                            : !memcmp(a.m, b.m, total * 4) && !memcmp(a.v, b.v, total * 4));
  CHECK(same, "SIMD (AVX-512 or AVX2) and portable loops differ (moments %s, round_p %d)",
        bf16_moments ? "bf16" : "fp32", round_p);
  /* against AdamW in double from the same stored inputs (orig): a stored bf16 parameter may
   * differ by half a bf16 ulp of the result (at most 2^-8 relative: 8 significant bits) plus
   * the fp32 error of the computation (a few fp32 ulps: 1e-6 of |p| + |update|, update <=
   * lr * 5 here) */
  int over = 0;
  double lr = 3e-3, bc1 = 1 - pow(0.9, 7), bc2 = 1 - pow(0.95, 7);
  for (int i = 0; i < NT && round_p; i++)
    for (size_t k = off[i]; k < off[i] + sizes[i]; k++) {
      double g = (double)orig.g[k] * (double)clip;
      double m = 0.9 * orig.m[k] + 0.1 * g, v = 0.95 * orig.v[k] + 0.05 * g * g;
      double pd = orig.p[k] * (1 - lr * seg[i].weight_decay);
      pd -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + 1e-8);
      double bound = ldexp(fabs(pd), -8) + 1e-6 * (fabs(pd) + 5 * lr);
      over += fabs((double)a.p[k] - pd) > bound;
    }
  CHECK(over == 0, "%d bf16 parameters further than half a bf16 ulp (+ fp32 error) from the "
        "double-precision AdamW", over);
  release(&a), release(&b), release(&ref), release(&orig);
}

int main(void) {
  loom_rng_seed(&ktest_rng, 20261125);
  test_policy(true, true);   /* param_dtype=bf16, optim_dtype=bf16 */
  test_policy(false, true);  /* param_dtype=bf16, optim_dtype=fp32 */
  test_policy(true, false);  /* param_dtype=fp32, optim_dtype=bf16 */
  test_policy(false, false); /* fp32 master weights and moments (the bf16 copies only) */
  return harness_finish("test_adamw_bf16");
}

/* float-only kernels: AdamW update, bf16 rounding, sum of squares. */
#include <math.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"

#define PAR_MIN_WORK 16384

void loom_adamw_f32(float *p, const float *g, float *m, float *v, size_t n, double lr,
                    double beta1, double beta2, double eps, double weight_decay, long step) {
  // p, g, m, v (n). Follows torch.optim.AdamW (single-tensor, non-capturable path):
  //   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
  //   p -= (lr / bc1) * (m / (sqrt(v) / sqrt(bc2) + eps)),  bc1 = 1-b1^t, bc2 = 1-b2^t
  // The scalars (decay factor, bias corrections, step size, sqrt(bc2)) are computed in double,
  // as Python floats are in PyTorch, then rounded to float once; the per-element arithmetic
  // is float. (PyTorch updates m with lerp, m + (1-b1)(g-m): equal up to float rounding.)
  LOOM_ASSERT(step >= 1);
  const double bc1 = 1.0 - pow(beta1, (double)step);
  const double bc2 = 1.0 - pow(beta2, (double)step);
  const float step_size = (float)(lr / bc1);
  const float bc2_sqrt = (float)sqrt(bc2);
  const float decay = (float)(1.0 - lr * weight_decay);
  const float b1 = (float)beta1, b2 = (float)beta2, epsf = (float)eps;
  const float one_m_b1 = (float)(1.0 - beta1), one_m_b2 = (float)(1.0 - beta2);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN_WORK)
  for (size_t i = 0; i < n; i++) {
    float pi = p[i], gi = g[i];
    if (weight_decay != 0.0) pi *= decay;
    float mi = b1 * m[i] + one_m_b1 * gi;
    float vi = b2 * v[i] + one_m_b2 * (gi * gi);
    float denom = sqrtf(vi) / bc2_sqrt + epsf;
    p[i] = pi - step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

static void loom_round_bf16_f32_run(float *dst, const float *src, size_t n) {
  // dst (n), src (n); dst == src is allowed. Round to nearest, ties to even; NaN stays NaN.
#pragma omp parallel for schedule(static) if (n >= PAR_MIN_WORK)
  for (size_t i = 0; i < n; i++) dst[i] = loom_bf16_round(src[i]);
}

void loom_round_bf16_f32(float *dst, const float *src, size_t n) {
  LOOM_PROF_PUSH(LOOM_PART_BF16_CVT);
  loom_round_bf16_f32_run(dst, src, n);
  LOOM_PROF_POP(0, 8.0 * n); /* 4 bytes read, 4 written per value */
}

static double loom_sumsq_f32_run(const float *x, size_t n) {
  // x (n). Fixed chunking that depends only on n: NCHUNK partial sums in double, each over a
  // contiguous range, then added in chunk order. Same bits for any thread count. Within a
  // chunk, LANES independent accumulators (element i goes to lane i % LANES, the lanes added
  // in order at the end): one chain of dependent adds ran at ~1 element per 4 cycles (the
  // clipping norm at 20% of the memory bandwidth); independent lanes vectorise.
  enum { NCHUNK = 256 };
  double part[NCHUNK];
  const size_t chunk = (n + NCHUNK - 1) / NCHUNK;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN_WORK)
  for (int c = 0; c < NCHUNK; c++) {
    size_t i0 = (size_t)c * chunk, i1 = i0 + chunk;
    if (i0 > n) i0 = n;
    if (i1 > n) i1 = n;
    enum { LANES = 16 };
    double lane[LANES] = {0};
    size_t i = i0;
    for (; i + LANES <= i1; i += LANES)
      for (int l = 0; l < LANES; l++) lane[l] += (double)x[i + l] * (double)x[i + l];
    for (; i < i1; i++) lane[(i - i0) % LANES] += (double)x[i] * (double)x[i];
    double acc = 0.0;
    for (int l = 0; l < LANES; l++) acc += lane[l];
    part[c] = acc;
  }
  double total = 0.0;
  for (int c = 0; c < NCHUNK; c++) total += part[c];
  return total;
}

double loom_sumsq_f32(const float *x, size_t n) {
  LOOM_PROF_PUSH(LOOM_PART_CLIP);
  double r = loom_sumsq_f32_run(x, n);
  LOOM_PROF_POP(0, 4.0 * n); /* x read once */
  return r;
}

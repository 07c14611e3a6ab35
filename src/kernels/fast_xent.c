/* Cross-entropy over row chunks of logits for the fused classifier head: per-row statistics
 * (max and sum of exp over the real vocabulary columns, the loss of the target) and the
 * unscaled logit gradient softmax - onehot, written in place over the logits so that a chunk
 * of R rows needs one (R, V) buffer and the (B*T, V) probabilities never exist. Rows are
 * independent (parallel over rows). Rows on AVX-512, AVX2 + FMA (fast_xent_avx2.c) or portable
 * C. Shapes: l, g (R,V) with the first `real` columns real; targets, row_max, row_sumexp,
 * losses (R). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"

static void row_stats_generic(const float *l, int real, float *mx_out, float *sum_out) {
  float mx = -INFINITY;
  for (int j = 0; j < real; j++) mx = l[j] > mx ? l[j] : mx;
  float sum = 0;
  for (int j = 0; j < real; j++) sum += expf(l[j] - mx);
  *mx_out = mx;
  *sum_out = sum;
}

static void row_grad_generic(float *g, const float *l, int V, int real, float mx, float inv,
                             float scale) {
  for (int j = 0; j < real; j++) g[j] = scale * (expf(l[j] - mx) * inv);
  for (int j = real; j < V; j++) g[j] = 0;
}

/* the same values rounded to bf16 (loom_f32_to_bf16), the target's -scale applied before the
 * rounding; g may overlay l's row (each value is read before the half-size write reaches it) */
static void row_grad16_generic(uint16_t *g, const float *l, int V, int real, float mx, float inv,
                               float scale, int t) {
  for (int j = 0; j < real; j++) {
    float x = scale * (expf(l[j] - mx) * inv);
    if (j == t) x -= scale;
    g[j] = loom_f32_to_bf16(x);
  }
  for (int j = real; j < V; j++) g[j] = 0;
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
#include "kernels/vmath_avx512.h"

static void row_stats_avx512(const float *l, int real, float *mx_out, float *sum_out) {
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
  int j = 0;
  for (; j + 32 <= real; j += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(l + j));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(l + j + 16));
  }
  for (; j < real; j += 16)
    m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), v_tail((size_t)(real - j)), l + j));
  float mx = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  __m512 vm = _mm512_set1_ps(mx), s0 = _mm512_setzero_ps(), s1 = s0;
  for (j = 0; j + 32 <= real; j += 32) {
    s0 = _mm512_add_ps(s0, v_exp(_mm512_sub_ps(_mm512_loadu_ps(l + j), vm)));
    s1 = _mm512_add_ps(s1, v_exp(_mm512_sub_ps(_mm512_loadu_ps(l + j + 16), vm)));
  }
  for (; j < real; j += 16) {
    __mmask16 m = v_tail((size_t)(real - j));
    s0 = _mm512_add_ps(s0, _mm512_maskz_mov_ps(m, v_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, l + j), vm))));
  }
  *mx_out = mx;
  *sum_out = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void row_grad_avx512(float *g, const float *l, int V, int real, float mx, float inv,
                            float scale) {
  __m512 vm = _mm512_set1_ps(mx), vi = _mm512_set1_ps(inv), vs = _mm512_set1_ps(scale);
  int j = 0;
  for (; j < real; j += 16) {
    __mmask16 m = v_tail((size_t)(real - j));
    __m512 p = _mm512_mul_ps(vs, _mm512_mul_ps(v_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, l + j), vm)), vi));
    _mm512_mask_storeu_ps(g + j, m, p);
  }
  for (j = real; j < V; j++) g[j] = 0;
}

static void row_grad16_avx512(uint16_t *g, const float *l, int V, int real, float mx, float inv,
                              float scale, int t) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  __m512 vm = _mm512_set1_ps(mx), vi = _mm512_set1_ps(inv), vs = _mm512_set1_ps(scale);
  for (int j = 0; j < real; j += 16) {
    __mmask16 m = v_tail((size_t)(real - j));
    __m512 p = _mm512_mul_ps(vs, _mm512_mul_ps(v_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, l + j), vm)), vi));
    if (t >= j && t < j + 16) p = _mm512_mask_sub_ps(p, (__mmask16)(1u << (t - j)), p, vs);
    __m512i u = _mm512_castps_si512(p); /* loom_f32_to_bf16, as fast_bf16.c */
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    _mm256_mask_storeu_epi16(g + j, m, _mm512_cvtepi32_epi16(r));
  }
  for (int j = real; j < V; j++) g[j] = 0;
}
#pragma GCC pop_options

/* 1: AVX-512, 2: AVX2 + FMA (fast_xent_avx2.c), 0: portable */
static int xent_path(void) { return fast_avx512() ? 1 : fast_avx2_fma() ? 2 : 0; }

static void loom_xent_stats_f32_run(float *row_max, float *row_sumexp, float *losses, const float *l,
                         const int32_t *targets, int R, int V, int real) {
  int simd = xent_path();
#pragma omp parallel for schedule(static) if ((size_t)R * V >= FAST_PAR_MIN)
  for (int r = 0; r < R; r++) {
    const float *row = l + (size_t)r * V;
    float mx, sum;
    if (simd == 1) row_stats_avx512(row, real, &mx, &sum);
    else if (simd == 2) fast_xent_row_stats_avx2(row, real, &mx, &sum);
    else row_stats_generic(row, real, &mx, &sum);
    if (row_max) row_max[r] = mx;
    if (row_sumexp) row_sumexp[r] = sum;
    if (losses) {
      int t = targets ? targets[r] : LOOM_IGNORE_INDEX;
      LOOM_ASSERT(t < real);
      losses[r] = t < 0 ? 0.0f : (float)(log((double)sum) + mx - row[t]);
    }
  }
}

void loom_xent_stats_f32(float *row_max, float *row_sumexp, float *losses, const float *l,
                         const int32_t *targets, int R, int V, int real) {
  LOOM_PROF_PUSH(LOOM_PART_XENT);
  loom_xent_stats_f32_run(row_max, row_sumexp, losses, l, targets, R, V, real);
  LOOM_PROF_POP(0, 4.0 * ((double)R * V + 3.0 * R)); /* logits read, max sumexp loss written */
}

static void loom_xent_grad_f32_run(float *g, const float *l, const float *row_max,
                        const float *row_sumexp, const int32_t *targets, int R, int V, int real,
                        float scale) {
  int simd = xent_path();
#pragma omp parallel for schedule(static) if ((size_t)R * V >= FAST_PAR_MIN)
  for (int r = 0; r < R; r++) {
    float *gr = g + (size_t)r * V;
    const float *lr = l + (size_t)r * V;
    int t = targets[r];
    if (t == LOOM_IGNORE_INDEX) {
      memset(gr, 0, (size_t)V * sizeof(float));
      continue;
    }
    float inv = 1.0f / row_sumexp[r];
    if (simd == 1) row_grad_avx512(gr, lr, V, real, row_max[r], inv, scale);
    else if (simd == 2) fast_xent_row_grad_avx2(gr, lr, V, real, row_max[r], inv, scale);
    else row_grad_generic(gr, lr, V, real, row_max[r], inv, scale);
    if (t >= 0) gr[t] -= scale;
  }
}

void loom_xent_grad_f32(float *g, const float *l, const float *row_max,
                        const float *row_sumexp, const int32_t *targets, int R, int V, int real,
                        float scale) {
  LOOM_PROF_PUSH(LOOM_PART_XENT);
  loom_xent_grad_f32_run(g, l, row_max, row_sumexp, targets, R, V, real, scale);
  LOOM_PROF_POP(0, 4.0 * (2.0 * R * V + 3.0 * R)); /* logits read, gradient written, row stats and targets read */
}

/* Rows of (R, V) bf16 with row stride ldg values: exactly loom_f32_to_bf16 of what
 * loom_xent_grad_f32 writes — the head's gradient in the GEMM's operand type with no fp32
 * gradient written and no conversion pass. g may be (uint16_t *)l with ldg = 2 V. */
static void loom_xent_grad_bf16_run(uint16_t *g, size_t ldg, const float *l,
                                    const float *row_max, const float *row_sumexp,
                                    const int32_t *targets, int R, int V, int real, float scale) {
  int simd = xent_path();
#pragma omp parallel for schedule(static) if ((size_t)R * V >= FAST_PAR_MIN)
  for (int r = 0; r < R; r++) {
    uint16_t *gr = g + (size_t)r * ldg;
    const float *lr = l + (size_t)r * V;
    int t = targets[r];
    if (t == LOOM_IGNORE_INDEX) {
      memset(gr, 0, (size_t)V * sizeof(uint16_t));
      continue;
    }
    float inv = 1.0f / row_sumexp[r];
    if (simd == 1) row_grad16_avx512(gr, lr, V, real, row_max[r], inv, scale, t);
    else if (simd == 2) fast_xent_row_grad16_avx2(gr, lr, V, real, row_max[r], inv, scale, t);
    else row_grad16_generic(gr, lr, V, real, row_max[r], inv, scale, t);
  }
}

void loom_xent_grad_bf16(uint16_t *g, size_t ldg, const float *l, const float *row_max,
                         const float *row_sumexp, const int32_t *targets, int R, int V, int real,
                         float scale) {
  LOOM_PROF_PUSH(LOOM_PART_XENT);
  loom_xent_grad_bf16_run(g, ldg, l, row_max, row_sumexp, targets, R, V, real, scale);
  LOOM_PROF_POP(0, (double)R * V * 6 + 12.0 * R); /* logits read, bf16 gradient written */
}

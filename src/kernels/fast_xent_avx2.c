/* Cross-entropy rows on AVX2 + FMA (machines without AVX-512; fast_xent.c holds the AVX-512
 * and portable paths and the row loops): a row's max and sum of exp over its `real` columns,
 * and its gradient scale * softmax (fp32, or rounded to bf16 with the target's -scale applied
 * first). The AVX-512 rows' operations in 8 lanes with the Cephes exp (vmath_avx2.h); the
 * columns past the last whole vector by the same expressions with libm's expf. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/fast_internal.h"
#include "loom/core.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "kernels/vmath_avx2.h"

void fast_xent_row_stats_avx2(const float *l, int real, float *mx_out, float *sum_out) {
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
  int j = 0;
  for (; j + 16 <= real; j += 16) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(l + j));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(l + j + 8));
  }
  for (; j + 8 <= real; j += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(l + j));
  float mx = v8_hmax(_mm256_max_ps(m0, m1));
  for (; j < real; j++) mx = l[j] > mx ? l[j] : mx;
  __m256 vm = _mm256_set1_ps(mx), s0 = _mm256_setzero_ps(), s1 = s0;
  for (j = 0; j + 16 <= real; j += 16) {
    s0 = _mm256_add_ps(s0, v8_exp(_mm256_sub_ps(_mm256_loadu_ps(l + j), vm)));
    s1 = _mm256_add_ps(s1, v8_exp(_mm256_sub_ps(_mm256_loadu_ps(l + j + 8), vm)));
  }
  for (; j + 8 <= real; j += 8) s0 = _mm256_add_ps(s0, v8_exp(_mm256_sub_ps(_mm256_loadu_ps(l + j), vm)));
  float sum = v8_hsum(_mm256_add_ps(s0, s1));
  for (; j < real; j++) sum += expf(l[j] - mx);
  *mx_out = mx;
  *sum_out = sum;
}

void fast_xent_row_grad_avx2(float *g, const float *l, int V, int real, float mx, float inv,
                             float scale) {
  __m256 vm = _mm256_set1_ps(mx), vi = _mm256_set1_ps(inv), vs = _mm256_set1_ps(scale);
  int j = 0;
  for (; j + 8 <= real; j += 8) {
    __m256 p = v8_exp(_mm256_sub_ps(_mm256_loadu_ps(l + j), vm));
    _mm256_storeu_ps(g + j, _mm256_mul_ps(vs, _mm256_mul_ps(p, vi)));
  }
  for (; j < real; j++) g[j] = scale * (expf(l[j] - mx) * inv);
  for (j = real; j < V; j++) g[j] = 0;
}

/* g may overlay l's row: each 16-byte write lands on values read before it */
void fast_xent_row_grad16_avx2(uint16_t *g, const float *l, int V, int real, float mx, float inv,
                               float scale, int t) {
  __m256 vm = _mm256_set1_ps(mx), vi = _mm256_set1_ps(inv), vs = _mm256_set1_ps(scale);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int j = 0;
  for (; j + 8 <= real; j += 8) {
    __m256 p = _mm256_mul_ps(vs, _mm256_mul_ps(v8_exp(_mm256_sub_ps(_mm256_loadu_ps(l + j), vm)), vi));
    if (t >= j && t < j + 8) { /* the target's lane: p - scale */
      __m256 at = _mm256_castsi256_ps(_mm256_cmpeq_epi32(lane, _mm256_set1_epi32(t - j)));
      p = _mm256_sub_ps(p, _mm256_and_ps(at, vs));
    }
    v8_store_bf16(g + j, p);
  }
  for (; j < real; j++) {
    float x = scale * (expf(l[j] - mx) * inv);
    if (j == t) x -= scale;
    g[j] = loom_f32_to_bf16(x);
  }
  for (j = real; j < V; j++) g[j] = 0;
}
#pragma GCC pop_options

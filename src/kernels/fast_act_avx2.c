/* The MLP's activations on AVX2 + FMA (machines without AVX-512; fast_act.c holds the AVX-512
 * and portable paths): SwiGLU y = silu(gate) up, and dgate = dy up sig (1 + g (1 - sig)),
 * dup = dy g sig, with sig = 1 / (1 + exp(-g)); bias + GELU (tanh form, as x sigmoid(2u),
 * u = sqrt(2/pi) (x + 0.044715 x^3)) and its backward s + 2 x s (1 - s) du/dx. exp is the 8-lane
 * Cephes exp (vmath_avx2.h; libm's expf and tanhf on the portable path, <= 2 ulp apart). The
 * same operations as the AVX-512 loops, in 8 lanes; a tail of n % 8 values by the same
 * expressions with libm. Every output element is written by one thread. Shapes: n values, or
 * a row of C. */
#include <immintrin.h>
#include <math.h>

#include "kernels/fast_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "kernels/vmath_avx2.h"

static inline __m256 sigmoid8(__m256 x) {
  __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, v8_exp(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

static inline float sigmoid1(float x) { return 1.0f / (1.0f + expf(-x)); }

void fast_swiglu_fwd_avx2(float *y, const float *gate, const float *up, size_t n) {
  const size_t n8 = n / 8 * 8;
#pragma omp parallel for schedule(static) if (n >= FAST_PAR_MIN)
  for (size_t i = 0; i < n8; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(g)), _mm256_loadu_ps(up + i)));
  }
  for (size_t i = n8; i < n; i++) y[i] = gate[i] * sigmoid1(gate[i]) * up[i];
}

void fast_swiglu_bwd_avx2(float *dgate, float *dup, const float *dy, const float *gate,
                          const float *up, size_t n) {
  const size_t n8 = n / 8 * 8;
#pragma omp parallel for schedule(static) if (n >= FAST_PAR_MIN)
  for (size_t i = 0; i < n8; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i), d = _mm256_loadu_ps(dy + i);
    __m256 s = sigmoid8(g), one = _mm256_set1_ps(1.0f);
    if (dgate) { /* dy up sig (1 + g (1 - sig)) */
      __m256 ds = _mm256_mul_ps(s, _mm256_fmadd_ps(g, _mm256_sub_ps(one, s), one));
      _mm256_storeu_ps(dgate + i, _mm256_mul_ps(_mm256_mul_ps(d, _mm256_loadu_ps(up + i)), ds));
    }
    if (dup) _mm256_storeu_ps(dup + i, _mm256_mul_ps(d, _mm256_mul_ps(g, s)));
  }
  for (size_t i = n8; i < n; i++) {
    float g = gate[i], s = sigmoid1(g);
    if (dgate) dgate[i] = dy[i] * up[i] * (s * (1.0f + g * (1.0f - s)));
    if (dup) dup[i] = dy[i] * (g * s);
  }
}
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

static inline __m256 gelu_s8(__m256 x) { /* sigmoid(2u) = 0.5 (1 + tanh u) */
  __m256 x2 = _mm256_mul_ps(x, x);
  __m256 u = _mm256_mul_ps(_mm256_set1_ps(2.0f * GELU_K),
                           _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(GELU_A), x2), x, x));
  return sigmoid8(u);
}

static inline float gelu_s1(float x) {
  return sigmoid1(2.0f * GELU_K * (GELU_A * x * x * x + x));
}

void fast_bias_gelu_row_avx2(float *ur, float *act, const float *bias, int C) {
  int c = 0;
  for (; c + 8 <= C; c += 8) {
    __m256 x = _mm256_loadu_ps(ur + c);
    if (bias) {
      x = _mm256_add_ps(x, _mm256_loadu_ps(bias + c));
      _mm256_storeu_ps(ur + c, x);
    }
    _mm256_storeu_ps(act + c, _mm256_mul_ps(x, gelu_s8(x)));
  }
  for (; c < C; c++) {
    float x = ur[c] + (bias ? bias[c] : 0.0f);
    ur[c] = x;
    act[c] = x * gelu_s1(x);
  }
}

void fast_gelu_bwd_avx2(float *du, const float *dact, const float *u, size_t n) {
  const size_t n8 = n / 8 * 8;
#pragma omp parallel for schedule(static) if (n >= FAST_PAR_MIN)
  for (size_t i = 0; i < n8; i += 8) {
    __m256 x = _mm256_loadu_ps(u + i), s = gelu_s8(x), one = _mm256_set1_ps(1.0f);
    __m256 du_ = _mm256_mul_ps(_mm256_set1_ps(GELU_K),
                               _mm256_fmadd_ps(_mm256_set1_ps(3.0f * GELU_A), _mm256_mul_ps(x, x), one));
    /* gelu' = s + 2 x s (1 - s) du */
    __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(x, x), s),
                             _mm256_mul_ps(_mm256_sub_ps(one, s), du_));
    _mm256_storeu_ps(du + i, _mm256_mul_ps(_mm256_loadu_ps(dact + i), _mm256_add_ps(s, t)));
  }
  for (size_t i = n8; i < n; i++) {
    float x = u[i], s = gelu_s1(x), d = GELU_K * (3.0f * GELU_A * x * x + 1.0f);
    du[i] = dact[i] * (s + 2.0f * x * s * ((1.0f - s) * d));
  }
}
#pragma GCC pop_options

/* AVX2 + FMA vector math for the fast kernels of machines without AVX-512: exp on 8 lanes
 * (the same Cephes expf polynomial as vmath_avx512.h's v_exp, <= 2 ulp on the normal range,
 * 0 below -104, inf above 89, NaN kept) and the lane mask of a bit set.
 * Include only inside a region compiled with #pragma GCC target("avx2,fma"). */
#ifndef LOOM_VMATH_AVX2_H
#define LOOM_VMATH_AVX2_H
#include <immintrin.h>

/* 2^n for integer-valued n in [-150, 129] (the range v8_exp's clamp leaves), as two factors
 * 2^(n/2) and 2^(n - n/2) that are normal floats: x * a * b rounds once into the subnormal
 * range, as scalef does, instead of building a wrapped exponent */
static inline __m256 v8_scale2(__m256 x, __m256 n) {
  __m256i ni = _mm256_cvtps_epi32(n);
  __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  __m256i bias = _mm256_set1_epi32(127);
  __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  __m256 b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(x, a), b);
}

static inline __m256 v8_exp(__m256 x) {
  /* NaN-preserving clamp: max/min return their second operand when either is NaN */
  x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
  x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  /* a NaN input: n converts to INT_MIN, but p is NaN and stays NaN */
  return v8_scale2(p, n);
}

/* all-ones lanes where bit i of bits (0..255) is set, lane i = bit i */
static inline __m256 v8_lanes(unsigned bits) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  __m256i b = _mm256_and_si256(_mm256_set1_epi32((int)bits), sel);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, sel));
}
#endif

/* AVX2 + FMA vector math for the fast kernels of machines without AVX-512: exp on 8 lanes
 * (the same Cephes expf polynomial as vmath_avx512.h's v_exp, <= 2 ulp on the normal range,
 * 0 below -104, inf above 89, NaN kept), fp32 -> bf16 rounding, horizontal sum and max, and
 * the lane mask of a bit set.
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

/* bf16 bits of 8 floats in the low halves of the lanes: loom_f32_to_bf16 (nearest even, NaN
 * quieted, subnormals kept) */
static inline __m256i v8_bf16_bits(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                   _mm256_set1_epi32(0x7f800000));
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(r, q, nan);
}

/* the 8 bf16 of v8_bf16_bits(x) stored at dst (16 bytes) */
static inline void v8_store_bf16(void *dst, __m256 x) {
  __m256i b = v8_bf16_bits(x); /* 8 x [0, 65535] */
  __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), 0x08);
  _mm_storeu_si128((__m128i *)dst, _mm256_castsi256_si128(packed));
}

/* horizontal sum and max of 8 lanes */
static inline float v8_hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
static inline float v8_hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

/* all-ones lanes where bit i of bits (0..255) is set, lane i = bit i */
static inline __m256 v8_lanes(unsigned bits) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  __m256i b = _mm256_and_si256(_mm256_set1_epi32((int)bits), sel);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, sel));
}
#endif

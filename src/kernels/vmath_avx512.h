/* AVX-512 vector math for the fast kernels: exp (Cephes expf polynomial, <= 2 ulp on the
 * normal range, 0 below -104, inf above 89, NaN kept), sigmoid, fp32 -> bf16 rounding,
 * a 16 x 16 register transpose, horizontal sums/max.
 * Include only inside a region compiled with #pragma GCC target("avx512f,avx512bw,avx512dq,
 * avx512vl,fma"). */
#ifndef LOOM_VMATH_AVX512_H
#define LOOM_VMATH_AVX512_H
#include <immintrin.h>

static inline __m512 v_exp(__m512 x) {
  /* NaN-preserving clamp: max/min return their second operand when either is NaN */
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

/* 1 / (1 + exp(-x)) */
static inline __m512 v_sigmoid(__m512 x) {
  __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, v_exp(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

/* bf16 of 16 floats given as bits, round to nearest even, NaN quieted, subnormals kept: bit
 * for bit loom_f32_to_bf16 (the AVX512-BF16 conversion would flush subnormals) */
static inline __m256i v_bf16_bits(__m512i u) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

/* 16 x 16 32-bit values transposed in registers: r[k] becomes column k (rows 0..15 in its
 * lanes). After the 32- and 64-bit interleaves, r[4g + c] holds in its 128-bit lane L the
 * column 4L + c of rows 4g..4g+3; two rounds of 128-bit lane shuffles gather the four groups. */
static inline void v_transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; g++) {
    r[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; c++) {
    t[c] = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
    t[8 + c] = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
  }
  for (int c = 0; c < 4; c++) {
    r[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xdd);
    r[4 + c] = _mm512_shuffle_i32x4(t[4 + c], t[12 + c], 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(t[4 + c], t[12 + c], 0xdd);
  }
}

/* mask of the first n (0..16) lanes */
static inline __mmask16 v_tail(size_t n) {
  return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}
#endif

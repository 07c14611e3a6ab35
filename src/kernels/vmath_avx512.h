/* AVX-512 vector math for the fast kernels: exp (Cephes expf polynomial, <= 2 ulp on the
 * normal range, 0 below -104, inf above 89, NaN kept), sigmoid, horizontal sums/max.
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

/* mask of the first n (0..16) lanes */
static inline __mmask16 v_tail(size_t n) {
  return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}
#endif

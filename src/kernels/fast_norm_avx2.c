/* Residual + norm forward and norm backward (LayerNorm and RMSNorm) on AVX2 + FMA (machines
 * without AVX-512; fast_norm.c holds the AVX-512 and portable paths): the AVX-512 kernels'
 * operations in 8 lanes, a row's last C % 8 columns through masked loads and stores. Forward
 * per row: r = x + res (+ bias), its statistics, y. Backward: dx per row, dw and db summed
 * over the caller's fixed row ranges into their partial rows (the caller adds the ranges in
 * order: no result depends on the thread count). Shapes: x, res, r, y, dy, dx (N,C); bias, w,
 * b, dw, db (C); mean, rstd (N). */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#include "kernels/fast_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "kernels/vmath_avx2.h"

/* lanes [0, n) of a vector, n >= 8: all */
static inline __m256i tail8(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline __m256 ld(const float *p, __m256i m) { return _mm256_maskload_ps(p, m); }
static inline void st(float *p, __m256i m, __m256 v) { _mm256_maskstore_ps(p, m, v); }

void fast_add_norm_row_avx2(float *orow, float *yr, float *mean_n, float *rstd_n,
                            const float *xr, const float *rr, const float *bias, const float *w,
                            const float *b, int C, float eps) {
  __m256 s = _mm256_setzero_ps(), ss = _mm256_setzero_ps();
  for (int c = 0; c < C; c += 8) { /* r, and its sum (LN) or sum of squares (RMS) */
    __m256i m = tail8(C - c);
    __m256 v = ld(xr + c, m);
    if (rr) v = _mm256_add_ps(v, ld(rr + c, m));
    if (bias) v = _mm256_add_ps(v, ld(bias + c, m));
    if (orow) st(orow + c, m, v);
    s = _mm256_add_ps(s, v);
    ss = _mm256_fmadd_ps(v, v, ss);
  }
  const float *in = orow ? orow : xr;
  if (mean_n) {
    float mu = v8_hsum(s) / (float)C;
    __m256 vmu = _mm256_set1_ps(mu), var = _mm256_setzero_ps();
    for (int c = 0; c < C; c += 8) {
      __m256i m = tail8(C - c);
      __m256 d = _mm256_and_ps(_mm256_castsi256_ps(m), _mm256_sub_ps(ld(in + c, m), vmu));
      var = _mm256_fmadd_ps(d, d, var);
    }
    float rs = 1.0f / sqrtf(v8_hsum(var) / (float)C + eps);
    __m256 vrs = _mm256_set1_ps(rs);
    for (int c = 0; c < C; c += 8) {
      __m256i m = tail8(C - c);
      __m256 o = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(ld(in + c, m), vmu), vrs), ld(w + c, m));
      if (b) o = _mm256_add_ps(o, ld(b + c, m));
      st(yr + c, m, o);
    }
    *mean_n = mu;
    *rstd_n = rs;
  } else {
    float rs = 1.0f / sqrtf(v8_hsum(ss) / (float)C + eps);
    __m256 vrs = _mm256_set1_ps(rs);
    for (int c = 0; c < C; c += 8) {
      __m256i m = tail8(C - c);
      st(yr + c, m, _mm256_mul_ps(_mm256_mul_ps(ld(in + c, m), vrs), ld(w + c, m)));
    }
    *rstd_n = rs;
  }
}

void fast_norm_bwd_rows_avx2(float *dx, float *qw, float *qb, const float *dy, const float *x,
                             const float *w, const float *mean, const float *rstd, int r0,
                             int r1, int C) {
  for (int n = r0; n < r1; n++) {
    const float *xr = x + (size_t)n * C, *dyr = dy + (size_t)n * C;
    float *dxr = dx ? dx + (size_t)n * C : NULL;
    const float rs = rstd[n];
    const __m256 vrs = _mm256_set1_ps(rs), vmu = _mm256_set1_ps(mean ? mean[n] : 0.0f);
    __m256 k1 = _mm256_setzero_ps(), k2 = _mm256_setzero_ps(); /* dx's row coefficients */
    if (dxr && mean) { /* dx += rs (g - mean(g) - xhat mean(g xhat)), g = dy w */
      __m256 sg = _mm256_setzero_ps(), sgx = _mm256_setzero_ps();
      for (int c = 0; c < C; c += 8) {
        __m256i m = tail8(C - c);
        __m256 xh = _mm256_mul_ps(_mm256_and_ps(_mm256_castsi256_ps(m), _mm256_sub_ps(ld(xr + c, m), vmu)), vrs);
        __m256 g = _mm256_mul_ps(ld(dyr + c, m), ld(w + c, m));
        sg = _mm256_add_ps(sg, g);
        sgx = _mm256_fmadd_ps(g, xh, sgx);
      }
      k1 = _mm256_set1_ps(v8_hsum(sg) / (float)C);
      k2 = _mm256_set1_ps(v8_hsum(sgx) / (float)C);
    } else if (dxr) { /* dx += rs dy w - x rs^3 (sum dy w x) / C */
      __m256 dot = _mm256_setzero_ps();
      for (int c = 0; c < C; c += 8) {
        __m256i m = tail8(C - c);
        __m256 g = _mm256_mul_ps(ld(dyr + c, m), ld(w + c, m));
        dot = _mm256_fmadd_ps(g, ld(xr + c, m), dot);
      }
      k1 = _mm256_set1_ps(rs * rs * rs * v8_hsum(dot) / (float)C);
    }
    for (int c = 0; c < C; c += 8) {
      __m256i m = tail8(C - c);
      __m256 d = ld(dyr + c, m), xv = ld(xr + c, m);
      if (dxr) {
        __m256 g = _mm256_mul_ps(d, ld(w + c, m)), o = ld(dxr + c, m);
        if (mean) {
          __m256 xh = _mm256_mul_ps(_mm256_sub_ps(xv, vmu), vrs);
          __m256 t = _mm256_sub_ps(_mm256_sub_ps(g, k1), _mm256_mul_ps(xh, k2));
          o = _mm256_fmadd_ps(vrs, t, o);
        } else {
          o = _mm256_add_ps(o, _mm256_fnmadd_ps(xv, k1, _mm256_mul_ps(vrs, g)));
        }
        st(dxr + c, m, o);
      }
      if (qw) {
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(xv, vmu), vrs);
        st(qw + c, m, _mm256_fmadd_ps(d, xh, ld(qw + c, m)));
      }
      if (qb) st(qb + c, m, _mm256_add_ps(ld(qb + c, m), d));
    }
  }
}
#pragma GCC pop_options

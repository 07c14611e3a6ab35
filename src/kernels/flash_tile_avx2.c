/* The tile operations of flash attention on AVX2 + FMA (machines without AVX-512; see
 * flash_tile.h): the register-blocked small GEMM (6 rows x 16 columns of accumulators, the
 * 12 + 2 + 1 of the 16 ymm registers), the forward's online-softmax step and column scaling,
 * and the backward's probabilities and dS, vectorised over 8 query columns of a transposed
 * tile. The same arithmetic as the AVX-512 tiles (Cephes exp, FMA), in 8 lanes; the tiles'
 * layout needs D % 8 == 0. Transposes, the output store and delta stay portable: they are
 * O(T D), the products O(T^2 D). */
#include <immintrin.h>
#include <math.h>

#include "kernels/flash_tile.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "kernels/vmath_avx2.h"

/* C (MR, 8 NV) block; MR and NV are compile-time constants at every call site */
static inline __attribute__((always_inline)) void kern(int MR, int NV, float *C, int ldc,
                                                        const float *A, long ai, long ap,
                                                        const float *B, long ldb, int k, int acc) {
  __m256 c[6][2];
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
    for (int j = 0; j < NV; j++)
      c[i][j] = acc ? _mm256_loadu_ps(C + (size_t)i * ldc + 8 * j) : _mm256_setzero_ps();
  for (int p = 0; p < k; p++) {
    __m256 b[2];
#pragma GCC unroll 2
    for (int j = 0; j < NV; j++) b[j] = _mm256_loadu_ps(B + p * ldb + 8 * j);
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
      __m256 a = _mm256_broadcast_ss(A + i * ai + p * ap);
#pragma GCC unroll 2
      for (int j = 0; j < NV; j++) c[i][j] = _mm256_fmadd_ps(a, b[j], c[i][j]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
    for (int j = 0; j < NV; j++) _mm256_storeu_ps(C + (size_t)i * ldc + 8 * j, c[i][j]);
}

#define KCASE(MR, NV)                                                                        \
  case (MR)*4 + (NV):                                                                        \
    kern(MR, NV, C + (size_t)i * ldc + col, ldc, A + i * ai, ai, ap, B + col, ldb, k, acc); \
    break;
#define KROW(MR) KCASE(MR, 1) KCASE(MR, 2)

void ftile_mm_avx2(float *C, int ldc, const float *A, long ai, long ap, const float *B, long ldb,
                   int m, int n, int k, int acc) {
  for (int col = 0; col < n; col += 16) {
    int nv = (n - col) >= 16 ? 2 : (n - col) / 8;
    for (int i = 0; i < m; i += 6) {
      int mr = m - i < 6 ? m - i : 6;
      switch (mr * 4 + nv) {
        KROW(1) KROW(2) KROW(3) KROW(4) KROW(5) KROW(6)
        default: break;
      }
    }
  }
}

/* visible lanes of query columns [8 g, 8 g + 8) of key row c */
static inline __m256 vis8(const ftile_vis *vis, int c, int g, int nq) {
  return v8_lanes((ftile_vis_lanes(vis, c, g / 2, nq) >> (8 * (g & 1))) & 0xffu);
}

void ftile_softmax_avx2(float *St, int nk, int nq, const ftile_vis *vis, float scale, float *m,
                        float *l, float *alpha) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY), vs = _mm256_set1_ps(scale);
  for (int g = 0; g < BQ / 8; g++) {
    if (8 * g >= nq) break;
    __m256 mx = _mm256_loadu_ps(m + 8 * g);
    for (int c = 0; c < nk; c++) { /* scale, mask, column max */
      float *row = St + c * BQ + 8 * g;
      __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row), vs);
      s = _mm256_blendv_ps(ninf, s, vis8(vis, c, g, nq));
      _mm256_storeu_ps(row, s);
      mx = _mm256_max_ps(mx, s);
    }
    __m256 dead = _mm256_cmp_ps(mx, ninf, _CMP_EQ_OQ);
    __m256 ms = _mm256_andnot_ps(dead, mx); /* 0 where the column saw nothing yet */
    __m256 sum = _mm256_setzero_ps();
    for (int c = 0; c < nk; c++) { /* exp(-inf - ms) = 0 on masked entries */
      float *row = St + c * BQ + 8 * g;
      __m256 p = v8_exp(_mm256_sub_ps(_mm256_loadu_ps(row), ms));
      _mm256_storeu_ps(row, p);
      sum = _mm256_add_ps(sum, p);
    }
    __m256 a = v8_exp(_mm256_sub_ps(_mm256_loadu_ps(m + 8 * g), ms));
    _mm256_storeu_ps(alpha + 8 * g, a);
    _mm256_storeu_ps(l + 8 * g, _mm256_fmadd_ps(a, _mm256_loadu_ps(l + 8 * g), sum));
    _mm256_storeu_ps(m + 8 * g, mx);
  }
}

void ftile_scale_cols_avx2(float *Ot, int D, const float *alpha) {
  __m256 a[BQ / 8];
  for (int g = 0; g < BQ / 8; g++) a[g] = _mm256_loadu_ps(alpha + 8 * g);
  for (int d = 0; d < D; d++)
    for (int g = 0; g < BQ / 8; g++) {
      float *p = Ot + (size_t)d * BQ + 8 * g;
      _mm256_storeu_ps(p, _mm256_mul_ps(_mm256_loadu_ps(p), a[g]));
    }
}

void ftile_bwd_avx2(float *St, float *dPt, int nk, int nq, const ftile_vis *vis, float scale,
                    const float *lse, const float *delta) {
  const __m256 vs = _mm256_set1_ps(scale);
  for (int g = 0; g < BQ / 8; g++) {
    __m256 vl = _mm256_loadu_ps(lse + 8 * g), vd = _mm256_loadu_ps(delta + 8 * g);
    for (int c = 0; c < nk; c++) {
      float *srow = St + c * BQ + 8 * g, *drow = dPt + c * BQ + 8 * g;
      __m256 e = v8_exp(_mm256_fmsub_ps(_mm256_loadu_ps(srow), vs, vl));
      __m256 p = _mm256_and_ps(vis8(vis, c, g, nq), e);
      _mm256_storeu_ps(srow, p);
      __m256 ds = _mm256_mul_ps(_mm256_mul_ps(p, _mm256_sub_ps(_mm256_loadu_ps(drow), vd)), vs);
      _mm256_storeu_ps(drow, ds);
    }
  }
}
#pragma GCC pop_options

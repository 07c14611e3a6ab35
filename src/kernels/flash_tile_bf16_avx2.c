/* Tiles of bf16 pairs on AVX2 + FMA (machines without AVX-512; see flash_tile_bf16.h): the
 * pair GEMM (4 rows x 16 columns of fp32 accumulators), the VNNI pack of two rows and the
 * plain row pack. Bitwise the portable path's results: a pair's bf16 values are widened by
 * shifts (exact), and each product of two bf16 values is exact in fp32, so the fused
 * multiply-adds (odd product first, then even, as vdpbf16ps) round once each like the
 * portable loop's multiply and add; rounding to bf16 is loom_f32_to_bf16's (nearest even,
 * NaN quieted, subnormals kept). Needs n, ncols % 8 == 0 (D % 8 == 0: fb_path). */
#include <immintrin.h>
#include <string.h>

#include "kernels/flash_tile_bf16.h"
#include "loom/core.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "kernels/vmath_avx2.h"

/* C (MR, 8 NV) block; MR and NV are compile-time constants at every call site */
static inline __attribute__((always_inline)) void kern(int MR, int NV, float *C, int ldc,
                                                        const uint32_t *A, long ai, long ap,
                                                        const uint32_t *B, long ldb, int kp,
                                                        int acc) {
  const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
  __m256 c[4][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
    for (int j = 0; j < NV; j++)
      c[i][j] = acc ? _mm256_loadu_ps(C + (size_t)i * ldc + 8 * j) : _mm256_setzero_ps();
  for (int p = 0; p < kp; p++) {
    __m256 bhi[2], blo[2];
#pragma GCC unroll 2
    for (int j = 0; j < NV; j++) {
      __m256i b = _mm256_loadu_si256((const __m256i *)(B + p * ldb + 8 * j));
      bhi[j] = _mm256_castsi256_ps(_mm256_and_si256(b, hi_mask));
      blo[j] = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
      __m256i a = _mm256_set1_epi32((int)A[i * ai + p * ap]);
      __m256 ahi = _mm256_castsi256_ps(_mm256_and_si256(a, hi_mask));
      __m256 alo = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
#pragma GCC unroll 2
      for (int j = 0; j < NV; j++)
        c[i][j] = _mm256_fmadd_ps(alo, blo[j], _mm256_fmadd_ps(ahi, bhi[j], c[i][j]));
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
    for (int j = 0; j < NV; j++) _mm256_storeu_ps(C + (size_t)i * ldc + 8 * j, c[i][j]);
}

#define KCASE(MR, NV)                                                                         \
  case (MR)*4 + (NV):                                                                         \
    kern(MR, NV, C + (size_t)i * ldc + col, ldc, A + i * ai, ai, ap, B + col, ldb, kp, acc); \
    break;
#define KROW(MR) KCASE(MR, 1) KCASE(MR, 2)

void fb_mm_avx2(float *C, int ldc, const uint32_t *A, long ai, long ap, const uint32_t *B,
                long ldb, int m, int n, int kp, int acc) {
  for (int col = 0; col < n; col += 16) {
    int nv = (n - col) >= 16 ? 2 : (n - col) / 8;
    for (int i = 0; i < m; i += 4) {
      int mr = m - i < 4 ? m - i : 4;
      switch (mr * 4 + nv) {
        KROW(1) KROW(2) KROW(3) KROW(4)
        default: break;
      }
    }
  }
}

void fb_pack_vnni_avx2(uint32_t *dst, int lddst, const float *src, long ld, int nrows,
                       int ncols, int npairs) {
  const __m256 zero = _mm256_setzero_ps();
  for (int p = 0; p < npairs; p++) {
    const float *e = src + 2 * p * ld, *o = src + (2 * p + 1) * ld;
    int he = 2 * p < nrows, ho = 2 * p + 1 < nrows;
    uint32_t *d = dst + (size_t)p * lddst;
    int j = 0;
    for (; j + 8 <= ncols; j += 8) {
      __m256i re = v8_bf16_bits(he ? _mm256_loadu_ps(e + j) : zero);
      __m256i ro = v8_bf16_bits(ho ? _mm256_loadu_ps(o + j) : zero);
      _mm256_storeu_si256((__m256i *)(d + j), _mm256_or_si256(re, _mm256_slli_epi32(ro, 16)));
    }
    for (; j < ncols; j++)
      d[j] = (uint32_t)loom_f32_to_bf16(he ? e[j] : 0.0f) |
             (uint32_t)loom_f32_to_bf16(ho ? o[j] : 0.0f) << 16;
  }
}

void fb_pack_rows_avx2(uint32_t *dst, int lddst, const float *src, long ld, int nrows, int ncols,
                       int nrows_pad) {
  int np = (ncols + 1) / 2;
  for (int r = 0; r < nrows_pad; r++) {
    uint32_t *d = dst + (size_t)r * lddst;
    if (r >= nrows) {
      memset(d, 0, (size_t)np * sizeof(uint32_t));
      continue;
    }
    const float *x = src + r * ld;
    uint16_t *h = (uint16_t *)d; /* consecutive bf16 values are the pairs (little-endian) */
    int j = 0;
    for (; j + 8 <= ncols; j += 8) {
      v8_store_bf16(h + j, _mm256_loadu_ps(x + j));
    }
    for (; j < ncols; j++) h[j] = loom_f32_to_bf16(x[j]);
    if (ncols % 2) h[ncols] = 0;
  }
}
#pragma GCC pop_options

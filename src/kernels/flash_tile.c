/* Tile operations of flash attention (see flash_tile.h): a register-blocked small GEMM with
 * broadcast A operand (6 rows x 64 columns of accumulators on AVX-512), the transposing tile
 * load, and the online-softmax / backward-probability steps, vectorised over the query
 * columns of a transposed tile. Portable versions follow the same arithmetic in plain C. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "kernels/flash_tile.h"
#include "loom/core.h"

/* ---- portable ------------------------------------------------------------------------------ */

static void mm_generic(float *C, int ldc, const float *A, long ai, long ap, const float *B,
                       long ldb, int m, int n, int k, int acc) {
  for (int i = 0; i < m; i++) {
    float *c = C + (size_t)i * ldc;
    if (!acc) memset(c, 0, (size_t)n * sizeof(float));
    for (int p = 0; p < k; p++) {
      float a = A[i * ai + p * ap];
      const float *b = B + p * ldb;
      for (int j = 0; j < n; j++) c[j] += a * b[j];
    }
  }
}

void ftile_transpose_in(float *Xt, const float *src, long ld, int nrows, int D) {
  for (int d = 0; d < D; d++) {
    float *row = Xt + (size_t)d * BQ;
    for (int r = 0; r < nrows; r++) row[r] = src[r * ld + d];
    for (int r = nrows; r < BQ; r++) row[r] = 0;
  }
}
static int visible(const ftile_vis *vis, int c, int r) {
  return vis->full || (r >= vis->rlo[c] && r <= vis->rhi[c]);
}

static void softmax_generic(float *St, int nk, int nq, const ftile_vis *vis, float scale,
                            float *m, float *l, float *alpha) {
  for (int r = 0; r < nq; r++) {
    float mx = m[r];
    for (int c = 0; c < nk; c++)
      if (visible(vis, c, r)) {
        float s = St[c * BQ + r] * scale;
        St[c * BQ + r] = s;
        mx = s > mx ? s : mx;
      }
    float ms = mx == -INFINITY ? 0.0f : mx, sum = 0;
    for (int c = 0; c < nk; c++) {
      float p = visible(vis, c, r) ? expf(St[c * BQ + r] - ms) : 0.0f;
      St[c * BQ + r] = p;
      sum += p;
    }
    alpha[r] = expf(m[r] - ms);
    l[r] = alpha[r] * l[r] + sum;
    m[r] = mx;
  }
}

static void bwd_generic(float *St, float *dPt, int nk, int nq, const ftile_vis *vis, float scale,
                        const float *lse, const float *delta) {
  for (int c = 0; c < nk; c++)
    for (int r = 0; r < BQ; r++) {
      float p = r < nq && visible(vis, c, r) ? expf(St[c * BQ + r] * scale - lse[r]) : 0.0f;
      St[c * BQ + r] = p;
      dPt[c * BQ + r] = p * (dPt[c * BQ + r] - delta[r]) * scale;
    }
}

/* ---- AVX-512 ------------------------------------------------------------------------------- */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
#include "kernels/vmath_avx512.h"

/* C (MR, 16 NV) block; MR and NV are compile-time constants at every call site */
static inline __attribute__((always_inline)) void kern(int MR, int NV, float *C, int ldc,
                                                        const float *A, long ai, long ap,
                                                        const float *B, long ldb, int k, int acc) {
  __m512 c[6][4];
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++)
      c[i][j] = acc ? _mm512_loadu_ps(C + (size_t)i * ldc + 16 * j) : _mm512_setzero_ps();
  for (int p = 0; p < k; p++) {
    __m512 b[4];
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) b[j] = _mm512_loadu_ps(B + p * ldb + 16 * j);
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
      __m512 a = _mm512_set1_ps(A[i * ai + p * ap]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; j++) c[i][j] = _mm512_fmadd_ps(a, b[j], c[i][j]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) _mm512_storeu_ps(C + (size_t)i * ldc + 16 * j, c[i][j]);
}

#define KCASE(MR, NV)                                                        \
  case (MR)*8 + (NV):                                                        \
    kern(MR, NV, C + (size_t)i * ldc + col, ldc, A + i * ai, ai, ap, B + col, ldb, k, acc); \
    break;
#define KROW(MR) KCASE(MR, 1) KCASE(MR, 2) KCASE(MR, 3) KCASE(MR, 4)

static void mm_avx512(float *C, int ldc, const float *A, long ai, long ap, const float *B,
                      long ldb, int m, int n, int k, int acc) {
  for (int col = 0; col < n; col += 64) {
    int nv = (n - col) >= 64 ? 4 : (n - col) / 16;
    for (int i = 0; i < m; i += 6) {
      int mr = m - i < 6 ? m - i : 6;
      switch (mr * 8 + nv) {
        KROW(1) KROW(2) KROW(3) KROW(4) KROW(5) KROW(6)
        default: break;
      }
    }
  }
}

static inline __mmask16 vis_mask(const ftile_vis *vis, int c, int q, int nq) {
  return (__mmask16)ftile_vis_lanes(vis, c, q, nq);
}

static void softmax_avx512(float *St, int nk, int nq, const ftile_vis *vis, float scale,
                           float *m, float *l, float *alpha) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY), vs = _mm512_set1_ps(scale);
  for (int q = 0; q < BQ / 16; q++) {
    if (16 * q >= nq) break;
    __m512 mx = _mm512_loadu_ps(m + 16 * q);
    for (int c = 0; c < nk; c++) { /* scale, mask, column max */
      __mmask16 vm = vis_mask(vis, c, q, nq);
      float *row = St + c * BQ + 16 * q;
      __m512 s = _mm512_mask_mul_ps(ninf, vm, _mm512_loadu_ps(row), vs);
      _mm512_storeu_ps(row, s);
      mx = _mm512_max_ps(mx, s);
    }
    __mmask16 dead = _mm512_cmp_ps_mask(mx, ninf, _CMP_EQ_OQ);
    __m512 ms = _mm512_mask_mov_ps(mx, dead, _mm512_setzero_ps());
    __m512 sum = _mm512_setzero_ps();
    for (int c = 0; c < nk; c++) { /* exp(-inf - ms) = 0 on masked entries */
      float *row = St + c * BQ + 16 * q;
      __m512 p = v_exp(_mm512_sub_ps(_mm512_loadu_ps(row), ms));
      _mm512_storeu_ps(row, p);
      sum = _mm512_add_ps(sum, p);
    }
    __m512 a = v_exp(_mm512_sub_ps(_mm512_loadu_ps(m + 16 * q), ms));
    _mm512_storeu_ps(alpha + 16 * q, a);
    _mm512_storeu_ps(l + 16 * q, _mm512_fmadd_ps(a, _mm512_loadu_ps(l + 16 * q), sum));
    _mm512_storeu_ps(m + 16 * q, mx);
  }
}

static void scale_cols_avx512(float *Ot, int D, const float *alpha) {
  __m512 a[BQ / 16];
  for (int q = 0; q < BQ / 16; q++) a[q] = _mm512_loadu_ps(alpha + 16 * q);
  for (int d = 0; d < D; d++)
    for (int q = 0; q < BQ / 16; q++) {
      float *p = Ot + (size_t)d * BQ + 16 * q;
      _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_loadu_ps(p), a[q]));
    }
}

static void bwd_avx512(float *St, float *dPt, int nk, int nq, const ftile_vis *vis, float scale,
                       const float *lse, const float *delta) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int q = 0; q < BQ / 16; q++) {
    __m512 vl = _mm512_loadu_ps(lse + 16 * q), vd = _mm512_loadu_ps(delta + 16 * q);
    for (int c = 0; c < nk; c++) {
      __mmask16 vm = vis_mask(vis, c, q, nq);
      float *srow = St + c * BQ + 16 * q, *drow = dPt + c * BQ + 16 * q;
      __m512 p = _mm512_maskz_mov_ps(vm, v_exp(_mm512_fmsub_ps(_mm512_loadu_ps(srow), vs, vl)));
      _mm512_storeu_ps(srow, p);
      __m512 ds = _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(drow), vd)), vs);
      _mm512_storeu_ps(drow, ds);
    }
  }
}
#pragma GCC pop_options

/* ---- dispatch ------------------------------------------------------------------------------ */

void ftile_mm(int simd, float *C, int ldc, const float *A, long ai, long ap, const float *B,
              long ldb, int m, int n, int k, int acc) {
  if (simd) mm_avx512(C, ldc, A, ai, ap, B, ldb, m, n, k, acc);
  else mm_generic(C, ldc, A, ai, ap, B, ldb, m, n, k, acc);
}

void ftile_softmax_step(int simd, float *St, int nk, int nq, const ftile_vis *vis, float scale,
                        float *m, float *l, float *alpha) {
  if (simd) softmax_avx512(St, nk, nq, vis, scale, m, l, alpha);
  else softmax_generic(St, nk, nq, vis, scale, m, l, alpha);
}

void ftile_scale_cols(int simd, float *Ot, int D, const float *alpha) {
  if (simd) {
    scale_cols_avx512(Ot, D, alpha);
    return;
  }
  for (int d = 0; d < D; d++)
    for (int r = 0; r < BQ; r++) Ot[(size_t)d * BQ + r] *= alpha[r];
}

void ftile_bwd_p_ds(int simd, float *St, float *dPt, int nk, int nq, const ftile_vis *vis,
                    float scale, const float *lse, const float *delta) {
  if (simd) bwd_avx512(St, dPt, nk, nq, vis, scale, lse, delta);
  else bwd_generic(St, dPt, nk, nq, vis, scale, lse, delta);
}

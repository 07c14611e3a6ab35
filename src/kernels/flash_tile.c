/* Tile operations of flash attention (see flash_tile.h): a register-blocked small GEMM with
 * broadcast A operand (6 rows x 64 columns of accumulators on AVX-512), the transposing tile
 * load and output store and the backward's delta (16 x 16 register transposes), the visible
 * 16-blocks of a partly masked tile, and the online-softmax / backward-probability steps,
 * vectorised over the query columns of a transposed tile. Portable versions follow the same
 * arithmetic in plain C. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "kernels/flash_tile.h"
#include "loom/core.h"

/* ---- portable ------------------------------------------------------------------------------ */

_Static_assert(BQ == BK, "square tiles: loom_flash_attention_tile gives one size");
int loom_flash_attention_tile(void) { return BQ; }

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

static void transpose_generic(float *Xt, const float *src, long ld, int nrows, int D) {
  for (int d = 0; d < D; d++) {
    float *row = Xt + (size_t)d * BQ;
    for (int r = 0; r < nrows; r++) row[r] = src[r * ld + d];
    for (int r = nrows; r < BQ; r++) row[r] = 0;
  }
}

void ftile_span_of(const ftile_vis *vis, int nk, int nq, ftile_span *sp) {
  for (int b = 0; b < BK / 16; b++) sp->q0[b] = BQ, sp->q1[b] = 0;
  for (int b = 0; b < BQ / 16; b++) sp->k0[b] = BK, sp->k1[b] = 0;
  for (int c = 0; c < nk; c++) {
    int lo = vis->full ? 0 : vis->rlo[c], hi = vis->full ? nq - 1 : vis->rhi[c];
    if (hi > nq - 1) hi = nq - 1;
    if (lo > hi) continue;
    int kb = c / 16;
    if (lo < sp->q0[kb]) sp->q0[kb] = lo;
    if (hi + 1 > sp->q1[kb]) sp->q1[kb] = hi + 1;
    for (int qb = lo / 16; qb <= hi / 16; qb++) {
      if (c < sp->k0[qb]) sp->k0[qb] = c;
      if (c + 1 > sp->k1[qb]) sp->k1[qb] = c + 1;
    }
  }
  for (int b = 0; b < BK / 16; b++) { /* whole blocks of 16, clipped to the tile */
    sp->q0[b] &= ~15;
    sp->q1[b] = (sp->q1[b] + 15) & ~15; /* <= BQ: columns are whole vectors */
  }
  for (int b = 0; b < BQ / 16; b++) {
    sp->k0[b] &= ~15;
    sp->k1[b] = (sp->k1[b] + 15) & ~15;
    if (sp->k1[b] > nk) sp->k1[b] = nk;
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

/* D a multiple of 16: 16 x 16 blocks; rows >= nrows load as zero */
static void transpose_avx512(float *Xt, const float *src, long ld, int nrows, int D) {
  for (int r0 = 0; r0 < BQ; r0 += 16)
    for (int d0 = 0; d0 < D; d0 += 16) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++)
        r[i] = r0 + i < nrows ? _mm512_loadu_si512(src + (r0 + i) * ld + d0) : _mm512_setzero_si512();
      v_transpose16(r);
#pragma GCC unroll 16
      for (int k = 0; k < 16; k++) _mm512_storeu_si512(Xt + (size_t)(d0 + k) * BQ + r0, r[k]);
    }
}
/* out row r (r < nrows, D floats, row stride ld) = column r of Ot (D, BQ) times inv[r] */
static void store_out_avx512(float *out, long ld, const float *Ot, const float *inv, int nrows,
                             int D) {
  for (int r0 = 0; r0 < nrows; r0 += 16)
    for (int d0 = 0; d0 < D; d0 += 16) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(Ot + (size_t)(d0 + i) * BQ + r0);
      v_transpose16(r);
      for (int k = 0; k < 16 && r0 + k < nrows; k++)
        _mm512_storeu_ps(out + (r0 + k) * ld + d0,
                         _mm512_mul_ps(_mm512_castsi512_ps(r[k]), _mm512_set1_ps(inv[r0 + k])));
    }
}
/* delta of 16 consecutive positions t0.. of (b, h) at once: the rows' blocks of 16 head-dim
 * values transposed so that each lane sums its own row in head-dim order, as the scalar loop */
static void delta_avx512(float *work, const float *out, const float *dout, int B, int T, int Hq,
                         int D, int round, int par) {
  const int nt = (T + 15) / 16;
#pragma omp parallel for collapse(2) schedule(static) if (par)
  for (int bh = 0; bh < B * Hq; bh++)
    for (int tb = 0; tb < nt; tb++) {
      const int b = bh / Hq, h = bh % Hq, t0 = 16 * tb, n = T - t0 < 16 ? T - t0 : 16;
      __m512 acc = _mm512_setzero_ps();
      for (int d0 = 0; d0 < D; d0 += 16) {
        __m512i o[16], g[16];
        for (int i = 0; i < 16; i++) {
          size_t row = (((size_t)b * T + t0 + i) * Hq + h) * D + d0;
          o[i] = i < n ? _mm512_loadu_si512(out + row) : _mm512_setzero_si512();
          g[i] = i < n ? _mm512_loadu_si512(dout + row) : _mm512_setzero_si512();
        }
        v_transpose16(o);
        v_transpose16(g);
        for (int k = 0; k < 16; k++) {
          __m512i gk = g[k];
          if (round) /* loom_bf16_round: the bf16 value, widened back exactly */
            gk = _mm512_slli_epi32(_mm512_cvtepu16_epi32(v_bf16_bits(gk)), 16);
          acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_castsi512_ps(o[k]), _mm512_castsi512_ps(gk)));
        }
      }
      _mm512_mask_storeu_ps(work + (size_t)bh * T + t0, v_tail((size_t)n), acc);
    }
}
#pragma GCC pop_options

/* ---- dispatch ------------------------------------------------------------------------------ */

int ftile_simd(int D) {
  if (fast_avx512() && D % 16 == 0) return FTILE_AVX512;
  if (fast_avx2_fma() && D % 8 == 0) return FTILE_AVX2;
  return FTILE_GENERIC;
}

void ftile_transpose_in(float *Xt, const float *src, long ld, int nrows, int D) {
  if (D % 16 == 0 && fast_avx512()) transpose_avx512(Xt, src, ld, nrows, D);
  else transpose_generic(Xt, src, ld, nrows, D);
}

void ftile_delta(float *work, const float *out, const float *dout, int B, int T, int Hq, int D,
                 int round, int par) {
  if (D % 16 == 0 && fast_avx512()) {
    delta_avx512(work, out, dout, B, T, Hq, D, round, par);
    return;
  }
#pragma omp parallel for collapse(2) schedule(static) if (par)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < Hq; h++) {
        const float *o = out + (((size_t)b * T + t) * Hq + h) * D;
        const float *g = dout + (((size_t)b * T + t) * Hq + h) * D;
        float acc = 0;
        for (int d = 0; d < D; d++) acc += o[d] * (round ? loom_bf16_round(g[d]) : g[d]);
        work[((size_t)b * Hq + h) * T + t] = acc;
      }
}

void ftile_store_out(float *out, long ld, const float *Ot, const float *l, int nrows, int D) {
  float inv[BQ];
  for (int r = 0; r < nrows; r++) inv[r] = l[r] > 0 ? 1.0f / l[r] : 0.0f;
  if (D % 16 == 0 && fast_avx512()) {
    store_out_avx512(out, ld, Ot, inv, nrows, D);
    return;
  }
  for (int r = 0; r < nrows; r++)
    for (int d = 0; d < D; d++) out[r * ld + d] = Ot[(size_t)d * BQ + r] * inv[r];
}

void ftile_mm(int simd, float *C, int ldc, const float *A, long ai, long ap, const float *B,
              long ldb, int m, int n, int k, int acc) {
  if (simd == FTILE_AVX512) mm_avx512(C, ldc, A, ai, ap, B, ldb, m, n, k, acc);
  else if (simd == FTILE_AVX2) ftile_mm_avx2(C, ldc, A, ai, ap, B, ldb, m, n, k, acc);
  else mm_generic(C, ldc, A, ai, ap, B, ldb, m, n, k, acc);
}

void ftile_softmax_step(int simd, float *St, int nk, int nq, const ftile_vis *vis, float scale,
                        float *m, float *l, float *alpha) {
  if (simd == FTILE_AVX512) softmax_avx512(St, nk, nq, vis, scale, m, l, alpha);
  else if (simd == FTILE_AVX2) ftile_softmax_avx2(St, nk, nq, vis, scale, m, l, alpha);
  else softmax_generic(St, nk, nq, vis, scale, m, l, alpha);
}

void ftile_scale_cols(int simd, float *Ot, int D, const float *alpha) {
  if (simd == FTILE_AVX512) {
    scale_cols_avx512(Ot, D, alpha);
    return;
  }
  if (simd == FTILE_AVX2) {
    ftile_scale_cols_avx2(Ot, D, alpha);
    return;
  }
  for (int d = 0; d < D; d++)
    for (int r = 0; r < BQ; r++) Ot[(size_t)d * BQ + r] *= alpha[r];
}

void ftile_bwd_p_ds(int simd, float *St, float *dPt, int nk, int nq, const ftile_vis *vis,
                    float scale, const float *lse, const float *delta) {
  if (simd == FTILE_AVX512) bwd_avx512(St, dPt, nk, nq, vis, scale, lse, delta);
  else if (simd == FTILE_AVX2) ftile_bwd_avx2(St, dPt, nk, nq, vis, scale, lse, delta);
  else bwd_generic(St, dPt, nk, nq, vis, scale, lse, delta);
}

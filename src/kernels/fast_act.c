/* Elementwise kernels of the MLP and the residual stream, vectorised with AVX-512: bias + GELU
 * (tanh form, computed as x * sigmoid(2u), the same function), GELU backward, SwiGLU forward
 * and backward (those four also AVX2 + FMA: fast_act_avx2.c), residual adds, scaling and bias
 * gradients. Every output element is written by one thread; the bias gradient sums fixed row
 * ranges, then the ranges in order. Portable path: plain loops with libm. Shapes: u, act (N,C)
 * or n values; bias (C). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f
#define CB 64

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
#include "kernels/vmath_avx512.h"

static inline __m512 gelu_s(__m512 x) { /* sigmoid(2u) = 0.5 (1 + tanh u) */
  __m512 x2 = _mm512_mul_ps(x, x);
  __m512 u = _mm512_mul_ps(_mm512_set1_ps(2.0f * GELU_K),
                           _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_A), x2), x, x));
  return v_sigmoid(u);
}

/* act (fp32) or, when act16 is not NULL, act16 (its bf16) */
static void bias_gelu_avx512(float *u, float *act, uint16_t *act16, const float *bias, int N,
                             int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= FAST_PAR_MIN)
  for (int n = 0; n < N; n++) {
    float *ur = u + (size_t)n * C;
    for (int c = 0; c < C; c += 16) {
      __mmask16 m = v_tail((size_t)(C - c));
      __m512 x = _mm512_maskz_loadu_ps(m, ur + c);
      if (bias) {
        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, bias + c));
        _mm512_mask_storeu_ps(ur + c, m, x);
      }
      __m512 a = _mm512_mul_ps(x, gelu_s(x));
      if (act16)
        _mm256_mask_storeu_epi16(act16 + (size_t)n * C + c, m, v_bf16_bits(_mm512_castps_si512(a)));
      else
        _mm512_mask_storeu_ps(act + (size_t)n * C + c, m, a);
    }
  }
}

static void gelu_bwd_avx512(float *du, const float *dact, const float *u, size_t n) {
#pragma omp parallel for schedule(static) if (n >= FAST_PAR_MIN)
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = v_tail(n - i);
    __m512 x = _mm512_maskz_loadu_ps(m, u + i);
    __m512 s = gelu_s(x);
    __m512 du_ = _mm512_mul_ps(_mm512_set1_ps(GELU_K),
                               _mm512_fmadd_ps(_mm512_set1_ps(3.0f * GELU_A), _mm512_mul_ps(x, x),
                                               _mm512_set1_ps(1.0f)));
    /* gelu' = s + 2 x s (1 - s) du */
    __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(x, x), s),
                             _mm512_mul_ps(_mm512_sub_ps(_mm512_set1_ps(1.0f), s), du_));
    __m512 g = _mm512_add_ps(s, t);
    _mm512_mask_storeu_ps(du + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dact + i), g));
  }
}

/* y (fp32) or, when y16 is not NULL, y16 (its bf16) */
static void swiglu_fwd_avx512(float *y, uint16_t *y16, const float *gate, const float *up,
                              size_t n) {
#pragma omp parallel for schedule(static) if (n >= FAST_PAR_MIN)
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = v_tail(n - i);
    __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    __m512 o = _mm512_mul_ps(_mm512_mul_ps(g, v_sigmoid(g)), _mm512_maskz_loadu_ps(m, up + i));
    if (y16) _mm256_mask_storeu_epi16(y16 + i, m, v_bf16_bits(_mm512_castps_si512(o)));
    else _mm512_mask_storeu_ps(y + i, m, o);
  }
}

/* dgate, dup (fp32) or, with bf16 set, dgate16, dup16 (their bf16) */
static void swiglu_bwd_avx512(float *dgate, float *dup, uint16_t *dgate16, uint16_t *dup16,
                              const float *dy, const float *gate, const float *up, size_t n) {
#pragma omp parallel for schedule(static) if (n >= FAST_PAR_MIN)
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = v_tail(n - i);
    __m512 g = _mm512_maskz_loadu_ps(m, gate + i), d = _mm512_maskz_loadu_ps(m, dy + i);
    __m512 s = v_sigmoid(g), one = _mm512_set1_ps(1.0f);
    if (dgate || dgate16) { /* dy up sig (1 + g (1 - sig)) */
      __m512 ds = _mm512_mul_ps(s, _mm512_fmadd_ps(g, _mm512_sub_ps(one, s), one));
      __m512 r = _mm512_mul_ps(_mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, up + i)), ds);
      if (dgate16) _mm256_mask_storeu_epi16(dgate16 + i, m, v_bf16_bits(_mm512_castps_si512(r)));
      else _mm512_mask_storeu_ps(dgate + i, m, r);
    }
    if (dup || dup16) {
      __m512 r = _mm512_mul_ps(d, _mm512_mul_ps(g, s));
      if (dup16) _mm256_mask_storeu_epi16(dup16 + i, m, v_bf16_bits(_mm512_castps_si512(r)));
      else _mm512_mask_storeu_ps(dup + i, m, r);
    }
  }
}

static void residual_avx512(float *y, const float *x, const float *a, const float *bias, int N,
                            int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= FAST_PAR_MIN)
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c += 16) {
      __mmask16 m = v_tail((size_t)(C - c));
      size_t i = (size_t)n * C + c;
      __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, a + i));
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + c));
      _mm512_mask_storeu_ps(y + i, m, v);
    }
}

/* db (C) += column sums of dy (N,C). Rows are cut into BG_CHUNKS fixed ranges (by N alone, so
 * the bits do not depend on the thread count); each range is summed row by row into its own
 * partial row, streaming dy in memory order (column blocks over all rows read dy with a stride
 * of a whole row: 16 GB/s on Zen 4 with 2 threads), then the partial rows are added in range
 * order. */
enum { BG_CHUNKS = 64 };
/* dy16 (N,C), when not NULL: bf16 of dy written in the same pass (the read dy is the larger
 * cost; converting it again for the bf16 GEMMs would read it twice) */
static void bias_grad_avx512(float *db, uint16_t *dy16, const float *dy, int N, int C) {
  if (N <= 0) return;
  const int nch = N < BG_CHUNKS ? N : BG_CHUNKS, par = (size_t)N * C >= FAST_PAR_MIN;
  float *part = loom_alloc((size_t)nch * C * sizeof(float)); /* (nch, C) */
#pragma omp parallel for schedule(static) if (par)
  for (int ch = 0; ch < nch; ch++) {
    const int r0 = (int)((long)N * ch / nch), r1 = (int)((long)N * (ch + 1) / nch);
    float *p = part + (size_t)ch * C;
    memcpy(p, dy + (size_t)r0 * C, (size_t)C * sizeof(float));
    if (dy16) { /* row by row, in memory order, the bf16 row written beside it (the first row
                   only converted: it is the range's partial row): the blocks below, with 16
                   rows' streams of stores, ran at 26 GB/s where this runs at 38 (8192 x 3072,
                   2 threads, Zen 4) */
      for (int r = r0; r < r1; r++) {
        const float *row = dy + (size_t)r * C;
        uint16_t *row16 = dy16 + (size_t)r * C;
        for (int c = 0; c < C; c += 16) {
          __mmask16 m = v_tail((size_t)(C - c));
          __m512 v = _mm512_maskz_loadu_ps(m, row + c);
          if (r > r0)
            _mm512_mask_storeu_ps(p + c, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, p + c), v));
          _mm256_mask_storeu_epi16(row16 + c, m, v_bf16_bits(_mm512_castps_si512(v)));
        }
      }
      continue;
    }
    /* blocks of BG_ROWS rows (in L2) swept per 64 columns with the sums in registers: the
     * partial row is loaded and stored once per block instead of once per row */
    enum { BG_ROWS = 16 };
    for (int rb = r0 + 1; rb < r1; rb += BG_ROWS) {
      const int re = rb + BG_ROWS < r1 ? rb + BG_ROWS : r1;
      for (int c = 0; c < C; c += 64) {
        __mmask16 m[4];
        __m512 acc[4];
        for (int j = 0; j < 4; j++) {
          m[j] = c + 16 * j < C ? v_tail((size_t)(C - c - 16 * j)) : 0;
          acc[j] = _mm512_maskz_loadu_ps(m[j], p + c + 16 * j);
        }
        for (int r = rb; r < re; r++) {
          const float *row = dy + (size_t)r * C + c;
          for (int j = 0; j < 4; j++)
            acc[j] = _mm512_add_ps(acc[j], _mm512_maskz_loadu_ps(m[j], row + 16 * j));
        }
        for (int j = 0; j < 4; j++) _mm512_mask_storeu_ps(p + c + 16 * j, m[j], acc[j]);
      }
    }
  }
  fast_add_partials(db, part, nch, C, par);
  loom_free(part);
}

void fast_add_partials(float *out, const float *part, int nch, int C, int par) {
#pragma omp parallel for schedule(static) if (par)
  for (int v = 0; v < (C + 15) / 16; v++) {
    const int c = 16 * v;
    __mmask16 m = v_tail((size_t)(C - c));
    __m512 acc = _mm512_maskz_loadu_ps(m, part + c);
    for (int ch = 1; ch < nch; ch++)
      acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, part + (size_t)ch * C + c));
    _mm512_mask_storeu_ps(out + c, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, out + c), acc));
  }
}
#pragma GCC pop_options

/* portable: rows [n0, n1); act row n at act + (n - n0) * C */
static void bias_gelu_generic(float *u, float *act, const float *bias, int n0, int n1, int C) {
  for (int n = n0; n < n1; n++)
    for (int c = 0; c < C; c++) {
      size_t i = (size_t)n * C + c;
      float x = u[i] + (bias ? bias[c] : 0.0f);
      u[i] = x;
      float uu = GELU_K * (x + GELU_A * x * x * x);
      act[(size_t)(n - n0) * C + c] = 0.5f * x * (1.0f + tanhf(uu));
    }
}

static void loom_bias_gelu_forward_f32_run(float *u, float *act, const float *bias, int N, int C) {
  if (fast_avx512()) {
    bias_gelu_avx512(u, act, NULL, bias, N, C);
    return;
  }
  const int avx2 = fast_avx2_fma();
#pragma omp parallel for schedule(static) if ((size_t)N * C >= FAST_PAR_MIN)
  for (int n = 0; n < N; n++) {
    if (avx2) fast_bias_gelu_row_avx2(u + (size_t)n * C, act + (size_t)n * C, bias, C);
    else bias_gelu_generic(u, act + (size_t)n * C, bias, n, n + 1, C);
  }
}

void loom_bias_gelu_forward_bf16_out(float *u, uint16_t *act16, const float *bias, int N, int C) {
  LOOM_PROF_PUSH(LOOM_PART_ACT);
  if (fast_avx512()) {
    bias_gelu_avx512(u, NULL, act16, bias, N, C);
  } else { /* the portable values a row at a time, then rounded */
    float *row = loom_alloc((size_t)(C > 0 ? C : 1) * sizeof(float));
    for (int n = 0; n < N; n++) {
      if (fast_avx2_fma()) fast_bias_gelu_row_avx2(u + (size_t)n * C, row, bias, C);
      else bias_gelu_generic(u, row, bias, n, n + 1, C);
      for (int c = 0; c < C; c++) act16[(size_t)n * C + c] = loom_f32_to_bf16(row[c]);
    }
    loom_free(row);
  }
  LOOM_PROF_POP(0, 4.0 * (2.0 * N * C + C) + 2.0 * N * C); /* u read and written, act16 written */
}

void loom_bias_gelu_forward_f32(float *u, float *act, const float *bias, int N, int C) {
  LOOM_PROF_PUSH(LOOM_PART_ACT);
  loom_bias_gelu_forward_f32_run(u, act, bias, N, C);
  LOOM_PROF_POP(0, 4.0 * (3.0 * N * C + C)); /* u read and written back, act written, bias read */
}

static void loom_gelu_backward_fast_f32_run(float *du, const float *dact, const float *u, size_t n) {
  if (fast_avx512()) {
    gelu_bwd_avx512(du, dact, u, n);
    return;
  }
  if (fast_avx2_fma()) {
    fast_gelu_bwd_avx2(du, dact, u, n);
    return;
  }
  memset(du, 0, n * sizeof(float));
  loom_gelu_backward_f32(du, dact, u, n);
}

void loom_gelu_backward_fast_f32(float *du, const float *dact, const float *u, size_t n) {
  LOOM_PROF_PUSH(LOOM_PART_ACT);
  loom_gelu_backward_fast_f32_run(du, dact, u, n);
  LOOM_PROF_POP(0, 12.0 * n); /* dact, u read, du written */
}

static void loom_swiglu_forward_fast_f32_run(float *y, const float *gate, const float *up, size_t n) {
  if (fast_avx512()) swiglu_fwd_avx512(y, NULL, gate, up, n);
  else if (fast_avx2_fma()) fast_swiglu_fwd_avx2(y, gate, up, n);
  else loom_swiglu_forward_f32(y, gate, up, n);
}

void loom_swiglu_forward_bf16_out(uint16_t *y16, const float *gate, const float *up, size_t n) {
  LOOM_PROF_PUSH(LOOM_PART_ACT);
  if (fast_avx512()) {
    swiglu_fwd_avx512(NULL, y16, gate, up, n);
  } else { /* the portable values in blocks, then rounded */
    float blk[1024];
    for (size_t i = 0; i < n; i += 1024) {
      size_t k = n - i < 1024 ? n - i : 1024;
      if (fast_avx2_fma()) fast_swiglu_fwd_avx2(blk, gate + i, up + i, k);
      else loom_swiglu_forward_f32(blk, gate + i, up + i, k);
      for (size_t j = 0; j < k; j++) y16[i + j] = loom_f32_to_bf16(blk[j]);
    }
  }
  LOOM_PROF_POP(0, 10.0 * n); /* gate, up read, y16 written */
}

void loom_swiglu_forward_fast_f32(float *y, const float *gate, const float *up, size_t n) {
  LOOM_PROF_PUSH(LOOM_PART_ACT);
  loom_swiglu_forward_fast_f32_run(y, gate, up, n);
  LOOM_PROF_POP(0, 12.0 * n); /* gate, up read, y written */
}

static void loom_swiglu_backward_fast_f32_run(float *dgate, float *dup, const float *dy, const float *gate,
                                   const float *up, size_t n) {
  if (fast_avx512()) {
    swiglu_bwd_avx512(dgate, dup, NULL, NULL, dy, gate, up, n);
    return;
  }
  if (fast_avx2_fma()) {
    fast_swiglu_bwd_avx2(dgate, dup, dy, gate, up, n);
    return;
  }
  if (dgate) memset(dgate, 0, n * sizeof(float));
  if (dup) memset(dup, 0, n * sizeof(float));
  loom_swiglu_backward_f32(dgate, dup, dy, gate, up, n);
}

void loom_swiglu_backward_bf16_out(uint16_t *dgate16, uint16_t *dup16, const float *dy,
                                   const float *gate, const float *up, size_t n) {
  LOOM_PROF_PUSH(LOOM_PART_ACT);
  if (fast_avx512()) {
    swiglu_bwd_avx512(NULL, NULL, dgate16, dup16, dy, gate, up, n);
  } else { /* the portable values in blocks, then rounded */
    float bg[512], bu[512];
    for (size_t i = 0; i < n; i += 512) {
      size_t k = n - i < 512 ? n - i : 512;
      memset(bg, 0, sizeof bg), memset(bu, 0, sizeof bu);
      if (fast_avx2_fma()) fast_swiglu_bwd_avx2(bg, bu, dy + i, gate + i, up + i, k);
      else loom_swiglu_backward_f32(bg, bu, dy + i, gate + i, up + i, k);
      for (size_t j = 0; j < k; j++)
        dgate16[i + j] = loom_f32_to_bf16(bg[j]), dup16[i + j] = loom_f32_to_bf16(bu[j]);
    }
  }
  LOOM_PROF_POP(0, 16.0 * n); /* dy, gate, up read, dgate16, dup16 written */
}

void loom_swiglu_backward_fast_f32(float *dgate, float *dup, const float *dy, const float *gate,
                                   const float *up, size_t n) {
  LOOM_PROF_PUSH(LOOM_PART_ACT);
  loom_swiglu_backward_fast_f32_run(dgate, dup, dy, gate, up, n);
  LOOM_PROF_POP(0, 4.0 * n * (3 + (dgate != NULL) + (dup != NULL))); /* dy, gate, up read, dgate dup written */
}

static void loom_residual_add_f32_run(float *y, const float *x, const float *a, const float *bias, int N,
                           int C) {
  if (fast_avx512()) {
    residual_avx512(y, x, a, bias, N, C);
    return;
  }
#pragma omp parallel for schedule(static) if ((size_t)N * C >= FAST_PAR_MIN)
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      size_t i = (size_t)n * C + c;
      y[i] = x[i] + a[i] + (bias ? bias[c] : 0.0f);
    }
}

void loom_residual_add_f32(float *y, const float *x, const float *a, const float *bias, int N,
                           int C) {
  LOOM_PROF_PUSH(LOOM_PART_ACT);
  loom_residual_add_f32_run(y, x, a, bias, N, C);
  LOOM_PROF_POP(0, 4.0 * (3.0 * N * C + C)); /* x, a read, y written, bias read */
}

static void loom_scale_f32_run(float *y, const float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= FAST_PAR_MIN)
  for (size_t i = 0; i < n; i++) y[i] = s * x[i];
}

void loom_scale_f32(float *y, const float *x, float s, size_t n) {
  LOOM_PROF_PUSH(LOOM_PART_ACT);
  loom_scale_f32_run(y, x, s, n);
  LOOM_PROF_POP(0, 8.0 * n); /* x read, y written */
}

static void loom_bias_grad_f32_run(float *db, const float *dy, int N, int C) {
  if (fast_avx512()) {
    bias_grad_avx512(db, NULL, dy, N, C);
    return;
  }
  loom_linear_backward_f32(NULL, NULL, db, dy, NULL, NULL, N, 0, C);
}

void loom_bias_grad_f32(float *db, const float *dy, int N, int C) {
  LOOM_PROF_PUSH(LOOM_PART_ACT);
  loom_bias_grad_f32_run(db, dy, N, C);
  LOOM_PROF_POP(0, 4.0 * ((double)N * C + 2.0 * C)); /* dy read, db accumulated */
}

void loom_bias_grad_bf16_out(float *db, uint16_t *dy16, const float *dy, int N, int C) {
  const char *a = (const char *)dy16, *b = (const char *)dy;
  size_t n = (size_t)N * C;
  if (!fast_avx512() || (a < b + 4 * n && b < a + 2 * n)) { /* two passes, the same values */
    loom_bias_grad_f32(db, dy, N, C);
    loom_f32_to_bf16_n(dy16, dy, (size_t)N * C);
    return;
  }
  LOOM_PROF_PUSH(LOOM_PART_ACT);
  bias_grad_avx512(db, dy16, dy, N, C);
  LOOM_PROF_POP(0, 6.0 * N * C + 8.0 * C); /* dy read, dy16 written, db accumulated */
}

/* Residual + norm forward and norm backward (LayerNorm and RMSNorm), vectorised with AVX-512
 * (and AVX2 + FMA: fast_norm_avx2.c).
 * Forward, per row of C: r = x + res (+ bias), then the norm of r — one pass over memory (the
 * row stays in L1 between the statistics and the output). Backward: one pass, dx per row and
 * dw/db summed over fixed row ranges then the ranges in order, so no result depends on the
 * thread count. Portable path: the reference kernels. Shapes: x, res, r, y (N,C); bias, w, b
 * (C); mean, rstd (N). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"


static void add_norm_generic(float *r, float *y, float *mean, float *rstd, const float *x,
                             const float *res, const float *bias, const float *w, const float *b,
                             int N, int C, float eps) {
  const float *in = x;
  if (res || bias) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= FAST_PAR_MIN)
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++) {
        size_t i = (size_t)n * C + c;
        r[i] = x[i] + (res ? res[i] : 0.0f) + (bias ? bias[c] : 0.0f);
      }
    in = r;
  }
  if (mean) loom_layernorm_forward_f32(y, mean, rstd, in, w, b, N, C, eps);
  else loom_rmsnorm_forward_f32(y, rstd, in, w, N, C, eps);
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
#include "kernels/vmath_avx512.h"

static void add_norm_avx512(float *r, float *y, float *mean, float *rstd, const float *x,
                            const float *res, const float *bias, const float *w, const float *b,
                            int N, int C, float eps) {
  int write_r = res || bias;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= FAST_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * C;
    const float *rr = res ? res + (size_t)n * C : NULL;
    float *orow = write_r ? r + (size_t)n * C : NULL;
    float *yr = y + (size_t)n * C;
    __m512 s = _mm512_setzero_ps(), ss = _mm512_setzero_ps();
    for (int c = 0; c < C; c += 16) { /* r, and its sum (LN) or sum of squares (RMS) */
      __mmask16 m = v_tail((size_t)(C - c));
      __m512 v = _mm512_maskz_loadu_ps(m, xr + c);
      if (rr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, rr + c));
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + c));
      if (orow) _mm512_mask_storeu_ps(orow + c, m, v);
      s = _mm512_add_ps(s, v);
      ss = _mm512_fmadd_ps(v, v, ss);
    }
    const float *in = orow ? orow : xr;
    if (mean) {
      float mu = _mm512_reduce_add_ps(s) / (float)C;
      __m512 vmu = _mm512_set1_ps(mu), var = _mm512_setzero_ps();
      for (int c = 0; c < C; c += 16) {
        __mmask16 m = v_tail((size_t)(C - c));
        __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, in + c), vmu);
        var = _mm512_fmadd_ps(d, d, var);
      }
      float rs = 1.0f / sqrtf(_mm512_reduce_add_ps(var) / (float)C + eps);
      __m512 vrs = _mm512_set1_ps(rs);
      for (int c = 0; c < C; c += 16) {
        __mmask16 m = v_tail((size_t)(C - c));
        __m512 o = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, in + c), vmu), vrs),
                                 _mm512_maskz_loadu_ps(m, w + c));
        if (b) o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(m, b + c));
        _mm512_mask_storeu_ps(yr + c, m, o);
      }
      mean[n] = mu;
      rstd[n] = rs;
    } else {
      float rs = 1.0f / sqrtf(_mm512_reduce_add_ps(ss) / (float)C + eps);
      __m512 vrs = _mm512_set1_ps(rs);
      for (int c = 0; c < C; c += 16) {
        __mmask16 m = v_tail((size_t)(C - c));
        __m512 o = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, in + c), vrs),
                                 _mm512_maskz_loadu_ps(m, w + c));
        _mm512_mask_storeu_ps(yr + c, m, o);
      }
      rstd[n] = rs;
    }
  }
}

/* dx (+)= the norm's input gradient, dw += sum_n dy xhat, db += sum_n dy (LayerNorm only), in
 * one pass over dy and x. Rows are cut into NB_CHUNKS fixed ranges (by N alone: the same bits
 * for any thread count); each range's rows are handled in order by one thread, accumulating
 * dw and db into the range's partial rows (L1/L2-resident), which are then added in range
 * order. (A second pass per block of columns read dy and x a row's stride apart: the norms
 * ran at 43-46% of the streaming bandwidth.) */
enum { NB_CHUNKS = 64 };
/* rows [r0, r1): dx (+)=, the range's partial rows qw, qb += (either NULL: not asked for) */
static void norm_bwd_rows_avx512(float *dx, float *qw, float *qb, const float *dy,
                                 const float *x, const float *w, const float *mean,
                                 const float *rstd, int r0, int r1, int C) {
  for (int n = r0; n < r1; n++) {
    const float *xr = x + (size_t)n * C, *dyr = dy + (size_t)n * C;
    float *dxr = dx ? dx + (size_t)n * C : NULL;
    const float rs = rstd[n];
    const __m512 vrs = _mm512_set1_ps(rs), vmu = _mm512_set1_ps(mean ? mean[n] : 0.0f);
    __m512 k1 = _mm512_setzero_ps(), k2 = _mm512_setzero_ps(); /* dx's row coefficients */
    if (dxr && mean) { /* dx += rs (g - mean(g) - xhat mean(g xhat)), g = dy w */
      __m512 sg = _mm512_setzero_ps(), sgx = _mm512_setzero_ps();
      for (int c = 0; c < C; c += 16) {
        __mmask16 m = v_tail((size_t)(C - c));
        __m512 xh = _mm512_mul_ps(_mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, xr + c), vmu), vrs);
        __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dyr + c), _mm512_maskz_loadu_ps(m, w + c));
        sg = _mm512_add_ps(sg, g);
        sgx = _mm512_fmadd_ps(g, xh, sgx);
      }
      k1 = _mm512_set1_ps(_mm512_reduce_add_ps(sg) / (float)C);
      k2 = _mm512_set1_ps(_mm512_reduce_add_ps(sgx) / (float)C);
    } else if (dxr) { /* dx += rs dy w - x rs^3 (sum dy w x) / C */
      __m512 dot = _mm512_setzero_ps();
      for (int c = 0; c < C; c += 16) {
        __mmask16 m = v_tail((size_t)(C - c));
        __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dyr + c), _mm512_maskz_loadu_ps(m, w + c));
        dot = _mm512_fmadd_ps(g, _mm512_maskz_loadu_ps(m, xr + c), dot);
      }
      k1 = _mm512_set1_ps(rs * rs * rs * _mm512_reduce_add_ps(dot) / (float)C);
    }
    for (int c = 0; c < C; c += 16) {
      __mmask16 m = v_tail((size_t)(C - c));
      __m512 d = _mm512_maskz_loadu_ps(m, dyr + c), xv = _mm512_maskz_loadu_ps(m, xr + c);
      if (dxr) {
        __m512 g = _mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, w + c)), o = _mm512_maskz_loadu_ps(m, dxr + c);
        if (mean) {
          __m512 xh = _mm512_mul_ps(_mm512_sub_ps(xv, vmu), vrs);
          __m512 t = _mm512_sub_ps(_mm512_sub_ps(g, k1), _mm512_mul_ps(xh, k2));
          o = _mm512_fmadd_ps(vrs, t, o);
        } else {
          o = _mm512_add_ps(o, _mm512_fnmadd_ps(xv, k1, _mm512_mul_ps(vrs, g)));
        }
        _mm512_mask_storeu_ps(dxr + c, m, o);
      }
      if (qw) {
        __m512 xh = _mm512_mul_ps(_mm512_sub_ps(xv, vmu), vrs);
        _mm512_mask_storeu_ps(qw + c, m, _mm512_fmadd_ps(d, xh, _mm512_maskz_loadu_ps(m, qw + c)));
      }
      if (qb) _mm512_mask_storeu_ps(qb + c, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, qb + c), d));
    }
  }
}
#pragma GCC pop_options

/* out (C) += the partial rows part (nch, C) summed in row order (fast_add_partials' order) */
static void add_partials_generic(float *out, const float *part, int nch, int C) {
  for (int c = 0; c < C; c++) {
    float acc = part[c];
    for (int ch = 1; ch < nch; ch++) acc += part[(size_t)ch * C + c];
    out[c] += acc;
  }
}

/* The vectorised backward (avx512: 1, AVX2 + FMA: 0): rows cut into fixed ranges, each range's
 * rows in order on one thread with its partial rows of dw and db, the ranges added in order */
static void norm_bwd_ranges(int avx512, float *dx, float *dw, float *db, const float *dy,
                            const float *x, const float *w, const float *mean, const float *rstd,
                            int N, int C) {
  if (N <= 0) return;
  const int want_b = db && mean, nch = N < NB_CHUNKS ? N : NB_CHUNKS;
  /* partial rows (nch, C) of dw and of db, each only when asked for */
  float *pw = dw ? loom_alloc((size_t)nch * C * sizeof(float)) : NULL;
  float *pb = want_b ? loom_alloc((size_t)nch * C * sizeof(float)) : NULL;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= FAST_PAR_MIN)
  for (int ch = 0; ch < nch; ch++) {
    const int r0 = (int)((long)N * ch / nch), r1 = (int)((long)N * (ch + 1) / nch);
    float *qw = pw ? pw + (size_t)ch * C : NULL, *qb = pb ? pb + (size_t)ch * C : NULL;
    if (qw) memset(qw, 0, (size_t)C * sizeof(float));
    if (qb) memset(qb, 0, (size_t)C * sizeof(float));
    if (avx512) norm_bwd_rows_avx512(dx, qw, qb, dy, x, w, mean, rstd, r0, r1, C);
    else fast_norm_bwd_rows_avx2(dx, qw, qb, dy, x, w, mean, rstd, r0, r1, C);
  }
  const int par = (size_t)N * C >= FAST_PAR_MIN;
  if (avx512) {
    if (pw) fast_add_partials(dw, pw, nch, C, par);
    if (pb) fast_add_partials(db, pb, nch, C, par);
  } else {
    if (pw) add_partials_generic(dw, pw, nch, C);
    if (pb) add_partials_generic(db, pb, nch, C);
  }
  loom_free(pw);
  loom_free(pb);
}

static void loom_add_norm_forward_f32_run(float *r, float *y, float *mean, float *rstd, const float *x,
                               const float *res, const float *bias, const float *w,
                               const float *b, int N, int C, float eps) {
  if (fast_avx512()) {
    add_norm_avx512(r, y, mean, rstd, x, res, bias, w, b, N, C, eps);
  } else if (fast_avx2_fma()) {
    const int write_r = res || bias;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= FAST_PAR_MIN)
    for (int n = 0; n < N; n++)
      fast_add_norm_row_avx2(write_r ? r + (size_t)n * C : NULL, y + (size_t)n * C,
                             mean ? mean + n : NULL, rstd + n, x + (size_t)n * C,
                             res ? res + (size_t)n * C : NULL, bias, w, b, C, eps);
  } else {
    add_norm_generic(r, y, mean, rstd, x, res, bias, w, b, N, C, eps);
  }
}

void loom_add_norm_forward_f32(float *r, float *y, float *mean, float *rstd, const float *x,
                               const float *res, const float *bias, const float *w,
                               const float *b, int N, int C, float eps) {
  LOOM_PROF_PUSH(LOOM_PART_NORM);
  loom_add_norm_forward_f32_run(r, y, mean, rstd, x, res, bias, w, b, N, C, eps);
  LOOM_PROF_POP(0, 4.0 * ((double)N * C * (2 + (res != NULL) + (res || bias)) + 2.0 * N + 3.0 * C)); /* compulsory traffic: x (+ res) read, (r) y written, mean/rstd written, w b bias read */
}

static void loom_norm_backward_fast_f32_run(float *dx, float *dw, float *db, const float *dy, const float *x,
                                 const float *w, const float *mean, const float *rstd, int N,
                                 int C) {
  if (!fast_avx512() && !fast_avx2_fma()) {
    if (mean) loom_layernorm_backward_f32(dx, dw, db, dy, x, w, mean, rstd, N, C);
    else loom_rmsnorm_backward_f32(dx, dw, dy, x, w, rstd, N, C);
    return;
  }
  norm_bwd_ranges(fast_avx512(), dx, dw, db, dy, x, w, mean, rstd, N, C);
}

void loom_norm_backward_fast_f32(float *dx, float *dw, float *db, const float *dy, const float *x,
                                 const float *w, const float *mean, const float *rstd, int N,
                                 int C) {
  LOOM_PROF_PUSH(LOOM_PART_NORM);
  loom_norm_backward_fast_f32_run(dx, dw, db, dy, x, w, mean, rstd, N, C);
  LOOM_PROF_POP(0, 4.0 * ((double)N * C * (2 + (dx != NULL)) + 2.0 * N + 5.0 * C)); /* compulsory traffic: dy, x read, (dx) written, mean/rstd w read, dw db accumulated */
}

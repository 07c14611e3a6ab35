/* Tiles of bf16 pairs for flash attention (see flash_tile_bf16.h): packing fp32 tiles into
 * bf16 pairs (plain rows and the VNNI interleave of two rows), and the register-blocked pair
 * GEMM (6 rows x 64 columns of fp32 accumulators) on vdpbf16ps, on AVX-512F emulating it
 * operation for operation, or in portable C (AVX2: flash_tile_bf16_avx2.c). */
#include <immintrin.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "kernels/flash_tile_bf16.h"
#include "loom/core.h"

int fb_path(int D) {
  if (D % 16 == 0 && fast_avx512()) return fast_avx512_bf16() ? FB_BF16 : FB_AVX512;
  return D % 8 == 0 && fast_avx2_fma() ? FB_AVX2 : FB_GENERIC;
}

/* ---- portable ------------------------------------------------------------------------------ */

static uint32_t pair(float lo, float hi) {
  return (uint32_t)loom_f32_to_bf16(lo) | (uint32_t)loom_f32_to_bf16(hi) << 16;
}
static float lo_f32(uint32_t u) { return loom_bf16_to_f32((loom_bf16)(u & 0xffffu)); }
static float hi_f32(uint32_t u) { return loom_bf16_to_f32((loom_bf16)(u >> 16)); }

static void vnni_generic(uint32_t *dst, int lddst, const float *src, long ld, int nrows,
                         int ncols, int npairs) {
  for (int p = 0; p < npairs; p++)
    for (int j = 0; j < ncols; j++) {
      float lo = 2 * p < nrows ? src[2 * p * ld + j] : 0.0f;
      float hi = 2 * p + 1 < nrows ? src[(2 * p + 1) * ld + j] : 0.0f;
      dst[(size_t)p * lddst + j] = pair(lo, hi);
    }
}

static void mm_generic(float *C, int ldc, const uint32_t *A, long ai, long ap, const uint32_t *B,
                       long ldb, int m, int n, int kp, int acc) {
  for (int i = 0; i < m; i++) {
    float *c = C + (size_t)i * ldc;
    if (!acc) memset(c, 0, (size_t)n * sizeof(float));
    for (int p = 0; p < kp; p++) {
      uint32_t a = A[i * ai + p * ap];
      float alo = lo_f32(a), ahi = hi_f32(a);
      const uint32_t *b = B + p * ldb;
      for (int j = 0; j < n; j++) { /* vdpbf16ps order: odd index, then even */
        c[j] += ahi * hi_f32(b[j]);
        c[j] += alo * lo_f32(b[j]);
      }
    }
  }
}

/* ---- AVX-512 ------------------------------------------------------------------------------- */

/* The body of the (MR, 16 NV) block kernel; MR, NV and EMU are compile-time constants at every
 * call site. Defined twice below: with vdpbf16ps (compiled for AVX512-BF16) and emulated
 * (compiled without it, since it runs where AVX512-BF16 is absent). */
#define KERN_BODY(EMU)                                                                          \
  const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);                                  \
  __m512 c[6][4];                                                                               \
  _Pragma("GCC unroll 6") for (int i = 0; i < MR; i++)                                          \
  _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++)                                          \
    c[i][j] = acc ? _mm512_loadu_ps(C + (size_t)i * ldc + 16 * j) : _mm512_setzero_ps();        \
  for (int p = 0; p < kp; p++) {                                                                \
    __m512i b[4];                                                                               \
    _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++)                                        \
      b[j] = _mm512_loadu_si512(B + p * ldb + 16 * j);                                          \
    _Pragma("GCC unroll 6") for (int i = 0; i < MR; i++) {                                      \
      __m512i a = _mm512_set1_epi32((int)A[i * ai + p * ap]);                                   \
      KERN_STEP_##EMU                                                                           \
    }                                                                                           \
  }                                                                                             \
  _Pragma("GCC unroll 6") for (int i = 0; i < MR; i++)                                          \
  _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++)                                          \
    _mm512_storeu_ps(C + (size_t)i * ldc + 16 * j, c[i][j]);                                    \
  (void)hi_mask;

/* vdpbf16ps: c += a.odd * b.odd, then += a.even * b.even (per lane, one rounding each) */
#define KERN_STEP_0                                                                             \
  _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++)                                          \
    c[i][j] = _mm512_dpbf16_ps(c[i][j], (__m512bh)a, (__m512bh)b[j]);
/* the same in AVX-512F: bf16 widened by shifting (exact), the odd product first */
#define KERN_STEP_1                                                                             \
  __m512 ahi = _mm512_castsi512_ps(_mm512_and_si512(a, hi_mask));                               \
  __m512 alo = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));                                   \
  _Pragma("GCC unroll 4") for (int j = 0; j < NV; j++) {                                        \
    __m512 bhi = _mm512_castsi512_ps(_mm512_and_si512(b[j], hi_mask));                          \
    __m512 blo = _mm512_castsi512_ps(_mm512_slli_epi32(b[j], 16));                              \
    c[i][j] = _mm512_fmadd_ps(alo, blo, _mm512_fmadd_ps(ahi, bhi, c[i][j]));                    \
  }

#define KCASE(K, MR, NV)                                                                      \
  case (MR)*8 + (NV):                                                                         \
    K(MR, NV, C + (size_t)i * ldc + col, ldc, A + i * ai, ai, ap, B + col, ldb, kp, acc);      \
    break;
#define KROW(K, MR) KCASE(K, MR, 1) KCASE(K, MR, 2) KCASE(K, MR, 3) KCASE(K, MR, 4)
#define MM_BODY(K)                                                                        \
  for (int col = 0; col < n; col += 64) {                                                 \
    int nv = (n - col) >= 64 ? 4 : (n - col) / 16;                                        \
    for (int i = 0; i < m; i += 6) {                                                      \
      int mr = m - i < 6 ? m - i : 6;                                                     \
      switch (mr * 8 + nv) {                                                              \
        KROW(K, 1) KROW(K, 2) KROW(K, 3) KROW(K, 4) KROW(K, 5) KROW(K, 6) default : break; \
      }                                                                                   \
    }                                                                                     \
  }
#define KERN_ARGS                                                                              \
  int MR, int NV, float *C, int ldc, const uint32_t *A, long ai, long ap, const uint32_t *B,   \
      long ldb, int kp, int acc

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
/* bf16 of 16 floats (given as bits) in the low halves of the lanes: loom_f32_to_bf16 */
static inline __m512i rnd16(__m512i u) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb);
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
}

static void vnni_avx512(uint32_t *dst, int lddst, const float *src, long ld, int nrows,
                        int ncols, int npairs) {
  for (int p = 0; p < npairs; p++) {
    const float *e = src + 2 * p * ld, *o = src + (2 * p + 1) * ld;
    int he = 2 * p < nrows, ho = 2 * p + 1 < nrows;
    for (int j = 0; j < ncols; j += 16) {
      __mmask16 m = ncols - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (ncols - j)) - 1u);
      __m512i ue = he ? _mm512_maskz_loadu_epi32(m, e + j) : _mm512_setzero_si512();
      __m512i uo = ho ? _mm512_maskz_loadu_epi32(m, o + j) : _mm512_setzero_si512();
      __m512i r = _mm512_or_si512(rnd16(ue), _mm512_slli_epi32(rnd16(uo), 16));
      _mm512_mask_storeu_epi32(dst + (size_t)p * lddst + j, m, r);
    }
  }
}

static inline __attribute__((always_inline)) void kern_emu(KERN_ARGS) { KERN_BODY(1) }
static void mm_emu(float *C, int ldc, const uint32_t *A, long ai, long ap, const uint32_t *B,
                   long ldb, int m, int n, int kp, int acc) {
  MM_BODY(kern_emu)
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")
/* the same as a function attribute, which clang (the fuzzing build) honours too */
#define BF16_FN __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))
#include "kernels/vmath_avx512.h"
#include <math.h>
/* Packs with vcvtne2ps2bf16 (round to nearest even like loom_f32_to_bf16; it quiets NaN and
 * flushes subnormals to zero, which vdpbf16ps does to its bf16 inputs anyway) */
static inline BF16_FN __m512i cvt32(const float *src, int n) { /* n <= 32 values -> 32 bf16 */
  __mmask16 m0 = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
  __mmask16 m1 = n >= 32 ? (__mmask16)0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1u) : 0;
  __m512 lo = _mm512_maskz_loadu_ps(m0, src), hi = _mm512_maskz_loadu_ps(m1, src + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

static BF16_FN void rows_bf16(uint32_t *dst, int lddst, const float *src, long ld, int nrows, int ncols) {
  for (int r = 0; r < nrows; r++) {
    uint16_t *d = (uint16_t *)(dst + (size_t)r * lddst);
    const float *x = src + r * ld;
    if (r + 8 < nrows) ftile_prefetch_rows(src + (r + 8) * ld, ld, 1, ncols); /* K, V: T rows */
    for (int j = 0; j < ncols; j += 32) {
      int n = ncols - j < 32 ? ncols - j : 32, np = (n + 1) & ~1; /* an odd tail pads a zero */
      __mmask32 m = np >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << np) - 1u);
      _mm512_mask_storeu_epi16(d + j, m, cvt32(x + j, n));
    }
  }
}

static BF16_FN void vnni_bf16(uint32_t *dst, int lddst, const float *src, long ld, int nrows, int ncols,
                      int npairs) {
  /* (even row i, odd row i) for i < 16 from [even 0..15 | odd 0..15] */
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                       24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                       16, 0);
  for (int p = 0; p < npairs; p++) {
    const float *e = src + 2 * p * ld, *o = src + (2 * p + 1) * ld;
    int he = 2 * p < nrows, ho = 2 * p + 1 < nrows;
    if (2 * p + 9 < nrows) ftile_prefetch_rows(src + (2 * p + 8) * ld, ld, 2, ncols);
    for (int j = 0; j < ncols; j += 16) {
      __mmask16 m = ncols - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (ncols - j)) - 1u);
      __m512 ve = he ? _mm512_maskz_loadu_ps(m, e + j) : _mm512_setzero_ps();
      __m512 vo = ho ? _mm512_maskz_loadu_ps(m, o + j) : _mm512_setzero_ps();
      __m512i x = _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(vo, ve));
      _mm512_mask_storeu_epi32(dst + (size_t)p * lddst + j, m, x);
    }
  }
}

/* (even row, odd row) pairs of 16 columns: [bf16 e_0, bf16 o_0, ..., bf16 e_15, bf16 o_15] */
static inline BF16_FN __m512i pair16(__m512 even, __m512 odd) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                       24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                       16, 0);
  return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(odd, even));
}

/* ftile_softmax_step's AVX-512 arithmetic (flash_tile.c), the exp pass writing key pairs */
void BF16_FN fb_softmax_pack(float *St, int nk, int nq, const ftile_vis *vis, float scale,
                             float *m, float *l, float *alpha, uint32_t *Pp) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY), vs = _mm512_set1_ps(scale);
  const __m512 zero = _mm512_setzero_ps();
  const int nkp = (nk + 1) / 2;
  for (int q = 0; q < BQ / 16; q++) {
    if (16 * q >= nq) { /* padding columns: P = 0 */
      for (int p = 0; p < nkp; p++) _mm512_storeu_si512(Pp + (size_t)p * BQ + 16 * q, _mm512_setzero_si512());
      continue;
    }
    __m512 mx = _mm512_loadu_ps(m + 16 * q);
    for (int c = 0; c < nk; c++) { /* scale, mask, column max */
      __mmask16 vm = (__mmask16)ftile_vis_lanes(vis, c, q, nq);
      float *row = St + c * BQ + 16 * q;
      __m512 sc = _mm512_mask_mul_ps(ninf, vm, _mm512_loadu_ps(row), vs);
      _mm512_storeu_ps(row, sc);
      mx = _mm512_max_ps(mx, sc);
    }
    __mmask16 dead = _mm512_cmp_ps_mask(mx, ninf, _CMP_EQ_OQ);
    __m512 ms = _mm512_mask_mov_ps(mx, dead, zero);
    __m512 sum = zero;
    for (int c = 0; c < nk; c += 2) { /* exp(-inf - ms) = 0 on masked entries */
      __m512 p0 = v_exp(_mm512_sub_ps(_mm512_loadu_ps(St + c * BQ + 16 * q), ms)), p1 = zero;
      sum = _mm512_add_ps(sum, p0);
      if (c + 1 < nk) {
        p1 = v_exp(_mm512_sub_ps(_mm512_loadu_ps(St + (c + 1) * BQ + 16 * q), ms));
        sum = _mm512_add_ps(sum, p1);
      }
      _mm512_storeu_si512(Pp + (size_t)(c / 2) * BQ + 16 * q, pair16(p0, p1));
    }
    __m512 a = v_exp(_mm512_sub_ps(_mm512_loadu_ps(m + 16 * q), ms));
    _mm512_storeu_ps(alpha + 16 * q, a);
    _mm512_storeu_ps(l + 16 * q, _mm512_fmadd_ps(a, _mm512_loadu_ps(l + 16 * q), sum));
    _mm512_storeu_ps(m + 16 * q, mx);
  }
}

/* ftile_bwd_p_ds's AVX-512 arithmetic (flash_tile.c) for key rows c and c + 1 at once */
void BF16_FN fb_bwd_p_ds_pack(const float *St, const float *dPt, int nk, int nq,
                              const ftile_vis *vis, float scale, const float *lse,
                              const float *delta, uint32_t *Pb, uint32_t *dSb, uint32_t *dSp) {
  const __m512 vs = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  for (int c = 0; c < nk; c += 2) {
    const int two = c + 1 < nk;
    for (int q = 0; q < BQ / 16; q++) {
      __m512 vl = _mm512_loadu_ps(lse + 16 * q), vd = _mm512_loadu_ps(delta + 16 * q);
      __m512 p[2] = {zero, zero}, ds[2] = {zero, zero};
      for (int t = 0; t <= two; t++) {
        int r = c + t;
        __mmask16 vm = (__mmask16)ftile_vis_lanes(vis, r, q, nq);
        p[t] = _mm512_maskz_mov_ps(vm, v_exp(_mm512_fmsub_ps(_mm512_loadu_ps(St + r * BQ + 16 * q), vs, vl)));
        ds[t] = _mm512_mul_ps(_mm512_mul_ps(p[t], _mm512_sub_ps(_mm512_loadu_ps(dPt + r * BQ + 16 * q), vd)), vs);
        _mm256_storeu_si256((__m256i *)((uint16_t *)(Pb + (size_t)r * (BQ / 2)) + 16 * q),
                            (__m256i)_mm512_cvtneps_pbh(p[t]));
        _mm256_storeu_si256((__m256i *)((uint16_t *)(dSb + (size_t)r * (BQ / 2)) + 16 * q),
                            (__m256i)_mm512_cvtneps_pbh(ds[t]));
      }
      _mm512_storeu_si512(dSp + (size_t)(c / 2) * BQ + 16 * q, pair16(ds[0], ds[1]));
    }
  }
}

static inline __attribute__((always_inline)) BF16_FN void kern_bf16(KERN_ARGS) { KERN_BODY(0) }
static BF16_FN void mm_bf16(float *C, int ldc, const uint32_t *A, long ai, long ap, const uint32_t *B,
                    long ldb, int m, int n, int kp, int acc) {
  MM_BODY(kern_bf16)
}
#pragma GCC pop_options

/* ---- dispatch ------------------------------------------------------------------------------ */

void fb_pack_rows(int path, uint32_t *dst, int lddst, const float *src, long ld, int nrows,
                  int ncols, int nrows_pad) {
  int np = (ncols + 1) / 2;
  if (path == FB_AVX2) {
    fb_pack_rows_avx2(dst, lddst, src, ld, nrows, ncols, nrows_pad);
    return;
  }
  if (path == FB_BF16) {
    rows_bf16(dst, lddst, src, ld, nrows, ncols);
    for (int r = nrows; r < nrows_pad; r++)
      memset(dst + (size_t)r * lddst, 0, (size_t)np * sizeof(uint32_t));
    return;
  }
  for (int r = 0; r < nrows_pad; r++) {
    uint32_t *d = dst + (size_t)r * lddst;
    if (r >= nrows) {
      memset(d, 0, (size_t)np * sizeof(uint32_t));
      continue;
    }
    if (path == FB_GENERIC) {
      for (int p = 0; p < np; p++)
        d[p] = pair(src[r * ld + 2 * p], 2 * p + 1 < ncols ? src[r * ld + 2 * p + 1] : 0.0f);
    } else { /* consecutive bf16 values are the pairs (little-endian) */
      fast_f32_to_bf16_row((uint16_t *)d, src + r * ld, (size_t)ncols);
      if (ncols % 2) ((uint16_t *)d)[ncols] = 0;
    }
  }
}

void fb_pack_vnni(int path, uint32_t *dst, int lddst, const float *src, long ld, int nrows,
                  int ncols, int npairs) {
  if (path == FB_GENERIC) vnni_generic(dst, lddst, src, ld, nrows, ncols, npairs);
  else if (path == FB_BF16) vnni_bf16(dst, lddst, src, ld, nrows, ncols, npairs);
  else if (path == FB_AVX2) fb_pack_vnni_avx2(dst, lddst, src, ld, nrows, ncols, npairs);
  else vnni_avx512(dst, lddst, src, ld, nrows, ncols, npairs);
}

void fb_mm(int path, float *C, int ldc, const uint32_t *A, long ai, long ap, const uint32_t *B,
           long ldb, int m, int n, int kp, int acc) {
  if (path == FB_BF16 && m >= 16 && kp >= 16 && loom_kernels_amx()) {
    /* whole 16-row blocks and 16-pair steps on tiles, the rest on vdpbf16ps */
    int m16 = m / 16 * 16, kp16 = kp / 16 * 16;
    fb_mm_amx(C, ldc, A, ai, ap, B, ldb, m16, n, kp16, acc);
    if (kp16 < kp)
      mm_bf16(C, ldc, A + kp16 * ap, ai, ap, B + (size_t)kp16 * ldb, ldb, m16, n, kp - kp16, 1);
    if (m16 < m) mm_bf16(C + (size_t)m16 * ldc, ldc, A + m16 * ai, ai, ap, B, ldb, m - m16, n, kp, acc);
  } else if (path == FB_BF16) mm_bf16(C, ldc, A, ai, ap, B, ldb, m, n, kp, acc);
  else if (path == FB_AVX512) mm_emu(C, ldc, A, ai, ap, B, ldb, m, n, kp, acc);
  else if (path == FB_AVX2) fb_mm_avx2(C, ldc, A, ai, ap, B, ldb, m, n, kp, acc);
  else mm_generic(C, ldc, A, ai, ap, B, ldb, m, n, kp, acc);
}

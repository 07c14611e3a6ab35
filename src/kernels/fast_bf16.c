/* fp32 -> bf16 conversion for the bf16 GEMMs: round to nearest even, quiet NaN, subnormals
 * kept — bit for bit loom_f32_to_bf16 (the AVX512-BF16 instruction would flush subnormals, so
 * the integer form is vectorised instead). In place is allowed (dst overlays src's storage:
 * each block is read before the lower half it writes). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"

static void cvt_generic(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = loom_f32_to_bf16(src[i]);
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
#include "kernels/vmath_avx512.h"
static void cvt_avx512(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    _mm256_mask_storeu_epi16(dst + i, m, v_bf16_bits(_mm512_maskz_loadu_epi32(m, src + i)));
  }
}

/* dst (cols, rows) = src (rows, cols) transposed, 16-bit values. Blocks of 32 rows x 16
 * columns: each pair of rows is interleaved into 16 32-bit pairs (row 2p low, 2p + 1 high),
 * the 16 x 16 pairs transposed in registers, and each transposed vector is one dst row's 32
 * consecutive values. Edges (rows % 32, cols % 16) go value by value. */
static void transpose16_avx512(uint16_t *dst, const uint16_t *src, int rows, int cols) {
  const int rb = rows / 32, cb = cols / 16;
  /* whole 64-byte lines of dst when it is aligned: streamed past the caches (its 16 rows a
   * block writes are rows * 2 bytes apart, often the same cache sets) */
  const int nt = (uintptr_t)dst % 64 == 0 && rows % 32 == 0;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)rows * cols >= FAST_PAR_MIN)
  for (int bi = 0; bi < rb; bi++)
    for (int bj = 0; bj < cb; bj++) {
      const int i0 = 32 * bi, j0 = 16 * bj;
      __m512i r[16];
      for (int p = 0; p < 16; p++) {
        const uint16_t *e = src + (size_t)(i0 + 2 * p) * cols + j0;
        __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)e));
        __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(e + cols)));
        r[p] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
      }
      v_transpose16(r);
      for (int k = 0; k < 16; k++) {
        uint16_t *d = dst + (size_t)(j0 + k) * rows + i0;
        if (nt) _mm512_stream_si512((__m512i *)d, r[k]);
        else _mm512_storeu_si512(d, r[k]);
      }
    }
  _mm_sfence();
  /* the edges: rows below the last whole block of 32, columns right of the last of 16 */
  for (int i = 32 * rb; i < rows; i++)
    for (int j = 0; j < cols; j++) dst[(size_t)j * rows + i] = src[(size_t)i * cols + j];
  for (int i = 0; i < 32 * rb; i++)
    for (int j = 16 * cb; j < cols; j++) dst[(size_t)j * rows + i] = src[(size_t)i * cols + j];
}
#pragma GCC pop_options

void fast_f32_to_bf16_row(uint16_t *dst, const float *src, size_t n) {
  if (fast_avx512()) cvt_avx512(dst, src, n);
  else cvt_generic(dst, src, n);
}

/* Serial over the blocks of one range: in place stays correct because block i is read before
 * the half-size write that overlaps earlier elements only. */
static void cvt(uint16_t *dst, const float *src, size_t n) {
  if (fast_avx512()) cvt_avx512(dst, src, n);
  else cvt_generic(dst, src, n);
}

static void loom_f32_to_bf16_n_run(uint16_t *dst, const float *src, size_t n) {
  if ((const void *)dst == (const void *)src || n < FAST_PAR_MIN) { /* in place: one pass */
    cvt(dst, src, n);
    return;
  }
  enum { CH = 1 << 14 };
  size_t nch = (n + CH - 1) / CH;
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nch; c++) {
    size_t b = c * CH, e = b + CH < n ? b + CH : n;
    cvt(dst + b, src + b, e - b);
  }
}

void loom_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n) {
  LOOM_PROF_PUSH(LOOM_PART_BF16_CVT);
  loom_f32_to_bf16_n_run(dst, src, n);
  LOOM_PROF_POP(0, 6.0 * n); /* 4 bytes read, 2 written per value */
}

static void loom_f32_to_bf16_rows_run(uint16_t *dst, size_t ld_dst, const float *src, size_t ld_src,
                           int rows, int cols) {
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= FAST_PAR_MIN)
  for (int r = 0; r < rows; r++) cvt(dst + (size_t)r * ld_dst, src + (size_t)r * ld_src, (size_t)cols);
}

void loom_f32_to_bf16_rows(uint16_t *dst, size_t ld_dst, const float *src, size_t ld_src,
                           int rows, int cols) {
  LOOM_PROF_PUSH(LOOM_PART_BF16_CVT);
  loom_f32_to_bf16_rows_run(dst, ld_dst, src, ld_src, rows, cols);
  LOOM_PROF_POP(0, 6.0 * rows * cols); /* 4 bytes read, 2 written per value */
}

void loom_bf16_transpose(uint16_t *dst, const uint16_t *src, int rows, int cols) {
  LOOM_PROF_PUSH(LOOM_PART_BF16_CVT);
  if (fast_avx512()) {
    transpose16_avx512(dst, src, rows, cols);
  } else {
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= FAST_PAR_MIN)
    for (int j = 0; j < cols; j++)
      for (int i = 0; i < rows; i++) dst[(size_t)j * rows + i] = src[(size_t)i * cols + j];
  }
  LOOM_PROF_POP(0, 4.0 * rows * cols); /* 2 bytes read, 2 written per value */
}

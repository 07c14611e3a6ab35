/* bf16 flash attention's pair GEMM (fb_mm) on AMX tiles, for the FB_BF16 path where
 * loom_kernels_amx(): C (m, n) (+)= sum over kp pairs of A(i, p) . B(p, j), A(i, p) at
 * A[i ai + p ap], B(p, j) at B[p ldb + j] (flash_tile_bf16.h). m, kp multiples of 16 and n of
 * 16 here (fb_mm gives the remainders to vdpbf16ps).
 * B's rows are already tdpbf16ps's B layout (16 pairs x 16 columns per tile, row stride ldb).
 * A is a tile as it lies when its pairs run along a row (ap = 1: Q K^T's K, P's and dS's query
 * pairs); when they run down a column (ai = 1: V^T and dS^T as key pairs) a 16 x 16 block is
 * transposed into a scratch tile first. Every C element sums its pairs in increasing p, 16 per
 * tdpbf16ps (which adds each pair's even product, then its odd one: not vdpbf16ps's order, so
 * the bits differ from the FB_BF16 path's; test_flash_bf16 holds both to the reference). The
 * tile configuration is loaded on every call: the attention's threads run other tile code
 * (the GEMMs) between calls. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/amx_internal.h"
#include "kernels/flash_tile_bf16.h"

/* the 16 x 16 pairs A(i0.., p0..) with ai = 1 (column p at A + p ap) as tile rows i */
static AVX512_FN void a_transposed(uint32_t *t, const uint32_t *A, long ap, int i0, int p0) {
  __m512i r[16];
  for (int c = 0; c < 16; c++) r[c] = _mm512_loadu_si512(A + i0 + (size_t)(p0 + c) * ap);
  amx_transpose16(r);
  for (int i = 0; i < 16; i++) _mm512_storeu_si512(t + 16 * i, r[i]);
}

/* C rows i0..i0+15, columns j0..j0+16 nt-1 (nt <= 4 tiles: 0-3), A in tile 4, B in 5 */
static AMX_FN void rows16(float *C, int ldc, const uint32_t *A, long ai, long ap,
                          const uint32_t *B, long ldb, int i0, int j0, int nt, int kp, int acc,
                          uint32_t *scratch) {
  float *c = C + (size_t)i0 * ldc + j0;
  /* tile numbers are immediates: four copies of each step */
#define C_INIT(t)                                                  \
  if (nt > t) {                                                    \
    if (acc) _tile_loadd(t, c + 16 * t, ldc * 4);                  \
    else _tile_zero(t);                                            \
  }
  C_INIT(0) C_INIT(1) C_INIT(2) C_INIT(3)
#undef C_INIT
  for (int p0 = 0; p0 < kp; p0 += 16) {
    if (ap == 1) _tile_loadd(4, A + (size_t)i0 * ai + p0, ai * 4);
    else {
      a_transposed(scratch, A, ap, i0, p0);
      _tile_loadd(4, scratch, 64);
    }
    const uint32_t *b = B + (size_t)p0 * ldb + j0;
#define STEP(t)                                                    \
  if (nt > t) {                                                    \
    _tile_loadd(5, b + 16 * t, ldb * 4);                           \
    _tile_dpbf16ps(t, 4, 5);                                       \
  }
    STEP(0) STEP(1) STEP(2) STEP(3)
#undef STEP
  }
#define C_STORE(t) \
  if (nt > t) _tile_stored(t, c + 16 * t, ldc * 4);
  C_STORE(0) C_STORE(1) C_STORE(2) C_STORE(3)
#undef C_STORE
}

void fb_mm_amx(float *C, int ldc, const uint32_t *A, long ai, long ap, const uint32_t *B,
               long ldb, int m, int n, int kp, int acc) {
  uint32_t scratch[256] __attribute__((aligned(64)));
  amx_tiles_configure();
  for (int i0 = 0; i0 < m; i0 += 16)
    for (int j0 = 0; j0 < n; j0 += 64) {
      int nt = (n - j0) / 16 < 4 ? (n - j0) / 16 : 4;
      rows16(C, ldc, A, ai, ap, B, ldb, i0, j0, nt, kp, acc, scratch);
    }
  amx_tiles_release();
}

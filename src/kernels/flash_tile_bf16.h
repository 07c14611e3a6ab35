/* Private to bf16 flash attention: tiles of bf16 pairs and the small GEMM over them. A pair
 * is one uint32 holding two bf16 values of consecutive reduction indices (2p in the low half,
 * 2p+1 in the high half), the operand format of vdpbf16ps. Every pack rounds fp32 to bf16 to
 * nearest even (loom_f32_to_bf16; the vdpbf16ps path converts with vcvtne2ps2bf16, which also
 * flushes subnormals to zero — as vdpbf16ps treats subnormal inputs) and pads a missing odd
 * index with zero. */
#ifndef LOOM_FLASH_TILE_BF16_H
#define LOOM_FLASH_TILE_BF16_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/flash_tile.h"

/* Code paths of the pair GEMM: vdpbf16ps; the same arithmetic in AVX-512F (bf16 widened by
 * shifts, the odd product added first, then the even one, as vdpbf16ps specifies: products
 * of two bf16 values are exact in fp32, so each step rounds once, like the instruction);
 * portable C in the same order. */
enum { FB_GENERIC = 0, FB_AVX512 = 1, FB_BF16 = 2, FB_AVX2 = 3 };
/* The path for head dim D on this CPU (AVX-512 paths need D % 16 == 0; else AVX2 + FMA with
 * D % 8 == 0, flash_tile_bf16_avx2.c, bitwise the portable path's products and packs). */
int fb_path(int D);
/* The fp32 tile steps' path (ftile_softmax_step, ftile_bwd_p_ds, ftile_scale_cols) that goes
 * with a pair-GEMM path */
static inline int fb_ftile_simd(int path) {
  return path == FB_GENERIC ? FTILE_GENERIC : path == FB_AVX2 ? FTILE_AVX2 : FTILE_AVX512;
}

/* dst (nrows_pad, (ncols+1)/2) pairs, row stride lddst pairs: row r = bf16 of src row r
 * (row stride ld floats) read as pairs of consecutive columns; rows >= nrows zero. */
void fb_pack_rows(int path, uint32_t *dst, int lddst, const float *src, long ld, int nrows,
                  int ncols, int nrows_pad);
/* dst (npairs, ncols) pairs, row stride lddst: dst[p][j] = (bf16 src[2p][j], bf16 src[2p+1][j])
 * (src row stride ld floats; rows >= nrows read as zero): the VNNI layout of a (rows, ncols)
 * matrix that is the B operand (or the pair-strided A operand) of a product reducing over
 * its rows. npairs = (nrows + 1) / 2 at least. */
void fb_pack_vnni(int path, uint32_t *dst, int lddst, const float *src, long ld, int nrows,
                  int ncols, int npairs);
/* C (m, n) (+)= sum over kp pairs p of A(i, p) . B(p, j), fp32 accumulation:
 * A(i, p) = A[i*ai + p*ap] (a pair), B(p, j) = B[p*ldb + j] (a pair), C row i at C + i*ldc.
 * n a multiple of 16 on the AVX-512 paths, of 8 on AVX2. acc = 0 overwrites C. */
void fb_mm(int path, float *C, int ldc, const uint32_t *A, long ai, long ap, const uint32_t *B,
           long ldb, int m, int n, int kp, int acc);
/* fb_mm on AMX tiles (flash_tile_amx.c): m and kp multiples of 16, n of 16; fb_mm calls it on
 * the FB_BF16 path where loom_kernels_amx() (LOOM_AMX=0: vdpbf16ps only). */
void fb_mm_amx(float *C, int ldc, const uint32_t *A, long ai, long ap, const uint32_t *B,
               long ldb, int m, int n, int kp, int acc);
/* The softmax steps fused with the packing of their results, on the FB_BF16 path only (the
 * bf16 values never pass through fp32 tiles; every value and every sum is the same, bit for
 * bit, as the separate steps give):
 * forward: ftile_softmax_step on St (nk, BQ) (St keeps the scaled scores), P written as key
 * pairs Pp (nkp, BQ) like fb_pack_vnni (columns >= nq zero);
 * backward: P and dS of ftile_bwd_p_ds written as bf16: Pb and dSb (nk, BQ/2) rows of query
 * pairs like fb_pack_rows, dSp (nkp, BQ) key pairs like fb_pack_vnni. */
/* The AVX2 + FMA versions (flash_tile_bf16_avx2.c) */
void fb_mm_avx2(float *C, int ldc, const uint32_t *A, long ai, long ap, const uint32_t *B,
                long ldb, int m, int n, int kp, int acc);
void fb_pack_vnni_avx2(uint32_t *dst, int lddst, const float *src, long ld, int nrows,
                       int ncols, int npairs);
void fb_pack_rows_avx2(uint32_t *dst, int lddst, const float *src, long ld, int nrows, int ncols,
                       int nrows_pad);
void fb_softmax_pack(float *St, int nk, int nq, const ftile_vis *vis, float scale, float *m,
                     float *l, float *alpha, uint32_t *Pp);
void fb_bwd_p_ds_pack(const float *St, const float *dPt, int nk, int nq, const ftile_vis *vis,
                      float scale, const float *lse, const float *delta, uint32_t *Pb,
                      uint32_t *dSb, uint32_t *dSp);
#endif

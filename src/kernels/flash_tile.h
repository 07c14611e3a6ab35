/* Private to flash attention: the per-tile operations of the forward and backward passes, in
 * an AVX-512, an AVX2 + FMA (flash_tile_avx2.c) and a portable version (simd = FTILE_*). Tiles
 * hold BQ query columns: a "transposed" tile Xt (rows, BQ) has one row per key (or per head-dim
 * index) and one column per query, so that the softmax over keys is a vertical operation across
 * rows, vectorised over queries. */
#ifndef LOOM_FLASH_TILE_H
#define LOOM_FLASH_TILE_H
#include <stddef.h>

#define BQ 64 /* queries per tile (columns of a transposed tile) */
#define BK 64 /* keys per tile */

/* The code path of the tile operations (the `simd` argument below) */
enum { FTILE_GENERIC = 0, FTILE_AVX512 = 1, FTILE_AVX2 = 2 };
/* The fp32 tiles' path for head dimension D: AVX-512 when the CPU has it and D % 16 == 0, else
 * AVX2 + FMA when the CPU has those and D % 8 == 0, else portable (LOOM_SIMD=generic: portable) */
int ftile_simd(int D);

/* C (m, n) (+)= A (m, k) B (k, n): A(i,p) = A[i*ai + p*ap] (broadcast scalars, any strides),
 * B row p at B + p*ldb, C row i at C + i*ldc; n a multiple of 16 on the AVX-512 path, of 8
 * on the AVX2 path.
 * acc = 0 overwrites C. */
void ftile_mm(int simd, float *C, int ldc, const float *A, long ai, long ap, const float *B,
              long ldb, int m, int n, int k, int acc);
/* Xt (D, BQ) = rows (nrows, D) of src with row stride ld, transposed; columns >= nrows zero. */
void ftile_transpose_in(float *Xt, const float *src, long ld, int nrows, int D);
/* The backward's delta (B, Hq, T) = rowsum(dO * out) over the head dim, summed in head-dim
 * order (dO rounded to bf16 first when round: the dO the bf16 products see); out, dout
 * (B, T, Hq, D). par: OpenMP over the rows. */
void ftile_delta(float *work, const float *out, const float *dout, int B, int T, int Hq, int D,
                 int round, int par);
/* The forward's output: row r < nrows of out (D floats, row stride ld) = column r of Ot (D, BQ)
 * divided by the softmax sum l[r] (times 1 / l[r]; 0 for a query that saw no key, l = 0). */
void ftile_store_out(float *out, long ld, const float *Ot, const float *l, int nrows, int D);
/* Asks the caches for rows (nrows, D floats, row stride ld) of src that a later tile reads:
 * rows a head's stride apart are too far apart for the hardware prefetchers, and a tile's
 * loads otherwise wait on memory one line at a time. No effect on any result. */
static inline void ftile_prefetch_rows(const float *src, long ld, int nrows, int D) {
  for (int r = 0; r < nrows; r++)
    for (int d = 0; d < D; d += 16) __builtin_prefetch(src + r * ld + d, 0, 2);
}
/* Visible query columns of key row c: [rlo[c], rhi[c]] (empty when rlo > rhi). */
typedef struct {
  int rlo[BK], rhi[BK];
  int full; /* every (c < nk, r < nq) visible */
} ftile_vis;
/* Lanes (bits) of query columns [16 q, 16 q + 16) of key row c that are visible and < nq */
static inline unsigned ftile_vis_lanes(const ftile_vis *vis, int c, int q, int nq) {
  if (vis->full && 16 * q + 16 <= nq) return 0xffffu; /* interior tile, whole vector */
  int lo = vis->full ? 0 : vis->rlo[c], hi = vis->full ? nq - 1 : vis->rhi[c];
  if (hi > nq - 1) hi = nq - 1;
  int a = lo - 16 * q, b = hi - 16 * q; /* lanes [a, b] */
  if (b < 0 || a > 15 || a > b) return 0;
  if (a < 0) a = 0;
  if (b > 15) b = 15;
  return ((1u << (b + 1)) - 1u) & ~((1u << a) - 1u);
}
/* Where a partly visible tile has work, in blocks of 16 (empty when lo >= hi): the query
 * columns [q0[kb], q1[kb]) that key rows [16 kb, 16 kb + 16) see (multiples of 16, so that
 * they are whole vectors; q1 may pass nq, as whole tiles do), and the key rows [k0[qb],
 * k1[qb]) that query columns [16 qb, 16 qb + 16) see (k0 a multiple of 16, k1 <= nk).
 * Products restricted to these ranges skip only terms whose probability is zero. */
typedef struct {
  int q0[BK / 16], q1[BK / 16], k0[BQ / 16], k1[BQ / 16];
} ftile_span;
void ftile_span_of(const ftile_vis *vis, int nk, int nq, ftile_span *sp);
/* Forward online-softmax step on St (nk, BQ) raw scores: s = scale * St on visible entries;
 * m_new = max(m, column max); alpha = exp(m - m_new); St becomes P = exp(s - m_new) (0 where
 * masked); l = alpha l + column sums of P; m = m_new. Columns r >= nq are left alone. */
void ftile_softmax_step(int simd, float *St, int nk, int nq, const ftile_vis *vis, float scale,
                        float *m, float *l, float *alpha);
/* Ot (D, BQ) columns scaled by alpha */
void ftile_scale_cols(int simd, float *Ot, int D, const float *alpha);
/* Backward: St (nk, BQ) raw scores -> P = exp(scale St - lse) (0 masked / r >= nq);
 * dPt (nk, BQ) -> dS * scale = P (dP - delta) scale. */
void ftile_bwd_p_ds(int simd, float *St, float *dPt, int nk, int nq, const ftile_vis *vis,
                    float scale, const float *lse, const float *delta);
/* A backward work item's dK and dV sums (T rows of D floats, row r of dK at dk + r ld; NULL
 * where the gradient is not asked for). Summed in the output rows themselves, an item's rows
 * lie between those of the neighbouring kv head, which another thread writes all the while;
 * on the 2-vCPU Zen 4 this was measured on, the 2-thread backward then ran for stretches of
 * minutes at 1.4x one thread's rate instead of 2x (Qwen2.5-0.5B's layer, 4 x 512: 0.025 s
 * against 0.017), while two 1-thread processes side by side, sharing nothing, did not slow
 * down. With private rows it stays at 0.017-0.018 s through those stretches. So the sums are
 * private rows (ld = D), copied out once at the item's end, when 2 T D floats fit a bound
 * (flash_kv_acc.c); above it the output rows (ld = ldk). The same bits either way. */
typedef struct {
  float *dk, *dv;
  long ld;
} ftile_kv_acc;
/* The backward's work items, one per (sequence b, kv head kh), in parallel (par) with dynamic
 * scheduling: each thread gets scratch_bytes of scratch and its private dK/dV rows; per item
 * fn(ctx, scratch, b, kh, off, acc) runs with the item's sums started at zero (off: the item's
 * first row in dk, dv of shape (B, T, Hkv, D)), which are then copied out. */
typedef void (*ftile_bwd_item_fn)(void *ctx, void *scratch, int b, int kh, size_t off,
                                  const ftile_kv_acc *acc);
/* The AVX2 + FMA versions (flash_tile_avx2.c): n and D multiples of 8 */
void ftile_mm_avx2(float *C, int ldc, const float *A, long ai, long ap, const float *B, long ldb,
                   int m, int n, int k, int acc);
void ftile_softmax_avx2(float *St, int nk, int nq, const ftile_vis *vis, float scale, float *m,
                        float *l, float *alpha);
void ftile_scale_cols_avx2(float *Ot, int D, const float *alpha);
void ftile_bwd_avx2(float *St, float *dPt, int nk, int nq, const ftile_vis *vis, float scale,
                    const float *lse, const float *delta);
void ftile_bwd_items(int B, int T, int Hkv, int D, float *dk, float *dv, int par,
                     size_t scratch_bytes, ftile_bwd_item_fn fn, void *ctx);
/* (query, key) pairs of one sequence and head that mask m leaves visible (flash_work.c). The
 * profiler's work: forward 4 D FLOPs per pair (q.k and p v), backward 10 D (scores recomputed,
 * dP = dO.v, dV, dK, dQ), times B Hq — visible pairs only, not the masked halves of tiles. */
#include "loom/kernels.h"
double flash_visible_pairs(loom_attn_mask m, int B, int T);
#endif

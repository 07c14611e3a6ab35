/* Private to flash attention: key ranges of a mask and the visibility of a tile. A query t of
 * sequence b sees keys [fmask_lo, fmask_hi]: the causal/window rule intersected with its
 * segment (packed documents, varlen attention; positions shifted by the block offsets of a
 * ring attention block). Both ends are non-decreasing in t, so a tile of queries x keys has a
 * visible entry exactly when its key range meets [lo(first query), hi(last query)] — when the
 * range of each query holds the query itself, or (an off-diagonal block) reaches the block's
 * end — and fully masked tiles are skipped by that test. The range of a query may be empty
 * (lo > hi) in an off-diagonal block. */
#ifndef LOOM_FLASH_MASK_H
#define LOOM_FLASH_MASK_H
#include "kernels/flash_tile.h"
#include "loom/kernels.h"

static inline size_t fmask_at(loom_attn_mask m, int b, int T, int pos) {
  return (size_t)b * (size_t)(m.seg_stride > 0 ? m.seg_stride : T) + (size_t)pos;
}
/* first and last key a query t of sequence b sees (inclusive; lo > hi: none) */
static inline int fmask_lo(loom_attn_mask m, int b, int t, int T) {
  int lo = m.window > 0 ? t - m.window + 1 : 0;
  if (m.seg_lo) {
    int s = m.seg_lo[fmask_at(m, b, T, m.q_off + t)] - m.k_off;
    lo = s > lo ? s : lo;
  }
  return lo < 0 ? 0 : lo;
}
static inline int fmask_hi(loom_attn_mask m, int b, int t, int T) {
  int hi = m.causal ? t : (m.window > 0 ? t + m.window - 1 : T - 1);
  if (m.seg_hi) {
    int s = m.seg_hi[fmask_at(m, b, T, m.q_off + t)] - m.k_off;
    hi = s < hi ? s : hi;
  }
  return hi > T - 1 ? T - 1 : hi;
}
/* Visibility of key tile [s0, s0+nk) for query tile [t0, t0+nq) of sequence b: returns 0 when
 * nothing is visible, else fills vis (per key row, the visible query columns). */
static inline int fmask_tile(loom_attn_mask m, int b, int T, int t0, int nq, int s0, int nk,
                             ftile_vis *vis) {
  if (s0 > fmask_hi(m, b, t0 + nq - 1, T) || s0 + nk - 1 < fmask_lo(m, b, t0, T)) return 0;
  vis->full = s0 >= fmask_lo(m, b, t0 + nq - 1, T) && s0 + nk - 1 <= fmask_hi(m, b, t0, T);
  if (vis->full) return 1;
  for (int c = 0; c < nk; c++) { /* queries t with lo(t) <= s <= hi(t) */
    int s = s0 + c;
    int tlo = m.causal ? s : (m.window > 0 ? s - m.window + 1 : 0);
    int thi = m.window > 0 ? s + m.window - 1 : T - 1;
    if (m.seg_lo) { /* queries of the key's own segment */
      size_t at = fmask_at(m, b, T, m.k_off + s);
      int slo = m.seg_lo[at] - m.q_off, shi = m.seg_hi[at] - m.q_off;
      tlo = slo > tlo ? slo : tlo;
      thi = shi < thi ? shi : thi;
    }
    vis->rlo[c] = tlo - t0 < 0 ? 0 : tlo - t0;
    vis->rhi[c] = thi - t0 > nq - 1 ? nq - 1 : thi - t0;
  }
  return 1;
}
#endif

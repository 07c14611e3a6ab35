/* Private to flash attention: key ranges of a mask and the visibility of a tile. */
#ifndef LOOM_FLASH_MASK_H
#define LOOM_FLASH_MASK_H
#include "kernels/flash_tile.h"
#include "loom/kernels.h"

/* first and last key a query t sees (inclusive) */
static inline int fmask_lo(loom_attn_mask m, int t) {
  int lo = m.window > 0 ? t - m.window + 1 : 0;
  return lo < 0 ? 0 : lo;
}
static inline int fmask_hi(loom_attn_mask m, int t, int T) {
  int hi = m.causal ? t : (m.window > 0 ? t + m.window - 1 : T - 1);
  return hi > T - 1 ? T - 1 : hi;
}
/* Visibility of key tile [s0, s0+nk) for query tile [t0, t0+nq): returns 0 when nothing is
 * visible, else fills vis (per key row, the visible query columns). */
static inline int fmask_tile(loom_attn_mask m, int T, int t0, int nq, int s0, int nk,
                             ftile_vis *vis) {
  if (s0 > fmask_hi(m, t0 + nq - 1, T) || s0 + nk - 1 < fmask_lo(m, t0)) return 0;
  vis->full = s0 >= fmask_lo(m, t0 + nq - 1) && s0 + nk - 1 <= fmask_hi(m, t0, T);
  if (vis->full) return 1;
  for (int c = 0; c < nk; c++) { /* queries t with lo(t) <= s <= hi(t) */
    int s = s0 + c;
    int tlo = m.causal ? s : (m.window > 0 ? s - m.window + 1 : 0);
    int thi = m.window > 0 ? s + m.window - 1 : T - 1;
    vis->rlo[c] = tlo - t0 < 0 ? 0 : tlo - t0;
    vis->rhi[c] = thi - t0 > nq - 1 ? nq - 1 : thi - t0;
  }
  return 1;
}
#endif

/* Work of flash attention for the step profiler: the (query, key) pairs a mask leaves visible,
 * from the same per-query key ranges the kernels use (flash_mask.h). */
#include "kernels/flash_mask.h"
#include "kernels/flash_tile.h"

double flash_visible_pairs(loom_attn_mask m, int T) {
  double n = 0; /* causal without a window: T (T + 1) / 2 */
  for (int t = 0; t < T; t++) n += fmask_hi(m, t, T) - fmask_lo(m, t) + 1;
  return n;
}

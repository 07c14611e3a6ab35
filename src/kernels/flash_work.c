/* Work of flash attention for the step profiler: the (query, key) pairs a mask leaves visible,
 * from the same per-query key ranges the kernels use (flash_mask.h). */
#include "kernels/flash_mask.h"
#include "kernels/flash_tile.h"

double flash_visible_pairs(loom_attn_mask m, int B, int T) {
  double n = 0; /* causal without a window or segments: B T (T + 1) / 2 */
  int nb = m.seg_lo ? B : 1; /* without segments every sequence sees the same pairs */
  for (int b = 0; b < nb; b++)
    for (int t = 0; t < T; t++) {
      int c = fmask_hi(m, b, t, T) - fmask_lo(m, b, t, T) + 1;
      n += c > 0 ? c : 0; /* an empty range (a ring block) sees nothing */
    }
  return m.seg_lo ? n : n * B;
}

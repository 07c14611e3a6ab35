/* Segments of packed documents for masked attention: each sequence of the batch split after
 * every end-of-document token, as Megatron-LM's get_ltor_masks_and_position_ids does with
 * reset_attention_mask and reset_position_ids (the end-of-document token stays with the
 * document it ends). Shapes: tokens, seg_lo, seg_hi, pos (B,T). */
#include "loom/kernels.h"

void loom_attn_doc_segments(int *seg_lo, int *seg_hi, int *pos, const int32_t *tokens, int B,
                            int T, int32_t eod) {
  for (int b = 0; b < B; b++) {
    const int32_t *tok = tokens + (size_t)b * T;
    int *lo = seg_lo + (size_t)b * T, *hi = seg_hi + (size_t)b * T;
    int start = 0;
    for (int t = 0; t < T; t++) {
      if (t == T - 1 || tok[t] == eod) { /* t ends the document [start, t] */
        for (int u = start; u <= t; u++) {
          lo[u] = start, hi[u] = t;
          if (pos) pos[(size_t)b * T + u] = u - start;
        }
        start = t + 1;
      }
    }
  }
}

/* Non-interleaved pipeline generators (one chunk per rank).
 *
 * GPipe: every rank runs the forwards of micro-batches 0..m-1, then the backwards in reverse
 * order m-1..0 (as drawn in the GPipe paper; the last stage starts backward with the
 * micro-batch it just finished), then reduce-grads and optimizer-step.
 *
 * 1F1B (Megatron's non-interleaved schedule): rank r runs w = min(pp-r-1, m) warmup
 * forwards, then m-w steady pairs forward(w+i), backward(i), then the w cooldown backwards.
 * At most min(pp-r, m) micro-batches are in flight on rank r, against m for GPipe. */
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

static unsigned char *loaded_flags(const loom_schedule *s) {
  unsigned char *loaded = loom_calloc((size_t)s->microbatches, 1);
  return loaded;
}

void sched_generate_gpipe(loom_schedule *s) {
  for (int r = 0; r < s->pp; r++) {
    unsigned char *loaded = loaded_flags(s);
    for (int mb = 0; mb < s->microbatches; mb++) sched_emit_forward(s, r, 0, mb, loaded);
    for (int mb = s->microbatches - 1; mb >= 0; mb--) sched_emit_backward(s, r, 0, mb);
    sched_emit_tail(s, r);
    free(loaded);
  }
}

void sched_generate_1f1b(loom_schedule *s) {
  int m = s->microbatches;
  for (int r = 0; r < s->pp; r++) {
    unsigned char *loaded = loaded_flags(s);
    int warmup = s->pp - r - 1 < m ? s->pp - r - 1 : m;
    for (int k = 0; k < warmup; k++) sched_emit_forward(s, r, 0, k, loaded);
    for (int k = 0; k < m - warmup; k++) {
      sched_emit_forward(s, r, 0, warmup + k, loaded);
      sched_emit_backward(s, r, 0, k);
    }
    for (int k = m - warmup; k < m; k++) sched_emit_backward(s, r, 0, k);
    sched_emit_tail(s, r);
    free(loaded);
  }
}

/* loom_sched_generate: argument checks and dispatch to the generators, the building blocks
 * they share (a forward or backward with its load/recv/send, the step's tail), and "none"
 * (no pipeline: each micro-batch forward then backward through every chunk). */
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

static int holds_data_stage(const loom_schedule *s, int rank, int chunk) {
  int v = loom_sched_vstage(s, rank, chunk);
  return v == 0 || v == s->pp * s->vpp - 1;
}

void sched_emit_forward(loom_schedule *s, int rank, int chunk, int mb, unsigned char *loaded) {
  int v = loom_sched_vstage(s, rank, chunk), last = s->pp * s->vpp - 1;
  if (holds_data_stage(s, rank, chunk) && !loaded[mb]) {
    sched_push(s, rank, LOOM_INSTR_LOAD_MB, -1, mb, -1);
    loaded[mb] = 1;
  }
  if (v > 0 && s->pp > 1)
    sched_push(s, rank, LOOM_INSTR_RECV_ACT, chunk, mb, loom_sched_vstage_rank(s, v - 1));
  sched_push(s, rank, LOOM_INSTR_FORWARD, chunk, mb, -1);
  if (v < last && s->pp > 1)
    sched_push(s, rank, LOOM_INSTR_SEND_ACT, chunk, mb, loom_sched_vstage_rank(s, v + 1));
}

void sched_emit_backward(loom_schedule *s, int rank, int chunk, int mb) {
  int v = loom_sched_vstage(s, rank, chunk), last = s->pp * s->vpp - 1;
  if (v < last && s->pp > 1)
    sched_push(s, rank, LOOM_INSTR_RECV_GRAD, chunk, mb, loom_sched_vstage_rank(s, v + 1));
  sched_push(s, rank, LOOM_INSTR_BACKWARD, chunk, mb, -1);
  if (v > 0 && s->pp > 1)
    sched_push(s, rank, LOOM_INSTR_SEND_GRAD, chunk, mb, loom_sched_vstage_rank(s, v - 1));
}

void sched_emit_tail(loom_schedule *s, int rank) {
  sched_push(s, rank, LOOM_INSTR_REDUCE_GRADS, -1, -1, -1);
  sched_push(s, rank, LOOM_INSTR_OPTIMIZER_STEP, -1, -1, -1);
}

/* No pipeline (pp = 1): per micro-batch, forward through chunks 0..vpp-1, then backward
 * through vpp-1..0. */
void sched_generate_none(loom_schedule *s) {
  unsigned char *loaded = loom_calloc((size_t)s->microbatches, 1);
  for (int mb = 0; mb < s->microbatches; mb++) {
    for (int c = 0; c < s->vpp; c++) sched_emit_forward(s, 0, c, mb, loaded);
    for (int c = s->vpp - 1; c >= 0; c--) sched_emit_backward(s, 0, c, mb);
  }
  sched_emit_tail(s, 0);
  free(loaded);
}

int loom_sched_generate(loom_schedule *s, const char *name, int pp, int vpp, int microbatches) {
  memset(s, 0, sizeof *s);
  if (!name) name = "";
  int is_none = !strcmp(name, "none"), is_gpipe = !strcmp(name, "gpipe");
  int is_1f1b = !strcmp(name, "1f1b"), is_inter = !strcmp(name, "interleaved");
  if (!is_none && !is_gpipe && !is_1f1b && !is_inter)
    return loom_err("unknown schedule '%s': expected none, gpipe, 1f1b or interleaved", name);
  if (is_none && pp != 1)
    return loom_err("schedule 'none' needs pp = 1 (got pp = %d); use gpipe, 1f1b or "
                    "interleaved for pipeline parallelism", pp);
  if ((is_gpipe || is_1f1b) && vpp != 1)
    return loom_err("schedule '%s' takes vpp = 1 (got vpp = %d); use 'interleaved' for "
                    "virtual pipeline chunks", name, vpp);
  if (is_inter && vpp < 2)
    return loom_err("schedule 'interleaved' needs vpp >= 2 chunks per rank (got vpp = %d); "
                    "use '1f1b' for one chunk per rank", vpp);
  if (sched_init(s, name, pp, vpp, microbatches))
    return loom_err_prefix("schedule '%s': ", name);
  if (is_none) sched_generate_none(s);
  if (is_gpipe) sched_generate_gpipe(s);
  if (is_1f1b) sched_generate_1f1b(s);
  if (is_inter) sched_generate_interleaved(s);
  return 0;
}

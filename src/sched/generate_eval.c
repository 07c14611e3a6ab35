/* The forward-only schedule of an evaluation: every micro-batch goes forward through every
 * virtual stage (load, recv-act, forward, send-act) and nothing else — no backward, no
 * gradient reduction, no optimizer step. Each rank visits its (mb, chunk) pairs in the order
 * (mb, virtual stage), the same total order on every rank, so each recv waits only for a send
 * that comes earlier in that order: deadlock-free with asynchronous sends and blocking recvs
 * (the validator below proves it by replay). */
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

int loom_sched_generate_forward(loom_schedule *s, int pp, int vpp, int microbatches) {
  memset(s, 0, sizeof *s);
  if (sched_init(s, "forward", pp, vpp, microbatches))
    return loom_err_prefix("forward-only schedule: ");
  unsigned char *loaded = loom_calloc((size_t)pp * (size_t)microbatches, 1);
  for (int mb = 0; mb < microbatches; mb++)
    for (int v = 0; v < pp * vpp; v++) {
      int r = loom_sched_vstage_rank(s, v);
      sched_emit_forward(s, r, loom_sched_vstage_chunk(s, v), mb, loaded + (size_t)r * microbatches);
    }
  free(loaded);
  return 0;
}

/* Only forward-pass instructions; every forward once; a chunk's input (recv-act, or the
 * previous chunk's forward on the same rank) before its forward; send-act after it. */
static int check_forward_order(const loom_schedule *s) {
  int units = s->vpp * s->microbatches;
  int *done = loom_malloc((size_t)units * sizeof *done);
  int *recvd = loom_malloc((size_t)units * sizeof *recvd);
  int rc = 0;
  for (int r = 0; r < s->pp && !rc; r++) {
    for (int u = 0; u < units; u++) done[u] = recvd[u] = -1;
    for (int i = 0; i < s->count[r] && !rc; i++) {
      const loom_instr *in = &s->instr[r][i];
      int u = in->chunk >= 0 ? sched_unit(s, in->chunk, in->mb) : -1;
      int v = in->chunk >= 0 ? loom_sched_vstage(s, r, in->chunk) : -1;
      switch (in->kind) {
      case LOOM_INSTR_LOAD_MB:
        break;
      case LOOM_INSTR_RECV_ACT:
        recvd[u] = i;
        break;
      case LOOM_INSTR_FORWARD:
        if (done[u] >= 0)
          rc = loom_err("%sduplicate forward (first at instruction %d)", sched_where(s, r, i),
                        done[u]);
        else if (v > 0 && s->pp > 1 && recvd[u] < 0)
          rc = loom_err("%sits input activation has not been received: add 'recv-act chunk=%d "
                        "mb=%d' before it", sched_where(s, r, i), in->chunk, in->mb);
        else if (v > 0 && s->pp == 1 && done[sched_unit(s, in->chunk - 1, in->mb)] < 0)
          rc = loom_err("%sits input comes from 'forward chunk=%d mb=%d', which has not run",
                        sched_where(s, r, i), in->chunk - 1, in->mb);
        done[u] = i;
        break;
      case LOOM_INSTR_SEND_ACT:
        if (done[u] < 0)
          rc = loom_err("%ssends the output of 'forward chunk=%d mb=%d', which has not run",
                        sched_where(s, r, i), in->chunk, in->mb);
        break;
      default:
        rc = loom_err("%sa forward-only schedule holds only load, recv-act, forward and "
                      "send-act", sched_where(s, r, i));
      }
    }
    for (int u = 0; u < units && !rc; u++)
      if (done[u] < 0)
        rc = loom_err("rank %d: missing 'forward chunk=%d mb=%d'", r, u / s->microbatches,
                      u % s->microbatches);
  }
  free(done);
  free(recvd);
  return rc;
}

int loom_sched_validate_forward(const loom_schedule *s) {
  if (sched_check_shape(s) || sched_check_fields(s)) return LOOM_ERR;
  sched_links links;
  if (sched_match(s, &links)) return LOOM_ERR;
  int rc = check_forward_order(s);
  if (!rc) rc = sched_check_deadlock(s, &links);
  sched_links_free(s, &links);
  return rc;
}

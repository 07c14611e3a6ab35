/* Agreeing on a failure: every rank learns whether any rank failed, which one first (lowest
 * rank), its message, and whether every rank failed with the same message (an error every
 * rank detects identically, such as a layout check, is then reported once). One double
 * all-reduce of 2*size values; the message is broadcast only when something failed. The
 * traffic counters are left as they were (this is control traffic, not the model's). */
#include <stdio.h>
#include <stdlib.h>

#include "loom/comm.h"
#include "loom/core.h"

bool loom_comm_agree(const loom_comm *c, int rc, loom_failure *out) {
  memset(out, 0, sizeof *out);
  out->rank = -1;
  const char *mine = loom_errmsg();
  if (c->size <= 1) {
    if (!rc) return false;
    out->rank = c->rank;
    out->count = 1;
    out->all_same = true;
    snprintf(out->msg, sizeof out->msg, "%s", mine);
    return true;
  }
  loom_comm_stats saved = loom_comm_counters;
  /* [0, size): 1 where the rank failed; [size, 2 size): a 52-bit hash of its message */
  double *v = loom_calloc((size_t)c->size * 2, sizeof(double));
  if (rc) {
    v[c->rank] = 1;
    v[c->size + c->rank] = (double)(loom_hash64(mine, strlen(mine), 0) & ((1ull << 52) - 1));
  }
  loom_comm_allreduce_f64(c, v, (size_t)c->size * 2, LOOM_OP_SUM);
  double hash = -1;
  out->all_same = true;
  for (int r = 0; r < c->size; r++) {
    if (v[r] == 0) {
      out->all_same = false;
      continue;
    }
    if (out->rank < 0) out->rank = r;
    if (hash >= 0 && v[c->size + r] != hash) out->all_same = false;
    hash = v[c->size + r];
    out->count++;
  }
  free(v);
  if (out->rank >= 0) {
    if (c->rank == out->rank) snprintf(out->msg, sizeof out->msg, "%s", mine);
    loom_comm_bcast_bytes(c, out->msg, sizeof out->msg, out->rank);
    out->msg[sizeof out->msg - 1] = 0;
  }
  loom_comm_counters = saved;
  return out->rank >= 0;
}

/* Deadlock detection: replay the lists (asynchronous sends, blocking receives) and, when no
 * rank can advance, report every blocked rank with the receive it waits at and where the
 * matching send sits on the peer. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

enum { MAX_LISTED = 8 };

int sched_check_deadlock(const loom_schedule *s, const sched_links *links) {
  sched_replay_state st = {0};
  st.busy = loom_calloc((size_t)s->pp, sizeof *st.busy);
  st.blocked = loom_calloc((size_t)s->pp, sizeof *st.blocked);
  int rc = 0;
  if (sched_replay(s, links, &st)) {
    char msg[3000];
    size_t len = (size_t)snprintf(msg, sizeof msg,
                                  "deadlock: no rank can proceed (sends are asynchronous, "
                                  "receives block):");
    int listed = 0, blocked = 0;
    for (int r = 0; r < s->pp; r++) {
      int i = st.blocked[r];
      if (i >= s->count[r]) continue;
      blocked++;
      if (listed == MAX_LISTED || len >= sizeof msg) continue;
      listed++;
      const loom_instr *in = &s->instr[r][i];
      char text[96], send_text[96];
      int j = links->peer_index[r][i];
      loom_instr_format(in, text, sizeof text);
      loom_instr_format(&s->instr[in->peer][j], send_text, sizeof send_text);
      len += (size_t)snprintf(msg + len, sizeof msg - len,
                              " rank %d, instruction %d '%s' waits for rank %d's instruction "
                              "%d '%s' (rank %d is stopped at instruction %d);",
                              r, i, text, in->peer, j, send_text, in->peer,
                              st.blocked[in->peer]);
    }
    if (blocked > listed && len < sizeof msg)
      len += (size_t)snprintf(msg + len, sizeof msg - len, " and %d more blocked ranks;",
                              blocked - listed);
    rc = loom_err("%s reorder so that each send comes before any receive that waits on it", msg);
  }
  free(st.busy);
  free(st.blocked);
  return rc;
}

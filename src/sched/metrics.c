/* Metrics of a schedule: the pipeline bubble under given forward/backward costs (by replay)
 * and the peak number of micro-batches in flight on a rank (by walking its list). */
#include <math.h>
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

double loom_sched_bubble_fraction(const loom_schedule *s, double t_fwd, double t_bwd) {
  if (!(t_fwd > 0) || !(t_bwd > 0) || !isfinite(t_fwd) || !isfinite(t_bwd)) {
    loom_err("bubble fraction: costs must be positive and finite (t_fwd = %g, t_bwd = %g)",
             t_fwd, t_bwd);
    return -1;
  }
  if (loom_sched_validate(s)) return -1;
  sched_links links;
  if (sched_match(s, &links)) return -1;
  sched_replay_state st = {0};
  st.cost[LOOM_INSTR_FORWARD] = t_fwd;
  st.cost[LOOM_INSTR_BACKWARD] = t_bwd;
  st.cost[LOOM_INSTR_BACKWARD_INPUT] = t_bwd / 2;
  st.cost[LOOM_INSTR_BACKWARD_WEIGHT] = t_bwd / 2;
  st.busy = loom_calloc((size_t)s->pp, sizeof *st.busy);
  st.blocked = loom_calloc((size_t)s->pp, sizeof *st.blocked);
  int deadlock = sched_replay(s, &links, &st);
  LOOM_ASSERT(!deadlock); /* validation replays the same lists */
  double busy = 0;
  for (int r = 0; r < s->pp; r++) busy += st.busy[r];
  double idle = s->pp * st.makespan - busy;
  free(st.busy);
  free(st.blocked);
  sched_links_free(s, &links);
  return busy > 0 ? idle / busy : 0;
}

int loom_sched_peak_inflight(const loom_schedule *s, int rank) {
  if (rank < 0 || rank >= s->pp)
    return loom_err("peak in-flight: rank %d is out of range: pipeline ranks are 0..%d", rank,
                    s->pp - 1);
  int now = 0, peak = 0;
  for (int i = 0; i < s->count[rank]; i++) {
    loom_instr_kind k = s->instr[rank][i].kind;
    if (k == LOOM_INSTR_FORWARD && ++now > peak) peak = now;
    if (k == LOOM_INSTR_BACKWARD || k == LOOM_INSTR_BACKWARD_WEIGHT) now--;
  }
  return peak;
}

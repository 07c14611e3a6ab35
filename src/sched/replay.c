/* Replay of a schedule under the executor's communication model: sends are asynchronous
 * (they never wait), a recv blocks until its matched send has run, and its data is ready at
 * the end of that send. Every instruction takes cost[kind] time on its rank. Ranks advance
 * whenever their next instruction can run, so the times do not depend on the visiting order;
 * when no rank can advance and some are unfinished, the schedule deadlocks. */
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

int sched_replay(const loom_schedule *s, const sched_links *links, sched_replay_state *st) {
  int pp = s->pp;
  double *clock = calloc((size_t)pp, sizeof *clock);
  double **end = st->end;
  if (!clock) abort();
  if (!end) { /* recv times need the end of every send */
    end = calloc((size_t)pp, sizeof *end);
    if (!end) abort();
    for (int r = 0; r < pp; r++) {
      end[r] = malloc((size_t)(s->count[r] ? s->count[r] : 1) * sizeof **end);
      if (!end[r]) abort();
    }
  }
  int *pos = st->blocked;
  for (int r = 0; r < pp; r++) {
    pos[r] = 0;
    st->busy[r] = 0;
  }
  for (int progress = 1; progress;) {
    progress = 0;
    for (int r = 0; r < pp; r++)
      while (pos[r] < s->count[r]) {
        int i = pos[r];
        const loom_instr *in = &s->instr[r][i];
        double t = clock[r];
        if (sched_is_recv(in->kind)) {
          int j = links->peer_index[r][i];
          if (pos[in->peer] <= j) break; /* its send has not run yet */
          if (end[in->peer][j] > t) t = end[in->peer][j];
        }
        double d = st->cost[in->kind];
        if (st->start) st->start[r][i] = t;
        end[r][i] = t + d;
        clock[r] = t + d;
        if (sched_is_compute(in->kind)) st->busy[r] += d;
        pos[r]++;
        progress = 1;
      }
  }
  int deadlock = 0;
  st->makespan = 0;
  for (int r = 0; r < pp; r++) {
    if (pos[r] < s->count[r]) deadlock = 1;
    if (clock[r] > st->makespan) st->makespan = clock[r];
  }
  if (!st->end) {
    for (int r = 0; r < pp; r++) free(end[r]);
    free(end);
  }
  free(clock);
  return deadlock;
}

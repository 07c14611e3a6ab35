/* Replay of a schedule under the executor's communication model: sends are asynchronous
 * (they never wait), a recv blocks until its matched send has run. Ranks advance whenever
 * their next instruction can run, so the times do not depend on the visiting order; when no
 * rank can advance and some are unfinished, the schedule deadlocks.
 *
 * One core drives both users: the per-kind costs of the validator, the grid and the bubble
 * (a recv's data is ready at the end of its send; every instruction takes cost[kind]), and
 * the simulator's timing callback (loom_sched_replay_timed), which decides each
 * instruction's end and each send's arrival time. */
#include <stdbool.h>
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

/* Returns 1 on deadlock (blocked[r] = where rank r stopped). With `sync_optimizer` the
 * optimizer steps are a barrier: the executor's step all-reduces the global gradient norm over
 * every rank before any rank updates (training.grad_clip), so no optimizer step starts before
 * every rank has reached its own; they then start together at the latest of their clocks. A
 * rank waits at its optimizer step until no rank can advance otherwise; the ranks waiting there
 * are released together. */
static int replay_core(const loom_schedule *s, const sched_links *links, loom_sched_timing_fn fn,
                       void *ctx, int *pos, double *makespan, bool sync_optimizer) {
  int pp = s->pp;
  double *clock = loom_calloc((size_t)pp, sizeof *clock);
  double **ready = loom_calloc((size_t)pp, sizeof *ready);
  for (int r = 0; r < pp; r++) {
    ready[r] = loom_malloc((size_t)(s->count[r] ? s->count[r] : 1) * sizeof **ready);
    pos[r] = 0;
  }
  double release = -1; /* >= 0: the optimizer steps waiting now start at this time */
  for (int progress = 1; progress;) {
    progress = 0;
    for (int r = 0; r < pp; r++)
      while (pos[r] < s->count[r]) {
        int i = pos[r];
        const loom_instr *in = &s->instr[r][i];
        bool barrier = sync_optimizer && in->kind == LOOM_INSTR_OPTIMIZER_STEP;
        if (barrier && release < 0) break; /* waits for the other ranks */
        loom_sched_timing t = {clock[r], clock[r], clock[r], clock[r]};
        if (barrier) t.start = t.end = t.ready = t.arrival = clock[r] = release;
        if (sched_is_recv(in->kind)) {
          int j = links->peer_index[r][i];
          if (pos[in->peer] <= j) break; /* its send has not run yet */
          t.arrival = ready[in->peer][j];
        }
        fn(ctx, r, i, in, &t);
        if (t.end < t.start) t.end = t.start;
        ready[r][i] = sched_is_send(in->kind) ? t.ready : t.end;
        clock[r] = t.end;
        pos[r]++;
        progress = 1;
      }
    if (release >= 0) { /* the released optimizer steps have run */
      release = -1;
      progress = 1;
    } else if (!progress && sync_optimizer) { /* stalled: release those at an optimizer step */
      for (int r = 0; r < pp; r++)
        if (pos[r] < s->count[r] && s->instr[r][pos[r]].kind == LOOM_INSTR_OPTIMIZER_STEP &&
            clock[r] > release)
          release = clock[r];
      progress = release >= 0;
    }
  }
  int deadlock = 0;
  *makespan = 0;
  for (int r = 0; r < pp; r++) {
    if (pos[r] < s->count[r]) deadlock = 1;
    if (clock[r] > *makespan) *makespan = clock[r];
    free(ready[r]);
  }
  free(ready);
  free(clock);
  return deadlock;
}

/* per-kind costs; a recv starts when its data is there (the end of its send) */
static void kind_cost(void *ctx, int r, int i, const loom_instr *in, loom_sched_timing *t) {
  sched_replay_state *st = ctx;
  double start = t->start;
  if (sched_is_recv(in->kind) && t->arrival > start) start = t->arrival;
  double d = st->cost[in->kind];
  t->end = t->ready = start + d;
  if (st->start) st->start[r][i] = start;
  if (st->end) st->end[r][i] = start + d;
  if (sched_is_compute(in->kind)) st->busy[r] += d;
}

int sched_replay(const loom_schedule *s, const sched_links *links, sched_replay_state *st) {
  for (int r = 0; r < s->pp; r++) st->busy[r] = 0;
  return replay_core(s, links, kind_cost, st, st->blocked, &st->makespan, false);
}

int loom_sched_replay_timed(const loom_schedule *s, loom_sched_timing_fn fn, void *ctx,
                            double *makespan) {
  sched_links links;
  if (sched_match(s, &links)) return LOOM_ERR;
  int *pos = loom_calloc((size_t)s->pp, sizeof *pos);
  int deadlock = replay_core(s, &links, fn, ctx, pos, makespan, true);
  int rc = 0;
  if (deadlock) {
    int r = 0;
    while (r < s->pp && pos[r] >= s->count[r]) r++;
    rc = loom_err("replay: the schedule deadlocks (%s waits forever); validate it first",
                  sched_where(s, r, pos[r]));
  }
  free(pos);
  sched_links_free(s, &links);
  return rc;
}

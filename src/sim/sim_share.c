/* Processor sharing for profiles whose ranks outnumber the devices of a node and share them
 * in time (CPU cores under `mpirun --oversubscribe`): from the last replay's timeline, the
 * number of ranks doing work at each moment gives each one the rate devices/busy (at most 1);
 * an instruction's slowdown becomes the inverse of its average rate over its interval. The
 * replay is repeated until the slowdowns settle (damped fixed point).
 *
 * The replay follows a stage's busiest rank. Where MoE routing is unbalanced, the other ranks
 * of the stage finish their experts early and wait (asleep between polls) while it works on.
 * The cores they leave do not go to it: Linux's scheduler does not move a task that ran within
 * its migration cost (sched_migration_cost_ns, 0.5 ms by default) to another core, and an
 * instruction's imbalance lasts about that long. So the busiest rank keeps sharing its core with
 * the k - 1 other ranks placed there (k: ranks per core), and those are busy for the other
 * ranks' mean share of the instruction, m = (P (1 - waiting) - 1) / (P - 1) of it (P: the
 * stage's ranks; the mean rank works 1 - waiting of it). The stage's ranks then weigh
 * w (1/k + (1 - 1/k) m): an instruction of D seconds takes D (1 + (k - 1) m) where counting every
 * rank busy would give k D, and moving the waiting ranks' cores to it max(D, k D (1 - waiting)).
 *
 * In a pipeline (pp > 1) the ranks sharing a core belong to different stages (the placement the
 * scheduler meets when it does well: each core one rank of each stage). A stage's waiting ranks
 * then leave their cores to the other stage's ranks placed there, but a stage advances at its
 * slowest rank's pace (its ranks meet at every all-to-all), and the other stage's slowest rank
 * is the one sharing a core with this stage's busiest: the time handed over goes to ranks that
 * then wait. So no other rank gains it, and a pipeline stage counts all its ranks busy (m = 1).
 * Measured: pp2 x ep2 on 2 cores ran its step 4% longer than ep2 on the same cores (the same
 * work), where counting the waiting ranks' share gave it 5% less (docs/SIMULATOR.md, "In
 * rounds"). */
#include <math.h>
#include <stdlib.h>

#include "loom/core.h"
#include "sim/sim_internal_run.h"

typedef struct {
  double t, dw;
} edge;

static int by_time(const void *a, const void *b) {
  double x = ((const edge *)a)->t, y = ((const edge *)b)->t;
  return x < y ? -1 : x > y;
}

/* cumulative integral of the rate at time t (breakpoints bt[0..n), values G at them) */
static double cum(const double *bt, const double *G, const double *rate, int n, double t) {
  if (n == 0 || t <= bt[0]) return t;
  int lo = 0, hi = n - 1;
  while (lo < hi) { /* last breakpoint <= t */
    int mid = (lo + hi + 1) / 2;
    if (bt[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return G[lo] + (t - bt[lo]) * rate[lo];
}

double sim_share_update(sim_run *R, int ranks_per_stage, int nodes, double devices) {
  const loom_schedule *s = R->s;
  long n = 0;
  for (int r = 0; r < s->pp; r++) n += s->count[r];
  edge *e = loom_malloc((size_t)(2 * n + 1) * sizeof *e);
  long k = 0;
  double w = (double)ranks_per_stage / nodes, P = ranks_per_stage;
  double per_core = fmax(1, w * s->pp / devices); /* ranks a core runs */
  for (int r = 0; r < s->pp; r++)
    for (int i = 0; i < s->count[r]; i++)
      if (R->t1[r][i] > R->t0[r][i]) { /* the core-mates' work, spread over the interval */
        double m = P > 1 && s->pp == 1
                       ? fmin(1, fmax(0, (P * (1 - R->waiting[r][i]) - 1) / (P - 1))) : 1;
        double busy = w * (1 / per_core + (1 - 1 / per_core) * m);
        e[k++] = (edge){R->t0[r][i], busy};
        e[k++] = (edge){R->t1[r][i], -busy};
      }
  qsort(e, (size_t)k, sizeof *e, by_time);
  double *bt = loom_malloc((size_t)(k + 1) * sizeof *bt), *G = loom_malloc((size_t)(k + 1) * sizeof *G);
  double *rate = loom_malloc((size_t)(k + 1) * sizeof *rate);
  int m = 0;
  double load = 0, g = 0;
  for (long j = 0; j < k; j++) {
    load += e[j].dw;
    if (j + 1 < k && e[j + 1].t == e[j].t) continue;
    if (m > 0) g += (e[j].t - bt[m - 1]) * rate[m - 1];
    bt[m] = e[j].t;
    G[m] = g;
    rate[m] = load > devices + 1e-9 ? devices / load : 1;
    m++;
  }
  double change = 0;
  for (int r = 0; r < s->pp; r++)
    for (int i = 0; i < s->count[r]; i++) {
      double a = R->t0[r][i], b = R->t1[r][i];
      if (!(b > a)) continue;
      double avg = (cum(bt, G, rate, m, b) - cum(bt, G, rate, m, a)) / (b - a);
      double want = avg > 0 ? 1 / avg : 1, old = R->slow[r][i];
      /* the interval was measured at the old slowdown: the work is (b-a)/old */
      double next = 0.5 * old + 0.5 * want;
      change = fmax(change, fabs(next - old) / old);
      R->slow[r][i] = next;
    }
  free(e);
  free(bt);
  free(G);
  free(rate);
  return change;
}

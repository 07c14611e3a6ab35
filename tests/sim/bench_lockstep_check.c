/* `loom bench`'s ranks in lockstep (src/sim/bench.c, loom_bench_passes under b->lockstep): two
 * ranks time the same items on scripted times in which they trade places as the slow one
 * from pass to pass, as this machine's two vCPUs do. Every time taken is the slower rank's of
 * its moment, so both ranks keep the same best[], the fastest pass of those maxima
 * (min over passes of max over ranks), and run the same passes (different decisions would
 * leave one rank waiting in an all-reduce: the test's timeout). The old rule, each rank's own
 * best and then the slower rank's set, would price item 0 at 1.0 where no pass ran under 1.5.
 *
 * usage (under mpirun -np 2): sim_bench_lockstep_check */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "loom/comm.h"
#include "loom/core.h"
#include "loom/mesh.h"
#include "loom/sim_bench.h"

/* seconds by rank, item and pass */
static const double script[2][3][5] = {
    {{1.0, 1.5, 1.0, 1.5, 1.0}, /* item 0: the ranks trade places every pass */
     {2.0, 2.0, 2.0, 2.0, 2.0}, /* item 1: rank 1 the slower throughout */
     {5.0, 1.0, 1.0, 1.0, 1.0}},
    {{1.5, 1.0, 1.5, 1.0, 1.5},
     {3.0, 3.1, 3.0, 3.0, 3.0},
     {1.0, 1.0, 1.0, 1.0, 1.0}}};

typedef struct {
  int rank, calls[3];
} scripted;

static double scripted_time(void *ctx, int i) {
  scripted *s = ctx;
  return script[s->rank][i][s->calls[i]++];
}

int main(int argc, char **argv) {
  if (loom_dist_init(&argc, &argv)) return 1;
  loom_mesh m;
  if (loom_dist_world() != 2 || loom_mesh_create_on(&m, 1, 2, 1, 1, 1, 60, 0)) {
    fprintf(stderr, "sim_bench_lockstep_check: run under mpirun -np 2 (%s)\n", loom_errmsg());
    return 1;
  }
  int me = m.world_comm.rank;
  loom_bench_ctx b = {1.0, NULL, me, 2, &m.world_comm, &m.world_comm};
  CHECK(loom_bench_slowest(&b, me ? 0.25 : 0.5) == 0.5, "the slowest of 0.5 and 0.25 is 0.5");
  scripted s = {me, {0}};
  double best[3];
  int passes = loom_bench_passes(&b, scripted_time, &s, 3, 5, best);
  /* item 0: every pass's maximum is 1.5 (two passes agree: timed twice); item 1: 3.0 and 3.1
   * agree; item 2: 5.0 then 1.0 (apart), then 1.0 (agrees): three passes */
  CHECK(best[0] == 1.5 && best[1] == 3.0 && best[2] == 1.0,
        "rank %d: best %g %g %g, want 1.5 3 1 (the fastest pass of the slower rank's times)", me,
        best[0], best[1], best[2]);
  CHECK(passes == 3 && s.calls[0] == 2 && s.calls[1] == 2 && s.calls[2] == 3,
        "rank %d: %d passes, items timed %d %d %d times; want 3 passes, 2 2 3", me, passes,
        s.calls[0], s.calls[1], s.calls[2]);
  /* the same items alone (no lockstep): each rank its own best, item 0 at 1.0 on both */
  loom_bench_ctx alone = b;
  alone.lockstep = NULL;
  scripted t = {me, {0}};
  loom_bench_passes(&alone, scripted_time, &t, 3, 5, best);
  CHECK(best[0] == 1.0, "rank %d alone: item 0 at %g, want 1.0 (its own fastest moment)", me,
        best[0]);
  double f[1] = {harness_failed};
  loom_comm_allreduce_f64(&m.world_comm, f, 1, LOOM_OP_SUM);
  if (me == 0)
    printf("bench_lockstep_check: %d passed on rank 0, %.0f failed on both ranks\n",
           harness_passed, f[0]);
  loom_mesh_free(&m);
  loom_dist_finalize();
  return f[0] > 0;
}

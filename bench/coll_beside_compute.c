/* What a layer's collective costs a step when other ranks compute beside it on shared cores
 * (the simulator's sharing_beside, src/sim/cost_ops.c). Pairs of ranks (consecutive world ranks,
 * a tp-like group each) repeat: compute W ms, then one collective in the pair through loom's own
 * calls (loom_comm_allreduce_f32 / loom_comm_alltoall_f32: a non-blocking MPI collective polled
 * with loom's naps, 200 us where ranks outnumber the cores). The same loop without the
 * collective, right after, gives the compute under the same sharing; the difference of the two
 * means is what the collective adds to an iteration. bench/coll_beside_compute.sh runs it with one pair (each rank a core:
 * the collective alone, as `loom bench --nproc 2` times it) and with two pairs on the same 2
 * cores, and prints the ratio: 2 if the collective were slowed by the sharing as the compute is,
 * about 1 if its waits are filled by the other pair's compute.
 *   usage: mpirun -np 2|4 coll_beside_compute [rounds, default 5]
 * Prints one line per (collective, size, work): "kind MB work_ms added_ms work_only_ms", medians
 * over the rounds of the slowest rank's mean iteration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/comm.h"
#include "loom/core.h"
#include "loom/mesh.h"

static double cpu_now(void) { /* this thread's CPU time: the work's length whatever the sharing */
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile double sink;
/* `n` rounds of a dependent multiply-add chain over a 32 KB buffer: CPU work that stays in L1 */
static void work(long n, float *buf) {
  double x = 1;
  for (long i = 0; i < n; i++) x = x * 0.999999 + buf[i & 8191];
  sink = x;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The slowest rank's mean iteration, s: `iters` x (compute, then the collective: kind 0
 * all-reduce, 1 all-to-all, -1 none) */
static double iterate(const loom_mesh *m, int kind, float *x, float *y, size_t n, long per,
                      float *buf, int iters) {
  loom_comm_barrier(&m->world_comm);
  double t0 = loom_now();
  for (int i = 0; i < iters; i++) {
    work(per, buf);
    if (kind == 0) loom_comm_allreduce_f32(&m->tp_comm, x, n, LOOM_OP_SUM);
    if (kind == 1) loom_comm_alltoall_f32(&m->tp_comm, x, y, n / 2);
  }
  double t = (loom_now() - t0) / iters;
  loom_comm_allreduce_f64(&m->world_comm, &t, 1, LOOM_OP_MAX);
  return t;
}

int main(int argc, char **argv) {
  if (loom_dist_init(&argc, &argv)) return fprintf(stderr, "%s\n", loom_errmsg()), 1;
  int rounds = argc > 1 ? atoi(argv[1]) : 5, world = loom_dist_world();
  if (rounds < 1 || world < 2 || world % 2) {
    fprintf(stderr, "usage: mpirun -np 2|4|... coll_beside_compute [rounds >= 1] (an even number of ranks)\n");
    loom_dist_finalize();
    return 2;
  }
  loom_mesh m;
  if (loom_mesh_create_on(&m, 1, world / 2, 1, 1, 2, 600, 0)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 1;
  }
  float *buf = loom_calloc(8192, sizeof *buf);
  /* the work's rate from this thread's CPU time (not the wall: the ranks may share a core) */
  double c0 = cpu_now();
  work(20000000, buf);
  double per_ms = 20000000 / ((cpu_now() - c0) * 1e3);
  loom_comm_allreduce_f64(&m.world_comm, &per_ms, 1, LOOM_OP_MAX); /* one count on every rank */
  static const size_t sizes[] = {65536, 262144}; /* floats: 0.26 and 1 MB */
  static const double works[] = {0.5, 1, 2};     /* ms of compute between collectives */
  size_t nmax = sizes[1];
  float *x = loom_calloc(nmax, sizeof *x), *y = loom_calloc(nmax, sizeof *y);
  double *adds = loom_malloc((size_t)rounds * sizeof *adds);
  double *alone = loom_malloc((size_t)rounds * sizeof *alone);
  for (int kind = 0; kind < 2; kind++)
    for (int si = 0; si < 2; si++)
      for (int wi = 0; wi < 3; wi++) {
        long per = (long)(works[wi] * per_ms);
        int iters = (int)(200 / works[wi]); /* ~0.2-0.4 s a trial */
        iterate(&m, kind, x, y, sizes[si], per, buf, 5); /* warm-up */
        for (int r = 0; r < rounds; r++) { /* with and without in turns, minutes apart at most */
          double with = iterate(&m, kind, x, y, sizes[si], per, buf, iters);
          alone[r] = iterate(&m, -1, x, y, sizes[si], per, buf, iters);
          adds[r] = with - alone[r];
        }
        qsort(adds, (size_t)rounds, sizeof *adds, cmp);
        qsort(alone, (size_t)rounds, sizeof *alone, cmp);
        if (m.rank == 0)
          printf("%s %.3f %.1f %.4f %.4f\n", kind ? "all-to-all" : "all-reduce",
                 sizes[si] * 4e-6, works[wi], adds[rounds / 2] * 1e3, alone[rounds / 2] * 1e3);
      }
  free(x), free(y), free(buf), free(adds), free(alone);
  loom_mesh_free(&m);
  loom_dist_finalize();
  return 0;
}

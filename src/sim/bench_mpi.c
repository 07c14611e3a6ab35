/* MPI collectives between the ranks of this machine through the trainer's own calls
 * (loom_comm_*): all-reduce, reduce-scatter, all-gather, all-to-all and a send/recv ping-pong,
 * each at several sizes. A line t = latency_total + bytes_moved / bandwidth is fitted per
 * collective (bytes moved per rank under comm.h's ring accounting); the profile's one network
 * tier gets the send/recv bandwidth, an efficiency per collective (its bandwidth over that)
 * and the median latency per algorithm step. Runs on every rank; rank 0 keeps the result.
 *
 * Across nodes (ranks on several hosts, the same number r >= 2 on each, consecutive: what
 * `mpirun --hostfile` with slots=r places) the profile gets two tiers instead: shared memory
 * over the r ranks of a node (domain r), measured inside node 0 while the other nodes' ranks
 * wait, and the network between nodes (domain 0), measured between the ranks of the same local
 * index on every node, all of them at once (as a data-parallel reduction loads the link). With
 * one rank per node the one tier is the network's.
 *
 * Each tier records the time-sharing its times hold (ranks_per_core: the ranks working while
 * they were timed over this machine's cores; the simulator slows a collective only by what a
 * step's sharing exceeds it). A step meets its tensor-parallel collectives inside a node between
 * its layers' compute, while the ranks sharing its cores compute or run collectives of their own
 * at other moments: priced as timed alone and slowed as the compute is. Its gradient reduction
 * over the network is a moment every rank reaches together: priced as timed all at once. Where
 * nodes share this machine's cores (the namespaced nodes of scripts/nodes.sh), inside-a-node
 * timed with every node at once held the other nodes' collectives overlapping its own: the
 * forward and backward of dp2 x tp2 across two such nodes were simulated 5 ms (10%) shorter
 * than those of the same 4 ranks on one node, whose shared memory `loom bench --nproc 2` times
 * alone, where the two measured the same (docs/SIMULATOR.md). */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "loom/comm.h"
#include "loom/core.h"
#include "loom/mesh.h"
#include "loom/sim_bench.h"

static const size_t sizes[] = {2048, 32768, 262144, 1048576}; /* floats per rank */
enum { NS = 4 };
/* the all-reduce past the line's sizes: gradient reductions are often larger, and on CPUs
 * the bandwidth halves once the buffers leave the caches */
static const size_t big[] = {2097152, 4194304}; /* floats per rank: 8 and 16 MB */
enum { NB = 2 };

typedef struct {
  const loom_comm *c;   /* the group measured */
  const loom_comm *all; /* every rank: the groups that load the link at once */
  bool idle;            /* this rank's group is not timed: it only joins the barriers */
  loom_coll_kind kind;
  size_t n;
  float *in, *out;
} mjob;

static void run(void *p) {
  mjob *j = p;
  const loom_comm *c = j->c;
  if (j->idle) return;
  switch (j->kind) {
  case LOOM_COLL_ALLREDUCE: loom_comm_allreduce_f32(c, j->in, j->n, LOOM_OP_SUM); break;
  case LOOM_COLL_REDUCE_SCATTER: loom_comm_reduce_scatter_f32(c, j->in, j->out, j->n / c->size); break;
  case LOOM_COLL_ALLGATHER: loom_comm_allgather_f32(c, j->in, j->out, j->n / c->size); break;
  case LOOM_COLL_ALLTOALL: loom_comm_alltoall_f32(c, j->in, j->out, j->n / c->size); break;
  default: { /* ping-pong between ranks 0 and 1: two one-way messages */
    if (c->rank > 1) break;
    loom_comm_request r;
    if (c->rank == 0) {
      loom_comm_isend_f32(c, j->in, j->n, 1, 7, &r);
      loom_comm_wait(&r);
      loom_comm_recv_f32(c, j->out, j->n, 1, 8);
    } else {
      loom_comm_recv_f32(c, j->out, j->n, 0, 7);
      loom_comm_isend_f32(c, j->in, j->n, 0, 8, &r);
      loom_comm_wait(&r);
    }
  }
  }
}

/* The best of `trials` trials of `reps` runs each, every trial the slowest rank's mean. The
 * groups start each trial together (a barrier of all the ranks): groups that each timed alone
 * drifted apart, and the best trial of each was the one the others left the link to (between
 * nodes at 1 Gbit/s, an 8 MB all-reduce timed at 146 ms that took 210-230 ms in a step, with
 * the other group's). */
static double best_of(mjob *j, int reps, int trials) {
  double best = 1e300;
  for (int trial = 0; trial < trials; trial++) {
    loom_comm_barrier(j->all);
    double t0 = loom_now();
    for (int i = 0; i < reps; i++) run(j);
    double t[1] = {(loom_now() - t0) / reps};
    loom_comm_allreduce_f64(j->all, t, 1, LOOM_OP_MAX);
    if (t[0] < best) best = t[0];
  }
  return best;
}

/* Back to back: the same number of repetitions on every rank of every group (decided by the
 * slowest rank's first timing), the best of three trials. */
static double timed(mjob *j, double min_s) {
  run(j);
  int reps = (int)ceil(min_s / 3 / fmax(best_of(j, 1, 1), 1e-7));
  if (reps < 2) reps = 2;
  if (reps > 1000) reps = 1000;
  double best = best_of(j, reps, 3);
  return j->kind == LOOM_COLL_SENDRECV ? best / 2 : best;
}

/* One run at a time, as a step meets its gradient reduction: the link idle, until the last
 * rank has the result; the best of five. Back to back, a run's last bytes, still queued in the
 * link (a shaped one buffers up to 50 ms of them), travel while the next run's first are sent,
 * and TCP keeps its window open; a step's reduction pays them whole. Between nodes at 1 Gbit/s
 * a 4 MB all-reduce took 95-100 ms a run back to back, 115-116 alone (2026-11-30). */
static double timed_alone(mjob *j) {
  run(j);
  return best_of(j, 1, 5);
}

static double steps(loom_coll_kind k, int p) {
  return k == LOOM_COLL_ALLREDUCE ? 2.0 * (p - 1) : k == LOOM_COLL_SENDRECV ? 1 : p - 1;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The line t = latency + bytes / bandwidth of every collective on c: bw, lat (per step); and
 * the all-reduce's time at NS + NB sizes (ar_bytes per rank, ar_time). `idle`: this rank's
 * group waits while the others are timed (every rank calls this with its own group). */
static void measure(const loom_comm *c, bool idle, const loom_bench_ctx *b, const char *what,
                    double *bw, double *lat, double *ar_bytes, double *ar_time) {
  int p = c->size;
  size_t maxn = big[NB - 1];
  mjob j = {c, b->comm, idle, 0, 0, loom_alloc(maxn * sizeof(float)),
            loom_alloc(maxn * sizeof(float))};
  for (size_t i = 0; i < maxn; i++) j.in[i] = 1e-3f * (float)(i % 1000);
  for (int k = 0; k < LOOM_COLL_COUNT; k++) {
    double x[NS], y[NS], sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int s = 0; s < NS; s++) {
      j.kind = (loom_coll_kind)k;
      j.n = sizes[s] / (size_t)p * (size_t)p;
      double t = timed(&j, 0.03 * b->scale);
      x[s] = loom_hw_ring_bytes((loom_coll_kind)k, (double)j.n * 4, p);
      y[s] = t;
      sx += x[s], sy += y[s], sxx += x[s] * x[s], sxy += x[s] * y[s];
    }
    double slope = (NS * sxy - sx * sy) / (NS * sxx - sx * sx);
    double icpt = (sy - slope * sx) / NS;
    if (!(slope > 0)) slope = y[NS - 1] / x[NS - 1];
    if (icpt < 0) icpt = y[0] * 0.5;
    bw[k] = 1 / slope;
    lat[k] = icpt / steps((loom_coll_kind)k, p);
    if (b->log && b->rank == 0) {
      fprintf(b->log, "mpi %s%-15s (%d ranks):", what, loom_coll_name((loom_coll_kind)k), p);
      for (int s = 0; s < NS; s++) fprintf(b->log, " %zu B %.1f us,", sizes[s] * 4, y[s] * 1e6);
      fprintf(b->log, " -> %.2f GB/s, %.2f us per step\n", bw[k] / 1e9, lat[k] * 1e6);
    }
    if (k != LOOM_COLL_ALLREDUCE) continue;
    /* the all-reduce's times at the line's sizes and larger (fill_tier: over the line's) */
    for (int s = 0; s < NS + NB; s++) {
      size_t n = (s < NS ? sizes[s] : big[s - NS]) / (size_t)p * (size_t)p;
      j.n = n;
      ar_bytes[s] = (double)n * 4;
      ar_time[s] = s < NS - 1 ? y[s] : timed_alone(&j); /* 4 MB and up: a step's reductions */
    }
    if (b->log && b->rank == 0) {
      fprintf(b->log, "mpi %s%-15s (%d ranks):", what, "all-reduce", p);
      for (int s = NS - 1; s < NS + NB; s++)
        fprintf(b->log, " %.0f B %.1f us%s", ar_bytes[s], ar_time[s] * 1e6,
                s + 1 < NS + NB ? "," : " one at a time (the line's factors: the profile)\n");
    }
  }
  loom_free(j.in), loom_free(j.out);
}

/* A tier from a measurement: the send/recv bandwidth, each collective's efficiency over it,
 * the median latency per step, and the all-reduce's bandwidth at each measured size over what
 * the tier's line gives it (the simulator's time for it then meets the measured times). */
static void fill_tier(loom_hw_tier *t, const char *name, int domain, double per_core, int p,
                      const double *bw, const double *lat, const double *ar_bytes,
                      const double *ar_time) {
  snprintf(t->name, sizeof t->name, "%s", name);
  t->domain = domain;
  t->ranks_per_core = per_core <= 0 ? 0 : per_core > 1 ? per_core : 1; /* 0: the node's */
  t->algo = LOOM_ALGO_RING;
  t->bandwidth = bw[LOOM_COLL_SENDRECV];
  for (int k = 0; k < LOOM_COLL_COUNT; k++) {
    double e = bw[k] / t->bandwidth;
    t->efficiency[k] = e > 1.5 ? 1.5 : e;
  }
  double sorted[LOOM_COLL_COUNT];
  memcpy(sorted, lat, sizeof sorted);
  qsort(sorted, LOOM_COLL_COUNT, sizeof(double), by_value);
  t->latency = sorted[LOOM_COLL_COUNT / 2];
  double line_bw = t->bandwidth * t->efficiency[LOOM_COLL_ALLREDUCE];
  t->n_ar_size = NS + NB;
  for (int s = 0; s < NS + NB; s++) {
    double moved = loom_hw_ring_bytes(LOOM_COLL_ALLREDUCE, ar_bytes[s], p);
    double wire = ar_time[s] - t->latency * steps(LOOM_COLL_ALLREDUCE, p); /* bandwidth's part */
    double f = wire > 0 ? moved / line_bw / wire : 20;
    t->ar_size_bytes[s] = ar_bytes[s];
    t->ar_size_factor[s] = f < 0.05 ? 0.05 : f > 20 ? 20 : f;
  }
}

/* Ranks per node when the ranks are on several nodes, the same number on each, consecutive;
 * 0 otherwise (one node, or an irregular placement: measured as one tier). */
static int ranks_per_node(int world) {
  int nodes = loom_dist_nodes();
  if (nodes < 2 || world % nodes) return 0;
  int r = world / nodes;
  for (int i = 0; i < world; i++)
    if (loom_dist_node_of(i) != i / r) return 0;
  return r;
}

int loom_bench_mpi(loom_hw_profile *hw, const loom_bench_ctx *b) {
  const loom_comm *c = b->comm;
  double bw[LOOM_COLL_COUNT], lat[LOOM_COLL_COUNT], arb[NS + NB], art[NS + NB];
  int r = ranks_per_node(c->size);
  /* the time-sharing the times below hold: this machine's ranks, every one in the collective,
   * over its cores (the simulator does not slow them again for as much sharing) */
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  double cores = online > 0 ? (double)online : 1;
  double per_core = loom_dist_machine_ranks() / cores;
  hw->coll_ranks_per_core = per_core > 1 ? per_core : 1;
  if (r == 0 || r == 1) {
    measure(c, false, b, "", bw, lat, arb, art);
    hw->n_tiers = 1;
    fill_tier(&hw->tier[0], r ? "network" : "shared-memory-mpi", 0, 0, c->size, bw, lat, arb,
              art);
    return 0;
  }
  loom_mesh m; /* tp: the r ranks of a node, dp: one rank of every node */
  if (loom_mesh_create_on(&m, 1, c->size / r, 1, 1, r, 120, 0)) return -1;
  /* inside node 0 alone: its r ranks work, on this machine's cores with the idle ranks of the
   * nodes that share them */
  measure(&m.tp_comm, c->rank >= r, b, "inside node 0 (the others wait): ", bw, lat, arb, art);
  fill_tier(&hw->tier[0], "shared-memory-mpi", r, r / cores, m.tp_comm.size, bw, lat, arb, art);
  measure(&m.dp_comm, false, b, "between nodes: ", bw, lat, arb, art);
  fill_tier(&hw->tier[1], "network", 0, per_core, m.dp_comm.size, bw, lat, arb, art);
  hw->n_tiers = 2;
  loom_mesh_free(&m);
  return 0;
}

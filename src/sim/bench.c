/* `loom bench`'s driver: the table of sections, the defaults of a CPU profile, the timing
 * helper every section uses, and the choice of the rank whose measurements the profile keeps.
 *
 * Under mpirun every rank that has a core of its own measures the device sections at once, as
 * the ranks of a training job run at once: a rank alone on the machine would measure a core
 * whose neighbours are idle, and on shared vCPUs one of two cores ran 1.4-2.3x slower than the
 * other for minutes at a time (memory-bound kernels most: the host's other tenants). A
 * synchronous step waits for its slowest rank, so the measuring ranks time each item in
 * lockstep and keep the slowest rank's time of that moment (loom_bench_slowest): a pass is
 * priced as a step meets it, and the fastest pass of those maxima is kept. Before, each rank
 * kept its own fastest moment of every item and the profile the slowest rank's set; where the
 * vCPUs' speeds trade places from second to second, that paired each kernel with whichever
 * rank was fast at its moment, faster than any step (docs/SIMULATOR.md, "Ranks in lockstep").
 * The ranks that did not measure take the slowest measuring rank's profile (the lowest
 * geometric mean of the measured rates), and the log names it. A section
 * that measures the whole machine itself (the instruction peaks: a team of threads on every
 * core) runs after them on rank 0 alone, the others asleep, and every rank takes its figures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom/comm.h"
#include "loom/comm_ep.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/mesh.h"
#include "loom/sim_bench.h"

static const loom_bench_section sections[] = {
    {"gemm", "cblas_sgemm throughput by shape (m, n, k) in the three roles of a linear layer; "
             "bf16 path (rounded inputs)", false, loom_bench_gemm, false},
    {"peak", "instruction peaks from registers (FMA vfmadd231ps, AVX512_BF16 vdpbf16ps, AMX "
             "tdpbf16ps) on 1 thread and on every core at once; the gemm section's figure as a "
             "share of them", false, loom_bench_peak, true},
    {"memory", "memory bandwidth (copy, triad)", false, loom_bench_memory, false},
    {"vector", "rate of every vector kernel of the trainer (norms, GELU, SwiGLU, rotary, "
               "cross-entropy, AdamW, bf16 rounding, sum of squares, adds, copies)", false,
     loom_bench_vector, false},
    {"attention", "the reference causal attention, forward and backward", false,
     loom_bench_attention, false},
    {"mpi", "MPI collectives between the ranks (all-reduce, reduce-scatter, all-gather, "
            "all-to-all, send/recv): bandwidth and latency", true, loom_bench_mpi, false},
};

const loom_bench_section *loom_bench_sections(int *n) {
  *n = (int)(sizeof sections / sizeof sections[0]);
  return sections;
}

void loom_bench_profile_defaults(loom_hw_profile *hw) {
  loom_hw_defaults(hw);
  snprintf(hw->name, sizeof hw->name, "this-machine");
  long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  if (cores < 1) cores = 1;
  hw->devices_per_node = (int)cores;
  hw->timeshare = true;
  if (pages > 0 && page > 0) hw->mem_bytes = (double)pages * page / cores;
  hw->mem_reserved = 0.05 * hw->mem_bytes;
  hw->engine_loom_cpu = true;
  hw->recipe = LOOM_RECIPE_LOOM;
  hw->bf16_native = loom_gemm_bf16_native() != 0; /* the trainer's bf16 path on this machine */
  hw->tp_overlap = hw->dp_overlap = hw->p2p_overlap = false; /* no asynchronous MPI progress */
  hw->overlap_slowdown = 0;
  hw->attention = LOOM_ATTN_LOOM;
  hw->attn_rate_fwd = hw->attn_rate_bwd = 1e9; /* until the attention section measures them */
  hw->kernel_overhead = 0;
  hw->gemm_overhead = 0;
  hw->peak_flops[LOOM_DT_FP16] = 0;
  /* one tier until the MPI section measures it: a guess from memory copies */
  hw->n_tiers = 1;
  snprintf(hw->tier[0].name, sizeof hw->tier[0].name, "shared-memory");
  hw->tier[0].domain = 0;
  hw->tier[0].bandwidth = 5e9;
  hw->tier[0].latency = 2e-6;
}

double loom_bench_time(void (*fn)(void *), void *arg, double min_s) {
  fn(arg); /* warm up */
  double best = 1e300;
  for (int trial = 0; trial < 3; trial++) { /* the best of three: preemption only adds time */
    int reps = 0;
    double t0 = loom_now(), t;
    do {
      fn(arg);
      reps++;
      t = loom_now() - t0;
    } while (t < min_s / 3);
    if (t / reps < best) best = t / reps;
  }
  return best;
}

double loom_bench_slowest(const loom_bench_ctx *b, double t) {
  if (b && b->lockstep) loom_comm_allreduce_f64(b->lockstep, &t, 1, LOOM_OP_MAX);
  return t;
}

int loom_bench_passes(const loom_bench_ctx *b, double (*time_one)(void *ctx, int i), void *ctx,
                      int n, int max_passes, double *best) {
  double *second = loom_malloc((size_t)(n ? n : 1) * sizeof *second);
  int pass = 0, most = max_passes > 2 ? max_passes : 2;
  bool again = true;
  for (int i = 0; i < n; i++) best[i] = second[i] = 1e300;
  for (; pass < most && (pass < 2 || again); pass++) {
    again = false;
    for (int i = 0; i < n; i++) {
      if (pass >= 2 && second[i] <= 1.1 * best[i]) continue; /* two passes agree on it */
      double t = loom_bench_slowest(b, time_one(ctx, i)); /* the same t on every rank */
      if (t < best[i]) second[i] = best[i], best[i] = t;
      else if (t < second[i]) second[i] = t;
      if (pass >= 1 && second[i] > 1.1 * best[i]) again = true;
    }
  }
  free(second);
  return pass;
}

double loom_bench_fit_rel(const double (*X)[3], const double *t, int n, const int *cols, int m,
                          double c[3]) {
  double A[3][4] = {{0}};
  c[0] = c[1] = c[2] = 0;
  for (int s = 0; s < n; s++)
    for (int i = 0; i < m; i++) {
      for (int j = 0; j < m; j++) A[i][j] += X[s][cols[i]] * X[s][cols[j]] / (t[s] * t[s]);
      A[i][m] += X[s][cols[i]] / t[s];
    }
  for (int i = 0; i < m; i++) { /* Gauss-Jordan with partial pivoting */
    int piv = i;
    for (int r = i + 1; r < m; r++)
      if (fabs(A[r][i]) > fabs(A[piv][i])) piv = r;
    if (!(fabs(A[piv][i]) > 0)) return -1;
    for (int j = 0; j <= m; j++) {
      double tmp = A[i][j];
      A[i][j] = A[piv][j], A[piv][j] = tmp;
    }
    for (int r = 0; r < m; r++) {
      if (r == i) continue;
      double f = A[r][i] / A[i][i];
      for (int j = i; j <= m; j++) A[r][j] -= f * A[i][j];
    }
  }
  bool positive = true;
  for (int i = 0; i < m; i++) positive &= (c[cols[i]] = A[i][m] / A[i][i]) > 0;
  if (!positive) return -1;
  double sse = 0;
  for (int s = 0; s < n; s++) {
    double e = (X[s][0] * c[0] + X[s][1] * c[1] + X[s][2] * c[2]) / t[s] - 1;
    sse += e * e;
  }
  return sse;
}

/* a busy tenth of a second first: the core leaves its idle clock before anything is timed */
static void warm_up(void) {
  volatile double x = 1;
  double t0 = loom_now();
  while (loom_now() - t0 < 0.15)
    for (int i = 0; i < 10000; i++) x = x * 1.0000001 + 1e-9;
}

static bool selected(const loom_bench_section *s, const char *only) {
  if (!only) return true;
  size_t len = strlen(s->name);
  const char *p = strstr(only, s->name);
  return p && (p == only || p[-1] == ',') && (!p[len] || p[len] == ',');
}

/* Whether this rank measures the device sections: every rank with a core of its own (its
 * index among its machine's ranks < cores: an oversubscribed bench would time-share them and
 * halve every rate, which the simulator's time sharing then counts again; a machine, not a
 * host name, since namespaced nodes of one machine share its cores). */
static bool measures_devices(const loom_bench_ctx *b) {
  if (b->world < 2) return true;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return loom_dist_machine_index() < (cores > 0 ? cores : 1);
}

/* The geometric mean of the rates the device sections measured (FLOP/s, bytes/s, elements/s):
 * one number to tell a slow rank from a fast one. */
static double speed_index(const loom_hw_profile *hw) {
  double logs = 0;
  int n = 0;
  const double rates[] = {hw->peak_flops[LOOM_DT_FP32], hw->mem_bw, hw->attn_rate_fwd,
                          hw->attn_rate_bwd};
  for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
    if (rates[i] > 0) logs += log(rates[i]), n++;
  for (int i = 0; i < LOOM_VOP_COUNT; i++)
    if (hw->vop_rate[i] > 0) logs += log(hw->vop_rate[i]), n++;
  return n ? exp(logs / n) : 0;
}

/* Every rank takes the profile of the slowest measuring rank (in lockstep the measuring ranks
 * hold the same times already; this hands them to the ranks that did not measure); rank 0 logs
 * each measuring rank's index (the rates' geometric mean) and the one kept. */
static void keep_slowest(loom_hw_profile *hw, const loom_bench_ctx *b, bool measured) {
  const loom_comm *c = b->comm;
  double *speed = loom_calloc((size_t)b->world, sizeof *speed); /* 0: did not measure */
  speed[b->rank] = measured ? speed_index(hw) : 0;
  loom_comm_allreduce_f64(c, speed, (size_t)b->world, LOOM_OP_SUM);
  int root = 0, n = 0;
  for (int r = 0; r < b->world; r++)
    if (speed[r] > 0) {
      n++;
      if (speed[r] < speed[root]) root = r;
    }
  loom_comm_bcast_bytes(c, hw, sizeof *hw, root);
  if (b->log) {
    fprintf(b->log, "devices measured on %d ranks at once%s, rates' geometric mean by rank:", n,
            b->lockstep ? " (in lockstep: each time the slowest rank's of its moment)" : "");
    for (int r = 0; r < b->world; r++)
      if (speed[r] > 0) fprintf(b->log, " %d: %.6g", r, speed[r]);
    fprintf(b->log, "; the profile keeps rank %d's, the slowest\n", root);
  }
  free(speed);
}

static int run_section(loom_hw_profile *hw, const loom_bench_ctx *b, const loom_bench_section *s) {
  double t0 = loom_now();
  if (s->run(hw, b)) return loom_err_prefix("bench %s: ", s->name);
  if (b->log && b->rank == 0) fprintf(b->log, "%-9s done in %.2f s\n", s->name, loom_now() - t0);
  return 0;
}

/* A machine section under mpirun: rank 0 runs it alone (its own team of threads takes every
 * core; a rank's busy-polling wait would take one) while the others sleep between polls of a
 * non-blocking all-reduce of its status, then every rank takes rank 0's profile: the ranks held
 * the same one (the kept slowest rank's, or the one they update) but for what the section
 * measured. */
static int run_machine_section(loom_hw_profile *hw, const loom_bench_ctx *b,
                               const loom_bench_section *s) {
  if (b->world < 2) return run_section(hw, b, s);
  int rc = b->rank == 0 ? run_section(hw, b, s) : 0;
  float failed = rc ? 1.0f : 0.0f;
  loom_comm_request req;
  loom_comm_iallreduce_f32(b->comm, &failed, 1, &req);
  if (b->rank == 0) loom_comm_wait(&req);
  else
    while (!loom_comm_test(&req)) {
      struct timespec nap = {0, 1000000}; /* 1 ms */
      nanosleep(&nap, NULL);
    }
  if (failed > 0)
    return rc ? rc : loom_err("bench %s: rank 0 failed (its message is above)", s->name);
  loom_comm_bcast_bytes(b->comm, hw, sizeof *hw, 0);
  return 0;
}

int loom_bench_run(loom_hw_profile *hw, const loom_bench_ctx *given, const char *only) {
  warm_up();
  int n, devices = 0, rc = 0;
  const loom_bench_section *s = loom_bench_sections(&n);
  loom_bench_ctx ctx = *given, *b = &ctx;
  bool measures = measures_devices(b);
  /* the measuring ranks time in lockstep, on a communicator of their own */
  loom_comm lockstep = {0};
  if (b->world > 1) {
    loom_comm_split(&lockstep, b->comm, measures ? 0 : 1, b->rank, "bench");
    if (measures && lockstep.size > 1) ctx.lockstep = &lockstep;
    loom_comm_barrier(&lockstep);
  }
  /* the device sections: every measuring rank at once, logged by rank 0 */
  for (int i = 0; i < n; i++) {
    if (s[i].needs_mpi || s[i].machine || !selected(&s[i], only)) continue;
    devices++;
    if (measures && !rc) rc = run_section(hw, b, &s[i]);
  }
  if (b->world > 1) rc = loom_comm_any_failed(b->comm, rc);
  if (!rc && devices && b->world > 1) keep_slowest(hw, b, measures);
  if (b->world > 1) loom_comm_split_free(&lockstep);
  ctx.lockstep = NULL;
  if (rc) return rc;
  /* the whole machine from one process: rank 0 alone */
  for (int i = 0; i < n; i++)
    if (s[i].machine && selected(&s[i], only) && (rc = run_machine_section(hw, b, &s[i])))
      return rc;
  /* the collectives: every rank */
  for (int i = 0; i < n; i++) {
    if (!s[i].needs_mpi || !selected(&s[i], only)) continue;
    if (b->world < 2) {
      if (b->log && b->rank == 0)
        fprintf(b->log, "%-9s skipped: run under mpirun with 2 or more ranks (loom bench --nproc 2)\n",
                s[i].name);
      continue;
    }
    if ((rc = run_section(hw, b, &s[i]))) return rc;
  }
  return 0;
}

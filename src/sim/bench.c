/* `loom bench`'s driver: the table of sections, the defaults of a CPU profile, the timing
 * helper every section uses. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/sim_bench.h"

static const loom_bench_section sections[] = {
    {"gemm", "cblas_sgemm throughput by shape (m, n, k) in the three roles of a linear layer; "
             "bf16 path (rounded inputs)", false, loom_bench_gemm},
    {"memory", "memory bandwidth (copy, triad)", false, loom_bench_memory},
    {"vector", "rate of every vector kernel of the trainer (norms, GELU, SwiGLU, rotary, "
               "cross-entropy, AdamW, bf16 rounding, sum of squares, adds, copies)", false,
     loom_bench_vector},
    {"attention", "the reference causal attention, forward and backward", false,
     loom_bench_attention},
    {"mpi", "MPI collectives between the ranks (all-reduce, reduce-scatter, all-gather, "
            "all-to-all, send/recv): bandwidth and latency", true, loom_bench_mpi},
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

/* a busy tenth of a second first: the core leaves its idle clock before anything is timed */
static void warm_up(void) {
  volatile double x = 1;
  double t0 = loom_now();
  while (loom_now() - t0 < 0.15)
    for (int i = 0; i < 10000; i++) x = x * 1.0000001 + 1e-9;
}

int loom_bench_run(loom_hw_profile *hw, const loom_bench_ctx *b, const char *only) {
  warm_up();
  int n;
  const loom_bench_section *s = loom_bench_sections(&n);
  for (int i = 0; i < n; i++) {
    if (only) {
      size_t len = strlen(s[i].name);
      const char *p = strstr(only, s[i].name);
      if (!p || (p != only && p[-1] != ',') || (p[len] && p[len] != ',')) continue;
    }
    if (s[i].needs_mpi && b->world < 2) {
      if (b->log && b->rank == 0)
        fprintf(b->log, "%-9s skipped: run under mpirun with 2 or more ranks (loom bench --nproc 2)\n",
                s[i].name);
      continue;
    }
    if (!s[i].needs_mpi && b->rank != 0) continue; /* single-rank sections run on rank 0 */
    double t0 = loom_now();
    if (s[i].run(hw, b)) return loom_err_prefix("bench %s: ", s[i].name);
    if (b->log && b->rank == 0) fprintf(b->log, "%-9s done in %.2f s\n", s[i].name, loom_now() - t0);
  }
  return 0;
}

/* `loom bench`: calibration of this machine into a hardware profile (configs/hardware/
 * this-machine.yaml) through the very code the trainer runs: GEMM throughput by shape and role
 * through the BLAS of the linear layers (cblas_sgemm; bf16 as the trainer does it today:
 * rounded inputs + sgemm), the instruction peaks of the machine (FMA, AVX512_BF16 and AMX
 * from registers: what MFU is taken against), memory bandwidth, the rate of each vector
 * kernel (norms, activations, rotary, cross-entropy, AdamW, bf16 rounding, ...), the
 * reference attention, and, under mpirun, the bandwidth and latency of each MPI collective
 * between ranks.
 *
 * A bench is a list of sections, each filling part of the profile; a new measurement (model
 * step MFU, ...) is one more entry in the table of src/sim/bench.c. */
#ifndef LOOM_SIM_BENCH_H
#define LOOM_SIM_BENCH_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "loom/hw.h"

typedef struct {
  double scale;  /* time budget factor (1 = the default few seconds; --quick 0.3) */
  FILE *log;     /* progress and the measured tables (NULL: quiet) */
  int rank, world; /* MPI rank and size (world 1: no MPI section) */
  void *comm;    /* const loom_comm * of every rank, when world > 1 */
  void *lockstep; /* const loom_comm * of the ranks that time the device sections at once
                     (set by loom_bench_run; NULL: this rank times alone) */
} loom_bench_ctx;

typedef struct {
  const char *name;   /* "gemm", "memory", ... */
  const char *what;   /* one line for --help */
  bool needs_mpi;     /* runs only with world > 1 (on every rank) */
  int (*run)(loom_hw_profile *hw, const loom_bench_ctx *b);
  bool machine;       /* measures the whole machine from one process (its own team of threads
                         on every core): under mpirun rank 0 alone, the others asleep */
} loom_bench_section;

/* The sections, in order; n gets their count. */
const loom_bench_section *loom_bench_sections(int *n);
/* Defaults of a CPU profile (engine loom-cpu, cores as devices that time-share, RAM per core). */
void loom_bench_profile_defaults(loom_hw_profile *hw);
/* Run every section whose name is in `only` (comma-separated; NULL = all). */
int loom_bench_run(loom_hw_profile *hw, const loom_bench_ctx *b, const char *only);

/* sections (src/sim/bench_*.c) */
int loom_bench_gemm(loom_hw_profile *hw, const loom_bench_ctx *b);
int loom_bench_memory(loom_hw_profile *hw, const loom_bench_ctx *b);
int loom_bench_vector(loom_hw_profile *hw, const loom_bench_ctx *b);
int loom_bench_attention(loom_hw_profile *hw, const loom_bench_ctx *b);
int loom_bench_mpi(loom_hw_profile *hw, const loom_bench_ctx *b);
int loom_bench_peak(loom_hw_profile *hw, const loom_bench_ctx *b);

/* ---- instruction peaks (src/sim/bench_peak.c): the probes of the peak section -------------
 * Each keeps one instruction busy from registers: fma (vfmadd231ps on zmm with AVX-512F, else
 * on ymm with AVX2 + FMA), avx512_bf16 (vdpbf16ps on zmm), amx (tdpbf16ps on four accumulator
 * tiles; only where loom_kernels_amx()). */
typedef struct {
  int threads;                    /* threads that ran it at once */
  double instructions;            /* the unit's instructions executed, every thread */
  double flops;                   /* what they count: instructions x flops_per_instruction */
  double flops_per_instruction;   /* fma 32 (zmm) or 16 (ymm), avx512_bf16 64, amx 16384 */
  int instructions_per_iteration; /* per loop iteration and thread (fma 16 or 12, bf16 16, amx 4) */
  double lane;      /* the first output element of one thread: from 0, each instruction adds
                       lane_step to it (fma 1, vdpbf16ps 2, tdpbf16ps 32): the check that the
                       instructions ran (exact while below 2^24) */
  double lane_step;
  double seconds;   /* wall time from the team's start to its end */
} loom_peak_run;
/* Whether this process can run the unit's probe; why[] (may be NULL with n 0) says why not. */
bool loom_peak_available(loom_hw_unit u, char *why, size_t n);
/* Tests: 1 runs the fma probe on ymm (AVX2 + FMA) as on CPUs without AVX-512; 0 back. */
void loom_peak_force_ymm(int on);
/* The probe's instruction and registers ("vfmadd231ps zmm", ...), NULL when unavailable. */
const char *loom_peak_instruction(loom_hw_unit u);
/* Run the probe `iters` loop iterations on `threads` threads at once (1: the calling thread;
 * more: an OpenMP team). -1 with loom_err when the unit is not available here. */
int loom_peak_probe(loom_hw_unit u, long iters, int threads, loom_peak_run *r);
/* FLOP/s of the unit on `threads` threads at once: the best of three runs of about run_s
 * seconds each (up to nine while they are more than 10% apart); *got the threads that ran
 * (fewer than asked under OMP_THREAD_LIMIT), *worst (may be NULL) the slowest run's FLOP/s.
 * -1 with loom_err when the unit is not available. */
double loom_peak_measure(loom_hw_unit u, int threads, double run_s, int *got, double *worst);
/* Seconds per call of fn(arg), repeated until `min_s` has passed (at least twice). */
double loom_bench_time(void (*fn)(void *), void *arg, double min_s);
/* t on one rank timing alone; under b->lockstep, the longest of the t the ranks measured for
 * the same item at the same moment (every rank of it calls this for every item, in order):
 * a synchronous step runs at its slowest rank's pace of that moment. */
double loom_bench_slowest(const loom_bench_ctx *b, double t);
/* best[i] (seconds) for each of n items timed by time_one(ctx, i), in passes over all of them:
 * two passes, then further ones (up to max_passes) over the items whose two best times are
 * still more than 10% apart. A shared vCPU runs 2-20x slower now and then for tens of
 * milliseconds, longer than one item's trials (loom_bench_time's three, each a third of
 * min_s): an item is kept only once two passes, each at another moment, agree on it.
 * Each time is loom_bench_slowest(b, ...) of the item (b may be NULL: this process alone), so
 * the ranks in lockstep keep the same best[]: the fastest pass of the slowest rank of each
 * moment, not each rank's own fastest moment. Returns the passes run. */
int loom_bench_passes(const loom_bench_ctx *b, double (*time_one)(void *ctx, int i), void *ctx,
                      int n, int max_passes, double *best);
/* Relative least squares of a model t_i = sum_j X[i][cols[j]] c[cols[j]] over n observations
 * (each equation divided by t_i: every observation's error counts alike), for the m <= 3
 * columns cols of X; the other coefficients of c are 0. Returns the sum of squared relative
 * errors, or -1 when the normal equations are singular (c all 0) or a coefficient comes out
 * not positive (c as solved). */
double loom_bench_fit_rel(const double (*X)[3], const double *t, int n, const int *cols, int m,
                          double c[3]);
#endif

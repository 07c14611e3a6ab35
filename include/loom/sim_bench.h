/* `loom bench`: calibration of this machine into a hardware profile (configs/hardware/
 * this-machine.yaml) through the very code the trainer runs: GEMM throughput by shape and role
 * through the BLAS of the linear layers (cblas_sgemm; bf16 as the trainer does it today:
 * rounded inputs + sgemm), memory bandwidth, the rate of each vector kernel (norms,
 * activations, rotary, cross-entropy, AdamW, bf16 rounding, ...), the reference attention,
 * and, under mpirun, the bandwidth and latency of each MPI collective between ranks.
 *
 * A bench is a list of sections, each filling part of the profile; a new measurement (model
 * step MFU, ...) is one more entry in the table of src/sim/bench.c. */
#ifndef LOOM_SIM_BENCH_H
#define LOOM_SIM_BENCH_H
#include <stdbool.h>
#include <stdio.h>

#include "loom/hw.h"

typedef struct {
  double scale;  /* time budget factor (1 = the default few seconds; --quick 0.3) */
  FILE *log;     /* progress and the measured tables (NULL: quiet) */
  int rank, world; /* MPI rank and size (world 1: no MPI section) */
  void *comm;    /* const loom_comm * of every rank, when world > 1 */
} loom_bench_ctx;

typedef struct {
  const char *name;   /* "gemm", "memory", ... */
  const char *what;   /* one line for --help */
  bool needs_mpi;     /* runs only with world > 1 (on every rank) */
  int (*run)(loom_hw_profile *hw, const loom_bench_ctx *b);
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
/* Seconds per call of fn(arg), repeated until `min_s` has passed (at least twice). */
double loom_bench_time(void (*fn)(void *), void *arg, double min_s);
#endif

/* `loom bench`'s peak section: the instruction peaks of this machine, registers only. Each
 * probe keeps one kind of instruction busy on independent accumulators that never leave the
 * registers (AMX: four accumulator tiles, A and B tiles loaded once), on one thread and on
 * every online core at once (an OpenMP team, the FLOPs of all threads over the wall time
 * between two barriers), the best of three short runs (up to nine on a noisy machine). The
 * units:
 *   fma          vfmadd231ps on zmm (AVX-512F; 16 accumulators, 16 lanes: 32 FLOP each), else
 *                on ymm (AVX2 + FMA; 12 accumulators, 8 lanes: 16 FLOP each)
 *   avx512_bf16  vdpbf16ps on zmm (16 accumulators; 16 fp32 lanes x 2 bf16 pairs x 2: 64 FLOP)
 *   amx          tdpbf16ps (C 16x16 fp32 += A 16x32 bf16 . B 32x16 bf16: 16384 FLOP), where
 *                loom_kernels_amx() says the tiles may run
 * The profile keeps fp32 from fma and bf16 from the fastest unit that computes it (amx,
 * avx512_bf16, or fma: a bf16 matmul without a native dot product runs in fp32 FMAs). Every
 * probe is compiled for its own ISA (target attributes) and called only after the run-time
 * check, so the file builds and runs on any x86-64 CPU. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "loom/core.h"
#include "loom/hw.h"
#include "loom/kernels.h"
#include "loom/sim_bench.h"

/* every accumulator is summed into this, so no loop is dead code */
static volatile float peak_sink;
static int force_ymm; /* tests: the fma probe on ymm, as on CPUs without AVX-512 */

void loom_peak_force_ymm(int on) { force_ymm = on; }

/* One probe: the instruction, its count per loop iteration, FLOPs per instruction, what each
 * instruction adds to every output element (the check that they ran), the loop itself
 * (returns the first output element of the calling thread). */
typedef struct {
  const char *instr;
  int per_iter;
  double flops, step;
  float (*run)(long iters);
} probe;

#if defined(__x86_64__)
#define X12(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
#define X16(M) X12(M) M(12) M(13) M(14) M(15)

/* c_i starts at i (distinct chains: the compiler cannot merge them) and gains 1 x 1 per FMA:
 * c_0 ends at iters in every lane (exact below 2^24; beyond, it stops growing: no denormals,
 * no infinities to slow the unit down) */
__attribute__((target("avx512f"))) static float run_fma_zmm(long iters) {
  __m512 one = _mm512_set1_ps(1.0f);
  __asm__("" : "+v"(one)); /* opaque: no folding of 1 x 1 */
#define INIT(i) __m512 c##i = _mm512_set1_ps((float)(i));
  X16(INIT)
#undef INIT
  for (long it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm512_fmadd_ps(one, one, c##i);
    X16(STEP)
#undef STEP
  }
  __m512 s = c1;
#define SUM(i) s = _mm512_add_ps(s, c##i);
  SUM(2) SUM(3) SUM(4) SUM(5) SUM(6) SUM(7) SUM(8) SUM(9) SUM(10) SUM(11) SUM(12) SUM(13)
  SUM(14) SUM(15)
#undef SUM
  peak_sink = _mm512_reduce_add_ps(s);
  return _mm512_cvtss_f32(c0);
}

__attribute__((target("avx2,fma"))) static float run_fma_ymm(long iters) {
  __m256 one = _mm256_set1_ps(1.0f);
  __asm__("" : "+x"(one));
#define INIT(i) __m256 c##i = _mm256_set1_ps((float)(i));
  X12(INIT)
#undef INIT
  for (long it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm256_fmadd_ps(one, one, c##i);
    X12(STEP)
#undef STEP
  }
  __m256 s = c1;
#define SUM(i) s = _mm256_add_ps(s, c##i);
  SUM(2) SUM(3) SUM(4) SUM(5) SUM(6) SUM(7) SUM(8) SUM(9) SUM(10) SUM(11)
#undef SUM
  float lanes[8];
  _mm256_storeu_ps(lanes, s);
  peak_sink = lanes[0] + lanes[7];
  return _mm256_cvtss_f32(c0);
}

/* vdpbf16ps: each fp32 lane += a0 b0 + a1 b1 with every bf16 1.0 (0x3f80): +2 per instruction */
__attribute__((target("avx512f,avx512bf16"))) static float run_dpbf16(long iters) {
  __m512i ones = _mm512_set1_epi16(0x3f80);
  __asm__("" : "+v"(ones));
  __m512bh a = (__m512bh)ones, b = (__m512bh)ones;
#define INIT(i) __m512 c##i = _mm512_set1_ps((float)(i));
  X16(INIT)
#undef INIT
  for (long it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm512_dpbf16_ps(c##i, a, b);
    X16(STEP)
#undef STEP
  }
  __m512 s = c1;
#define SUM(i) s = _mm512_add_ps(s, c##i);
  SUM(2) SUM(3) SUM(4) SUM(5) SUM(6) SUM(7) SUM(8) SUM(9) SUM(10) SUM(11) SUM(12) SUM(13)
  SUM(14) SUM(15)
#undef SUM
  peak_sink = _mm512_reduce_add_ps(s);
  return _mm512_cvtss_f32(c0);
}

/* The tile configuration of ldtilecfg (palette 1): every tile 16 rows x 64 bytes. */
typedef struct __attribute__((aligned(64))) {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

/* tdpbf16ps on tiles 0-3 (C, fp32 16 x 16, from zero) with A in tiles 4-5 (16 rows x 32
 * bf16) and B in 6-7 (16 rows x 16 pairs), every bf16 1.0: each C element gains 32 per
 * instruction. */
__attribute__((target("amx-tile,amx-bf16"))) static float run_amx(long iters) {
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  static const int ab_n = 16 * 32;
  uint16_t ab[16 * 32] __attribute__((aligned(64)));
  float c[16 * 16] __attribute__((aligned(64)));
  for (int i = 0; i < ab_n; i++) ab[i] = 0x3f80;
  __asm__ volatile("" ::: "memory"); /* ldtilecfg and tileloadd read cfg and ab */
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  for (long it = 0; it < iters; it++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  peak_sink = c[255];
  return c[0];
}
#endif

/* The probe of unit u on this CPU, or false with why[] saying why there is none. */
static bool probe_of(loom_hw_unit u, probe *p, char *why, size_t n) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  bool avx512 = __builtin_cpu_supports("avx512f");
  switch (u) {
  case LOOM_UNIT_FMA:
    if (avx512 && !force_ymm) *p = (probe){"vfmadd231ps zmm", 16, 2 * 16, 1, run_fma_zmm};
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      *p = (probe){"vfmadd231ps ymm", 12, 2 * 8, 1, run_fma_ymm};
    else return snprintf(why, n, "the CPU has neither AVX-512F nor AVX2 + FMA"), false;
    return true;
  case LOOM_UNIT_AVX512_BF16:
    if (!avx512 || !__builtin_cpu_supports("avx512bf16"))
      return snprintf(why, n, "the CPU has no AVX512_BF16 (vdpbf16ps)"), false;
    *p = (probe){"vdpbf16ps zmm", 16, 16 * 2 * 2, 2, run_dpbf16};
    return true;
  case LOOM_UNIT_AMX:
    if (!loom_kernels_amx())
      return snprintf(why, n, "AMX tiles may not run in this process (no AMX-TILE/AMX-BF16, "
                              "no tile permission from Linux, or LOOM_AMX=0)"), false;
    *p = (probe){"tdpbf16ps", 4, 16.0 * 16 * 32 * 2, 32, run_amx};
    return true;
  default: break;
  }
  snprintf(why, n, "unknown unit %d", (int)u);
  return false;
#else
  snprintf(why, n, "not an x86-64 CPU");
  (void)u, (void)p;
  return false;
#endif
}

bool loom_peak_available(loom_hw_unit u, char *why, size_t n) {
  probe p;
  char tmp[8];
  return probe_of(u, &p, n ? why : tmp, n ? n : sizeof tmp);
}

const char *loom_peak_instruction(loom_hw_unit u) {
  probe p;
  char why[160];
  return probe_of(u, &p, why, sizeof why) ? p.instr : NULL;
}

int loom_peak_probe(loom_hw_unit u, long iters, int threads, loom_peak_run *r) {
  probe p;
  char why[160];
  memset(r, 0, sizeof *r);
  if (!probe_of(u, &p, why, sizeof why))
    return loom_err("no %s probe: %s", loom_hw_unit_name(u), why);
  if (iters < 1 || threads < 1) return loom_err("peak probe: iters and threads must be >= 1");
  double t0 = 0, t1 = 0;
  float lane = 0;
  int got = 1;
  if (threads == 1) { /* the calling thread itself */
    t0 = loom_now();
    lane = p.run(iters);
    t1 = loom_now();
  } else {
#pragma omp parallel num_threads(threads)
    {
#pragma omp barrier
#pragma omp master
      t0 = loom_now();
      float mine = p.run(iters);
#pragma omp barrier
#pragma omp master
      {
        t1 = loom_now();
        got = omp_get_num_threads();
        lane = mine;
      }
    }
  }
  r->threads = got;
  r->instructions = (double)iters * p.per_iter * got;
  r->flops = r->instructions * p.flops;
  r->flops_per_instruction = p.flops;
  r->instructions_per_iteration = p.per_iter;
  r->lane = lane;
  r->lane_step = p.step;
  r->seconds = t1 - t0;
  return 0;
}

double loom_peak_measure(loom_hw_unit u, int threads, double run_s, int *got, double *worst) {
  loom_peak_run r;
  long iters = 256;
  *got = 0;
  /* a first run warms the unit (AVX-512 clocks, the tile state) and the thread team */
  if (loom_peak_probe(u, iters, threads, &r)) return -1;
  /* the iterations of run_s seconds, timed on the calling thread alone: a team's wall time
   * also holds its threads' wake-ups, which on a busy machine can outlast a short run */
  do {
    iters *= 2;
    if (loom_peak_probe(u, iters, 1, &r)) return -1;
  } while (r.seconds < run_s / 8 && iters < (1L << 40));
  double scale = run_s / (r.seconds > 1e-9 ? r.seconds : 1e-9);
  iters = (long)((double)iters * (scale < 1 ? 1 : scale));
  /* the best of three (preemption, other cores' AMX work only take time away), up to nine
   * while the runs are more than 10% apart: a noisy machine gets more chances at the peak */
  double best = 0, slowest = 1e300;
  for (int trial = 0; trial < 3 || (trial < 9 && slowest < 0.9 * best); trial++) {
    if (loom_peak_probe(u, iters, threads, &r)) return -1;
    double rate = r.seconds > 0 ? r.flops / r.seconds : 0;
    if (rate > best) best = rate;
    if (rate < slowest) slowest = rate;
  }
  *got = r.threads;
  if (worst) *worst = slowest;
  return best;
}

/* ---- the section ------------------------------------------------------------------------ */

typedef struct {
  bool ok;                                  /* the unit's probe runs here */
  char instr[32];                           /* the instruction and its registers */
  double flops;                             /* per instruction */
  double rate[LOOM_HW_MAX_POINTS];          /* FLOP/s at each thread count (the best run) */
  double worst[LOOM_HW_MAX_POINTS];         /* the slowest of the three runs */
} unit_rates;

/* The thread counts measured: 1 and every online core (under mpirun the section runs on rank
 * 0 alone: src/sim/bench.c). */
static int thread_counts(int *t) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int n = 0;
  t[n++] = 1;
  if (cores > 1) t[n++] = (int)(cores < (1 << 20) ? cores : 1 << 20);
  return n;
}

/* Measure every unit this process can run at each thread count; where a team ran on fewer
 * threads than asked (OMP_THREAD_LIMIT), the counts are cut to those that ran as asked. */
static void measure_units(unit_rates *u, int *t, int *nt, double run_s) {
  for (int k = 0; k < LOOM_UNIT_COUNT; k++) {
    probe p;
    char why[160];
    u[k].ok = probe_of((loom_hw_unit)k, &p, why, sizeof why);
    if (!u[k].ok) continue;
    snprintf(u[k].instr, sizeof u[k].instr, "%s", p.instr);
    u[k].flops = p.flops;
    for (int i = 0; i < *nt; i++) {
      int got;
      u[k].rate[i] = loom_peak_measure((loom_hw_unit)k, t[i], run_s, &got, &u[k].worst[i]);
      if (got != t[i]) { /* the team was smaller: keep the counts that ran as asked */
        *nt = i;
        break;
      }
    }
  }
}

/* Runs of one measurement more than 10% apart: the machine was not quiet (other processes,
 * or other cores' AMX work lowering this one's clock), and the best may still be low. One line
 * naming each such measurement with its slowest and best run. */
static void log_spread(const unit_rates *u, const int *t, int nt, FILE *log) {
  int n = 0;
  for (int k = 0; k < LOOM_UNIT_COUNT; k++)
    for (int i = 0; i < nt && u[k].ok; i++)
      if (u[k].worst[i] < 0.9 * u[k].rate[i])
        fprintf(log, "%s %s %d thread%s %.1f..%.1f", n++ ? "," : "  runs more than 10% apart "
                "(GFLOP/s):", loom_hw_unit_name((loom_hw_unit)k), t[i], t[i] == 1 ? "" : "s",
                u[k].worst[i] / 1e9, u[k].rate[i] / 1e9);
  if (n)
    fprintf(log, "; the machine was not quiet: run 'loom bench --only peak' again on an idle "
            "machine\n");
}

/* A team reaches at least what one of its threads reaches alone: a figure below the first
 * entry's means other work held the cores (or SMT siblings share one), and the first entry's
 * figure is kept (the higher peak: MFU errs low). Logs what it raised. */
static void floor_at_one_thread(unit_rates *u, const int *t, int nt, FILE *log) {
  for (int k = 0; k < LOOM_UNIT_COUNT; k++)
    for (int i = 1; i < nt && u[k].ok; i++)
      if (u[k].rate[i] < u[k].rate[0]) {
        if (log)
          fprintf(log, "  %s on %d threads: %.1f GFLOP/s, below 1 thread's %.1f (the cores were "
                  "busy, or they share one physical core): 1 thread's figure kept\n",
                  loom_hw_unit_name((loom_hw_unit)k), t[i], u[k].rate[i] / 1e9,
                  u[k].rate[0] / 1e9);
        u[k].rate[i] = u[k].rate[0];
      }
}

/* The unit of the bf16 figure: the fastest on one thread of amx, avx512_bf16, fma. */
static loom_hw_unit bf16_unit(const unit_rates *u) {
  loom_hw_unit best = LOOM_UNIT_FMA;
  for (int k = 0; k < LOOM_UNIT_COUNT; k++)
    if (u[k].ok && u[k].rate[0] > u[best].rate[0]) best = (loom_hw_unit)k;
  return best;
}

/* The library's figure of dtype for t threads (the gemm section's one core times t) as a
 * share of a unit's rate, into out ("-" without one). */
static void library_share(char *out, size_t n, const loom_hw_profile *hw, loom_hw_dtype dt,
                          int t, double rate, bool library) {
  double g = t * hw->peak_flops[dt];
  if (library && g > 0 && rate > 0)
    snprintf(out, n, "%s %8.1f GFLOP/s = %5.1f%%", loom_hw_dtype_name(dt), g / 1e9,
             100 * g / rate);
  else snprintf(out, n, "-");
}

/* The table: per unit and thread count the rate, per thread, and beside the units the profile
 * takes (fp32: fma; bf16: bu) the gemm section's library figure of that dtype (one core's,
 * times the threads) as a share of it. */
static void log_table(FILE *f, const loom_hw_profile *hw, const unit_rates *u, const int *t,
                      int nt, double run_s, bool library, loom_hw_unit bu) {
  fprintf(f, "peak: instruction peaks from registers, every thread at once (runs of %.2f s, "
          "best of 3, up to 9 while they are more than 10%% apart)\n", run_s);
  fprintf(f, "  %-12s %-16s %10s %7s %10s %10s  %s\n", "unit", "instruction", "FLOP/instr",
          "threads", "GFLOP/s", "per thread", "library GEMM (gemm section: threads x 1 core)");
  for (int k = 0; k < LOOM_UNIT_COUNT; k++) {
    if (!u[k].ok) continue;
    for (int i = 0; i < nt; i++) {
      char lib[96] = "", bf[96] = "";
      if (k == LOOM_UNIT_FMA)
        library_share(lib, sizeof lib, hw, LOOM_DT_FP32, t[i], u[k].rate[i], library);
      if (k == (int)bu)
        library_share(bf, sizeof bf, hw, LOOM_DT_BF16, t[i], u[k].rate[i], library);
      fprintf(f, "  %-12s %-16s %10.0f %7d %10.1f %10.1f  %s%s%s\n",
              loom_hw_unit_name((loom_hw_unit)k), u[k].instr, u[k].flops, t[i],
              u[k].rate[i] / 1e9, u[k].rate[i] / t[i] / 1e9, lib, lib[0] && bf[0] ? "; " : "",
              bf[0] || lib[0] ? bf : "(not the profile's bf16 unit)");
    }
  }
}

/* Whether the profile holds the gemm section's library figure (this run's, or that of the
 * profile it updates: its grid, or the backend it names), not loom bench's defaults. */
static bool library_measured(const loom_hw_profile *hw) {
  return hw->engine_loom_cpu && (hw->grid_n[0] > 0 || hw->gemm_backend[0]);
}

int loom_bench_peak(loom_hw_profile *hw, const loom_bench_ctx *b) {
  char why[160];
  if (!loom_peak_available(LOOM_UNIT_FMA, why, sizeof why)) {
    hw->n_ipeak = 0;
    if (b->log) fprintf(b->log, "peak: no instruction peak measured: %s\n", why);
    return 0;
  }
  int t[LOOM_HW_MAX_POINTS], nt = thread_counts(t);
  double run_s = 0.1 * b->scale < 0.03 ? 0.03 : 0.1 * b->scale;
  unit_rates u[LOOM_UNIT_COUNT];
  memset(u, 0, sizeof u);
  measure_units(u, t, &nt, run_s);
  for (int k = 0; k < LOOM_UNIT_COUNT; k++)
    for (int i = 0; i < nt; i++)
      if (u[k].ok && !(u[k].rate[i] > 0))
        return loom_err("the %s probe on %d threads measured no rate",
                        loom_hw_unit_name((loom_hw_unit)k), t[i]);
  loom_hw_unit bu = bf16_unit(u); /* on one thread's figures, which the floor leaves */
  if (b->log) log_table(b->log, hw, u, t, nt, run_s, library_measured(hw), bu);
  if (b->log) log_spread(u, t, nt, b->log);
  floor_at_one_thread(u, t, nt, b->log);
  hw->n_ipeak = nt;
  hw->ipeak_bf16_unit = bu;
  for (int i = 0; i < nt; i++) {
    hw->ipeak_threads[i] = t[i];
    hw->ipeak_flops[LOOM_DT_FP32][i] = u[LOOM_UNIT_FMA].rate[i];
    hw->ipeak_flops[LOOM_DT_BF16][i] = u[bu].rate[i];
  }
  if (!b->log) return 0;
  for (int k = 0; k < LOOM_UNIT_COUNT; k++)
    if (!u[k].ok && !loom_peak_available((loom_hw_unit)k, why, sizeof why))
      fprintf(b->log, "  %-12s not measured: %s\n", loom_hw_unit_name((loom_hw_unit)k), why);
  if (!library_measured(hw))
    fprintf(b->log, "  no library figure: the gemm section has not measured one\n");
  if (b->world > 1)
    fprintf(b->log, "  under mpirun: measured by rank 0 alone, the other ranks asleep\n");
  fprintf(b->log, "  the profile's instruction_peak: fp32 from fma, bf16 from %s\n",
          loom_hw_unit_name(bu));
  return 0;
}

/* Instruction peaks: MFU's peak from a hand-written profile with device.instruction_peak (the
 * exact figure and the why text naming the unit, the threads and the library's GEMM beside
 * it) and without it (the library's figure, as before); the probes of loom bench's peak
 * section execute the instructions they count (the FLOPs per call and one output element that
 * every instruction adds to, never a time); the AMX probe says plainly why it is skipped where
 * loom_kernels_amx() is 0; `loom bench --only peak` writes the keys into a profile; the
 * passes every bench section times its items in (scripted times). Nothing
 * here asserts a rate: the suite runs on busy machines. */
#include <math.h>
#include <unistd.h>

#include "loom/kernels.h"
#include "loom/sim_bench.h"
#include "sim_test_util.h"

static const char *const cpu_profile =
    "name: cpu-test\n"
    "device:\n"
    "  peak_tflops: {fp32: 0.1, bf16: 0.08}\n"
    "  instruction_peak:\n"
    "    threads: [1, 2]\n"
    "    fp32_gflops: [175, 300]\n"
    "    bf16_gflops: [2300, 4000]\n"
    "    bf16_unit: amx\n"
    "runtime:\n"
    "  engine: loom-cpu\n"
    "  gemm_backend: onednn\n";

/* MFU against the instruction peak: the table's figure for the threads, the unit named, the
 * library's GEMM beside it as a share */
static void test_mfu_instruction(void) {
  loom_hw_profile hw;
  CHECK(loom_hw_parse(&hw, cpu_profile, "cpu.yaml") == 0, "%s", loom_errmsg());
  loom_mfu_source s;
  double p = loom_mfu_peak_hw(&hw, "bf16", 2, &s);
  CHECK(p == 4000e9 && s.peak == p && s.instruction && s.unit == LOOM_UNIT_AMX && s.threads == 2 &&
            !strcmp(s.kind, "instruction") && !strcmp(s.name, "AMX tdpbf16ps instruction peak") &&
            s.library_peak == 2 * 0.08e12 && !strcmp(s.profile, "cpu.yaml"),
        "bf16, 2 threads: %g, instruction %d, unit %d, library %g", p, s.instruction, (int)s.unit,
        s.library_peak);
  CHECK(HAS(s.why, "MFU against 4000.0 GFLOP/s per rank (AMX tdpbf16ps instruction peak, 2 threads, "
                   "of hardware profile 'cpu-test'",
            "the gemm section's best bf16 GEMM (onednn backend): 2 x 80.0 = 160.0 GFLOP/s, 4.0% of it"),
        "why names the instruction peak and the library's GEMM");
  p = loom_mfu_peak_hw(&hw, "fp32", 1, &s);
  CHECK(p == 175e9 && s.unit == LOOM_UNIT_FMA &&
            HAS(s.why, "MFU against 175.0 GFLOP/s per rank (FMA vfmadd231ps instruction peak, 1 thread",
                "the gemm section's best fp32 GEMM (onednn backend): 1 x 100.0 = 100.0 GFLOP/s, 57.1% of it"),
        "fp32, 1 thread: %g: %s", p, s.why);
  /* 3 threads: 3 x the 2 threads' per-thread figure (errs high: MFU low) */
  p = loom_mfu_peak_hw(&hw, "fp32", 3, &s);
  CHECK(p == 450e9 && HAS(s.why, "3 threads = 3 x the per-thread figure of 2 threads"),
        "fp32, 3 threads: %g: %s", p, s.why);
  /* a bf16 figure from vdpbf16ps names that unit */
  hw.ipeak_bf16_unit = LOOM_UNIT_AVX512_BF16;
  loom_mfu_peak_hw(&hw, "bf16", 1, &s);
  CHECK(HAS(s.why, "AVX512_BF16 vdpbf16ps instruction peak, 1 thread"), "%s", s.why);
  /* a profile whose library figure is loom bench's default (no gemm section: no backend, no
   * grid) sets none beside the instruction peak */
  hw.gemm_backend[0] = 0;
  p = loom_mfu_peak_hw(&hw, "fp32", 2, &s);
  CHECK(p == 300e9 && s.library_peak == 0 &&
            HAS(s.why, "FMA vfmadd231ps instruction peak, 2 threads",
                "no library GEMM figure in the profile (loom bench's gemm section measures one)"),
        "no library figure: %s", s.why);
  /* MFU itself: the one definition, against that peak */
  double mfu = loom_mfu(1000, 1, 1e9, 4000e9);
  CHECK(mfu == 0.25, "MFU %g", mfu);
}

/* Without device.instruction_peak: the library's one-core figure times the threads, said to be
 * the library's; an accelerator's profile as it is */
static void test_mfu_library(void) {
  loom_hw_profile hw;
  char *text = loom_strdup(cpu_profile);
  char *cut = strstr(text, "  instruction_peak:"), *rest = strstr(text, "runtime:");
  memmove(cut, rest, strlen(rest) + 1);
  CHECK(loom_hw_parse(&hw, text, "old.yaml") == 0 && hw.n_ipeak == 0, "%s", loom_errmsg());
  free(text);
  loom_mfu_source s;
  double p = loom_mfu_peak_hw(&hw, "fp32", 2, &s);
  CHECK(p == 2 * 0.1e12 && !s.instruction && s.library_peak == p && !strcmp(s.kind, "library") &&
            !strcmp(s.name, "fp32 GEMM peak (onednn backend)") &&
            HAS(s.why, "MFU against 200.0 GFLOP/s per rank (2 threads x 100.0 GFLOP/s, the fp32 "
                       "matrix peak of one core in hardware profile 'cpu-test'",
                "the gemm section's best GEMM (onednn backend), not an instruction peak"),
        "library peak: %g: %s", p, s.why);
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  p = loom_mfu_peak_hw(&hw, "bf16", 8, &s);
  CHECK(p == 989e12 && !s.instruction && s.threads == 1 && !strcmp(s.kind, "device") &&
            HAS(s.why, "the bf16 matrix peak of hardware profile 'h100-sxm'"),
        "accelerator: %g: %s", p, s.why);
  hw.peak_flops[LOOM_DT_BF16] = 0;
  p = loom_mfu_peak_hw(&hw, "bf16", 1, &s);
  CHECK(p == 0 && HAS(s.why, "MFU not shown", "has no bf16 peak") && !s.profile[0],
        "no peak: %s", s.why);
}

/* this machine's profile through LOOM_HW_PROFILE: the trainer's path (loom_mfu_peak_from) */
static void test_mfu_this_machine(void) {
  const char *path = "sim-peak.tmp/this-machine.yaml";
  loom_mkdir_p("sim-peak.tmp");
  CHECK(loom_write_file_atomic(path, cpu_profile, strlen(cpu_profile)) == 0, "%s", loom_errmsg());
  const char *old = getenv("LOOM_HW_PROFILE");
  char *keep = old ? loom_strdup(old) : NULL;
  setenv("LOOM_HW_PROFILE", path, 1);
  char profile[512], why[640];
  double p = loom_mfu_peak_from("bf16", 1, profile, sizeof profile, why, sizeof why);
  CHECK(p == 2300e9 && !strcmp(profile, path) &&
            HAS(why, "AMX tdpbf16ps instruction peak, 1 thread"),
        "this machine, bf16 on 1 thread: %g (%s): %s", p, profile, why);
  /* more threads than cores: held to the cores */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  loom_mfu_source s;
  loom_mfu_source_get("fp32", 64, &s);
  CHECK(s.threads == (cores < 64 ? cores : 64), "64 threads on %ld cores: %d", cores, s.threads);
  if (keep) setenv("LOOM_HW_PROFILE", keep, 1);
  else unsetenv("LOOM_HW_PROFILE");
  free(keep);
}

/* Each available probe executes what it counts: FLOPs = instructions x the unit's FLOPs per
 * instruction, and its first output element grew by the unit's step per instruction. */
static void check_probe(loom_hw_unit u, double flops_per_instr, double step) {
  char why[256];
  if (!loom_peak_available(u, why, sizeof why)) {
    printf("skipped: the %s probe: %s\n", loom_hw_unit_name(u), why);
    loom_peak_run r;
    CHECK(loom_peak_probe(u, 10, 1, &r) != 0 && HAS(loom_errmsg(), loom_hw_unit_name(u)),
          "an unavailable probe is refused with its name");
    return;
  }
  for (int threads = 1; threads <= 2; threads++) {
    loom_peak_run r;
    long iters = 1000;
    CHECK(loom_peak_probe(u, iters, threads, &r) == 0, "%s: %s", loom_hw_unit_name(u), loom_errmsg());
    double want = (double)iters * r.instructions_per_iteration * r.threads;
    CHECK(r.threads >= 1 && r.threads <= threads && r.instructions == want &&
              r.flops_per_instruction == flops_per_instr && r.flops == want * flops_per_instr,
          "%s on %d threads: %g instructions (want %g), %g FLOPs", loom_hw_unit_name(u), threads,
          r.instructions, want, r.flops);
    CHECK(r.lane_step == step && r.lane == iters * step,
          "%s: the first output element is %g after %ld iterations (want %g): the instructions "
          "did not all run", loom_hw_unit_name(u), r.lane, iters, iters * step);
  }
}

static void test_probes(void) {
  /* fma: 16 accumulators of 16 lanes on zmm, else 12 of 8 on ymm; 2 FLOPs a lane */
  const char *fma = loom_peak_instruction(LOOM_UNIT_FMA);
  double fma_flops = fma && strstr(fma, "zmm") ? 32 : 16;
  check_probe(LOOM_UNIT_FMA, fma_flops, 1);
  if (fma) {
    loom_peak_run r;
    CHECK(loom_peak_probe(LOOM_UNIT_FMA, 10, 1, &r) == 0 &&
              r.instructions_per_iteration == (fma_flops == 32 ? 16 : 12),
          "fma accumulators: %d", r.instructions_per_iteration);
  }
  /* the ymm probe of CPUs without AVX-512 (Zen 3), where this one has AVX2 + FMA */
  loom_peak_force_ymm(1);
  const char *ymm = loom_peak_instruction(LOOM_UNIT_FMA);
  if (ymm) {
    CHECK(!strcmp(ymm, "vfmadd231ps ymm"), "forced to ymm: %s", ymm);
    check_probe(LOOM_UNIT_FMA, 16, 1);
  } else {
    printf("skipped: the ymm fma probe: no AVX2 + FMA\n");
  }
  loom_peak_force_ymm(0);
  check_probe(LOOM_UNIT_AVX512_BF16, 16 * 2 * 2, 2); /* 16 lanes x 2 pairs x 2 */
  check_probe(LOOM_UNIT_AMX, 16 * 16 * 32 * 2, 32);  /* C 16x16 += A 16x32 . B 32x16 */
  /* with AMX turned off (as LOOM_AMX=0) the probe is skipped with the reason */
  loom_kernels_force_no_amx(1);
  char why[256];
  CHECK(!loom_peak_available(LOOM_UNIT_AMX, why, sizeof why) && HAS(why, "AMX tiles may not run"),
        "AMX off: %s", why);
  check_probe(LOOM_UNIT_AMX, 16384, 32);
  loom_kernels_force_no_amx(0);
  loom_peak_run r;
  CHECK(loom_peak_probe(LOOM_UNIT_FMA, 0, 1, &r) != 0, "zero iterations refused");
}

/* `loom bench --only peak` writes device.instruction_peak into a profile (new, and over one
 * whose other keys it keeps), and logs the table with the library's figure beside it. */
static void test_bench_cli(void) {
  const char *dir = "sim-peak.tmp";
  loom_mkdir_p(dir);
  unlink("sim-peak.tmp/new.yaml");
  run_result r = loom_run_in(dir, "bench --quick --quiet --only peak --out sim-peak.tmp/new.yaml");
  loom_hw_profile hw;
  CHECK(r.status == 0, "loom bench --only peak: %s", r.err);
  CHECK(loom_hw_load_file(&hw, "sim-peak.tmp/new.yaml") == 0, "%s", loom_errmsg());
  if (loom_peak_available(LOOM_UNIT_FMA, NULL, 0)) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(hw.n_ipeak >= 1 && hw.ipeak_threads[0] == 1 &&
              (cores < 2 || (hw.n_ipeak == 2 && hw.ipeak_threads[1] == cores) ||
               hw.n_ipeak == 1),
          "thread counts: %d entries, first %d", hw.n_ipeak, hw.ipeak_threads[0]);
    for (int i = 0; i < hw.n_ipeak; i++)
      CHECK(hw.ipeak_flops[0][i] > 0 && hw.ipeak_flops[1][i] > 0, "entry %d has figures", i);
    loom_hw_unit want = loom_kernels_amx() ? LOOM_UNIT_AMX : LOOM_UNIT_FMA;
    if (!loom_kernels_amx() && loom_peak_available(LOOM_UNIT_AVX512_BF16, NULL, 0))
      want = hw.ipeak_bf16_unit; /* vdpbf16ps or fma, whichever ran faster here */
    CHECK(hw.ipeak_bf16_unit == want, "bf16 unit %s, expected %s",
          loom_hw_unit_name(hw.ipeak_bf16_unit), loom_hw_unit_name(want));
  } else {
    CHECK(hw.n_ipeak == 0, "no FMA unit: no instruction peak");
  }
  run_done(&r);
  /* over a profile with a library figure: kept, and set beside the instruction peaks */
  loom_bench_profile_defaults(&hw);
  hw.peak_flops[LOOM_DT_FP32] = 0.1e12, hw.peak_flops[LOOM_DT_BF16] = 0.08e12;
  hw.grid_n[0] = hw.grid_n[1] = hw.grid_n[2] = 1;
  hw.grid_axis[0][0] = hw.grid_axis[1][0] = hw.grid_axis[2][0] = 64;
  for (int k = 0; k < LOOM_GEMM_ROLES; k++) hw.grid_eff[k][0] = 0.5;
  snprintf(hw.gemm_backend, sizeof hw.gemm_backend, "openblas");
  char *yaml = loom_hw_to_yaml(&hw, NULL);
  CHECK(loom_write_file_atomic("sim-peak.tmp/old.yaml", yaml, strlen(yaml)) == 0, "%s",
        loom_errmsg());
  free(yaml);
  r = loom_run_in(dir, "bench --quick --only peak --out sim-peak.tmp/old.yaml");
  CHECK(r.status == 0, "loom bench --only peak over a profile: %s", r.err);
  loom_hw_profile upd;
  CHECK(loom_hw_load_file(&upd, "sim-peak.tmp/old.yaml") == 0, "%s", loom_errmsg());
  CHECK(upd.peak_flops[LOOM_DT_FP32] == 0.1e12 && upd.peak_flops[LOOM_DT_BF16] == 0.08e12 &&
            !strcmp(upd.gemm_backend, "openblas") && upd.grid_n[0] == 1,
        "the library's figures kept: %g %g '%s'", upd.peak_flops[0], upd.peak_flops[1],
        upd.gemm_backend);
  if (loom_peak_available(LOOM_UNIT_FMA, NULL, 0))
    CHECK(upd.n_ipeak >= 1 &&
              HAS(r.out, "peak: instruction peaks from registers", "fma ", "library GEMM",
                  "fp32    100.0 GFLOP/s = ", "the profile's instruction_peak: fp32 from fma"),
          "the table:\n%s", r.out);
  run_done(&r);
}

/* loom_bench_passes on scripted times (seconds by pass, per item): two passes over every
 * item, then only the items whose two best times are more than 10% apart, up to the limit */
typedef struct {
  const double (*script)[5];
  int calls[4];
} scripted;

static double scripted_time(void *ctx, int i) {
  scripted *s = ctx;
  return s->script[i][s->calls[i]++];
}

static void test_passes(void) {
  static const double script[4][5] = {
      {1.0, 1.05, 9, 9, 9},   /* agree within 10% after two passes: timed twice */
      {1.0, 6.0, 1.02, 9, 9}, /* a slowed second pass: timed a third time, then agreed */
      {7.0, 1.0, 1.08, 9, 9}, /* a slowed first pass */
      {4.0, 1.0, 2.0, 3.0, 0.5}, /* never agrees: timed up to the limit, the best kept */
  };
  scripted s = {script, {0}};
  double best[4];
  int passes = loom_bench_passes(NULL, scripted_time, &s, 4, 5, best);
  CHECK(passes == 5, "passes %d, want 5 (item 3 never agrees)", passes);
  CHECK(s.calls[0] == 2 && s.calls[1] == 3 && s.calls[2] == 3 && s.calls[3] == 5,
        "timed %d, %d, %d, %d times; want 2, 3, 3, 5", s.calls[0], s.calls[1], s.calls[2],
        s.calls[3]);
  CHECK(best[0] == 1.0 && best[1] == 1.0 && best[2] == 1.0 && best[3] == 0.5,
        "best %g %g %g %g", best[0], best[1], best[2], best[3]);
  scripted t = {script, {0}};
  passes = loom_bench_passes(NULL, scripted_time, &t, 1, 5, best); /* item 0 alone: two passes */
  CHECK(passes == 2 && t.calls[0] == 2 && best[0] == 1.0, "one agreeing item: %d passes", passes);
}

/* loom_bench_fit_rel recovers exact coefficients, reports a term that comes out negative, and
 * refuses singular equations */
static void test_fit_rel(void) {
  static const double X[4][3] = {{1, 2, 3}, {4, 1, 1}, {2, 5, 1}, {3, 3, 7}};
  const double want[3] = {0.5, 2, 0.25};
  double t[4], c[3];
  for (int i = 0; i < 4; i++) t[i] = X[i][0] * want[0] + X[i][1] * want[1] + X[i][2] * want[2];
  static const int all[3] = {0, 1, 2}, ends[2] = {0, 2};
  double sse = loom_bench_fit_rel(X, t, 4, all, 3, c);
  CHECK(sse >= 0 && sse < 1e-24 && fabs(c[0] / 0.5 - 1) < 1e-12 && fabs(c[1] / 2 - 1) < 1e-12 &&
            fabs(c[2] / 0.25 - 1) < 1e-12,
        "exact data: sse %g, c %g %g %g", sse, c[0], c[1], c[2]);
  sse = loom_bench_fit_rel(X, t, 4, ends, 2, c); /* two of the three terms: c[1] stays 0 */
  CHECK(sse > 0 && c[1] == 0 && c[0] > 0 && c[2] > 0, "columns 0 and 2: sse %g, c %g %g %g", sse,
        c[0], c[1], c[2]);
  double tn[4];
  for (int i = 0; i < 4; i++) tn[i] = X[i][0] * 1 - X[i][1] * 0.1 + X[i][2] * 1; /* c[1] < 0 */
  CHECK(loom_bench_fit_rel(X, tn, 4, all, 3, c) == -1 && c[1] < 0, "a negative term: c[1] %g", c[1]);
  static const double same[2][3] = {{1, 1, 0}, {2, 2, 0}};
  CHECK(loom_bench_fit_rel(same, t, 2, all, 3, c) == -1 && c[0] == 0, "singular equations");
}

int main(void) {
  test_mfu_instruction();
  test_mfu_library();
  test_mfu_this_machine();
  test_probes();
  test_bench_cli();
  test_passes();
  test_fit_rel();
  return harness_finish("test_sim_peak");
}

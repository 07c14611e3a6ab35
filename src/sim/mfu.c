/* MFU, the one definition (the progress line, summary.json, the registry, the sweep summary and
 * loom sim all call it), and the peak it is taken against: on a CPU profile with an instruction
 * peak (loom bench's peak section: what the machine's FMA / AVX512_BF16 / AMX instructions
 * reach from registers) that of the run's dtype at the rank's threads, with the library's best
 * GEMM beside it; without one, the library's GEMM figure of the run's dtype in this machine's
 * hardware profile (`loom bench` writes it), scaled to the threads a rank runs. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/hw.h"

double loom_hw_instruction_peak(const loom_hw_profile *hw, loom_hw_dtype dt, int threads,
                                char *basis, size_t n) {
  if (n) basis[0] = 0;
  if (hw->n_ipeak < 1 || (dt != LOOM_DT_FP32 && dt != LOOM_DT_BF16)) return 0;
  if (threads < 1) threads = 1;
  const int *t = hw->ipeak_threads;
  const double *f = hw->ipeak_flops[dt];
  int below = -1; /* the last entry with fewer threads */
  for (int i = 0; i < hw->n_ipeak; i++) {
    if (t[i] == threads) {
      if (n) snprintf(basis, n, "%d thread%s", threads, threads == 1 ? "" : "s");
      return f[i];
    }
    if (t[i] < threads) below = i;
  }
  if (below < 0) { /* fewer threads than the first entry: at most what it reaches */
    if (n) snprintf(basis, n, "%d thread%s, taken as %d threads' (the fewest measured)", threads,
                    threads == 1 ? "" : "s", t[0]);
    return f[0];
  }
  if (n)
    snprintf(basis, n, "%d threads = %d x the per-thread figure of %d thread%s", threads,
             threads, t[below], t[below] == 1 ? "" : "s");
  return f[below] / t[below] * threads;
}

/* " (onednn backend)": the GEMM backend loom bench's gemm section measured through, "" when
 * the profile does not say (the bf16 path behind a backend may be another library's or loom's
 * own kernel: the backend is what the profile records) */
static void backend_note(const loom_hw_profile *hw, char *out, size_t n) {
  if (hw->gemm_backend[0]) snprintf(out, n, " (%s backend)", hw->gemm_backend);
  else if (n) out[0] = 0;
}

/* why[] of a CPU profile with an instruction peak: the peak, its unit and threads, and the
 * library's GEMM figure for the same threads as a share of it */
static void why_instruction(const loom_hw_profile *hw, const char *dtype, loom_mfu_source *s,
                            const char *basis) {
  char lib[256] = "; no library GEMM figure in the profile (loom bench's gemm section "
                  "measures one)", backend[48];
  backend_note(hw, backend, sizeof backend);
  if (s->library_peak > 0)
    snprintf(lib, sizeof lib, "; the gemm section's best %s GEMM%s: %d x %.1f = %.1f GFLOP/s, "
             "%.1f%% of it", dtype, backend, s->threads, s->library_peak / s->threads / 1e9,
             s->library_peak / 1e9, 100 * s->library_peak / s->peak);
  snprintf(s->why, sizeof s->why,
           "MFU against %.1f GFLOP/s per rank (%s instruction peak, %s, of hardware profile "
           "'%s', loaded as this machine's)%s",
           s->peak / 1e9, loom_hw_unit_instruction(s->unit), basis, hw->name, lib);
}

double loom_mfu_peak_hw(const loom_hw_profile *hw, const char *dtype, int threads,
                        loom_mfu_source *s) {
  loom_hw_dtype dt = strcmp(dtype, "bf16") ? LOOM_DT_FP32 : LOOM_DT_BF16;
  int used = threads < 1 ? 1 : threads;
  s->peak = s->library_peak = 0;
  s->instruction = false;
  s->kind = "";
  s->name[0] = 0;
  s->unit = LOOM_UNIT_FMA;
  s->threads = used;
  snprintf(s->profile, sizeof s->profile, "%s", hw->path);
  if (!hw->engine_loom_cpu) { /* an accelerator's profile: its device is the rank */
    s->threads = 1;
    if (hw->peak_flops[dt] <= 0) {
      snprintf(s->why, sizeof s->why, "MFU not shown: the profile of this machine (%s) has no %s "
               "peak", hw->path, dtype);
      s->profile[0] = 0;
      return 0;
    }
    s->peak = s->library_peak = hw->peak_flops[dt];
    s->kind = "device";
    snprintf(s->name, sizeof s->name, "%s matrix peak of the device", dtype);
    snprintf(s->why, sizeof s->why, "MFU against %.1f GFLOP/s per rank (the %s matrix peak of "
             "hardware profile '%s', loaded as this machine's)", s->peak / 1e9, dtype, hw->name);
    return s->peak;
  }
  /* loom bench's devices are cores (one thread each): a rank running T threads can at most
   * reach T cores' library figure; the multi-threaded GEMM rate is below T x the one-thread
   * rate (shared caches, lower all-core clocks), so that figure never overstates MFU */
  s->library_peak = used * hw->peak_flops[dt];
  char basis[160];
  double ipeak = loom_hw_instruction_peak(hw, dt, used, basis, sizeof basis);
  if (ipeak > 0) {
    /* beside it the library's figure, where the gemm section measured one (a profile of
     * `loom bench --only peak` alone holds the defaults) */
    if (!hw->gemm_backend[0] && !hw->grid_n[0]) s->library_peak = 0;
    s->peak = ipeak;
    s->instruction = true;
    s->unit = dt == LOOM_DT_BF16 ? hw->ipeak_bf16_unit : LOOM_UNIT_FMA;
    s->kind = "instruction";
    snprintf(s->name, sizeof s->name, "%s instruction peak", loom_hw_unit_instruction(s->unit));
    why_instruction(hw, dtype, s, basis);
    return s->peak;
  }
  if (hw->peak_flops[dt] <= 0) {
    snprintf(s->why, sizeof s->why, "MFU not shown: the profile of this machine (%s) has no %s "
             "peak", hw->path, dtype);
    s->profile[0] = 0;
    s->library_peak = 0;
    return 0;
  }
  s->peak = s->library_peak;
  s->kind = "library";
  char backend[48];
  backend_note(hw, backend, sizeof backend);
  snprintf(s->name, sizeof s->name, "%s GEMM peak%s", dtype, backend);
  snprintf(s->why, sizeof s->why,
           "MFU against %.1f GFLOP/s per rank (%d thread%s x %.1f GFLOP/s, the %s matrix peak of "
           "one core in hardware profile '%s', loaded as this machine's: the gemm section's best "
           "GEMM%s, not an instruction peak; 'loom bench --only peak' measures that)",
           s->peak / 1e9, used, used == 1 ? "" : "s", hw->peak_flops[dt] / 1e9, dtype, hw->name,
           backend);
  return s->peak;
}

double loom_mfu_source_get(const char *dtype, int threads, loom_mfu_source *s) {
  loom_hw_profile hw;
  memset(s, 0, sizeof *s);
  s->kind = "";
  if (loom_hw_load(&hw, "this-machine")) {
    snprintf(s->why, sizeof s->why, "MFU not shown: no measured peak of this machine (run 'loom "
             "bench' once; it writes configs/hardware/this-machine.yaml)");
    loom_err_clear();
    return 0;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int used = threads < 1 ? 1 : threads;
  if (hw.engine_loom_cpu && cores > 0 && used > cores) used = (int)cores;
  return loom_mfu_peak_hw(&hw, dtype, used, s);
}

double loom_mfu_peak_from(const char *dtype, int threads, char *profile, size_t np, char *why,
                          size_t n) {
  loom_mfu_source s;
  double peak = loom_mfu_source_get(dtype, threads, &s);
  if (np) snprintf(profile, np, "%s", s.profile);
  if (n) snprintf(why, n, "%s", s.why);
  return peak;
}

double loom_mfu_peak(const char *dtype, char *why, size_t n) {
  return loom_mfu_peak_from(dtype, 1, NULL, 0, why, n);
}

double loom_mfu(double tokens, double seconds, double flops_per_token, double peak_flops) {
  if (!(peak_flops > 0) || !(seconds > 0) || !(flops_per_token > 0)) return NAN;
  return tokens * flops_per_token / (seconds * peak_flops);
}

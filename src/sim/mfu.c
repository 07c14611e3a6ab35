/* MFU, the one definition (the progress line, summary.json, the registry, the sweep summary and
 * loom sim all call it), and the peak it is taken against: the matrix peak of the run's dtype
 * in this machine's hardware profile (`loom bench` writes it), scaled to the threads a rank
 * runs. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/hw.h"

double loom_mfu_peak_from(const char *dtype, int threads, char *profile, size_t np,
                                       char *why, size_t n) {
  loom_hw_profile hw;
  if (np) profile[0] = 0;
  if (loom_hw_load(&hw, "this-machine")) {
    snprintf(why, n, "MFU not shown: no measured peak of this machine (run 'loom bench' once; "
             "it writes configs/hardware/this-machine.yaml)");
    loom_err_clear();
    return 0;
  }
  loom_hw_dtype dt = strcmp(dtype, "bf16") ? LOOM_DT_FP32 : LOOM_DT_BF16;
  if (hw.peak_flops[dt] <= 0) {
    snprintf(why, n, "MFU not shown: the profile of this machine (%s) has no %s peak", hw.path,
             dtype);
    return 0;
  }
  if (np) snprintf(profile, np, "%s", hw.path);
  if (!hw.engine_loom_cpu) { /* an accelerator's profile: its device is the rank */
    snprintf(why, n, "MFU against %.1f GFLOP/s per rank (the %s matrix peak of hardware profile "
             "'%s', loaded as this machine's)", hw.peak_flops[dt] / 1e9, dtype, hw.name);
    return hw.peak_flops[dt];
  }
  /* loom bench's devices are cores (one thread each): a rank running T threads on this
   * machine can at most reach T cores' peak, and no more cores than the machine has. The
   * multi-threaded GEMM rate is below T x the one-thread rate (shared caches, lower all-core
   * clocks), so the figure never overstates MFU. */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int used = threads < 1 ? 1 : threads;
  if (cores > 0 && used > cores) used = (int)cores;
  snprintf(why, n, "MFU against %.1f GFLOP/s per rank (%d thread%s x %.1f GFLOP/s, the %s matrix "
           "peak of one core in hardware profile '%s', loaded as this machine's)",
           used * hw.peak_flops[dt] / 1e9, used, used == 1 ? "" : "s", hw.peak_flops[dt] / 1e9,
           dtype, hw.name);
  return used * hw.peak_flops[dt];
}

double loom_mfu_peak(const char *dtype, char *why, size_t n) {
  return loom_mfu_peak_from(dtype, 1, NULL, 0, why, n);
}

double loom_mfu(double tokens, double seconds, double flops_per_token,
                         double peak_flops) {
  if (!(peak_flops > 0) || !(seconds > 0) || !(flops_per_token > 0)) return NAN;
  return tokens * flops_per_token / (seconds * peak_flops);
}

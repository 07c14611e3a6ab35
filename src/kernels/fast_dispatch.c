/* Run-time choice of the fast kernels' code path: AVX-512 when the CPU has it, else portable C.
 * LOOM_SIMD=generic in the environment, or loom_kernels_force_generic(1), forces the portable
 * path (the tests run both). */
#include <stdlib.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "loom/kernels.h"

static int state = -1; /* -1: not probed */

int fast_avx512(void) {
  if (state < 0) {
    const char *e = getenv("LOOM_SIMD");
    int forced = e && !strcmp(e, "generic");
    __builtin_cpu_init();
    state = !forced && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  }
  return state;
}

void loom_kernels_force_generic(int on) {
  state = -1;
  if (!on) (void)fast_avx512();
  else state = 0;
}

const char *loom_kernels_simd(void) { return fast_avx512() ? "avx512" : "generic"; }

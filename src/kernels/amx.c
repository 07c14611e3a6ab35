/* Whether this process may run AMX tile instructions: the CPU has AMX-TILE and AMX-BF16, and
 * Linux granted the process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA; without the grant the first tile instruction faults). Asked once;
 * LOOM_AMX=0 in the environment answers no: loom's own AMX kernels stay unused and bf16 GEMMs
 * go to oneDNN (which picks its own ISA, AMX included). Thread-safe: every thread that asks
 * first gets the same answer, and the grant is per process. */
#include <cpuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "loom/kernels.h"

enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

static int amx_state = -1; /* -1: not asked */
static int amx_forced_off;

static int amx_probe(void) {
  const char *e = getenv("LOOM_AMX");
  if (e && strcmp(e, "0") && strcmp(e, "1")) {
    fprintf(stderr, "loom: LOOM_AMX=%s is not 0 or 1: use 0 to leave bf16 GEMMs to oneDNN, or "
            "leave it unset to run loom's AMX kernels where the CPU has them\n", e);
    exit(2);
  }
  if (e && !strcmp(e, "0")) return 0;
  /* CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE; subleaf 1 EAX bit 5 AVX512-BF16
   * (read directly: clang 14's __builtin_cpu_supports knows no AMX feature names) */
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 22 & 1) || !(d >> 24 & 1)) return 0;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a >> 5 & 1)) return 0;
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int loom_kernels_amx(void) {
  if (amx_forced_off) return 0;
  int s = __atomic_load_n(&amx_state, __ATOMIC_ACQUIRE);
  if (s < 0) {
    s = amx_probe();
    __atomic_store_n(&amx_state, s, __ATOMIC_RELEASE);
  }
  return s;
}

void loom_kernels_force_no_amx(int on) { amx_forced_off = on; }

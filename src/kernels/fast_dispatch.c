/* Run-time choice of the fast kernels' code path: AVX-512 when the CPU has it, else portable C;
 * for the bf16 products of flash attention also whether AVX512-BF16 (vdpbf16ps) is there; for
 * the AVX2 loops of machines without AVX-512 (AdamW; flash attention's fp32 tiles, which also
 * need FMA) whether AVX2 is.
 * LOOM_SIMD=generic in the environment, or loom_kernels_force_generic(1), forces the portable
 * path; LOOM_SIMD=avx2 or loom_kernels_force_avx2(1) the AVX2 paths on an AVX-512 machine;
 * LOOM_SIMD=avx512 or loom_kernels_force_no_bf16(1) AVX-512 without AVX512-BF16 (the tests run
 * every path the CPU has). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "loom/kernels.h"

/* LOOM_SIMD, NULL when unset; any value but generic, avx2 and avx512 is refused (exit 2) */
static const char *simd_env(void) {
  const char *e = getenv("LOOM_SIMD");
  if (e && strcmp(e, "generic") && strcmp(e, "avx2") && strcmp(e, "avx512")) {
    fprintf(stderr, "loom: LOOM_SIMD=%s is not a code path: use generic (portable C), avx2 "
            "(no AVX-512) or avx512 (no AVX512-BF16), or leave it unset to detect the CPU's\n", e);
    exit(2);
  }
  return e;
}

static int state = -1;      /* -1: not probed */
static int avx2_state = -1; /* -1: not probed */
static int bf16_state = -1; /* -1: not probed */
static int no_bf16_forced;

int fast_avx512(void) {
  if (state < 0) {
    const char *e = simd_env();
    int forced = e && (!strcmp(e, "generic") || !strcmp(e, "avx2"));
    __builtin_cpu_init();
    state = !forced && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  }
  return state;
}

int fast_avx2(void) {
  if (avx2_state < 0) {
    const char *e = simd_env();
    __builtin_cpu_init();
    avx2_state = !(e && !strcmp(e, "generic")) && __builtin_cpu_supports("avx2");
  }
  return avx2_state;
}

int fast_avx2_fma(void) { return fast_avx2() && __builtin_cpu_supports("fma"); }

void loom_kernels_force_generic(int on) {
  state = -1;
  avx2_state = on ? 0 : -1;
  if (!on) (void)fast_avx512();
  else state = 0;
}

void loom_kernels_force_avx2(int on) {
  state = on ? 0 : -1;
  avx2_state = -1;
}

const char *loom_kernels_simd(void) {
  return fast_avx512() ? "avx512" : fast_avx2() ? "avx2" : "generic";
}

int fast_avx512_bf16(void) {
  if (bf16_state < 0) {
    const char *e = simd_env();
    int forced = no_bf16_forced || (e && !strcmp(e, "avx512"));
    bf16_state = !forced && fast_avx512() && __builtin_cpu_supports("avx512bf16");
  }
  return bf16_state && fast_avx512();
}

void loom_kernels_force_no_bf16(int on) {
  no_bf16_forced = on;
  bf16_state = -1;
}

const char *loom_kernels_attn_bf16_path(void) {
  return fast_avx512_bf16() ? (loom_kernels_amx() ? "amx" : "avx512_bf16")
         : fast_avx512()    ? "avx512"
         : fast_avx2_fma()   ? "avx2"
                             : "generic";
}

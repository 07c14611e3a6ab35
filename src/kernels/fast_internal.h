/* Private to the fast kernels: the run-time choice between the AVX-512 and the portable code
 * paths, and the OpenMP work threshold. */
#ifndef LOOM_FAST_INTERNAL_H
#define LOOM_FAST_INTERNAL_H
#include <stddef.h>

/* Loops with less work than this run on one thread (thread start-up is not free). */
#define FAST_PAR_MIN 32768

/* 1 when the CPU has AVX-512 F/BW/DQ/VL (and LOOM_SIMD is not "generic"). */
int fast_avx512(void);
#endif

/* The shared part of bench/gemm_amx_ab.c and bench/flash_amx_ab.c (bench/amx_ab.sh): the rounds
 * argument and the AMX check, and the median and best of one revision's times. */
#ifndef LOOM_BENCH_AMX_AB_H
#define LOOM_BENCH_AMX_AB_H
#include <stdio.h>
#include <stdlib.h>

#include "loom/kernels.h"

static int ab_by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* rounds from argv[1] (default 15, 3..1001); 0 where the CPU has no AMX (said so: exit 0),
 * -1 on a bad argument (said so: exit 2) */
static int ab_rounds(int argc, char **argv, const char *prog) {
  int rounds = argc > 1 ? atoi(argv[1]) : 15;
  if (rounds < 3 || rounds > 1001) {
    fprintf(stderr, "%s: rounds %s is not in 3..1001\n", prog, argc > 1 ? argv[1] : "");
    return -1;
  }
  if (!loom_kernels_amx()) {
    printf("%s: this CPU has no AMX tiles (or Linux refused them): nothing to measure\n", prog);
    return 0;
  }
  return rounds;
}

/* t[0..rounds-1] sorted; the median and the best */
static void ab_median_best(double *t, int rounds, double *median, double *best) {
  qsort(t, (size_t)rounds, sizeof *t, ab_by_value);
  *median = t[rounds / 2], *best = t[0];
}
#endif

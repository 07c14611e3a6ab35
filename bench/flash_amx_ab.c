/* bf16 flash attention's products on AMX tiles (fb_mm_amx, src/kernels/flash_tile_amx.c) of
 * two revisions in one process: "base" (the file at a git revision) against "this" (the
 * working tree), each compiled with its public name prefixed (bench/amx_ab.sh), at the
 * products one 64-query x 64-key tile of the forward and backward runs (St = K Q^T with pairs
 * along rows, O += V^T P^T with A's pairs down columns, transposed through a scratch tile) for
 * head_dim 64 and 128. The two alternate call by call, each call a batch of the product
 * repeated over 256 tiles of operands (a head's worth, out of L1 as in the kernel); the table
 * gives each one's median and best GFLOP/s and the ratio of the medians, and whether the two
 * results are bitwise equal (the change must keep every sum's order).
 * usage: flash_amx_ab [rounds] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "amx_ab.h"

typedef void (*mm_fn)(float *, int, const uint32_t *, long, long, const uint32_t *, long, int, int,
                      int, int);
void base_fb_mm_amx(float *, int, const uint32_t *, long, long, const uint32_t *, long, int, int,
                    int, int);
void this_fb_mm_amx(float *, int, const uint32_t *, long, long, const uint32_t *, long, int, int,
                    int, int);
static const mm_fn rev[2] = {base_fb_mm_amx, this_fb_mm_amx};

enum { TILES = 4, REPEAT = 64 }; /* 4 tiles' operands (in L2, as the kernel's), 64 passes */

static const struct {
  int m, n, kp, a_down, acc;
  const char *name;
} shapes[] = {
    {64, 64, 32, 0, 0, "St = K Q^T, D 64"},
    {64, 64, 32, 1, 1, "O += V^T P^T, D 64"},
    {64, 64, 64, 0, 0, "St = K Q^T, D 128"},
    {128, 64, 32, 1, 1, "O += V^T P^T, D 128"},
};

int main(int argc, char **argv) {
  int rounds = ab_rounds(argc, argv, "flash_amx_ab");
  if (rounds <= 0) return rounds < 0 ? 2 : 0;
  printf("one batch of %d products each in turns, %d rounds; GFLOP/s median (best)\n",
         TILES * REPEAT, rounds);
  printf("| product | m x n x pairs | base | this | this/base (medians) | bitwise equal |\n"
         "|---|---|---|---|---|---|\n");
  double med_sum[2] = {0, 0};
  int all_equal = 1;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int m = shapes[s].m, n = shapes[s].n, kp = shapes[s].kp;
    /* A: (m, kp) pairs, row-wise (ai = kp, ap = 1) or down columns (ai = 1, ap = m) */
    long ai = shapes[s].a_down ? 1 : kp, ap = shapes[s].a_down ? m : 1;
    size_t na = (size_t)m * kp, nb = (size_t)kp * n, nc = (size_t)m * n;
    uint32_t *A = loom_malloc(na * TILES * 4), *B = loom_malloc(nb * TILES * 4);
    for (size_t i = 0; i < na * TILES; i++) /* two bf16 in 1..2 */
      A[i] = (uint32_t)(0x3f80 + i * 7919 % 127) | (uint32_t)(0x3f80 + i * 31 % 101) << 16;
    for (size_t i = 0; i < nb * TILES; i++)
      B[i] = (uint32_t)(0xbf80 + i * 104729 % 113) | (uint32_t)(0x3f80 + i * 17 % 89) << 16;
    float *C[2];
    double *t[2], med[2], best[2];
    for (int v = 0; v < 2; v++) {
      C[v] = loom_malloc(nc * TILES * 4), t[v] = loom_malloc(rounds * sizeof(double));
      memset(C[v], 0, nc * TILES * 4);
    }
    for (int r = 0; r < rounds; r++)
      for (int v = 0; v < 2; v++) {
        double t0 = loom_now();
        for (int k = 0; k < TILES * REPEAT; k++)
          rev[v](C[v] + nc * (k % TILES), n, A + na * (k % TILES), ai, ap, B + nb * (k % TILES), n,
                 m, n, kp, shapes[s].acc);
        t[v][r] = loom_now() - t0;
      }
    double flops = 2.0 * 2 * m * n * kp * TILES * REPEAT; /* two products per pair */
    for (int v = 0; v < 2; v++) {
      ab_median_best(t[v], rounds, &med[v], &best[v]);
      med_sum[v] += med[v];
    }
    int equal = !memcmp(C[0], C[1], nc * TILES * 4);
    all_equal &= equal;
    printf("| %s | %d x %d x %d | %.0f (%.0f) | %.0f (%.0f) | %.2f | %s |\n", shapes[s].name, m, n,
           kp, flops / med[0] / 1e9, flops / best[0] / 1e9, flops / med[1] / 1e9,
           flops / best[1] / 1e9, med[0] / med[1], equal ? "yes" : "NO");
    for (int v = 0; v < 2; v++) free(C[v]), free(t[v]);
    free(A), free(B);
  }
  printf("all products: this/base %.3f (sums of the medians)\n", med_sum[0] / med_sum[1]);
  return all_equal ? 0 : 1;
}

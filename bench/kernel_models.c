/* The two kernel models loom bench calibrates the simulator with, held against the kernels at
 * the shapes loom's own small models train with (bench/kernel_models.sh builds and runs it):
 *  1. GEMMs as a training step meets them: each product hot (the same operands again, as a
 *     timing loop has them) against its second operand and its output taken from a pool larger
 *     than the caches (a step's weight or saved activation and its fresh output) with the first
 *     operand hot (the input just produced), timed in turns; the ratio is what loom bench's
 *     pool takes off the hot rate. And the same cold product after other work, as a step calls
 *     it (loom bench times its calls back to back): after the next shape's product (untimed),
 *     and after that and a 4 MB sweep (a layer's other kernels' footprint in the caches).
 *  2. Flash attention at eight shapes (T = 128..2048, head_dim 32..128, GQA and MHA), timed in
 *     turns, against two models fitted to all of them by relative least squares: one rate over
 *     the causal (query, key) pairs x head_dim (loom bench before 2026-11-29), and a rate over
 *     the pairs of the kernel's tile grid x head_dim plus one over the query rows x head_dim
 *     (loom bench from 2026-11-29), and that plus a time per query row whatever head_dim (loom
 *     bench since 2026-11-30); each shape's error of each model, and of the profile loom bench's
 *     attention section writes (fitted to its own six shapes), and the worst.
 * Medians of R rounds, each round every case once, in this thread's CPU time (other processes
 * on a shared machine do not stretch it); run with OMP_NUM_THREADS=1 as loom bench's ranks do.
 *   usage: kernel_models [R] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/core.h"
#include "loom/hw.h"
#include "loom/kernels.h"
#include "loom/sim_bench.h"

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp);
  return x[n / 2];
}

enum { POOL = 16 << 20, MAXR = 201 }; /* 64 MiB of floats; rounds */
static float *pool;
static size_t at;

static float *take(size_t n) {
  size_t step = (n + 1023) & ~(size_t)1023;
  if (at + step > POOL) at = 0;
  float *p = pool + at;
  at += step;
  return p;
}

/* one product C (m,n) = A (m,k) B (k,n) in the layout of the linear layer's call for its role
 * (0 fwd, 1 dgrad, 2 wgrad), as src/sim/bench_gemm.c times it */
static void gemm(int role, int m, int n, int k, const float *a, const float *b, float *c) {
  if (role == 0) loom_gemm_f32(0, 1, m, n, k, a, k, b, k, NULL, 0.0f, c, n);
  else if (role == 1) loom_gemm_f32(0, 0, m, n, k, a, k, b, n, NULL, 0.0f, c, n);
  else loom_gemm_f32(1, 0, m, n, k, a, m, b, n, NULL, 1.0f, c, n);
}

static void gemms(int R) {
  /* tiny-qwen3-moe (hidden 128, q 192, kv 96, 512 tokens a micro-batch), its experts (128 rows
   * of 96) and tiny-gpt2 (hidden 256, 1024 inner), as products (m, n, k) */
  static const int shape[][3] = {{512, 192, 128}, {512, 96, 128}, {512, 128, 192}, {192, 128, 512},
                                 {128, 96, 128},  {512, 768, 256}, {512, 256, 1024}, {256, 1024, 512}};
  enum { NS = sizeof shape / sizeof shape[0] };
  static const char *const role_name[] = {"fwd", "dgrad", "wgrad"};
  float *hot = loom_alloc(3 * (size_t)1024 * 1024 * sizeof(float));
  for (size_t i = 0; i < 3 * (size_t)1024 * 1024; i++) hot[i] = (float)(i % 97) * 0.01f - 0.4f;
  printf("GEMMs: hot operands against B and C out of the caches (A hot), one thread, medians of "
         "%d rounds\n", R);
  printf("| (m, n, k) | role | hot GFLOP/s | B, C cold GFLOP/s | cold / hot | cold after a GEMM | "
         "after a GEMM and 4 MB | after both / cold |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  enum { SWEEP = 1 << 20 }; /* floats: 4 MB */
  float *sweep = loom_alloc((size_t)SWEEP * sizeof(float)), *other = loom_alloc(((size_t)3 << 20) * sizeof(float));
  memset(sweep, 0, (size_t)SWEEP * sizeof(float));
  memcpy(other, hot, ((size_t)3 << 20) * sizeof(float));
  static double t[4][MAXR];
  for (int s = 0; s < NS; s++)
    for (int role = 0; role < 3; role++) {
      int m = shape[s][0], n = shape[s][1], k = shape[s][2];
      const int *o = shape[(s + 1) % NS]; /* the other work's product */
      float *A = hot, *B = hot + 1024 * 1024, *C = hot + 2 * 1024 * 1024;
      float *oA = other, *oB = other + 1024 * 1024, *oC = other + 2 * 1024 * 1024;
      gemm(role, m, n, k, A, B, C); /* the primitives, created before timing */
      gemm(role, o[0], o[1], o[2], oA, oB, oC);
      for (int r = 0; r < R; r++)
        for (int mode = 0; mode < 4; mode++) { /* hot, cold, cold after a GEMM, after both */
          float *b = mode ? take((size_t)k * n) : B, *c = mode ? take((size_t)m * n) : C;
          if (mode >= 2) gemm(role, o[0], o[1], o[2], oA, oB, oC);
          if (mode == 3)
            for (int i = 0; i < SWEEP; i++) sweep[i] += 1.0f;
          double t0 = cpu_now();
          gemm(role, m, n, k, A, b, c);
          t[mode][r] = cpu_now() - t0;
        }
      double th = median(t[0], R), tc = median(t[1], R), tg = median(t[2], R), tw = median(t[3], R);
      double fl = 2.0 * m * n * k;
      printf("| (%d, %d, %d) | %s | %.1f | %.1f | %.3f | %.1f | %.1f | %.3f |\n", m, n, k,
             role_name[role], fl / th / 1e9, fl / tc / 1e9, th / tc, fl / tg / 1e9, fl / tw / 1e9,
             tc / tw);
    }
  loom_free(hot), loom_free(sweep), loom_free(other);
}

static void attention(int R) {
  static const int shape[][5] = {/* B, T, Hq, Hkv, D */
                                 {2, 256, 4, 4, 64},  {4, 128, 4, 2, 48}, {4, 128, 4, 4, 64},
                                 {2, 256, 4, 4, 32},  {2, 256, 4, 4, 128}, {4, 128, 4, 4, 48},
                                 {1, 2048, 4, 2, 32}, {4, 128, 4, 2, 64}};
  enum { NS = sizeof shape / sizeof shape[0] };
  const int tile = loom_flash_attention_tile();
  loom_hw_profile grid; /* only its tile: the pairs the kernel computes, as the simulator counts */
  loom_hw_defaults(&grid);
  grid.attn_tile[0] = grid.attn_tile[1] = tile;
  size_t n = 4u << 20;
  float *buf = loom_alloc(10 * n * sizeof(float));
  for (size_t i = 0; i < 10 * n; i++) buf[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  static double tf[NS][MAXR], tb[NS][MAXR];
  loom_attn_mask causal = {.causal = 1};
  for (int r = 0; r < R; r++)
    for (int s = 0; s < NS; s++) {
      int B = shape[s][0], T = shape[s][1], Hq = shape[s][2], Hkv = shape[s][3], D = shape[s][4];
      size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D;
      float *q = buf, *o = q + nq, *dout = o + nq, *dq = dout + nq, *k = dq + nq, *v = k + nk;
      float *dk = v + nk, *dv = dk + nk, *lse = dv + nk, *work = lse + (size_t)B * Hq * T;
      double t0 = cpu_now();
      loom_flash_attention_forward_f32(o, lse, q, k, v, B, T, Hq, Hkv, D, causal);
      double t1 = cpu_now();
      loom_flash_attention_backward_f32(dq, dk, dv, dout, o, lse, q, k, v, B, T, Hq, Hkv, D,
                                        causal, work);
      tf[s][r] = t1 - t0, tb[s][r] = cpu_now() - t1;
    }
  double y[2][NS], causal_x[NS][3], tile_x[NS][3];
  for (int s = 0; s < NS; s++) {
    int B = shape[s][0], T = shape[s][1], Hq = shape[s][2], D = shape[s][4];
    y[0][s] = median(tf[s], R), y[1][s] = median(tb[s], R);
    causal_x[s][0] = (double)B * Hq * T * (T + 1) / 2 * D, causal_x[s][1] = causal_x[s][2] = 0;
    tile_x[s][0] = (double)B * Hq * loom_hw_causal_tile_pairs(&grid, T) * D;
    tile_x[s][1] = (double)B * Hq * T * D;
    tile_x[s][2] = (double)B * Hq * T; /* query rows, whatever head_dim */
  }
  /* and the profile loom bench's attention section writes (its own six shapes, fitted there),
   * taken after the rounds above: how the simulator prices these shapes */
  loom_hw_profile lb;
  loom_bench_profile_defaults(&lb);
  loom_bench_ctx ctx = {1, NULL, 0, 1, NULL};
  loom_bench_attention(&lb, &ctx);
  printf("\nflash attention (tiles of %d), one thread, medians of %d rounds; error of each model "
         "fitted to all eight shapes, and of loom bench's profile (fitted to its own six)\n",
         tile, R);
  printf("| B | T | heads (kv) | head_dim | forward ms | backward ms | causal pairs: fwd, bwd error "
         "| tile pairs + rows: fwd, bwd | + a time per row: fwd, bwd | loom bench's profile: fwd, "
         "bwd |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  enum { M = 4 };
  double c[M][2][3], worst[M][2] = {{0}};
  static const int cols[3] = {0, 1, 2}; /* the first 1, 2 or 3 terms; shown even if one is not
                                           positive (the fit's errors are the point here) */
  for (int d = 0; d < 2; d++) {
    loom_bench_fit_rel((const double(*)[3])causal_x, y[d], NS, cols, 1, c[0][d]);
    loom_bench_fit_rel((const double(*)[3])tile_x, y[d], NS, cols, 2, c[1][d]);
    loom_bench_fit_rel((const double(*)[3])tile_x, y[d], NS, cols, 3, c[2][d]);
  }
  for (int s = 0; s < NS; s++) {
    double e[M][2];
    for (int d = 0; d < 2; d++) {
      e[0][d] = c[0][d][0] * causal_x[s][0] / y[d][s] - 1;
      for (int m = 1; m < 3; m++)
        e[m][d] = (c[m][d][0] * tile_x[s][0] + c[m][d][1] * tile_x[s][1] +
                   c[m][d][2] * tile_x[s][2]) / y[d][s] - 1;
      double pairs = tile_x[s][0] / shape[s][4], rows = tile_x[s][2];
      e[3][d] = loom_hw_loom_attn_time(&lb, d, pairs, rows, shape[s][4]) / y[d][s] - 1;
      for (int m = 0; m < M; m++) worst[m][d] = fmax(worst[m][d], fabs(e[m][d]));
    }
    printf("| %d | %d | %d (%d) | %d | %.3f | %.3f |", shape[s][0], shape[s][1], shape[s][2],
           shape[s][3], shape[s][4], y[0][s] * 1e3, y[1][s] * 1e3);
    for (int m = 0; m < M; m++) printf(" %+.1f%%, %+.1f%% |", 100 * e[m][0], 100 * e[m][1]);
    printf("\n");
  }
  printf("worst error (forward / backward): causal pairs %.1f%% / %.1f%%, tile pairs + rows %.1f%% "
         "/ %.1f%%, + a time per row %.1f%% / %.1f%%, loom bench's profile %.1f%% / %.1f%%\n",
         100 * worst[0][0], 100 * worst[0][1], 100 * worst[1][0], 100 * worst[1][1],
         100 * worst[2][0], 100 * worst[2][1], 100 * worst[3][0], 100 * worst[3][1]);
  loom_free(buf);
}

int main(int argc, char **argv) {
  int R = argc > 1 ? atoi(argv[1]) : 41;
  if (R < 1 || R > MAXR) {
    fprintf(stderr, "kernel_models: rounds must be 1..%d, got %s\n", MAXR, argv[1]);
    return 2;
  }
  pool = loom_alloc((size_t)POOL * sizeof(float));
  for (size_t i = 0; i < POOL; i++) pool[i] = (float)(i % 89) * 0.01f - 0.4f;
  gemms(R);
  attention(R);
  loom_free(pool);
  return 0;
}

/* loom's RoPE (cos and sin from a per-thread table kept across calls) against the rotation it
 * computed before (pow, cos and sin of every (position, pair) on every call), at the shapes of
 * loom's small models and of a 0.5B model's step, one thread, in turns; both must give the same
 * bits (bench/rope_table.sh builds and runs it).
 *   usage: rope_table [rounds, default 21] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/core.h"
#include "loom/kernels.h"

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the per-call rotation loom ran until 2026-11-30 (x (B,T,H,D) in place) */
static void rope_per_call(float *x, int B, int T, int H, int D, double theta, int pos_offset) {
  const int half = D / 2;
  for (int t = 0; t < T; t++) {
    double pos = (double)(t + pos_offset);
    for (int i = 0; i < half; i++) {
      double angle = pos * pow(theta, -2.0 * i / D);
      float c = (float)cos(angle), s = (float)sin(angle);
      for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
          float *p = x + (((size_t)b * T + t) * H + h) * D;
          float x0 = p[i], x1 = p[i + half];
          p[i] = x0 * c - x1 * s;
          p[i + half] = x1 * c + x0 * s;
        }
    }
  }
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int R = argc > 1 ? atoi(argv[1]) : 21;
  if (R < 1 || R > 201) {
    fprintf(stderr, "rope_table: rounds must be 1..201, got %s\n", argv[1]);
    return 2;
  }
  static const struct { const char *what; int B, T, H, D; } shape[] = {
      {"tiny-qwen3-moe q (4 x 128, 4 heads of 48)", 4, 128, 4, 48},
      {"tiny-llama q (4 x 128, 4 heads of 32)", 4, 128, 4, 32},
      {"Qwen2.5-0.5B q (4 x 512, 14 heads of 64)", 4, 512, 14, 64},
      {"Qwen2.5-0.5B k (4 x 512, 2 heads of 64)", 4, 512, 2, 64}};
  printf("| shape | per call (before) us | table us | speed-up | same bits |\n| --- | --- | --- | --- | --- |\n");
  for (size_t s = 0; s < sizeof shape / sizeof shape[0]; s++) {
    int B = shape[s].B, T = shape[s].T, H = shape[s].H, D = shape[s].D;
    size_t n = (size_t)B * T * H * D;
    float *a = loom_alloc(n * sizeof(float)), *b = loom_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = b[i] = (float)(i % 97) * 0.01f - 0.5f;
    double *t0 = loom_alloc((size_t)R * sizeof(double)), *t1 = loom_alloc((size_t)R * sizeof(double));
    loom_rope_forward_f32(b, B, T, H, D, 10000.0, 0); /* the table, built once */
    rope_per_call(a, B, T, H, D, 10000.0, 0);
    int same = memcmp(a, b, n * sizeof(float)) == 0;
    for (int r = 0; r < R; r++) {
      double c0 = cpu_now();
      rope_per_call(a, B, T, H, D, 10000.0, 0);
      double c1 = cpu_now();
      loom_rope_forward_f32(b, B, T, H, D, 10000.0, 0);
      t0[r] = c1 - c0, t1[r] = cpu_now() - c1;
    }
    same = same && memcmp(a, b, n * sizeof(float)) == 0;
    qsort(t0, (size_t)R, sizeof *t0, cmp), qsort(t1, (size_t)R, sizeof *t1, cmp);
    printf("| %s | %.1f | %.1f | %.2fx | %s |\n", shape[s].what, t0[R / 2] * 1e6, t1[R / 2] * 1e6,
           t0[R / 2] / t1[R / 2], same ? "yes" : "NO");
    loom_free(a), loom_free(b), loom_free(t0), loom_free(t1);
    if (!same) return 1;
  }
  return 0;
}

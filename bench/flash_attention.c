/* Flash attention speed, fp32 vs bf16 kernels, one shape (default GPT-2: T=1024, 12 heads of 64,
 * causal), forward and backward, best of R runs, timed in this thread's CPU time so that other
 * processes on a shared machine do not stretch the figure (run with OMP_NUM_THREADS=1).
 * FLOPs: forward 4 D, backward 10 D per visible (query, key) pair (flash_tile.h).
 * Build against the library of a release build:
 *   gcc -O2 -fopenmp -Iinclude -Isrc bench/flash_attention.c build/libloomlib.a -lm \
 *       -lopenblas $(pkg-config --libs yaml-0.1 libpcre2-8 jansson) -o /tmp/flash_attention
 *   OMP_NUM_THREADS=1 /tmp/flash_attention [B] [R] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "loom/core.h"
#include "loom/kernels.h"

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  int B = argc > 1 ? atoi(argv[1]) : 1, reps = argc > 2 ? atoi(argv[2]) : 5;
  const int T = 1024, H = 12, D = 64;
  size_t n = (size_t)B * T * H * D, nl = (size_t)B * H * T;
  float *buf = loom_alloc((8 * n + 2 * nl) * sizeof(float));
  float *q = buf, *k = q + n, *v = k + n, *g = v + n, *o = g + n, *dq = o + n, *dk = dq + n;
  float *dv = dk + n, *lse = dv + n, *work = lse + nl;
  loom_rng r;
  loom_rng_seed(&r, 1);
  for (size_t i = 0; i < 4 * n; i++) buf[i] = (float)loom_rng_normal(&r);
  loom_attn_mask m = {1, 0};
  double pairs = (double)T * (T + 1) / 2, ff = 4.0 * D * B * H * pairs, fb = 10.0 * D * B * H * pairs;
  for (int bf = 0; bf < 2; bf++) {
    double bestf = 1e30, bestb = 1e30;
    for (int rep = 0; rep < reps; rep++) {
      double t0 = cpu_now();
      if (bf) loom_flash_attention_forward_bf16(o, lse, q, k, v, B, T, H, H, D, m);
      else loom_flash_attention_forward_f32(o, lse, q, k, v, B, T, H, H, D, m);
      double t1 = cpu_now();
      if (bf) loom_flash_attention_backward_bf16(dq, dk, dv, g, o, lse, q, k, v, B, T, H, H, D, m, work);
      else loom_flash_attention_backward_f32(dq, dk, dv, g, o, lse, q, k, v, B, T, H, H, D, m, work);
      double t2 = cpu_now();
      if (t1 - t0 < bestf) bestf = t1 - t0;
      if (t2 - t1 < bestb) bestb = t2 - t1;
    }
    printf("%s (%s): forward %.4f s %.1f GFLOP/s, backward %.4f s %.1f GFLOP/s\n",
           bf ? "bf16" : "fp32", bf ? loom_kernels_attn_bf16_path() : loom_kernels_simd(), bestf,
           ff / bestf / 1e9, bestb, fb / bestb / 1e9);
  }
  loom_free(buf);
  return 0;
}

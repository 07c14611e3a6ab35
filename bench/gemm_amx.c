/* loom's AMX bf16 GEMM (src/kernels/gemm_amx.c) against oneDNN's bf16 matmul, the peer, at
 * every GEMM shape of a GPT-2 124M 8x1024 step and a Qwen2.5-0.5B 4x512 step, in the three
 * roles of a linear layer: forward y = x W^T, data gradient dx = dy W, weight gradient
 * dW = dy^T x (the first two through the weights path, the weight marked changed before each
 * call as an optimizer step does: its packing is in the time; the third as the decoder runs
 * it, from a transposed copy of dy, the LM head's from dy in place). The two run in turns
 * (best of `rounds` each), so a change of the machine's speed moves both. Prints GFLOP/s,
 * the ratio, and the share of the instruction peak given on the command line (loom bench's
 * `peak` section measures it). Also checks the two agree (max difference relative to the
 * largest |C|) so a fast wrong kernel cannot pass unnoticed.
 * usage: gemm_amx [rounds] [bf16 instruction peak GFLOP/s] */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"

typedef struct {
  const char *model, *name;
  int tokens, out, in;
} linear;

static const linear layers[] = {
    {"gpt2", "qkv", 8192, 2304, 768},  {"gpt2", "proj", 8192, 768, 768},
    {"gpt2", "fc", 8192, 3072, 768},   {"gpt2", "fc_proj", 8192, 768, 3072},
    {"gpt2", "lm_head", 8192, 50304, 768},
    {"qwen2.5-0.5b", "qkv", 2048, 1152, 896}, {"qwen2.5-0.5b", "o", 2048, 896, 896},
    {"qwen2.5-0.5b", "gate_up", 2048, 9728, 896},
    {"qwen2.5-0.5b", "down", 2048, 896, 4864},
    {"qwen2.5-0.5b", "lm_head", 2048, 151936, 896},
};

typedef struct {
  int ta, tb, M, N, K, lda, ldb;
  const uint16_t *A, *B;
  float *C;
  int plain; /* a weight gradient: plain operands, not the weights path */
} call;

static void fill(uint16_t *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    float f = ((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
    uint32_t u;
    memcpy(&u, &f, 4);
    x[i] = (uint16_t)(u >> 16);
  }
}

static double time_best(void (*fn)(const call *), const call *c) {
  fn(c);
  double t0 = loom_now();
  int reps = 0;
  do fn(c), reps++;
  while (loom_now() - t0 < 0.05);
  return (loom_now() - t0) / reps;
}

/* forward and data gradient: B is the weight, through the weights path with the weight
 * marked changed before each call, as a training step with one micro-batch meets it (packed
 * once per optimizer step, used once); weight gradient: plain operands */
static void run_amx(const call *c) {
  if (c->plain) {
    gemm_amx_bf16(c->ta, c->tb, c->M, c->N, c->K, c->A, c->lda, c->B, c->ldb, NULL, 0, c->C, c->N);
    return;
  }
  gemm_amx_weights_changed(c->B, 2, 0);
  gemm_amx_bf16_w(c->ta, c->tb, c->M, c->N, c->K, c->A, c->lda, c->B, c->ldb, NULL, 0, c->C, c->N);
}
static void run_dnnl(const call *c) {
  if (c->plain) {
    gemm_onednn(1, c->ta, c->tb, c->M, c->N, c->K, c->A, c->lda, c->B, c->ldb, NULL, 0, c->C, c->N);
    return;
  }
  gemm_onednn_weights_changed(c->B, 2, 0);
  gemm_onednn_w(1, c->ta, c->tb, c->M, c->N, c->K, c->A, c->lda, c->B, c->ldb, NULL, 0, c->C, c->N);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  double peak = argc > 2 ? atof(argv[2]) : 0;
  if (rounds < 1 || rounds > 101) {
    fprintf(stderr, "gemm_amx: rounds %s is not in 1..101\n", argv[1]);
    return 2;
  }
  if (!loom_kernels_amx()) {
    printf("gemm_amx: this CPU has no AMX tiles (or Linux refused them): nothing to measure\n");
    return 0;
  }
  printf("threads %d, best of %d rounds in turns%s\n", omp_get_max_threads(), rounds,
         peak > 0 ? "" : " (no instruction peak given: shares not shown)");
  printf("| model | GEMM | role | M x N x K | loom AMX GFLOP/s | oneDNN GFLOP/s | loom/oneDNN "
         "| loom %% of peak | max rel diff |\n|---|---|---|---|---|---|---|---|---|\n");
  double flops_all = 0, t_amx_all = 0, t_dnnl_all = 0;
  for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
    const linear *L = &layers[l];
    size_t nx = (size_t)L->tokens * L->in, nw = (size_t)L->out * L->in;
    size_t ny = (size_t)L->tokens * L->out;
    uint16_t *x = loom_malloc(nx * 2), *w = loom_malloc(nw * 2), *dy = loom_malloc(ny * 2);
    fill(x, nx, 1), fill(w, nw, 2), fill(dy, ny, 3);
    size_t cmax = nx > nw ? nx : nw;
    if (ny > cmax) cmax = ny;
    float *c1 = loom_malloc(cmax * 4), *c2 = loom_malloc(cmax * 4);
    const char *roles[3] = {"fwd", "dgrad", "wgrad"};
    /* dW = dy^T x as the decoder runs it: the LM head reads dy in place (ta = 1), the other
     * linears a transposed copy (decoder_ops.c, dec_linear_bwd16: A stored as read) */
    int head = !strcmp(L->name, "lm_head");
    uint16_t *dyT = head ? NULL : loom_malloc(ny * 2);
    if (dyT) loom_bf16_transpose(dyT, dy, L->tokens, L->out);
    call calls[3] = {
        {0, 1, L->tokens, L->out, L->in, L->in, L->in, x, w, NULL, 0},   /* y = x W^T */
        {0, 0, L->tokens, L->in, L->out, L->out, L->in, dy, w, NULL, 0}, /* dx = dy W */
        head ? (call){1, 0, L->out, L->in, L->tokens, L->out, L->in, dy, x, NULL, 1}
             : (call){0, 0, L->out, L->in, L->tokens, L->tokens, L->in, dyT, x, NULL, 1},
    };
    for (int r = 0; r < 3; r++) {
      call a = calls[r], d = calls[r];
      a.C = c1, d.C = c2;
      double ta = 1e30, td = 1e30;
      for (int k = 0; k < rounds; k++) {
        double t = time_best(run_amx, &a);
        if (t < ta) ta = t;
        t = time_best(run_dnnl, &d);
        if (t < td) td = t;
      }
      double big = 0, diff = 0;
      for (size_t i = 0; i < (size_t)a.M * a.N; i++) {
        if (fabsf(c2[i]) > big) big = fabsf(c2[i]);
        if (fabsf(c1[i] - c2[i]) > diff) diff = fabsf(c1[i] - c2[i]);
      }
      double fl = 2.0 * a.M * a.N * a.K;
      flops_all += fl, t_amx_all += ta, t_dnnl_all += td;
      char share[32] = "-";
      if (peak > 0) snprintf(share, sizeof share, "%.1f%%", 100 * fl / ta / 1e9 / peak);
      printf("| %s | %s | %s | %d x %d x %d | %.0f | %.0f | %.2f | %s | %.1e |\n", L->model,
             L->name, roles[r], a.M, a.N, a.K, fl / ta / 1e9, fl / td / 1e9, td / ta, share,
             diff / big);
    }
    gemm_amx_weights_changed(w, nw * 2, 1);
    gemm_onednn_weights_changed(w, nw * 2, 1);
    free(x), free(w), free(dy), free(dyT), free(c1), free(c2);
  }
  printf("all GEMMs: loom %.0f GFLOP/s, oneDNN %.0f GFLOP/s, loom/oneDNN %.2f\n",
         flops_all / t_amx_all / 1e9, flops_all / t_dnnl_all / 1e9, t_dnnl_all / t_amx_all);
  return 0;
}

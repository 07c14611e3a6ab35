/* loom's AMX bf16 GEMM (src/kernels/gemm_amx.c) of two revisions in one process: "base" (the
 * file at a git revision) against "this" (the working tree), each compiled with its public
 * names prefixed (bench/amx_ab.sh gemm), at the GEMM shapes of a GPT-2 124M 8x1024 and a
 * Qwen2.5-0.5B 4x512 step in the roles where the kernels differ most (forward and data
 * gradient through the weights path, the weight marked changed before each call as an
 * optimizer step does; the weight gradient on plain operands, in the decoder's two forms).
 * The two alternate call by call, so the machine's speed, which moves by 2x within seconds on
 * shared vCPUs, moves both alike; the table gives each one's median and best GFLOP/s over the
 * rounds and the ratio of the medians, and says whether the two results are bitwise equal (a
 * change of blocking or packing must not change one bit: invariant 3 of gemm_amx.c).
 * usage: gemm_amx_ab [rounds] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "amx_ab.h"

typedef void (*gemm_fn)(int, int, int, int, int, const uint16_t *, int, const uint16_t *, int,
                        const float *, float, float *, int);
typedef void (*changed_fn)(const void *, size_t, int);
#define DECLARE(v)                                                                                 \
  void v##_gemm_amx_bf16(int, int, int, int, int, const uint16_t *, int, const uint16_t *, int,    \
                         const float *, float, float *, int);                                      \
  void v##_gemm_amx_bf16_w(int, int, int, int, int, const uint16_t *, int, const uint16_t *, int,  \
                           const float *, float, float *, int);                                    \
  void v##_gemm_amx_weights_changed(const void *, size_t, int);
DECLARE(base)
DECLARE(this)

static const struct {
  gemm_fn plain, weights;
  changed_fn changed;
  const char *name;
} rev[2] = {{base_gemm_amx_bf16, base_gemm_amx_bf16_w, base_gemm_amx_weights_changed, "base"},
            {this_gemm_amx_bf16, this_gemm_amx_bf16_w, this_gemm_amx_weights_changed, "this"}};

/* role: 'w' forward and data gradient, B the weight through the weights path; 'g' the weight
 * gradient as the decoder's linears run it (dW += dY^T X from a transposed copy of dY: A stored
 * as read, ta = 0, B = X k-major, plain entry); 'h' the LM head's (ta = 1, dY read in place) */
static const struct {
  char role;
  int ta, tb, M, N, K;
  const char *name;
} shapes[] = {
    {'w', 0, 1, 8192, 2304, 768, "gpt2 qkv fwd"},
    {'w', 0, 0, 8192, 768, 2304, "gpt2 qkv dgrad"},
    {'g', 0, 0, 2304, 768, 8192, "gpt2 qkv wgrad"},
    {'w', 0, 1, 8192, 3072, 768, "gpt2 fc fwd"},
    {'w', 0, 1, 8192, 768, 3072, "gpt2 fc_proj fwd"},
    {'g', 0, 0, 768, 3072, 8192, "gpt2 fc_proj wgrad"},
    {'h', 1, 0, 50304, 768, 2048, "gpt2 lm_head wgrad (2048 rows)"},
    {'w', 0, 1, 2048, 1152, 896, "qwen qkv fwd"},
    {'w', 0, 0, 2048, 896, 9728, "qwen gate_up dgrad"},
    {'g', 0, 0, 896, 4864, 2048, "qwen down wgrad"},
};

int main(int argc, char **argv) {
  int rounds = ab_rounds(argc, argv, "gemm_amx_ab");
  if (rounds <= 0) return rounds < 0 ? 2 : 0;
  printf("one call each in turns, %d rounds; GFLOP/s median (best)\n", rounds);
  printf("| GEMM | M x N x K | base | this | this/base (medians) | bitwise equal |\n"
         "|---|---|---|---|---|---|\n");
  double med_sum[2] = {0, 0};
  int all_equal = 1;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int ta = shapes[s].ta, tb = shapes[s].tb, M = shapes[s].M, N = shapes[s].N, K = shapes[s].K;
    int lda = ta ? M : K, ldb = tb ? K : N;
    size_t na = (size_t)M * K, nb = (size_t)N * K, nc = (size_t)M * N;
    uint16_t *A = loom_malloc(na * 2), *B = loom_malloc(nb * 2);
    for (size_t i = 0; i < na; i++) A[i] = (uint16_t)(0x3f80 + i * 7919 % 127);   /* 1..2 */
    for (size_t i = 0; i < nb; i++) B[i] = (uint16_t)(0xbf80 + i * 104729 % 113); /* -1..-2 */
    float *C[2];
    double *t[2], med[2], best[2];
    for (int v = 0; v < 2; v++)
      C[v] = loom_malloc(nc * 4), t[v] = loom_malloc(rounds * sizeof(double));
    for (int r = 0; r < rounds; r++)
      for (int v = 0; v < 2; v++) {
        double t0 = loom_now();
        if (shapes[s].role != 'w') rev[v].plain(ta, tb, M, N, K, A, lda, B, ldb, NULL, 0, C[v], N);
        else {
          rev[v].changed(B, 2, 0);
          rev[v].weights(ta, tb, M, N, K, A, lda, B, ldb, NULL, 0, C[v], N);
        }
        t[v][r] = loom_now() - t0;
      }
    double flops = 2.0 * M * N * K;
    for (int v = 0; v < 2; v++) {
      ab_median_best(t[v], rounds, &med[v], &best[v]);
      med_sum[v] += med[v];
    }
    int equal = !memcmp(C[0], C[1], nc * 4);
    all_equal &= equal;
    printf("| %s | %d x %d x %d | %.0f (%.0f) | %.0f (%.0f) | %.2f | %s |\n", shapes[s].name, M, N,
           K, flops / med[0] / 1e9, flops / best[0] / 1e9, flops / med[1] / 1e9,
           flops / best[1] / 1e9, med[0] / med[1], equal ? "yes" : "NO");
    for (int v = 0; v < 2; v++) rev[v].changed(B, nb * 2, 1), free(C[v]), free(t[v]);
    free(A), free(B);
  }
  printf("all shapes: this/base %.3f (sums of the medians)\n", med_sum[0] / med_sum[1]);
  return all_equal ? 0 : 1;
}

/* The routed experts' SwiGLUs over the permuted rows, fast path: every product through the
 * GEMM backend (loom_gemm_f32, the one the decoder's linear layers use), expert after expert
 * with the backend's threads inside each product (oneDNN's primitives share one scratchpad, so
 * products cannot run side by side), and the SwiGLU of all experts' rows in one parallel pass.
 * bf16 mode is the dense MLP's training.dtype=bf16 on a backend without native bf16 GEMMs:
 * operands hold bf16 values (xp and the weights given so, act and the gradients rounded here),
 * products accumulate in fp32. Shapes: expert j owns count[j] consecutive rows; its gate and up
 * (Ie,C) and down (C,Ie) are ws values after expert j-1's. */
#include <stddef.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/kernels_moe.h"

void loom_moe_experts_forward_fast_f32(float *yp, const loom_moe_expert_acts *a,
                                       const float *xp, const float *wg, const float *wu,
                                       const float *wd, size_t ws, const int *count, int n_exp,
                                       int C, int Ie, bool bf16) {
  // yp (rows,C), a->hg, a->hu, a->act (rows,Ie), xp (rows,C)
  size_t r0 = 0;
  for (int j = 0; j < n_exp; r0 += (size_t)count[j], j++) { /* hg = xp wg^T, hu = xp wu^T */
    int n = count[j];
    if (n == 0) continue;
    loom_gemm_f32(0, 1, n, Ie, C, xp + r0 * C, C, wg + j * ws, C, NULL, 0.0f, a->hg + r0 * Ie, Ie);
    loom_gemm_f32(0, 1, n, Ie, C, xp + r0 * C, C, wu + j * ws, C, NULL, 0.0f, a->hu + r0 * Ie, Ie);
  }
  size_t rows = r0;
  loom_swiglu_forward_fast_f32(a->act, a->hg, a->hu, rows * Ie);
  if (bf16) loom_round_bf16_f32(a->act, a->act, rows * Ie);
  r0 = 0;
  for (int j = 0; j < n_exp; r0 += (size_t)count[j], j++) { /* yp = act wd^T */
    int n = count[j];
    if (n == 0) continue;
    loom_gemm_f32(0, 1, n, C, Ie, a->act + r0 * Ie, Ie, wd + j * ws, Ie, NULL, 0.0f, yp + r0 * C, C);
  }
}

size_t loom_moe_experts_work_floats(int max_count, int C, int Ie, bool bf16) {
  return (size_t)max_count * (3 * (size_t)Ie + (bf16 ? (size_t)C : 0));
}

void loom_moe_experts_backward_fast_f32(float *dxp, float *dwg, float *dwu, float *dwd,
                                        const float *dyp, const loom_moe_expert_acts *a,
                                        const float *xp, const float *wg, const float *wu,
                                        const float *wd, size_t ws, const int *count, int n_exp,
                                        int C, int Ie, bool bf16, float *work) {
  // dxp (rows,C) written; dwg, dwu, dwd += ; dyp, xp (rows,C); a->hg, hu, act (rows,Ie)
  size_t r0 = 0;
  for (int j = 0; j < n_exp; r0 += (size_t)count[j], j++) {
    int n = count[j];
    if (n == 0) continue;
    size_t nI = (size_t)n * Ie;
    float *dact = work, *dg = work + nI, *du = work + 2 * nI; // (n,Ie) each
    const float *dy = dyp + r0 * C, *x = xp + r0 * C;         // (n,C)
    if (bf16) {
      float *dyr = work + 3 * nI; // (n,C)
      loom_round_bf16_f32(dyr, dy, (size_t)n * C);
      dy = dyr;
    }
    const float *wgj = wg + j * ws, *wuj = wu + j * ws, *wdj = wd + j * ws;
    /* yp = act wd^T: dact = dy wd, dwd += dy^T act */
    loom_gemm_f32(0, 0, n, Ie, C, dy, C, wdj, Ie, NULL, 0.0f, dact, Ie);
    loom_gemm_f32(1, 0, C, Ie, n, dy, C, a->act + r0 * Ie, Ie, NULL, 1.0f, dwd + j * ws, Ie);
    loom_swiglu_backward_fast_f32(dg, du, dact, a->hg + r0 * Ie, a->hu + r0 * Ie, nI);
    if (bf16) {
      loom_round_bf16_f32(dg, dg, nI);
      loom_round_bf16_f32(du, du, nI);
    }
    /* hg = x wg^T, hu = x wu^T: the weight gradients first (x may be overwritten by dx) */
    loom_gemm_f32(1, 0, Ie, C, n, dg, Ie, x, C, NULL, 1.0f, dwg + j * ws, C);
    loom_gemm_f32(1, 0, Ie, C, n, du, Ie, x, C, NULL, 1.0f, dwu + j * ws, C);
    loom_gemm_f32(0, 0, n, C, Ie, dg, Ie, wgj, C, NULL, 0.0f, dxp + r0 * C, C);
    loom_gemm_f32(0, 0, n, C, Ie, du, Ie, wuj, C, NULL, 1.0f, dxp + r0 * C, C);
  }
}

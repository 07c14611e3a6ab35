/* The MoE layer of one process in float: the fast grouped experts and the GEMM backend, bf16
 * operands optional (training.dtype=bf16 without native bf16 GEMMs). See moe_block.inc. */
#include <math.h>
#include <string.h>

#include "kernels/moe_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/kernels_moe.h"

#define T float
#define S(name) name##_f32
#define MATH(fn) fn##f

static void blk_lin_fwd_f32(float *y, const float *x, const float *w, int M, int K, int N) {
  loom_gemm_f32(0, 1, M, N, K, x, K, w, K, NULL, 0.0f, y, N);
}

static void blk_lin_bwd_f32(float *dx, float beta, float *dw, const float *dy, const float *x,
                            const float *w, int M, int K, int N) {
  if (dx) loom_gemm_f32(0, 0, M, K, N, dy, N, w, K, NULL, beta, dx, K);
  loom_gemm_f32(1, 0, N, K, M, dy, N, x, K, NULL, 1.0f, dw, K);
}

static void blk_swiglu_fwd_f32(float *y, const float *g, const float *u, size_t n) {
  loom_swiglu_forward_fast_f32(y, g, u, n);
}

static void blk_swiglu_bwd_f32(float *dg, float *du, const float *dy, const float *g,
                               const float *u, size_t n) {
  loom_swiglu_backward_fast_f32(dg, du, dy, g, u, n);
}

static const float *blk_round_f32(const loom_moe_block_f32 *b, float *dst, const float *src,
                                  size_t n) {
  if (!b->bf16) return src;
  loom_round_bf16_f32(dst, src, n);
  return dst;
}

static void blk_experts_fwd_f32(loom_moe_block_f32 *b, const loom_moe_params_f32 *p) {
  loom_moe_expert_acts a = {b->hg, b->hu, b->act};
  loom_moe_experts_forward_fast_f32(b->yp, &a, b->xp, p->wg, p->wu, p->wd, p->ws, b->plan.count,
                                    b->s.E, b->s.C, b->s.Ie, b->bf16);
}

static void blk_experts_bwd_f32(loom_moe_block_f32 *b, const loom_moe_grads_f32 *g,
                                const loom_moe_params_f32 *p, const float *dyp, float *dxp) {
  loom_moe_expert_acts a = {b->hg, b->hu, b->act};
  loom_moe_experts_backward_fast_f32(dxp, g->wg, g->wu, g->wd, dyp, &a, b->xp, p->wg, p->wu,
                                     p->wd, p->ws, b->plan.count, b->s.E, b->s.C, b->s.Ie,
                                     b->bf16, b->work);
}

#include "moe_block.inc"

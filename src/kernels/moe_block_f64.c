/* The MoE layer of one process in double, on the reference kernels (what the finite-difference
 * tests check). See moe_block.inc. */
#include <math.h>
#include <string.h>

#include "kernels/moe_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/kernels_moe.h"

#define T double
#define S(name) name##_f64
#define MATH(fn) fn

static void blk_lin_fwd_f64(double *y, const double *x, const double *w, int M, int K, int N) {
  loom_linear_forward_f64(y, x, w, NULL, M, K, N);
}

static void blk_lin_bwd_f64(double *dx, double beta, double *dw, const double *dy,
                            const double *x, const double *w, int M, int K, int N) {
  if (dx && beta == 0) memset(dx, 0, sizeof(double) * (size_t)M * K);
  loom_linear_backward_f64(dx, dw, NULL, dy, x, w, M, K, N);
}

static void blk_swiglu_fwd_f64(double *y, const double *g, const double *u, size_t n) {
  loom_swiglu_forward_f64(y, g, u, n);
}

static void blk_swiglu_bwd_f64(double *dg, double *du, const double *dy, const double *g,
                               const double *u, size_t n) {
  memset(dg, 0, sizeof(double) * n), memset(du, 0, sizeof(double) * n);
  loom_swiglu_backward_f64(dg, du, dy, g, u, n);
}

static const double *blk_round_f64(const loom_moe_block_f64 *b, double *dst, const double *src,
                                   size_t n) {
  (void)b, (void)dst, (void)n;
  return src; /* no bf16 mode in double */
}

static void blk_experts_fwd_f64(loom_moe_block_f64 *b, const loom_moe_params_f64 *p) {
  loom_moe_experts_forward_f64(b->yp, b->hg, b->hu, b->xp, p->wg, p->wu, p->wd, p->ws,
                               b->plan.count, b->s.E, b->s.C, b->s.Ie);
}

static void blk_experts_bwd_f64(loom_moe_block_f64 *b, const loom_moe_grads_f64 *g,
                                const loom_moe_params_f64 *p, const double *dyp, double *dxp) {
  memset(dxp, 0, sizeof(double) * (size_t)b->plan.rows * b->s.C);
  loom_moe_experts_backward_f64(dxp, g->wg, g->wu, g->wd, dyp, b->xp, b->hg, b->hu, p->wg, p->wu,
                                p->wd, p->ws, b->plan.count, b->s.E, b->s.C, b->s.Ie);
}

#include "moe_block.inc"

/* The dispatch plan's storage and the capacity rule, and the two auxiliary losses of the
 * router from statistics pooled over layers and ranks (include/loom/kernels_moe.h). The plan
 * itself is built by loom_moe_plan_build_f32/_f64 (moe_ops.inc). */
#include <math.h>
#include <string.h>

#include "kernels/moe_internal.h"
#include "loom/core.h"
#include "loom/kernels_moe.h"

void loom_moe_plan_init(loom_moe_plan *p, int max_tokens, int k, int E) {
  LOOM_ASSERT(max_tokens >= 0 && k >= 1 && k <= E && k <= MOE_MAX_TOPK);
  memset(p, 0, sizeof *p);
  p->max_tokens = max_tokens, p->k = k, p->E = E;
  size_t nk = (size_t)max_tokens * k;
  p->selected = loom_alloc(sizeof(int) * (size_t)E);
  p->count = loom_alloc(sizeof(int) * (size_t)E);
  p->offset = loom_alloc(sizeof(int) * ((size_t)E + 1));
  p->row_token = loom_alloc(sizeof(int32_t) * (nk ? nk : 1));
  p->row_pair = loom_alloc(sizeof(int32_t) * (nk ? nk : 1));
  p->pair_row = loom_alloc(sizeof(int32_t) * (nk ? nk : 1));
  p->scratch = loom_alloc(sizeof(moe_cand) * (nk ? nk : 1));
}

void loom_moe_plan_free(loom_moe_plan *p) {
  if (!p) return;
  loom_free(p->selected), loom_free(p->count), loom_free(p->offset);
  loom_free(p->row_token), loom_free(p->row_pair), loom_free(p->pair_row);
  loom_free(p->scratch);
  memset(p, 0, sizeof *p);
}

int loom_moe_capacity(double capacity_factor, int N, int k, int E) {
  if (!(capacity_factor > 0)) return 0;
  double c = ceil(capacity_factor * (double)N * (double)k / (double)E);
  return c < 1 ? 1 : (int)c;
}

int moe_cand_by_weight(const void *a, const void *b) {
  const moe_cand *x = a, *y = b;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  return (x->pair > y->pair) - (x->pair < y->pair);
}

int moe_cand_by_pair(const void *a, const void *b) {
  const moe_cand *x = a, *y = b;
  return (x->pair > y->pair) - (x->pair < y->pair);
}

double loom_moe_aux_loss(double *grad, const int64_t *selected, const double *prob_sum, int E,
                         int64_t rows, double coef) {
  /* HF's load_balancing_loss_func: sum_{j,e} mean_rows(onehot(idx)[:, j, e]) * mean_rows(probs[:, e])
   * * E = E * sum_e (selected_e / R) (prob_sum_e / R) */
  if (rows <= 0) {
    if (grad) memset(grad, 0, sizeof(double) * (size_t)E);
    return 0;
  }
  double R = (double)rows, sum = 0;
  for (int e = 0; e < E; e++) {
    sum += ((double)selected[e] / R) * (prob_sum[e] / R);
    if (grad) grad[e] = coef * E * (double)selected[e] / (R * R);
  }
  return coef * E * sum;
}

double loom_moe_z_loss(double *grad, double lse_sq_sum, int64_t rows, double coef) {
  /* Megatron's z_loss_func: mean(square(logsumexp(logits, -1))) * z_loss_coeff */
  if (rows <= 0) {
    if (grad) *grad = 0;
    return 0;
  }
  if (grad) *grad = coef / (double)rows;
  return coef * lse_sq_sum / (double)rows;
}

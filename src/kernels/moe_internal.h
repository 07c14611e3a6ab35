/* Private to the Mixture-of-Experts kernels (moe_*.c): work thresholds, the largest top-k,
 * and the candidates a plan sorts when an expert is over capacity. */
#ifndef LOOM_MOE_INTERNAL_H
#define LOOM_MOE_INTERNAL_H
#include <stdint.h>

/* Loops with less work than this run on one thread. */
#define MOE_PAR_MIN 16384
/* Column block of the column sums over rows (router statistics). */
#define MOE_CBLOCK 64
/* Largest k the router's top-k keeps on the stack (Qwen3 and DeepSeek-V3 use 8). */
#define MOE_MAX_TOPK 64

/* One (token, slot) pair that chose an expert, with its routing weight. */
typedef struct {
  double w;
  int32_t pair; /* token * k + slot */
} moe_cand;
/* qsort orders: weight descending then pair ascending (the earlier token wins a tie); pair
 * ascending (token order). */
int moe_cand_by_weight(const void *a, const void *b);
int moe_cand_by_pair(const void *a, const void *b);
#endif

/* Private to the planner (src/sim/plan_*.c): the cached costs of one layer shape and the
 * closed-form estimate of a strategy. */
#ifndef LOOM_SIM_PLAN_INTERNAL_H
#define LOOM_SIM_PLAN_INTERNAL_H
#include <string.h>

#include "sim/sim_internal.h"

typedef struct {
  loom_sim_cost layer, embed, head;
  loom_sim_cost dense; /* an MoE model's dense layers (= layer for a dense model) */
} plan_costs;

typedef struct {
  double time;        /* estimated step time */
  double mem;         /* estimated peak memory of the fullest rank */
  double bubble_time, comm_time;
} plan_eval;

int plan_inflight(const loom_sim_strategy *st);
double plan_estimate(const loom_sim_ctx *c, const plan_costs *k, plan_eval *out);
#endif

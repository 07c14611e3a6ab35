/* Closed forms the tests check the models against and the planner prunes with: model FLOPs
 * per token, Megatron's FLOPs per iteration, Korthikanti et al.'s activation formulas, ZeRO
 * bytes per parameter, pipeline bubble fractions. */
#include <string.h>

#include "loom/decoder.h"
#include "loom/model.h"
#include "loom/sim.h"

double loom_sim_flops_per_token(const loom_model_spec *spec, int T) {
  double f = loom_decoder_flops_per_token(spec, T);
  const loom_moe_spec *m = &spec->moe;
  int moe = loom_model_moe_layers(spec);
  if (moe == 0) return f;
  /* Megatron-LM's num_floating_point_operations (megatron/training/training.py,
   * transformer_flops): an MoE layer's MLP counts the experts a token is routed to and the
   * shared expert, 6 x hidden x 3 x (moe_ffn_hidden_size x topk + shared_expert_size), in
   * place of the dense MLP's 6 x hidden x 3 x ffn_hidden_size; the router is not counted */
  double C = spec->hidden, dense = 3.0 * C * spec->intermediate;
  double routed = 3.0 * C * ((double)m->intermediate * m->top_k + m->shared_intermediate);
  return f + 6.0 * moe * (routed - dense);
}

double loom_sim_megatron_flops(double B, double s, double L, double h, double V) {
  return 72.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L));
}

double loom_sim_megatron_act_bytes(double s, double b, double h, double a, double t, bool sp,
                                   loom_recompute rc) {
  double sbh = s * b * h, att = 5 * a * s / h;
  if (rc == LOOM_RECOMPUTE_FULL) return sp ? 2 * sbh / t : 2 * sbh;
  if (rc == LOOM_RECOMPUTE_SELECTIVE) att = 0;
  if (sp) return sbh / t * (34 + att);
  return sbh * (10 + 24 / t + att / t);
}

double loom_sim_zero_bytes_per_param(int stage, double Nd) {
  switch (stage) {
  case 0: return 16;
  case 1: return 4 + 12 / Nd;
  case 2: return 2 + 14 / Nd;
  default: return 16 / Nd;
  }
}

double loom_sim_bubble_closed(const char *schedule, int p, int m, int v) {
  if (p <= 1 || !strcmp(schedule, "none")) return 0;
  if (!strcmp(schedule, "interleaved") && v > 1) {
    if (m >= p) return (double)(p - 1) / ((double)v * m);
    return ((double)(p - 1) + (double)(p - m) * (v - 1)) / ((double)v * m);
  }
  return (double)(p - 1) / m;
}

/* Hugging Face names of a Mixture-of-Experts layer's loom tensors (one loom tensor per HF
 * tensor, no transposes: HF's nn.Linear weights are (out, in) as loom's):
 *   layers.{l}.moe.router.weight (E, C)         -> {P}.gate.weight
 *   layers.{l}.moe.router.bias (E), if any      -> {P}.gate.e_score_correction_bias (DeepSeek-V3's
 *                                                  name for the selection-only balancing bias)
 *   layers.{l}.moe.experts.{e}.gate.weight      -> {P}.experts.{e}.gate_proj.weight (Mixtral: w1)
 *   layers.{l}.moe.experts.{e}.up.weight        -> {P}.experts.{e}.up_proj.weight   (Mixtral: w3)
 *   layers.{l}.moe.experts.{e}.down.weight      -> {P}.experts.{e}.down_proj.weight (Mixtral: w2)
 *   layers.{l}.moe.shared.{gate,up,down}.weight -> {P}.shared_expert.{gate,up,down}_proj.weight
 *   layers.{l}.moe.shared_gate.weight (1, C)    -> {P}.shared_expert_gate.weight
 * where {P} is model.layers.{l}.mlp (Qwen2-MoE, Qwen3-MoE) or model.layers.{l}.block_sparse_moe
 * (Mixtral). */
#include <stdio.h>

#include "ckpt/hf_plan.h"
#include "loom/core.h"

static void one(hf_planner *pl, const char *hf, const char *loom) {
  hf_plan_add(pl, hf, 1, (const char *const[]){loom}, false, false);
}

void hf_plan_moe_layer(hf_planner *pl, const char *prefix, int l, bool mixtral) {
  const loom_moe_spec *m = &pl->spec->moe;
  char p[128], hf[192], lm[96];
  snprintf(p, sizeof p, "%slayers.%d.%s", prefix, l, mixtral ? "block_sparse_moe" : "mlp");
  snprintf(hf, sizeof hf, "%s.gate.weight", p);
  snprintf(lm, sizeof lm, "layers.%d.moe.router.weight", l);
  one(pl, hf, lm);
  snprintf(lm, sizeof lm, "layers.%d.moe.router.bias", l);
  if (loom_param_find(pl->lay, lm)) {
    snprintf(hf, sizeof hf, "%s.gate.e_score_correction_bias", p);
    one(pl, hf, lm);
  }
  static const char *const part[3] = {"gate", "up", "down"};
  static const char *const qwen[3] = {"gate_proj", "up_proj", "down_proj"};
  static const char *const mix[3] = {"w1", "w3", "w2"};
  for (int k = 0; k < 3; k++) /* loom's order: every expert's gate, then up, then down */
    for (int e = 0; e < m->experts; e++) {
      snprintf(hf, sizeof hf, "%s.experts.%d.%s.weight", p, e, mixtral ? mix[k] : qwen[k]);
      snprintf(lm, sizeof lm, "layers.%d.moe.experts.%d.%s.weight", l, e, part[k]);
      one(pl, hf, lm);
    }
  if (m->shared_intermediate <= 0) return;
  for (int k = 0; k < 3; k++) {
    snprintf(hf, sizeof hf, "%s.shared_expert.%s.weight", p, qwen[k]);
    snprintf(lm, sizeof lm, "layers.%d.moe.shared.%s.weight", l, part[k]);
    one(pl, hf, lm);
  }
  snprintf(hf, sizeof hf, "%s.shared_expert_gate.weight", p);
  snprintf(lm, sizeof lm, "layers.%d.moe.shared_gate.weight", l);
  one(pl, hf, lm);
}

/* Which Hugging Face transformers class a loom text model is exported as: GPT-2, Llama, Qwen2,
 * Qwen3 (q/k norms), Qwen3-MoE (q/k norms + routed experts), Qwen2-MoE (routed experts + a
 * gated shared expert) or Mixtral (routed experts in every layer, renormalised top-k), chosen
 * from the spec's features; a model no class computes is refused naming the loom keys, never
 * written under a class that would compute something else. */
#include <stdio.h>

#include "ckpt/hf_family.h"
#include "loom/core.h"

static const struct {
  const char *type, *cls;
} names[] = {
    [HF_GPT2] = {"gpt2", "GPT2LMHeadModel"},
    [HF_LLAMA] = {"llama", "LlamaForCausalLM"},
    [HF_QWEN2] = {"qwen2", "Qwen2ForCausalLM"},
    [HF_QWEN3] = {"qwen3", "Qwen3ForCausalLM"},
    [HF_QWEN3_MOE] = {"qwen3_moe", "Qwen3MoeForCausalLM"},
    [HF_QWEN2_MOE] = {"qwen2_moe", "Qwen2MoeForCausalLM"},
    [HF_MIXTRAL] = {"mixtral", "MixtralForCausalLM"},
};

const char *hf_family_type(hf_family f) { return names[f].type; }
const char *hf_family_class(hf_family f) { return names[f].cls; }
bool hf_family_is_moe(hf_family f) {
  return f == HF_QWEN3_MOE || f == HF_QWEN2_MOE || f == HF_MIXTRAL;
}

/* A Mixture-of-Experts model: Qwen3-MoE with q/k norms, Qwen2-MoE with a shared expert,
 * Mixtral otherwise. */
static int moe_family(const loom_model_spec *s, hf_family *out) {
  const loom_moe_spec *m = &s->moe;
  if (s->qk_norm) {
    if (m->shared_intermediate > 0)
      return loom_err("this Mixture-of-Experts model has q/k norms (model.qk_norm) and a shared "
                      "expert (model.moe.shared_intermediate = %d): no Hugging Face class has "
                      "both (Qwen3MoeForCausalLM has no shared expert, Qwen2MoeForCausalLM no "
                      "q/k norms), so it cannot be exported",
                      m->shared_intermediate);
    if (s->qkv_bias)
      return loom_err("Qwen3MoeForCausalLM (the class of MoE models with q/k norms) has "
                      "attention_bias, a bias on q, k, v and o_proj alike; this model has "
                      "biases on q, k, v only (model.qkv_bias=true), which it cannot express");
    *out = HF_QWEN3_MOE;
    return 0;
  }
  if (m->shared_intermediate > 0) {
    if (s->head_dim * s->heads != s->hidden)
      return loom_err("Qwen2MoeForCausalLM (the class of MoE models with a shared expert) needs "
                      "heads * head_dim == hidden, but this model has model.head_dim = %d with "
                      "%d heads and hidden %d",
                      s->head_dim, s->heads, s->hidden);
    *out = HF_QWEN2_MOE;
    return 0;
  }
  /* routed experts only, no q/k norms: Mixtral's block, which has no dense layers, always
   * renormalises the top k, and has no attention biases */
  const char *why = NULL;
  char buf[160];
  if (loom_model_moe_layers(s) != s->layers) {
    snprintf(buf, sizeof buf,
             "%d of its %d layers keep a dense MLP (model.moe.sparse_step = %d, "
             "model.moe.mlp_only_layers)",
             s->layers - loom_model_moe_layers(s), s->layers, s->moe.sparse_step);
    why = buf;
  } else if (!m->norm_topk) {
    why = "it does not renormalise the top-k weights (model.moe.norm_topk=false)";
  } else if (s->qkv_bias) {
    why = "it has q/k/v biases (model.qkv_bias=true)";
  }
  if (why)
    return loom_err("this Mixture-of-Experts model (no shared expert, no q/k norms) would be "
                    "MixtralForCausalLM, but %s, which Mixtral does not compute; Qwen3-MoE "
                    "needs q/k norms (model.qk_norm=true), Qwen2-MoE a shared expert "
                    "(model.moe.shared_intermediate)",
                    why);
  *out = HF_MIXTRAL;
  return 0;
}

int hf_family_of(const loom_model_spec *s, hf_family *out) {
  if (s->arch == LOOM_ARCH_GPT2) {
    *out = HF_GPT2;
    return 0;
  }
  if (s->moe.experts > 0) return moe_family(s, out);
  if (s->qk_norm) {
    if (s->qkv_bias)
      return loom_err("Qwen3ForCausalLM (the class of models with q/k norms) has "
                      "attention_bias, a bias on q, k, v and o_proj alike; this model has "
                      "biases on q, k, v only (model.qkv_bias=true), which it cannot express");
    *out = HF_QWEN3;
    return 0;
  }
  *out = s->qkv_bias ? HF_QWEN2 : HF_LLAMA;
  return 0;
}

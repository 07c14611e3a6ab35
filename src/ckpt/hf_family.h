/* Private to the Hugging Face code of src/ckpt: which transformers class a loom text model is
 * written as (its model_type and architecture), or why none can express it. */
#ifndef LOOM_HF_FAMILY_H
#define LOOM_HF_FAMILY_H
#include <stdbool.h>

#include "loom/model.h"

typedef enum {
  HF_GPT2,      /* GPT2LMHeadModel */
  HF_LLAMA,     /* LlamaForCausalLM: no biases */
  HF_QWEN2,     /* Qwen2ForCausalLM: q/k/v biases */
  HF_QWEN3,     /* Qwen3ForCausalLM: q_norm/k_norm, free head_dim */
  HF_QWEN3_MOE, /* Qwen3MoeForCausalLM: q_norm/k_norm, routed experts, dense layers allowed */
  HF_QWEN2_MOE, /* Qwen2MoeForCausalLM: routed experts + a gated shared expert */
  HF_MIXTRAL,   /* MixtralForCausalLM: every layer routed experts, renormalised top-k */
} hf_family;

/* The family a text model is written as; an error naming the loom keys no class expresses
 * (e.g. Mixture-of-Experts with a shared expert and q/k norms). */
int hf_family_of(const loom_model_spec *s, hf_family *out);
/* "qwen3_moe", "Qwen3MoeForCausalLM". */
const char *hf_family_type(hf_family f);
const char *hf_family_class(hf_family f);
/* Mixtral names its MoE block block_sparse_moe.* and its experts w1/w3/w2; the Qwen families
 * mlp.* and gate_proj/up_proj/down_proj. */
bool hf_family_is_moe(hf_family f);
#endif

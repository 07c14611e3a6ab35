/* Private to the Hugging Face name mapping (hf_names.c, hf_names_moe.c, hf_names_vision.c):
 * the planner that collects HF tensors, each made of loom tensors stacked by rows. */
#ifndef LOOM_HF_PLAN_H
#define LOOM_HF_PLAN_H
#include "loom/hf.h"

typedef struct {
  const loom_model_spec *spec;
  const loom_param_layout *lay;
  loom_hf_tensor *t;
  int n, cap;
} hf_planner;

/* Add HF tensor `hf` made of the loom tensors loom[0..nparts) stacked by rows (transposed when
 * `transpose`; vocab: only the first vocab_size rows). The loom tensors must exist. */
loom_hf_tensor *hf_plan_add(hf_planner *pl, const char *hf, int nparts, const char *const *loom,
                            bool transpose, bool vocab);
/* One loom tensor -> one HF tensor, names formatted with i (ignored by formats without %d). */
loom_hf_tensor *hf_plan_one(hf_planner *pl, const char *hf_fmt, const char *loom_fmt, int i);
/* Give t the HF shape dims[0..ndim) holding the same elements in the same order. */
void hf_plan_reshape(loom_hf_tensor *t, int ndim, const int64_t *dims);
/* The Llama-family text model under prefix ("model." or "language_model.model."): Llama,
 * Qwen2, Qwen3 (q_norm/k_norm) and the MoE families (mixtral: Mixtral's MoE names, else
 * Qwen's); the untied head as head_name. */
void hf_plan_llama_text(hf_planner *pl, const char *prefix, const char *head_name, bool mixtral);
/* Layer l's Mixture-of-Experts tensors (hf_names_moe.c): router (and its selection bias, when
 * the layout has one), routed experts, shared expert. */
void hf_plan_moe_layer(hf_planner *pl, const char *prefix, int l, bool mixtral);
/* The vision encoders (hf_names_vision.c). Errors name what HF's class cannot express. */
int hf_plan_qwen_vision(hf_planner *pl);
int hf_plan_llava_vision(hf_planner *pl);
#endif

/* loom decoder models: the spec (dims of a GPT-2 or Llama/Qwen2-family decoder), presets,
 * the parameter layout inside one flat buffer, and the single-process forward/backward.
 *
 * Parameter names (loom's own layout, also used in model.safetensors):
 *   embed.weight (Vp,C)                  token embedding; tied LM head when tied_embeddings
 *   pos_embed.weight (max_seq,C)         gpt2 only
 *   layers.{i}.attn_norm.weight (C)      [.bias (C) for gpt2 LayerNorm]
 *   layers.{i}.attn.q.weight (Hq*D,C)    [.bias (Hq*D) when qkv_bias]
 *   layers.{i}.attn.k.weight (Hkv*D,C)   [.bias]
 *   layers.{i}.attn.v.weight (Hkv*D,C)   [.bias]
 *   layers.{i}.attn.o.weight (C,Hq*D)    [.bias (C) for gpt2]
 *   layers.{i}.mlp_norm.weight (C)       [.bias for gpt2]
 *   gpt2:  layers.{i}.mlp.up.weight (I,C), .bias (I); layers.{i}.mlp.down.weight (C,I), .bias
 *   llama: layers.{i}.mlp.gate.weight (I,C), mlp.up.weight (I,C), mlp.down.weight (C,I)
 *   qwen3: layers.{i}.attn.q_norm.weight, attn.k_norm.weight (D) per-head RMSNorm weights
 *   MoE layers (loom_model_layer_is_moe) instead of mlp.*: layers.{i}.moe.router.weight (E,C),
 *          [moe.router.bias (E) with bias_update_rate > 0], moe.experts.{e}.gate/up.weight
 *          (Ie,C), .down.weight (C,Ie), [moe.shared.gate/up (Is,C), .down (C,Is),
 *          moe.shared_gate.weight (1,C)]
 *   final_norm.weight (C)                [.bias for gpt2]
 *   lm_head.weight (Vp,C)                only when not tied
 * Rows V..Vp-1 of embed/lm_head are vocabulary padding: initialised to zero, excluded from
 * the softmax, so they stay zero. */
#ifndef LOOM_MODEL_H
#define LOOM_MODEL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/config.h"

typedef enum { LOOM_ARCH_GPT2 = 0, LOOM_ARCH_LLAMA = 1 } loom_arch;

/* Vision encoder of a vision-language model (none for text-only models).
 *  qwen:  Qwen2.5-VL ViT — patch embedding of 3 x temporal x patch x patch values (no bias),
 *         2D rotary positions, RMSNorm, SwiGLU MLP with biases, window attention (windows of
 *         `window` pixels) except in `full_layers`, and the patch merger (RMSNorm, 2x2
 *         neighbours concatenated, Linear-GELU-Linear to the text hidden size).
 *  llava: ViT with learned positions for a fixed image size, LayerNorm, GELU MLP, full
 *         attention, a final LayerNorm, and a Linear-GELU-Linear projector; one token per patch.
 * Parameters are named vision.* and live in the same flat buffer as the text model's. */
typedef enum { LOOM_VISION_NONE = 0, LOOM_VISION_QWEN = 1, LOOM_VISION_LLAVA = 2 } loom_vision_arch;

typedef struct {
  loom_vision_arch arch;
  int hidden;          /* Cv */
  int depth;
  int heads;
  int intermediate;
  int patch;           /* 14 */
  int temporal;        /* frames per patch: 2 (qwen, still images repeat the frame), 1 (llava) */
  int merge;           /* patches merged per side: 2 (qwen), 1 (llava) */
  int window;          /* window attention size in pixels (qwen) */
  int image_size;      /* llava: fixed input size in pixels */
  int n_full;
  int full_layers[16]; /* qwen: blocks with full attention */
  double rope_theta;
  double norm_eps;
  int mrope_section[3]; /* text multimodal rotary sections (t, h, w) in frequency pairs; all 0
                           = plain 1D rotary */
} loom_vision_spec;

/* Mixture-of-Experts MLP layers, as Hugging Face's Qwen2-MoE / Qwen3-MoE / Mixtral define them
 * (docs/TRAINING.md, "Mixture-of-Experts"): a router `gate` (E, C) without bias, softmax over
 * all experts in fp32, the top k, renormalised to sum 1 when norm_topk, each chosen expert's bias-free SwiGLU of inner
 * size `intermediate`, weighted and summed; with shared_intermediate > 0 a shared SwiGLU expert
 * gated by sigmoid(shared_gate(x)) (shared_gate: (1, C)) is added. Layer l is an MoE layer
 * when experts > 0, l is not dense[l], and (l+1) % sparse_step == 0; the others keep the dense
 * MLP of the model's `intermediate`. */
#define LOOM_MOE_MAX_EXPERTS 1024
typedef struct {
  int experts;             /* E routed experts (0: a dense model) */
  int top_k;               /* k <= E */
  int intermediate;        /* Ie: each routed expert's SwiGLU inner size */
  int shared_intermediate; /* Is: the shared expert's inner size, 0 = none */
  bool norm_topk;          /* renormalise the k weights */
  int sparse_step;         /* >= 1 */
  uint64_t dense_mask[4];  /* bit l: layer l keeps the dense MLP (mlp_only_layers, l < 256) */
  double aux_loss_coef;    /* load-balancing loss, all MoE layers pooled: E * sum_e f_e P_e */
  double z_loss_coef;      /* router z-loss: mean over tokens of logsumexp(logits)^2 */
  double capacity_factor;  /* 0: dropless */
  bool drop_by_position;   /* over capacity: drop the latest tokens (else the lowest probs) */
  double bias_update_rate; /* auxiliary-loss-free balancing step, 0 = off */
} loom_moe_spec;

typedef struct {
  loom_arch arch;
  int vocab_size;     /* V: real tokens */
  int padded_vocab;   /* Vp >= V, a multiple of vocab_pad_multiple */
  int hidden;         /* C */
  int layers;         /* L */
  int heads;          /* Hq */
  int kv_heads;       /* Hkv, divides Hq */
  int head_dim;       /* D */
  int intermediate;   /* I */
  int max_seq;        /* positions available */
  double norm_eps;
  double rope_theta;
  bool qkv_bias;
  bool tied_embeddings;
  double init_std;
  loom_vision_spec vision;
  bool qk_norm;       /* per-head RMSNorm of q and k (weights (D)) before RoPE: Qwen3 */
  loom_moe_spec moe;  /* experts == 0: every layer has the dense MLP */
} loom_model_spec;

/* ---- Mixture-of-Experts (src/model/spec_moe.c) ---- */
/* Layer l has an MoE MLP (routed experts, and the shared expert if any). */
bool loom_model_layer_is_moe(const loom_model_spec *s, int layer);
/* MoE layers of the model. */
int loom_model_moe_layers(const loom_model_spec *s);
/* Parameters a token uses (the k routed experts of each MoE layer, not all E), the figure MoE
 * FLOP counts are based on; equals loom_model_count_params for a dense model. */
size_t loom_model_count_active_params(const loom_model_spec *s);

/* Fill spec from a preset name ("gpt2-124m", "qwen2.5-0.5b", "tiny-gpt2", "tiny-llama", ...).
 * Returns -1 with a message listing the presets when the name is unknown. */
int loom_model_preset(loom_model_spec *spec, const char *name);
/* Values per patch fed to the vision encoder: 3 * temporal * patch * patch (1176 for Qwen). */
int loom_vision_patch_values(const loom_vision_spec *v);
/* Name of preset i (0, 1, ...), NULL past the last one. */
const char *loom_model_preset_name(int i);
/* Print the preset names and dims, one per line. */
void loom_model_list_presets(void);
/* Resolve config.model (preset + explicit dims) into a spec and check it: heads dividing
 * hidden, kv_heads dividing heads, even head_dim for rope, positive sizes. Errors name the
 * config key and both numbers. */
int loom_model_spec_from_config(loom_model_spec *spec, const loom_config_model *mc);
int loom_model_spec_check(const loom_model_spec *spec);

typedef struct {
  char name[64];
  int ndim;
  int shape[2];    /* local shape (this rank's slice) */
  int gshape[2];   /* global shape of the whole tensor */
  int split_dim;   /* dimension split across tensor-parallel ranks, -1 when replicated */
  int split_start; /* first index of this rank's slice along split_dim */
  size_t offset;   /* in floats, into the flat buffers */
  size_t numel;
  bool decay;      /* weight decay applies (matrices); false for norms and biases */
  bool tp_replicated; /* same values on every tp rank (norms, row-parallel biases, positions) */
  bool frozen;        /* not trained (training.freeze_*, or the MoE balancing bias the decoder
                         sets itself): no update, not in the gradient norm */
  bool seq_partial;   /* gradient partial per tp rank under Megatron sequence parallelism (the
                         text model's tp-replicated tensors; not the vision encoder's) */
  bool expert;        /* a routed expert held by this expert-parallel rank only (shard ep > 1):
                         in the expert region, reduced over the expert-data-parallel group */
} loom_param;

/* What one rank holds of the model: tensor-parallel slice, sequence parallelism, and the
 * pipeline chunks (ranges of global layer indices). A NULL shard means the whole model. */
#define LOOM_MAX_CHUNKS 16
enum { LOOM_MODULE_ALL = 0, LOOM_MODULE_TEXT, LOOM_MODULE_VISION };
typedef struct {
  int module;                  /* LOOM_MODULE_ALL: text decoder and (replicated) vision encoder;
                                  _TEXT: the decoder only; _VISION: the vision encoder only,
                                  split over its own tensor-parallel ranks (tp, tp_rank) */
  int tp, tp_rank;
  bool seq_parallel;           /* Megatron sequence parallelism over the tp ranks */
  int sp, sp_rank;             /* Ulysses sequence parallelism */
  int cp, cp_rank;             /* context parallelism (ring attention); 0 is read as 1 */
  int n_chunks;
  int chunk_first[LOOM_MAX_CHUNKS], chunk_last[LOOM_MAX_CHUNKS]; /* layers [first, last) */
  bool chunk_embed[LOOM_MAX_CHUNKS], chunk_head[LOOM_MAX_CHUNKS];
  int ep, ep_rank;             /* expert parallelism: MoE layers run the routed experts
                                  [ep_rank*E/ep, (ep_rank+1)*E/ep) for the ep ranks' tokens
                                  and hold only those experts' weights; 0 is read as 1 */
  bool experts_over_tp;        /* ep folded on the tp ranks (parallel.etp = 1, ep = tp): tp
                                  rank r holds experts [r*E/tp, (r+1)*E/tp) whole (not split
                                  over tp, not replicated) and runs them for the tp group's
                                  tokens, which every tp rank has */
} loom_shard;

/* The whole model on one rank. */
void loom_shard_full(loom_shard *sh, const loom_model_spec *spec);
/* Vocabulary rows per tensor-parallel rank: ceil(padded_vocab / tp). */
int loom_shard_vocab_local(const loom_shard *sh, const loom_model_spec *spec);

/* Parameter layout over one flat buffer (tensors carved out of it, in order). */
typedef struct {
  int count;
  loom_param *params;
  size_t total;    /* floats */
  size_t expert_begin; /* start of the expert region (tensors flagged expert); total without */
} loom_param_layout;

int loom_param_layout_build(loom_param_layout *lay, const loom_model_spec *spec);
/* Layout of what `shard` holds (global names, local shapes, slice of the global tensor). */
int loom_param_layout_build_shard(loom_param_layout *lay, const loom_model_spec *spec,
                                  const loom_shard *shard);
void loom_param_layout_free(loom_param_layout *lay);
const loom_param *loom_param_find(const loom_param_layout *lay, const char *name);
/* Parameter count excluding vocabulary padding rows (the number papers quote). */
size_t loom_model_count_params(const loom_model_spec *spec, bool include_padding);

#endif

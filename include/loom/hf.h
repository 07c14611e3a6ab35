/* Hugging Face checkpoints: export a loom checkpoint directory to HF safetensors naming
 * (GPT2LMHeadModel without the "transformer." prefix, or LlamaForCausalLM/Qwen2ForCausalLM)
 * plus config.json, import such a directory back into a loom weights-only checkpoint, and
 * load only the weights of a checkpoint into a decoder (for fine-tuning from them).
 *
 * Name mapping (loom name -> HF name; see docs/FORMATS-checkpoint.md):
 *   gpt2:  embed -> wte (V rows: vocabulary padding dropped), pos_embed -> wpe,
 *          layers.i.attn_norm -> h.i.ln_1, attn.{q,k,v} -> h.i.attn.c_attn (Conv1D: weight
 *          (C, 3C) = transpose of q,k,v concatenated along out; bias (3C)), attn.o ->
 *          h.i.attn.c_proj (transposed), mlp_norm -> h.i.ln_2, mlp.up -> h.i.mlp.c_fc and
 *          mlp.down -> h.i.mlp.c_proj (transposed), final_norm -> ln_f, lm_head -> lm_head.
 *   llama: embed -> model.embed_tokens, layers.i.attn_norm -> model.layers.i.input_layernorm,
 *          attn.{q,k,v,o} -> model.layers.i.self_attn.{q,k,v,o}_proj, mlp_norm ->
 *          post_attention_layernorm, mlp.{gate,up,down} -> mlp.{gate,up,down}_proj,
 *          final_norm -> model.norm, lm_head -> lm_head (V rows). No transposes.
 *   qwen3 / qwen3_moe / qwen2_moe / mixtral (src/ckpt/hf_family.c picks the class from the
 *          spec): the llama names plus attn.{q,k}_norm -> self_attn.{q,k}_norm; an MoE layer's
 *          moe.router -> mlp.gate, moe.router.bias (balancing) ->
 *          mlp.gate.e_score_correction_bias, moe.experts.e.{gate,up,down} ->
 *          mlp.experts.e.{gate,up,down}_proj, moe.shared.{gate,up,down} ->
 *          mlp.shared_expert.*_proj, moe.shared_gate -> mlp.shared_expert_gate (Mixtral:
 *          block_sparse_moe.gate, block_sparse_moe.experts.e.{w1,w3,w2}). Import also reads
 *          transformers v5's fused mlp.experts.gate_up_proj [E, 2I, C] / down_proj [E, C, I].
 *   Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration): the llama names for the text model plus
 *          vision.patch_embed -> visual.patch_embed.proj (Conv3d (Cv, 3, T, p, p)),
 *          vision.blocks.i.attn_norm/mlp_norm -> visual.blocks.i.norm1/norm2, attn.{q,k,v}
 *          -> attn.qkv (rows stacked q, k, v), attn.o -> attn.proj, mlp.{gate,up,down} ->
 *          mlp.{gate,up,down}_proj, merger.norm -> visual.merger.ln_q, merger.fc1/fc2 ->
 *          visual.merger.mlp.0/mlp.2.
 *   LLaVA-style (LoomLlavaForConditionalGeneration, not HF's LlavaForConditionalGeneration:
 *          no CLS token, no pre-layernorm, a patch-embedding bias and a layernorm on every
 *          patch feature): language_model.model.* / language_model.lm_head for the text
 *          model, vision_tower.vision_model.* (CLIP names) for the encoder,
 *          multi_modal_projector.linear_1/linear_2 for the projector. */
#ifndef LOOM_HF_H
#define LOOM_HF_H
#include <stdbool.h>
#include <stdint.h>

#include "loom/config.h"
#include "loom/decoder.h"
#include "loom/model.h"
#include "loom/safetensors.h"

/* ---- name mapping (src/ckpt/hf_names.c, hf_names_vision.c) -------------------------------
 * One HF tensor = the loom tensors parts[0..nparts) stacked along dim 0 (each contributing
 * rows[k] leading rows: fewer than its own rows only for vocabulary padding), transposed when
 * `transpose` (GPT-2 Conv1D stores (in, out)). shape is the HF shape on disk: the stacked
 * matrix (or its transpose), or for convolution weights a reshape of it with the same
 * row-major order (Qwen2.5-VL patch_embed.proj: (Cv, 3*T*p*p) -> (Cv, 3, T, p, p)). */
#define LOOM_HF_MAX_DIMS 5
typedef struct {
  char name[96];             /* HF name */
  int ndim;                  /* 1, 2, 4 or 5 */
  int64_t shape[LOOM_HF_MAX_DIMS]; /* HF shape */
  int nparts;                /* 1..3 */
  const loom_param *parts[3];
  int rows[3];
  bool transpose;
} loom_hf_tensor;

/* The HF tensors of a model, in loom's parameter order; *out is malloc'd. Errors for models
 * that HF naming cannot express (gpt2 with kv_heads != heads, a Qwen2.5-VL whose vision
 * settings Qwen2_5_VLForConditionalGeneration fixes otherwise, ...), naming what differs.
 * Checks the plan with loom_hf_plan_check. */
int loom_hf_plan(const loom_model_spec *spec, const loom_param_layout *lay,
                 loom_hf_tensor **out, int *count);
/* Every parameter of lay must be part of exactly one planned HF tensor, and the HF tensors
 * must hold every value except vocabulary padding rows; otherwise an error naming the
 * parameters that would be lost (or written twice). */
int loom_hf_plan_check(const loom_model_spec *spec, const loom_param_layout *lay,
                       const loom_hf_tensor *t, int n);
/* Elements of an HF tensor (product of its shape). */
size_t loom_hf_numel(const loom_hf_tensor *t);
/* params (flat loom buffer) -> dst (HF layout, numel floats). */
void loom_hf_gather(const loom_hf_tensor *t, const float *params, float *dst);
/* src (HF layout) -> params (rows beyond t->rows[k] are left untouched). */
void loom_hf_scatter(const loom_hf_tensor *t, const float *src, float *params);
/* HF names that may appear in a checkpoint but are not parameters (GPT-2 attention mask
 * buffers h.i.attn.bias / h.i.attn.masked_bias, rotary inv_freq buffers). */
bool loom_hf_is_ignorable(const char *hf_name);

/* ---- config.json (src/ckpt/hf_config.c) -------------------------------------------------- */
/* config.json text (malloc'd) with the HF architecture fields of spec; torch_dtype from dt.
 * NULL with an error when no Hugging Face class computes the text model (loom_hf_plan says the
 * same when exporting). */
char *loom_hf_config_json(const loom_model_spec *spec, loom_dtype dt);
/* Special tokens of a vision-language model's tokenizer (-1: unknown, left out of
 * config.json): <|image_pad|>, <|vision_start|>, <|vision_end|>. */
typedef struct {
  int32_t image, vision_start, vision_end;
} loom_hf_token_ids;
/* loom_hf_config_json with a VLM's special token ids (NULL: none known). */
char *loom_hf_config_json_ids(const loom_model_spec *spec, loom_dtype dt,
                              const loom_hf_token_ids *ids);
/* Parse an HF config.json into cfg (defaults elsewhere; model.* from the file, preset "" for
 * text models; keys of features loom lacks, e.g. DeepSeek's kv_lora_rank, are refused; for qwen2_5_vl / loom_llava the preset whose vision encoder matches
 * vision_config, with the text dimensions set explicitly). want_arch: the family detected
 * from the tensor names (checked against model_type). Errors name the file, the key and what
 * to do. */
int loom_hf_config_load(loom_config *cfg, const char *path, loom_arch want_arch);
/* "5GB" (10^9), "500MiB" (2^20), "20KB", "123" (bytes) -> bytes. */
int loom_hf_parse_size(const char *text, int64_t *bytes);

/* ---- export / import (src/ckpt/hf_export.c, hf_import.c) --------------------------------- */
typedef struct {
  loom_dtype dtype;          /* LOOM_DT_F32 or LOOM_DT_BF16 */
  int64_t max_shard_bytes;   /* shard when the tensors exceed this (HF default 5GB) */
  bool force;                /* replace an existing output directory */
} loom_hf_export_opts;

/* CKPT_DIR (config.yaml + model.safetensors) -> OUT_DIR (model.safetensors or shards +
 * model.safetensors.index.json, config.json), written as OUT_DIR.tmp.<pid> and renamed. */
int loom_hf_export(const char *ckpt_dir, const char *out_dir, const loom_hf_export_opts *o);

typedef struct {
  const char *config_path;   /* run YAML giving the model, or NULL: from HF_DIR/config.json */
  bool force;                /* replace an existing output directory */
} loom_hf_import_opts;

/* HF_DIR -> CKPT_DIR holding model.safetensors (fp32, loom names, padded vocabulary) and
 * config.yaml; no optimizer state or trainer_state.json (not resumable, only init_from). */
int loom_hf_import(const char *hf_dir, const char *out_dir, const loom_hf_import_opts *o);

/* The model of HF directory dir as `loom ckpt import` reads it (family from the tensor names,
 * model.* from config.json, checked): cfg = the defaults with that model. */
int loom_hf_dir_model(const char *dir, loom_config *cfg);

/* ---- a run's model from checkpoint.init_from (src/ckpt/hf_init_model.c) ------------------
 * loom_hf_init_model_mark on the defaults, before the run's config file and overrides are
 * applied, marks model.preset and model.arch as unset. Then loom_hf_init_model puts their
 * defaults back where the run did not set them and, when checkpoint.init_from names a Hugging
 * Face directory (config.json, no config.yaml) and the run set neither, makes cfg->model the
 * directory's model (loom_hf_dir_model) with every other model.* key the run sets (a value
 * other than the default) laid over it: no model keys give the weights' model; keys that
 * contradict the weights stay, for checkpoint.init_from's check to refuse naming both values.
 * *taken (may be NULL): whether the model was taken from the directory. Errors name the
 * directory. loom_hf_init_model_unmark only puts the defaults back. */
void loom_hf_init_model_mark(loom_config *cfg);
int loom_hf_init_model(loom_config *cfg, bool *taken);
void loom_hf_init_model_unmark(loom_config *cfg);

/* ---- weights only (src/ckpt/hf_weights.c) ------------------------------------------------- */
/* Load DIR/model.safetensors (loom names, whole tensors: a loom or imported checkpoint) into
 * d->params and refresh the bf16 copy; a sharded decoder (tensor / pipeline parallel) takes
 * the slices its layout holds. Every parameter must be present with its global shape, except
 * that the vocabulary rows of embed/lm_head may be padded differently (rows >= vocab_size are
 * set to zero). Tensors the model does not have are an error. d->params is undefined after
 * an error. */
int loom_ckpt_load_weights(const char *dir, loom_decoder *d);
/* A checkpoint written by several ranks (index.json + model-r<rank>.safetensors pieces, see
 * loom/checkpoint.h) rather than one model.safetensors; loom_ckpt_load_weights passes those
 * to loom_ckpt_load_params. */
bool loom_ckpt_is_multi_rank(const char *dir);
/* Whole-tensor DIR/model.safetensors into a bare flat buffer of layout lay (lay->total
 * floats), with the checks of loom_ckpt_load_weights. */
int loom_weights_read(const char *dir, const loom_model_spec *spec,
                      const loom_param_layout *lay, float *params);

/* ---- output directories (src/ckpt/hf_outdir.c), shared by export and import ------------- */
/* Copy of path without trailing slashes (so that PATH.tmp.<pid> is a sibling). */
char *loom_hf_clean_dir(const char *path);
/* out must not exist (unless force) and must be neither src nor a directory holding src. */
int loom_hf_check_out(const char *src, const char *out, bool force);

#endif

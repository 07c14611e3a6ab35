/* Hugging Face names of loom's vision encoders (see loom/hf.h):
 *  - Qwen2.5-VL as published for Qwen2_5_VLForConditionalGeneration (visual.*): q/k/v
 *    stacked into attn.qkv, the patch embedding (Cv, 3*T*p*p) reshaped to the Conv3d weight
 *    (Cv, 3, T, p, p) -- loom's patch vectors are ordered (channel, frame, row, column), the
 *    order of HF's pixel_values.view(-1, 3, T, p, p);
 *  - loom's LLaVA-style encoder under CLIP names (vision_tower.vision_model.*) and LLaVA's
 *    projector names, with its patch embedding reshaped to the Conv2d weight (Cv, 3, p, p),
 *    plus the tensors CLIP does not have (patch-embedding bias, feature layernorm). */
#include <stdio.h>

#include "ckpt/hf_plan.h"
#include "loom/core.h"

int hf_plan_qwen_vision(hf_planner *pl) {
  const loom_model_spec *s = pl->spec;
  const loom_vision_spec *v = &s->vision;
  if (!s->qkv_bias)
    return loom_err("Qwen2_5_VLForConditionalGeneration's text attention always has q/k/v "
                    "biases, but this model has model.qkv_bias=false");
  if (!v->mrope_section[0] && !v->mrope_section[1] && !v->mrope_section[2])
    return loom_err("Qwen2_5_VLForConditionalGeneration always uses multimodal rotary "
                    "positions (rope_scaling.mrope_section), but this model has none");
  if (s->head_dim * s->heads != s->hidden)
    return loom_err("Qwen2_5_VLForConditionalGeneration derives head_dim as hidden_size / "
                    "num_attention_heads = %d, but this model has model.head_dim %d",
                    s->hidden / s->heads, s->head_dim);
  if (v->rope_theta != 10000.0 || v->norm_eps != 1e-6)
    return loom_err("Qwen2_5_VLForConditionalGeneration fixes the vision rotary base at 10000 "
                    "and the vision RMSNorm epsilon at 1e-6, but this model has %g and %g",
                    v->rope_theta, v->norm_eps);
  int64_t conv[5] = {v->hidden, 3, v->temporal, v->patch, v->patch};
  hf_plan_reshape(hf_plan_one(pl, "visual.patch_embed.proj.weight", "vision.patch_embed.weight",
                              0), 5, conv);
  for (int i = 0; i < v->depth; i++) {
    hf_plan_one(pl, "visual.blocks.%d.norm1.weight", "vision.blocks.%d.attn_norm.weight", i);
    for (int b = 0; b < 2; b++) {
      const char *kind = b ? "bias" : "weight";
      char hf[96], n[3][64];
      snprintf(hf, sizeof hf, "visual.blocks.%d.attn.qkv.%s", i, kind);
      for (int k = 0; k < 3; k++)
        snprintf(n[k], sizeof n[k], "vision.blocks.%d.attn.%c.%s", i, "qkv"[k], kind);
      hf_plan_add(pl, hf, 3, (const char *const[]){n[0], n[1], n[2]}, false, false);
    }
    hf_plan_one(pl, "visual.blocks.%d.attn.proj.weight", "vision.blocks.%d.attn.o.weight", i);
    hf_plan_one(pl, "visual.blocks.%d.attn.proj.bias", "vision.blocks.%d.attn.o.bias", i);
    hf_plan_one(pl, "visual.blocks.%d.norm2.weight", "vision.blocks.%d.mlp_norm.weight", i);
    static const char *const mlp[][2] = {{"gate_proj", "gate"}, {"up_proj", "up"},
                                         {"down_proj", "down"}};
    for (int k = 0; k < 3; k++)
      for (int b = 0; b < 2; b++) {
        char hf[96], lm[96];
        snprintf(hf, sizeof hf, "visual.blocks.%%d.mlp.%s.%s", mlp[k][0], b ? "bias" : "weight");
        snprintf(lm, sizeof lm, "vision.blocks.%%d.mlp.%s.%s", mlp[k][1], b ? "bias" : "weight");
        hf_plan_one(pl, hf, lm, i);
      }
  }
  hf_plan_one(pl, "visual.merger.ln_q.weight", "vision.merger.norm.weight", 0);
  hf_plan_one(pl, "visual.merger.mlp.0.weight", "vision.merger.fc1.weight", 0);
  hf_plan_one(pl, "visual.merger.mlp.0.bias", "vision.merger.fc1.bias", 0);
  hf_plan_one(pl, "visual.merger.mlp.2.weight", "vision.merger.fc2.weight", 0);
  hf_plan_one(pl, "visual.merger.mlp.2.bias", "vision.merger.fc2.bias", 0);
  return 0;
}

int hf_plan_llava_vision(hf_planner *pl) {
  const loom_vision_spec *v = &pl->spec->vision;
  if (v->temporal > 1 || v->merge != 1)
    return loom_err("a LLaVA-style encoder with %d frames per patch and %dx%d patch merging has "
                    "no CLIP/LLaVA naming", v->temporal, v->merge, v->merge);
  const char *E = "vision_tower.vision_model.embeddings.";
  const char *L = "vision_tower.vision_model.encoder.layers.%d.";
  char hf[128], lm[96];
#define HF(base, suffix) (snprintf(hf, sizeof hf, "%s%s", base, suffix), hf)
  int64_t conv[4] = {v->hidden, 3, v->patch, v->patch};
  hf_plan_reshape(hf_plan_one(pl, HF(E, "patch_embedding.weight"), "vision.patch_embed.weight",
                              0), 4, conv);
  hf_plan_one(pl, HF(E, "patch_embedding.bias"), "vision.patch_embed.bias", 0);
  hf_plan_one(pl, HF(E, "position_embedding.weight"), "vision.pos_embed.weight", 0);
  static const char *const map[][2] = {
      {"layer_norm1", "attn_norm"}, {"self_attn.q_proj", "attn.q"}, {"self_attn.k_proj", "attn.k"},
      {"self_attn.v_proj", "attn.v"}, {"self_attn.out_proj", "attn.o"},
      {"layer_norm2", "mlp_norm"},  {"mlp.fc1", "mlp.up"},         {"mlp.fc2", "mlp.down"}};
  for (int i = 0; i < v->depth; i++)
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
      for (int b = 0; b < 2; b++) {
        char suffix[64];
        snprintf(suffix, sizeof suffix, "%s.%s", map[k][0], b ? "bias" : "weight");
        snprintf(lm, sizeof lm, "vision.blocks.%%d.%s.%s", map[k][1], b ? "bias" : "weight");
        hf_plan_one(pl, HF(L, suffix), lm, i);
      }
  hf_plan_one(pl, "vision_tower.vision_model.feature_layernorm.weight", "vision.post_norm.weight",
              0);
  hf_plan_one(pl, "vision_tower.vision_model.feature_layernorm.bias", "vision.post_norm.bias", 0);
  hf_plan_one(pl, "multi_modal_projector.linear_1.weight", "vision.merger.fc1.weight", 0);
  hf_plan_one(pl, "multi_modal_projector.linear_1.bias", "vision.merger.fc1.bias", 0);
  hf_plan_one(pl, "multi_modal_projector.linear_2.weight", "vision.merger.fc2.weight", 0);
  hf_plan_one(pl, "multi_modal_projector.linear_2.bias", "vision.merger.fc2.bias", 0);
#undef HF
  return 0;
}

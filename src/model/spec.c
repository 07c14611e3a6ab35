/* Model specs: presets of the GPT-2 and Llama/Qwen2 families, resolution of config.model
 * (preset + explicit dims) into a checked spec, and closed-form parameter counts. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "loom/config_schema.h"
#include "loom/core.h"
#include "loom/model.h"
#include "model/spec_internal.h"

typedef struct {
  const char *name;
  const char *about;
  loom_model_spec spec;
} preset;

/* arch, V, Vp(0: derived), C, L, Hq, Hkv, D(0: C/Hq), I, max_seq, eps, theta, qkv_bias, tied, std,
 * {vision}, qk_norm, {moe: E, k, Ie, Is, norm_topk, sparse_step, {dense layers}, aux, z,
 * capacity, drop_by_position, bias_rate}. The published models' numbers are those of their
 * Hugging Face config.json, cited beside each. */
static const preset presets[] = {
    {"gpt2-124m", "GPT-2 small", {LOOM_ARCH_GPT2, 50257, 0, 768, 12, 12, 12, 0, 3072, 1024, 1e-5, 0, true, true, 0.02, {0}, false, {0}}},
    {"gpt2-350m", "GPT-2 medium", {LOOM_ARCH_GPT2, 50257, 0, 1024, 24, 16, 16, 0, 4096, 1024, 1e-5, 0, true, true, 0.02, {0}, false, {0}}},
    {"gpt2-774m", "GPT-2 large", {LOOM_ARCH_GPT2, 50257, 0, 1280, 36, 20, 20, 0, 5120, 1024, 1e-5, 0, true, true, 0.02, {0}, false, {0}}},
    {"gpt2-1558m", "GPT-2 XL", {LOOM_ARCH_GPT2, 50257, 0, 1600, 48, 25, 25, 0, 6400, 1024, 1e-5, 0, true, true, 0.02, {0}, false, {0}}},
    {"qwen2.5-0.5b", "Qwen2.5-0.5B", {LOOM_ARCH_LLAMA, 151936, 0, 896, 24, 14, 2, 0, 4864, 32768, 1e-6, 1000000.0, true, true, 0.02, {0}, false, {0}}},
    {"qwen2.5-1.5b", "Qwen2.5-1.5B", {LOOM_ARCH_LLAMA, 151936, 0, 1536, 28, 12, 2, 0, 8960, 32768, 1e-6, 1000000.0, true, true, 0.02, {0}, false, {0}}},
    {"qwen2.5-7b", "Qwen2.5-7B", {LOOM_ARCH_LLAMA, 152064, 0, 3584, 28, 28, 4, 0, 18944, 32768, 1e-6, 1000000.0, true, false, 0.02, {0}, false, {0}}},
    {"llama3-8b", "Llama 3 8B", {LOOM_ARCH_LLAMA, 128256, 0, 4096, 32, 32, 8, 0, 14336, 8192, 1e-5, 500000.0, false, false, 0.02, {0}, false, {0}}},
    {"tiny-gpt2", "tiny GPT-2 for the demo and tests", {LOOM_ARCH_GPT2, 512, 0, 128, 4, 4, 4, 0, 512, 256, 1e-5, 0, true, true, 0.02, {0}, false, {0}}},
    {"tiny-llama", "tiny Llama (GQA, untied, no bias)", {LOOM_ARCH_LLAMA, 512, 0, 128, 4, 4, 2, 0, 352, 256, 1e-6, 10000.0, false, false, 0.02, {0}, false, {0}}},
    {"tiny-qwen2", "tiny Qwen2 (GQA, QKV bias, tied)", {LOOM_ARCH_LLAMA, 512, 0, 128, 4, 4, 2, 0, 352, 256, 1e-6, 10000.0, true, true, 0.02, {0}, false, {0}}},
    /* Qwen3: q_norm/k_norm per head, head_dim independent of hidden/heads, no qkv bias */
    {"tiny-qwen3", "tiny Qwen3 (q/k norms, head_dim 48 != hidden/heads)", {LOOM_ARCH_LLAMA, 512, 0, 128, 4, 4, 2, 48, 352, 256, 1e-6, 10000.0, false, true, 0.02, {0}, true, {0}}},
    {"tiny-qwen3-moe", "tiny Qwen3-MoE (8 experts, top 2)", {LOOM_ARCH_LLAMA, 512, 0, 128, 4, 4, 2, 48, 352, 256, 1e-6, 10000.0, false, false, 0.02, {0}, true,
      {8, 2, 96, 0, true, 1, {0}, 0.001, 0, 0, false, 0}}},
    {"tiny-qwen2-moe", "tiny Qwen2-MoE (8 experts, top 2, shared expert)", {LOOM_ARCH_LLAMA, 512, 0, 128, 4, 4, 2, 0, 352, 256, 1e-6, 10000.0, true, false, 0.02, {0}, false,
      {8, 2, 64, 128, false, 1, {0}, 0.001, 0, 0, false, 0}}},
    /* huggingface.co/Qwen/Qwen3-0.6B config.json */
    {"qwen3-0.6b", "Qwen3-0.6B", {LOOM_ARCH_LLAMA, 151936, 0, 1024, 28, 16, 8, 128, 3072, 40960, 1e-6, 1000000.0, false, true, 0.02, {0}, true, {0}}},
    /* huggingface.co/Qwen/Qwen3-30B-A3B config.json: 128 experts, 8 per token, moe 768 */
    {"qwen3-30b-a3b", "Qwen3-30B-A3B (MoE)", {LOOM_ARCH_LLAMA, 151936, 0, 2048, 48, 32, 4, 128, 6144, 40960, 1e-6, 1000000.0, false, false, 0.02, {0}, true,
      {128, 8, 768, 0, true, 1, {0}, 0.001, 0, 0, false, 0}}},
    /* huggingface.co/Qwen/Qwen3-235B-A22B config.json: 128 experts, 8 per token, moe 1536 */
    {"qwen3-235b-a22b", "Qwen3-235B-A22B (MoE)", {LOOM_ARCH_LLAMA, 151936, 0, 4096, 94, 64, 4, 128, 12288, 40960, 1e-6, 1000000.0, false, false, 0.02, {0}, true,
      {128, 8, 1536, 0, true, 1, {0}, 0.001, 0, 0, false, 0}}},
    /* huggingface.co/Qwen/Qwen1.5-MoE-A2.7B config.json: 60 experts, 4 per token, moe 1408,
     * shared expert 5632, norm_topk_prob false, QKV bias */
    {"qwen1.5-moe-a2.7b", "Qwen1.5-MoE-A2.7B (MoE, shared expert)", {LOOM_ARCH_LLAMA, 151936, 0, 2048, 24, 16, 16, 0, 5632, 8192, 1e-6, 1000000.0, true, false, 0.02, {0}, false,
      {60, 4, 1408, 5632, false, 1, {0}, 0.001, 0, 0, false, 0}}},
    /* huggingface.co/allenai/OLMoE-1B-7B-0924 config.json: 64 experts, 8 per token, 1024 each.
     * OLMoE normalises q and k over the whole projection, not per head: the same cost, which is
     * what the simulator needs of this preset */
    {"olmoe-1b-7b", "OLMoE-1B-7B (MoE)", {LOOM_ARCH_LLAMA, 50304, 0, 2048, 16, 16, 16, 0, 1024, 4096, 1e-5, 10000.0, false, false, 0.02, {0}, true,
      {64, 8, 1024, 0, false, 1, {0}, 0.01, 0, 0, false, 0}}},
    /* huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json: 8 experts, 2 per token, 14336 */
    {"mixtral-8x7b", "Mixtral-8x7B (MoE)", {LOOM_ARCH_LLAMA, 32000, 0, 4096, 32, 32, 8, 0, 14336, 32768, 1e-5, 1000000.0, false, false, 0.02, {0}, false,
      {8, 2, 14336, 0, true, 1, {0}, 0.02, 0, 0, false, 0}}},
    /* vision-language: Qwen2.5-VL (text: Qwen2.5 with multimodal rotary sections 16/24/24;
     * vision: 32 blocks, hidden 1280, 16 heads, full attention in blocks 7/15/23/31) */
    {"qwen2.5-vl-7b", "Qwen2.5-VL-7B", {LOOM_ARCH_LLAMA, 152064, 0, 3584, 28, 28, 4, 0, 18944, 128000, 1e-6, 1000000.0, true, false, 0.02,
      {LOOM_VISION_QWEN, 1280, 32, 16, 3420, 14, 2, 2, 112, 0, 4, {7, 15, 23, 31}, 10000.0, 1e-6, {16, 24, 24}}, false, {0}}},
    {"qwen2.5-vl-32b", "Qwen2.5-VL-32B", {LOOM_ARCH_LLAMA, 152064, 0, 5120, 64, 40, 8, 0, 27648, 128000, 1e-6, 1000000.0, true, false, 0.02,
      {LOOM_VISION_QWEN, 1280, 32, 16, 3456, 14, 2, 2, 112, 0, 4, {7, 15, 23, 31}, 10000.0, 1e-6, {16, 24, 24}}, false, {0}}},
    {"tiny-qwen2.5-vl", "tiny Qwen2.5-VL (window attention, merger, M-RoPE)", {LOOM_ARCH_LLAMA, 512, 0, 64, 2, 4, 2, 0, 128, 1024, 1e-6, 10000.0, true, true, 0.02,
      {LOOM_VISION_QWEN, 32, 2, 2, 64, 14, 2, 2, 56, 0, 1, {1}, 10000.0, 1e-6, {2, 3, 3}}, false, {0}}},
    {"small-qwen2.5-vl", "small Qwen2.5-VL for the VQA demo", {LOOM_ARCH_LLAMA, 512, 0, 128, 3, 4, 2, 0, 256, 1024, 1e-6, 10000.0, true, true, 0.02,
      {LOOM_VISION_QWEN, 64, 2, 4, 128, 14, 2, 2, 56, 0, 1, {1}, 10000.0, 1e-6, {4, 6, 6}}, false, {0}}},
    {"tiny-llava", "tiny LLaVA (ViT with learned positions + MLP projector)", {LOOM_ARCH_LLAMA, 512, 0, 64, 2, 4, 2, 0, 128, 1024, 1e-6, 10000.0, false, false, 0.02,
      {LOOM_VISION_LLAVA, 32, 2, 2, 64, 14, 1, 1, 0, 112, 0, {0}, 10000.0, 1e-5, {0, 0, 0}}, false, {0}}},
};
#define N_PRESETS (int)(sizeof presets / sizeof presets[0])

/* Derived fields: head_dim (hidden / heads when unset) and the padded vocabulary, computed in
 * 64 bits; a padded vocabulary past INT_MAX is an error naming both keys. */
static int finish_spec(loom_model_spec *s, long pad_multiple) {
  if (s->head_dim == 0 && s->heads > 0) s->head_dim = s->hidden / s->heads;
  if (pad_multiple < 1) pad_multiple = 1;
  long v = s->vocab_size > 0 ? s->vocab_size : 0;
  long padded = (v + pad_multiple - 1) / pad_multiple * pad_multiple;
  if (pad_multiple > INT_MAX || padded > INT_MAX)
    return loom_err("model.vocab_size = %d rounded up to a multiple of model.vocab_pad_multiple "
                    "= %ld is %ld, past the limit of %d (a 32-bit int); lower either key",
                    s->vocab_size, pad_multiple, padded, INT_MAX);
  s->padded_vocab = s->vocab_size > 0 ? (int)padded : s->vocab_size;
  return 0;
}

int loom_model_preset(loom_model_spec *spec, const char *name) {
  for (int i = 0; i < N_PRESETS; i++)
    if (!strcmp(presets[i].name, name)) {
      *spec = presets[i].spec;
      return finish_spec(spec, 64);
    }
  char list[1024] = "";
  for (int i = 0; i < N_PRESETS; i++) {
    strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
    strncat(list, presets[i].name, sizeof list - strlen(list) - 1);
  }
  const char *names[N_PRESETS + 1];
  for (int i = 0; i < N_PRESETS; i++) names[i] = presets[i].name;
  names[N_PRESETS] = NULL;
  const char *near = loom_config_nearest_of(name, names);
  char hint[96] = "";
  if (near) snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
  return loom_err("unknown model preset '%s'%s; known presets: %s (or set model.preset: \"\" "
                  "and give every dimension)", name, hint, list);
}

const char *loom_model_preset_name(int i) {
  return i >= 0 && i < N_PRESETS ? presets[i].name : NULL;
}

void loom_model_list_presets(void) {
  int w = 6; /* the name column fits the longest preset name */
  for (int i = 0; i < N_PRESETS; i++)
    if ((int)strlen(presets[i].name) > w) w = (int)strlen(presets[i].name);
  printf("%-*s %-5s %7s %6s %6s %5s %8s %6s %8s %14s %14s  %s\n", w, "preset", "arch", "vocab",
         "hidden", "layers", "heads", "kv_heads", "inter", "experts", "params", "active",
         "about");
  for (int i = 0; i < N_PRESETS; i++) {
    loom_model_spec s = presets[i].spec;
    if (finish_spec(&s, 64)) continue; /* presets always fit */
    char experts[16] = "-";
    if (s.moe.experts) snprintf(experts, sizeof experts, "%d/%d", s.moe.top_k, s.moe.experts);
    printf("%-*s %-5s %7d %6d %6d %5d %8d %6d %8s %14zu %14zu  %s\n", w, presets[i].name,
           s.arch == LOOM_ARCH_GPT2 ? "gpt2" : "llama", s.vocab_size, s.hidden, s.layers,
           s.heads, s.kv_heads, s.intermediate, experts, loom_model_count_params(&s, false),
           loom_model_count_active_params(&s), presets[i].about);
  }
}

static int tri_bool(const char *v, bool *out, const char *key) {
  if (!v[0]) return 0;
  if (!strcmp(v, "true")) *out = true;
  else if (!strcmp(v, "false")) *out = false;
  else return loom_err("%s must be true or false, found '%s'", key, v);
  return 0;
}

int loom_model_spec_from_config(loom_model_spec *spec, const loom_config_model *mc) {
  memset(spec, 0, sizeof *spec);
  if (mc->preset[0]) {
    if (loom_model_preset(spec, mc->preset)) return loom_err_prefix("model.preset: ");
  } else {
    if (!mc->arch[0])
      return loom_err("model.arch is required when model.preset is empty (gpt2 or llama)");
    spec->init_std = 0.02;
    spec->qkv_bias = !strcmp(mc->arch, "gpt2");
    spec->tied_embeddings = true;
  }
  if (mc->arch[0]) {
    if (!strcmp(mc->arch, "gpt2")) spec->arch = LOOM_ARCH_GPT2;
    else if (!strcmp(mc->arch, "llama")) spec->arch = LOOM_ARCH_LLAMA;
    else return loom_err("model.arch must be gpt2 or llama, found '%s'", mc->arch);
  }
  const struct {
    const char *key;
    long v;
  } dims[] = {{"model.vocab_size", mc->vocab_size}, {"model.hidden", mc->hidden},
              {"model.layers", mc->layers},         {"model.heads", mc->heads},
              {"model.kv_heads", mc->kv_heads},     {"model.head_dim", mc->head_dim},
              {"model.intermediate", mc->intermediate}, {"model.max_seq", mc->max_seq}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (dims[i].v < 0 || dims[i].v > INT_MAX)
      return loom_err("%s = %ld is out of range: it must be between 0 and %d", dims[i].key,
                      dims[i].v, INT_MAX);
  bool preset_kv_equal = spec->kv_heads == spec->heads;
  if (mc->vocab_size) spec->vocab_size = (int)mc->vocab_size;
  if (mc->hidden) spec->hidden = (int)mc->hidden;
  if (mc->layers) spec->layers = (int)mc->layers;
  if (mc->heads) {
    spec->heads = (int)mc->heads;
    if (preset_kv_equal) spec->kv_heads = spec->heads;
  }
  if (mc->kv_heads) spec->kv_heads = (int)mc->kv_heads;
  if (spec->kv_heads == 0) spec->kv_heads = spec->heads;
  /* a preset's explicit head_dim (Qwen3: != hidden/heads) stays unless the config sets one or
   * changes hidden or heads (then hidden/heads, below) */
  if (mc->head_dim) spec->head_dim = (int)mc->head_dim;
  else if (mc->hidden || mc->heads) spec->head_dim = 0;
  if (mc->intermediate) spec->intermediate = (int)mc->intermediate;
  if (spec->intermediate == 0 && spec->arch == LOOM_ARCH_GPT2) {
    if (spec->hidden > INT_MAX / 4)
      return loom_err("model.intermediate defaults to 4 * model.hidden = 4 * %d, past the limit "
                      "of %d; set model.intermediate or lower model.hidden", spec->hidden,
                      INT_MAX);
    spec->intermediate = 4 * spec->hidden;
  }
  if (mc->max_seq) spec->max_seq = (int)mc->max_seq;
  if (mc->norm_eps > 0) spec->norm_eps = mc->norm_eps;
  if (spec->norm_eps <= 0) spec->norm_eps = spec->arch == LOOM_ARCH_GPT2 ? 1e-5 : 1e-6;
  if (mc->rope_theta > 0) spec->rope_theta = mc->rope_theta;
  if (spec->rope_theta <= 0) spec->rope_theta = 10000.0;
  if (mc->init_std > 0) spec->init_std = mc->init_std;
  if (tri_bool(mc->qkv_bias, &spec->qkv_bias, "model.qkv_bias")) return LOOM_ERR;
  if (tri_bool(mc->tied_embeddings, &spec->tied_embeddings, "model.tied_embeddings"))
    return LOOM_ERR;
  if (tri_bool(mc->qk_norm, &spec->qk_norm, "model.qk_norm")) return LOOM_ERR;
  if (loom_moe_spec_from_config(spec, mc)) return LOOM_ERR;
  if (spec->hidden > 0 && spec->heads > 0 && spec->head_dim == 0) {
    if (spec->hidden % spec->heads)
      return loom_err("model.heads (%d) does not divide model.hidden (%d); choose heads that "
                      "divide hidden or set model.head_dim explicitly",
                      spec->heads, spec->hidden);
  }
  if (finish_spec(spec, mc->vocab_pad_multiple)) return LOOM_ERR;
  return loom_model_spec_check(spec);
}

static int vision_check(const loom_model_spec *s) {
  const loom_vision_spec *v = &s->vision;
  if (v->arch == LOOM_VISION_NONE) return 0;
  if (v->hidden <= 0 || v->depth <= 0 || v->heads <= 0 || v->intermediate <= 0 || v->patch <= 0 ||
      v->merge <= 0)
    return loom_err("vision: hidden, depth, heads, intermediate, patch and merge must be positive");
  int max_full = (int)(sizeof v->full_layers / sizeof v->full_layers[0]);
  if (v->n_full < 0 || v->n_full > max_full)
    return loom_err("vision: %d full-attention blocks listed, at most %d", v->n_full, max_full);
  if (v->hidden % v->heads)
    return loom_err("vision.heads (%d) must divide vision.hidden (%d)", v->heads, v->hidden);
  int D = v->hidden / v->heads;
  if (v->arch == LOOM_VISION_QWEN && D % 4)
    return loom_err("vision head size %d must be a multiple of 4 for 2D rotary positions", D);
  long sum = (long)v->mrope_section[0] + v->mrope_section[1] + v->mrope_section[2];
  if (sum && sum != s->head_dim / 2)
    return loom_err("multimodal rotary sections %d+%d+%d must add up to head_dim/2 = %d",
                    v->mrope_section[0], v->mrope_section[1], v->mrope_section[2], s->head_dim / 2);
  long unit = (long)v->patch * v->merge;
  if (v->arch == LOOM_VISION_QWEN && (v->window % unit))
    return loom_err("vision window %d px must be a multiple of patch*merge = %ld", v->window,
                    unit);
  if (v->arch == LOOM_VISION_LLAVA && (v->image_size <= 0 || v->image_size % v->patch))
    return loom_err("llava vision image size %d must be a positive multiple of the patch %d",
                    v->image_size, v->patch);
  for (int i = 0; i < v->n_full; i++)
    if (v->full_layers[i] < 0 || v->full_layers[i] >= v->depth)
      return loom_err("vision full-attention block %d is outside 0..%d", v->full_layers[i],
                      v->depth - 1);
  return 0;
}

/* Sizes that the layout (layout.c), the kernels and the parameter count compute: every
 * product held in an int must fit in one, and the whole model must stay under
 * LOOM_MODEL_MAX_PARAMS parameters and LOOM_MODEL_MAX_LAYERS blocks. Checked in 128-bit
 * arithmetic before anything is computed in narrower types. Runs after the positivity checks. */
typedef unsigned __int128 u128;

#define LOOM_MODEL_MAX_LAYERS 65536
#define LOOM_MODEL_MAX_PARAMS ((u128)1 << 47)

static int product_err(const char *what, u128 v) {
  return loom_err("%s = %.0f is past the limit of %d (a 32-bit int); lower them", what,
                  (double)v, INT_MAX);
}

static int vision_size_check(const loom_model_spec *s, u128 *params) {
  const loom_vision_spec *v = &s->vision;
  if (v->arch == LOOM_VISION_NONE) return 0;
  u128 Cv = (u128)v->hidden, I = (u128)v->intermediate, C = (u128)s->hidden;
  u128 patch = 3 * (u128)(v->temporal > 0 ? v->temporal : 1) * (u128)v->patch * (u128)v->patch;
  u128 in = Cv * (u128)v->merge * (u128)v->merge;
  u128 side = v->patch > 0 && v->image_size > 0 ? (u128)(v->image_size / v->patch) : 0;
  if (patch > INT_MAX) return product_err("vision 3 * temporal * patch * patch", patch);
  if (in > INT_MAX) return product_err("vision hidden * merge * merge", in);
  if (side * side > INT_MAX) return product_err("vision (image_size / patch)^2", side * side);
  if (v->depth > LOOM_MODEL_MAX_LAYERS)
    return loom_err("vision depth %d is past the limit of %d blocks", v->depth,
                    LOOM_MODEL_MAX_LAYERS);
  *params += Cv * patch + side * side * Cv + (u128)v->depth * (4 * Cv * Cv + 3 * I * Cv) +
             in * in + C * in + C * C;
  return 0;
}

static int size_check(const loom_model_spec *s) {
  u128 C = (u128)s->hidden, I = (u128)s->intermediate, Vp = (u128)s->padded_vocab;
  u128 QD = (u128)s->heads * (u128)s->head_dim, KD = (u128)s->kv_heads * (u128)s->head_dim;
  if (QD > INT_MAX) return product_err("model.heads * model.head_dim", QD);
  if (KD > INT_MAX) return product_err("model.kv_heads * model.head_dim", KD);
  if (s->layers > LOOM_MODEL_MAX_LAYERS)
    return loom_err("model.layers = %d is past the limit of %d blocks", s->layers,
                    LOOM_MODEL_MAX_LAYERS);
  /* per block: q, k, v, o, up, gate, down, norms and biases (an upper bound for both archs),
   * q/k norms, and the MoE layer's router, experts and shared expert */
  const loom_moe_spec *m = &s->moe;
  u128 moe = m->experts > 0 ? (u128)m->experts * (C + 3 * (u128)m->intermediate * C) +
                                  3 * (u128)m->shared_intermediate * C + C
                            : 0;
  u128 block = C * QD * 2 + C * KD * 2 + 3 * I * C + 4 * C + QD + 2 * KD + I +
               2 * (u128)s->head_dim + moe;
  u128 params = (u128)s->layers * block + 2 * Vp * C + (u128)s->max_seq * C + 2 * C;
  if (vision_size_check(s, &params)) return LOOM_ERR;
  if (params > LOOM_MODEL_MAX_PARAMS)
    return loom_err("the model has about %.3g parameters, past the limit of %.3g (2^47); lower "
                    "model.layers, model.hidden, model.intermediate or model.vocab_size",
                    (double)params, (double)LOOM_MODEL_MAX_PARAMS);
  return 0;
}

int loom_model_spec_check(const loom_model_spec *s) {
  if (vision_check(s)) return LOOM_ERR;
  const struct {
    const char *key;
    long v;
  } pos[] = {{"model.vocab_size", s->vocab_size}, {"model.hidden", s->hidden},
             {"model.layers", s->layers},         {"model.heads", s->heads},
             {"model.kv_heads", s->kv_heads},     {"model.head_dim", s->head_dim},
             {"model.intermediate", s->intermediate}, {"model.max_seq", s->max_seq}};
  for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
    if (pos[i].v <= 0)
      return loom_err("%s must be positive, found %ld (set it, or pick a model.preset)",
                      pos[i].key, pos[i].v);
  if (size_check(s)) return LOOM_ERR;
  if (s->heads % s->kv_heads)
    return loom_err("model.kv_heads (%d) must divide model.heads (%d) for grouped-query "
                    "attention", s->kv_heads, s->heads);
  if (s->arch == LOOM_ARCH_LLAMA && s->head_dim % 2)
    return loom_err("model.head_dim (%d) must be even for rotary embeddings", s->head_dim);
  if (s->arch == LOOM_ARCH_GPT2 && (long)s->head_dim * s->heads != s->hidden)
    return loom_err("gpt2 needs heads * head_dim == hidden, found %d * %d != %d", s->heads,
                    s->head_dim, s->hidden);
  if (s->padded_vocab < s->vocab_size)
    return loom_err("padded vocabulary %d smaller than vocab_size %d", s->padded_vocab,
                    s->vocab_size);
  if (s->qk_norm && s->arch != LOOM_ARCH_LLAMA)
    return loom_err("model.qk_norm needs the llama family (rotary attention); model.arch is gpt2");
  return loom_moe_spec_check(s);
}

/* Hugging Face config.json: written from a loom model spec on export, mapped onto a loom
 * config (model.*) on import, plus parsing of shard sizes such as "5GB". */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "loom/core.h"
#include "ckpt/hf_json.h"
#include "loom/hf.h"

/* ---- export --------------------------------------------------------------------------- */

/* 15 significant digits when every real reads back exactly that way (values typed by people:
 * 1e-06 instead of 9.9999999999999995e-07), else jansson's round-tripping 17. */
static int real_precision(const double *v, int n) {
  for (int i = 0; i < n; i++) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.15g", v[i]);
    if (strtod(buf, NULL) != v[i]) return 17;
  }
  return 15;
}

json_t *hf_json_text(const loom_model_spec *s) {
  json_t *o = json_object();
  bool gpt2 = s->arch == LOOM_ARCH_GPT2;
  const char *type = gpt2 ? "gpt2" : s->qkv_bias ? "qwen2" : "llama";
  const char *cls = gpt2 ? "GPT2LMHeadModel"
                    : s->qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  json_object_set_new(o, "architectures", json_pack("[s]", cls));
  json_object_set_new(o, "model_type", json_string(type));
  json_object_set_new(o, "vocab_size", json_integer(s->vocab_size));
  if (gpt2) {
    json_object_set_new(o, "n_embd", json_integer(s->hidden));
    json_object_set_new(o, "n_layer", json_integer(s->layers));
    json_object_set_new(o, "n_head", json_integer(s->heads));
    json_object_set_new(o, "n_positions", json_integer(s->max_seq));
    json_object_set_new(o, "n_ctx", json_integer(s->max_seq));
    json_object_set_new(o, "n_inner", s->intermediate == 4 * s->hidden
                                          ? json_null() : json_integer(s->intermediate));
    json_object_set_new(o, "layer_norm_epsilon", json_real(s->norm_eps));
    json_object_set_new(o, "activation_function", json_string("gelu_new"));
  } else {
    json_object_set_new(o, "hidden_size", json_integer(s->hidden));
    json_object_set_new(o, "intermediate_size", json_integer(s->intermediate));
    json_object_set_new(o, "num_hidden_layers", json_integer(s->layers));
    json_object_set_new(o, "num_attention_heads", json_integer(s->heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(s->kv_heads));
    json_object_set_new(o, "head_dim", json_integer(s->head_dim));
    json_object_set_new(o, "rms_norm_eps", json_real(s->norm_eps));
    json_object_set_new(o, "rope_theta", json_real(s->rope_theta));
    json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "max_position_embeddings", json_integer(s->max_seq));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    if (s->qkv_bias) {
      json_object_set_new(o, "use_sliding_window", json_false());
    } else {
      json_object_set_new(o, "attention_bias", json_false());
      json_object_set_new(o, "mlp_bias", json_false());
    }
  }
  json_object_set_new(o, "tie_word_embeddings", json_boolean(s->tied_embeddings));
  json_object_set_new(o, "initializer_range", json_real(s->init_std));
  return o;
}

char *loom_hf_config_json_ids(const loom_model_spec *s, loom_dtype dt,
                              const loom_hf_token_ids *ids) {
  loom_hf_token_ids none = {-1, -1, -1};
  json_t *o;
  switch (s->vision.arch) {
  case LOOM_VISION_QWEN: o = hf_json_qwen_vl(s, ids ? ids : &none); break;
  case LOOM_VISION_LLAVA: o = hf_json_llava(s, ids ? ids : &none); break;
  default: o = hf_json_text(s); break;
  }
  json_object_set_new(o, "torch_dtype", json_string(dt == LOOM_DT_BF16 ? "bfloat16" : "float32"));
  double reals[] = {s->norm_eps, s->rope_theta, s->init_std, s->vision.norm_eps};
  int prec = real_precision(reals, 4);
  char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(prec));
  json_decref(o);
  LOOM_ASSERT(text);
  return text;
}

char *loom_hf_config_json(const loom_model_spec *s, loom_dtype dt) {
  return loom_hf_config_json_ids(s, dt, NULL);
}

/* ---- import (the typed getters are in hf_json.c) ---------------------------------------- */

static int load_gpt2(const jcfg *j, loom_config_model *m) {
  static const char *const acts[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
  long hidden, inner;
  bool tied, scale = true;
  int rc = hf_json_int(j, "vocab_size", true, 0, &m->vocab_size) ||
           hf_json_int(j, "n_embd", true, 0, &hidden) ||
           hf_json_int(j, "n_layer", true, 0, &m->layers) ||
           hf_json_int(j, "n_head", true, 0, &m->heads) ||
           hf_json_int(j, "n_positions", false, 1024, &m->max_seq) ||
           hf_json_num(j, "layer_norm_epsilon", 1e-5, &m->norm_eps) ||
           hf_json_bool(j, "tie_word_embeddings", true, &tied) ||
           hf_json_bool(j, "scale_attn_weights", true, &scale) ||
           hf_json_off(j, "scale_attn_by_inverse_layer_idx", "extra attention scaling") ||
           hf_json_str_in(j, "activation_function", acts, " (the tanh approximation of GELU)");
  if (rc) return LOOM_ERR;
  if (!scale)
    return loom_err("%s: \"scale_attn_weights\" is false; loom always scales attention by "
                    "1/sqrt(head_dim)", j->path);
  if (hf_json_int(j, "n_inner", false, 4 * hidden, &inner)) return LOOM_ERR; /* hidden <= INT_MAX */
  if (inner > INT_MAX)
    return loom_err("%s: \"n_inner\" is absent, so it is 4 * n_embd = %ld, past the limit of %d "
                    "(a 32-bit int)", j->path, inner, INT_MAX);
  m->hidden = hidden;
  m->intermediate = inner;
  m->kv_heads = m->heads;
  snprintf(m->arch, sizeof m->arch, "gpt2");
  snprintf(m->qkv_bias, sizeof m->qkv_bias, "true");
  snprintf(m->tied_embeddings, sizeof m->tied_embeddings, "%s", tied ? "true" : "false");
  return 0;
}

int hf_json_load_llama(const jcfg *j, loom_config_model *m, bool qwen2, bool mrope) {
  static const char *const acts[] = {"silu", NULL};
  bool tied;
  json_t *rs = json_object_get(j->o, "rope_scaling");
  if (!mrope && rs && !json_is_null(rs))
    return loom_err("%s: \"rope_scaling\" is set; loom implements only plain RoPE (remove it "
                    "only if the model was trained without scaling)", j->path);
  int rc = hf_json_int(j, "vocab_size", true, 0, &m->vocab_size) ||
           hf_json_int(j, "hidden_size", true, 0, &m->hidden) ||
           hf_json_int(j, "num_hidden_layers", true, 0, &m->layers) ||
           hf_json_int(j, "num_attention_heads", true, 0, &m->heads) ||
           hf_json_int(j, "intermediate_size", true, 0, &m->intermediate) ||
           hf_json_int(j, "num_key_value_heads", false, m->heads, &m->kv_heads) ||
           hf_json_int(j, "head_dim", false, 0, &m->head_dim) ||
           hf_json_int(j, "max_position_embeddings", false, qwen2 ? 32768 : 2048, &m->max_seq) ||
           hf_json_num(j, "rms_norm_eps", 1e-6, &m->norm_eps) ||
           hf_json_num(j, "rope_theta", 10000.0, &m->rope_theta) ||
           hf_json_bool(j, "tie_word_embeddings", false, &tied) ||
           hf_json_str_in(j, "hidden_act", acts, " (SwiGLU MLP)") ||
           hf_json_off(j, "attention_bias", "bias on o_proj too") ||
           hf_json_off(j, "mlp_bias", "biases in the MLP") ||
           hf_json_off(j, "use_sliding_window", "sliding-window attention");
  if (rc) return LOOM_ERR;
  snprintf(m->arch, sizeof m->arch, "llama");
  snprintf(m->qkv_bias, sizeof m->qkv_bias, "%s", qwen2 ? "true" : "false");
  snprintf(m->tied_embeddings, sizeof m->tied_embeddings, "%s", tied ? "true" : "false");
  return 0;
}

/* Dimensions in the text part of the model the tensors of a text-only family describe. */
static int load_text(const jcfg *j, const char *type, loom_arch want_arch, loom_config_model *m) {
  const char *names = want_arch == LOOM_ARCH_GPT2 ? "GPT-2" : "Llama/Qwen2";
  if ((want_arch == LOOM_ARCH_GPT2) != !strcmp(type, "gpt2"))
    return loom_err("%s: model_type \"%s\" does not match the tensor names, which are %s naming",
                    j->path, type, names);
  if (want_arch == LOOM_ARCH_GPT2) return load_gpt2(j, m);
  return hf_json_load_llama(j, m, !strcmp(type, "qwen2"), false);
}

int loom_hf_config_load(loom_config *cfg, const char *path, loom_arch want_arch) {
  json_error_t e;
  jcfg j = {path, json_load_file(path, 0, &e)};
  if (!j.o)
    return loom_err("%s:%d:%d: not valid JSON (%s); repair or regenerate config.json, or pass "
                    "--config run.yaml to give the model", path, e.line, e.column, e.text);
  if (!json_is_object(j.o)) {
    json_decref(j.o);
    return loom_err("%s: expected a JSON object at the top level", path);
  }
  const char *type = json_string_value(json_object_get(j.o, "model_type"));
  loom_config_model *m = &cfg->model;
  int rc = 0;
  if (!type) {
    rc = loom_err("%s: \"model_type\" is missing or not a string (expected gpt2, llama, qwen2, "
                  "qwen2_5_vl or loom_llava)", path);
  } else if (want_arch == LOOM_ARCH_GPT2 && strcmp(type, "gpt2")) {
    rc = loom_err("%s: model_type \"%s\" does not match the tensor names, which are GPT-2 "
                  "naming", path, type);
  } else {
    m->preset[0] = 0;
    double init_std;
    rc = hf_json_num(&j, "initializer_range", 0.02, &init_std);
    if (!rc && init_std > 0) m->init_std = init_std;
  }
  if (rc) {
  } else if (!strcmp(type, "gpt2") || !strcmp(type, "llama") || !strcmp(type, "qwen2")) {
    rc = load_text(&j, type, want_arch, m);
  } else if (!strcmp(type, "qwen2_5_vl")) {
    rc = hf_config_load_qwen_vl(&j, m);
  } else if (!strcmp(type, "loom_llava")) {
    rc = hf_config_load_loom_llava(&j, m);
  } else if (!strcmp(type, "llava")) {
    rc = loom_err("%s: model_type \"llava\" (Hugging Face's LlavaForConditionalGeneration) has "
                  "a CLIP vision tower with a class token and a pre-layernorm "
                  "(vision_tower.vision_model.embeddings.class_embedding, pre_layrnorm) that "
                  "loom's LLaVA-style encoder does not compute; loom imports LLaVA-style "
                  "checkpoints in its own layout only (model_type \"loom_llava\", written by "
                  "`loom ckpt export`)", path);
  } else {
    rc = loom_err("%s: model_type \"%s\" is not supported; loom converts gpt2, llama, qwen2, "
                  "qwen2_5_vl (Qwen2_5_VLForConditionalGeneration) and loom_llava", path, type);
  }
  json_decref(j.o);
  return rc;
}

/* ---- sizes ------------------------------------------------------------------------------ */

int loom_hf_parse_size(const char *text, int64_t *bytes) {
  static const struct {
    const char *unit;
    double mult;
  } units[] = {{"", 1},       {"B", 1},        {"KB", 1e3},           {"MB", 1e6},
               {"GB", 1e9},   {"TB", 1e12},    {"KIB", 1024.0},       {"MIB", 1048576.0},
               {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  errno = 0;
  char *end;
  double v = strtod(text, &end);
  while (*end == ' ') end++;
  if (end != text && errno == 0 && isfinite(v) && v > 0)
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
      if (!strcasecmp(end, units[i].unit) && v * units[i].mult >= 1 && v * units[i].mult < 9e18) {
        *bytes = (int64_t)(v * units[i].mult);
        return 0;
      }
  return loom_err("invalid size '%s': give a positive number with an optional unit, e.g. 5GB "
                  "(10^9 bytes), 500MB, 2GiB (2^30 bytes) or 65536", text);
}

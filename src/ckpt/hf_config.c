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

#include "ckpt/hf_family.h"
#include "ckpt/hf_json.h"
#include "loom/core.h"
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

/* "0,3" of the dense layers below s->layers (HF's mlp_only_layers) as a JSON list. */
static json_t *dense_layers(const loom_model_spec *s) {
  json_t *a = json_array();
  for (int l = 0; l < s->layers && l < 256; l++)
    if (s->moe.dense_mask[l / 64] >> (l % 64) & 1) json_array_append_new(a, json_integer(l));
  return a;
}

/* The Mixture-of-Experts fields of Qwen2-MoE / Qwen3-MoE (qwen) or Mixtral. The auxiliary
 * loss enters HF's training loss only with output_router_logits, so that is set exactly when
 * loom trains with it. */
static void moe_fields(json_t *o, const loom_model_spec *s, hf_family f) {
  const loom_moe_spec *m = &s->moe;
  if (f == HF_MIXTRAL) {
    json_object_set_new(o, "num_local_experts", json_integer(m->experts));
  } else {
    json_object_set_new(o, "num_experts", json_integer(m->experts));
    json_object_set_new(o, "moe_intermediate_size", json_integer(m->intermediate));
    if (f == HF_QWEN2_MOE)
      json_object_set_new(o, "shared_expert_intermediate_size",
                          json_integer(m->shared_intermediate));
    json_object_set_new(o, "norm_topk_prob", json_boolean(m->norm_topk));
    json_object_set_new(o, "decoder_sparse_step", json_integer(m->sparse_step));
    json_object_set_new(o, "mlp_only_layers", dense_layers(s));
  }
  json_object_set_new(o, "num_experts_per_tok", json_integer(m->top_k));
  json_object_set_new(o, "router_aux_loss_coef", json_real(m->aux_loss_coef));
  json_object_set_new(o, "output_router_logits", json_boolean(m->aux_loss_coef > 0));
  if (f == HF_MIXTRAL) json_object_set_new(o, "router_jitter_noise", json_real(0.0));
  /* DeepSeek-V3-style balancing: its rate is a training setting no HF class has; kept so
   * that the import holds the bias again (e_score_correction_bias) */
  if (m->bias_update_rate > 0)
    json_object_set_new(o, "loom_bias_update_rate", json_real(m->bias_update_rate));
}

/* Attention and MLP fields of the Llama-family classes. */
static void llama_fields(json_t *o, const loom_model_spec *s, hf_family f) {
  bool mixtral = f == HF_MIXTRAL;
  json_object_set_new(o, "hidden_size", json_integer(s->hidden));
  /* Mixtral's intermediate_size is its experts' (it has no dense layers) */
  json_object_set_new(o, "intermediate_size",
                      json_integer(mixtral ? s->moe.intermediate : s->intermediate));
  json_object_set_new(o, "num_hidden_layers", json_integer(s->layers));
  json_object_set_new(o, "num_attention_heads", json_integer(s->heads));
  json_object_set_new(o, "num_key_value_heads", json_integer(s->kv_heads));
  json_object_set_new(o, "head_dim", json_integer(s->head_dim));
  json_object_set_new(o, "rms_norm_eps", json_real(s->norm_eps));
  json_object_set_new(o, "rope_theta", json_real(s->rope_theta));
  json_object_set_new(o, "rope_scaling", json_null());
  json_object_set_new(o, "max_position_embeddings", json_integer(s->max_seq));
  json_object_set_new(o, "hidden_act", json_string("silu"));
  switch (f) {
  case HF_LLAMA:
    json_object_set_new(o, "attention_bias", json_false());
    json_object_set_new(o, "mlp_bias", json_false());
    break;
  case HF_QWEN2: json_object_set_new(o, "use_sliding_window", json_false()); break;
  case HF_QWEN3:
  case HF_QWEN3_MOE:
    json_object_set_new(o, "attention_bias", json_false());
    json_object_set_new(o, "use_sliding_window", json_false());
    json_object_set_new(o, "sliding_window", json_null());
    break;
  case HF_QWEN2_MOE:
    json_object_set_new(o, "qkv_bias", json_boolean(s->qkv_bias));
    json_object_set_new(o, "use_sliding_window", json_false());
    json_object_set_new(o, "sliding_window", json_null());
    break;
  case HF_MIXTRAL: json_object_set_new(o, "sliding_window", json_null()); break;
  case HF_GPT2: break;
  }
  if (f == HF_LLAMA || f == HF_QWEN2) return; /* as written before Qwen3 and MoE came */
  json_object_set_new(o, "attention_dropout", json_real(0.0));
  if (hf_family_is_moe(f)) moe_fields(o, s, f);
}

json_t *hf_json_text(const loom_model_spec *s) {
  hf_family f = HF_LLAMA;
  int rc = hf_family_of(s, &f);
  LOOM_ASSERT(rc == 0); /* callers planned the export (loom_hf_plan), which checks the family */
  json_t *o = json_object();
  json_object_set_new(o, "architectures", json_pack("[s]", hf_family_class(f)));
  json_object_set_new(o, "model_type", json_string(hf_family_type(f)));
  json_object_set_new(o, "vocab_size", json_integer(s->vocab_size));
  if (f == HF_GPT2) {
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
    llama_fields(o, s, f);
  }
  json_object_set_new(o, "tie_word_embeddings", json_boolean(s->tied_embeddings));
  json_object_set_new(o, "initializer_range", json_real(s->init_std));
  return o;
}

char *loom_hf_config_json_ids(const loom_model_spec *s, loom_dtype dt,
                              const loom_hf_token_ids *ids) {
  loom_hf_token_ids none = {-1, -1, -1};
  json_t *o;
  hf_family f;
  if (s->vision.arch == LOOM_VISION_NONE && hf_family_of(s, &f)) return NULL; /* no HF class */
  switch (s->vision.arch) {
  case LOOM_VISION_QWEN: o = hf_json_qwen_vl(s, ids ? ids : &none); break;
  case LOOM_VISION_LLAVA: o = hf_json_llava(s, ids ? ids : &none); break;
  default: o = hf_json_text(s); break;
  }
  json_object_set_new(o, "torch_dtype", json_string(dt == LOOM_DT_BF16 ? "bfloat16" : "float32"));
  double reals[] = {s->norm_eps,          s->rope_theta,           s->init_std,
                    s->vision.norm_eps, s->moe.aux_loss_coef, s->moe.bias_update_rate};
  int prec = real_precision(reals, 6);
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

/* transformers v5's rope_parameters {"rope_type": "default", "rope_theta": ...} in place of
 * rope_theta / rope_scaling: plain RoPE only; its rope_theta wins. */
static int rope_parameters(const jcfg *j, double *theta) {
  json_t *rp = json_object_get(j->o, "rope_parameters");
  if (!rp || json_is_null(rp)) return 0;
  if (!json_is_object(rp))
    return loom_err("%s: \"rope_parameters\" must be an object", j->path);
  const char *type = json_string_value(json_object_get(rp, "rope_type"));
  if (json_object_get(rp, "rope_type") && (!type || strcmp(type, "default")))
    return loom_err("%s: \"rope_parameters\".\"rope_type\" is %s; loom implements only plain "
                    "RoPE (\"default\")", j->path, type ? type : "not a string");
  json_t *t = json_object_get(rp, "rope_theta");
  if (!t || json_is_null(t)) return 0;
  if (!json_is_number(t) || json_number_value(t) <= 0)
    return loom_err("%s: \"rope_parameters\".\"rope_theta\" must be a positive number", j->path);
  *theta = json_number_value(t);
  return 0;
}

int hf_json_load_llama_with(const jcfg *j, loom_config_model *m, const hf_llama_defaults *d,
                            bool mrope) {
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
           hf_json_int(j, "head_dim", false, d->head_dim, &m->head_dim) ||
           hf_json_int(j, "max_position_embeddings", false, d->max_seq, &m->max_seq) ||
           hf_json_num(j, "rms_norm_eps", d->eps, &m->norm_eps) ||
           hf_json_num(j, "rope_theta", d->theta, &m->rope_theta) ||
           (!mrope && rope_parameters(j, &m->rope_theta)) ||
           hf_json_bool(j, "tie_word_embeddings", false, &tied) ||
           hf_json_str_in(j, "hidden_act", acts, " (SwiGLU MLP)") ||
           hf_json_off(j, "attention_bias", "bias on o_proj too") ||
           hf_json_off(j, "mlp_bias", "biases in the MLP") ||
           hf_json_off(j, "use_sliding_window", "sliding-window attention");
  if (rc) return LOOM_ERR;
  snprintf(m->arch, sizeof m->arch, "llama");
  snprintf(m->qkv_bias, sizeof m->qkv_bias, "%s", d->qkv_bias ? "true" : "false");
  snprintf(m->tied_embeddings, sizeof m->tied_embeddings, "%s", tied ? "true" : "false");
  return 0;
}

int hf_json_load_llama(const jcfg *j, loom_config_model *m, bool qwen2, bool mrope) {
  hf_llama_defaults d = {qwen2 ? 32768 : 2048, 1e-6, 10000.0, 0, qwen2};
  return hf_json_load_llama_with(j, m, &d, mrope);
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
                  "qwen3, qwen3_moe, qwen2_moe, mixtral, qwen2_5_vl or loom_llava)", path);
  } else if (want_arch == LOOM_ARCH_GPT2 && strcmp(type, "gpt2")) {
    rc = loom_err("%s: model_type \"%s\" does not match the tensor names, which are GPT-2 "
                  "naming", path, type);
  } else {
    m->preset[0] = 0;
    double init_std;
    rc = hf_config_check_unsupported(&j) || hf_json_num(&j, "initializer_range", 0.02, &init_std);
    if (!rc && init_std > 0) m->init_std = init_std;
  }
  if (rc) {
  } else if (!strcmp(type, "gpt2") || !strcmp(type, "llama") || !strcmp(type, "qwen2")) {
    rc = load_text(&j, type, want_arch, m);
  } else if (!strcmp(type, "qwen3") || !strcmp(type, "qwen3_moe")) {
    rc = hf_config_load_qwen3(&j, m, !strcmp(type, "qwen3_moe"));
  } else if (!strcmp(type, "qwen2_moe")) {
    rc = hf_config_load_qwen2_moe(&j, m);
  } else if (!strcmp(type, "mixtral")) {
    rc = hf_config_load_mixtral(&j, m);
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
                  "qwen3, qwen3_moe, qwen2_moe, mixtral, qwen2_5_vl "
                  "(Qwen2_5_VLForConditionalGeneration) and loom_llava", path, type);
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

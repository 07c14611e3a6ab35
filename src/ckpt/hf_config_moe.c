/* Hugging Face config.json of Qwen3 (dense), Qwen3-MoE, Qwen2-MoE and Mixtral mapped onto
 * model.* (with the defaults of each transformers class for the keys a config may leave
 * out: Qwen3 head_dim 128, Mixtral rope_theta 1e6 and rms_norm_eps 1e-5, ...), and the
 * refusal of config keys that describe features loom does not have, naming the key. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hf_json.h"
#include "loom/core.h"

/* ---- features loom does not have ------------------------------------------------------- */

typedef enum { SET, NOT_ONE, NOT_STR } bad_when;
static const struct {
  const char *key;
  bad_when when;
  const char *ok; /* NOT_STR: the one accepted value */
  const char *what;
} unsupported[] = {
    {"kv_lora_rank", SET, NULL,
     "DeepSeek's multi-head latent attention (MLA: keys and values "
     "through a low-rank latent)"},
    {"q_lora_rank", SET, NULL,
     "DeepSeek's multi-head latent attention (MLA: queries through a "
     "low-rank latent)"},
    {"n_shared_experts", SET, NULL, NULL},
    {"num_shared_experts", SET, NULL, NULL},
    {"moe_num_shared_experts", SET, NULL, NULL},
    {"first_k_dense_replace", SET, NULL, "DeepSeek's leading dense layers"},
    {"n_group", NOT_ONE, NULL, "group-limited expert routing"},
    {"topk_group", NOT_ONE, NULL, "group-limited expert routing"},
    {"routed_scaling_factor", NOT_ONE, NULL, "routing weights scaled by a factor"},
    {"scoring_func", NOT_STR, "softmax", "router scores other than a softmax"},
    {"topk_method", NOT_STR, "greedy", "an expert selection other than the plain top-k"},
    {"router_jitter_noise", SET, NULL, "multiplicative jitter on the router input in training"},
    {"partial_rotary_factor", NOT_ONE, NULL, "rotary embedding on part of each head"},
};

/* Whether v (not null) is "set": a non-zero number, true, or a non-empty string / list. */
static bool is_set(json_t *v) {
  if (json_is_number(v)) return json_number_value(v) != 0;
  if (json_is_boolean(v)) return json_is_true(v);
  if (json_is_string(v)) return json_string_length(v) > 0;
  if (json_is_array(v)) return json_array_size(v) > 0;
  return true;
}

static int refuse(const jcfg *j, const char *key, json_t *v, const char *what) {
  char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  loom_err("%s: \"%s\" = %s: %s, which loom does not implement; it cannot be imported (loom "
           "never approximates a model it does not compute)",
           j->path, key, text ? text : "?", what);
  free(text);
  return LOOM_ERR;
}

int hf_config_check_unsupported(const jcfg *j) {
  for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
    json_t *v = json_object_get(j->o, unsupported[i].key);
    if (!v || json_is_null(v)) continue;
    bool bad = unsupported[i].when == SET ? is_set(v)
               : unsupported[i].when == NOT_ONE
                   ? !(json_is_number(v) && json_number_value(v) == 1)
                   : !(json_is_string(v) && !strcmp(json_string_value(v), unsupported[i].ok));
    if (!bad) continue;
    const char *what = unsupported[i].what;
    char buf[256];
    if (!what) { /* the shared-expert counts */
      bool several = !json_is_number(v) || json_number_value(v) > 1;
      snprintf(buf, sizeof buf,
               "%s (loom has at most one shared expert, Qwen2-MoE's, gated by "
               "sigmoid(shared_expert_gate(x)) and given by shared_expert_intermediate_size)",
               several ? "several shared experts" : "DeepSeek's ungated shared expert");
      what = buf;
    }
    return refuse(j, unsupported[i].key, v, what);
  }
  json_t *types = json_object_get(j->o, "layer_types");
  for (size_t i = 0; json_is_array(types) && i < json_array_size(types); i++) {
    const char *t = json_string_value(json_array_get(types, i));
    if (!t || strcmp(t, "full_attention")) {
      char key[48];
      snprintf(key, sizeof key, "layer_types[%zu]", i);
      return refuse(j, key, json_array_get(types, i),
                    "a layer without full causal attention "
                    "(sliding-window or other attention)");
    }
  }
  return 0;
}

/* ---- Mixture-of-Experts fields ------------------------------------------------------------ */

/* The routed expert count: `key` (the family's name) or its alias (transformers v5 saves
 * Qwen3-MoE's and Mixtral's as num_local_experts, attribute_map num_experts). */
static int expert_count(const jcfg *j, const char *key, const char *alias, long def, long *out) {
  long a = 0, b = 0;
  bool has_a = json_object_get(j->o, key) && !json_is_null(json_object_get(j->o, key));
  bool has_b = json_object_get(j->o, alias) && !json_is_null(json_object_get(j->o, alias));
  if ((has_a && hf_json_int(j, key, true, 0, &a)) || (has_b && hf_json_int(j, alias, true, 0, &b)))
    return LOOM_ERR;
  if (has_a && has_b && a != b)
    return loom_err("%s: \"%s\" = %ld and \"%s\" = %ld disagree (both name the routed experts)",
                    j->path, key, a, alias, b);
  *out = has_a ? a : has_b ? b : def;
  return 0;
}

/* mlp_only_layers: a list of layer indices (those past the last layer name no layer, as in
 * HF) -> "0,3" or "none". */
static int dense_layers(const jcfg *j, long layers, loom_config_moe *c) {
  json_t *a = json_object_get(j->o, "mlp_only_layers");
  snprintf(c->mlp_only_layers, sizeof c->mlp_only_layers, "none");
  if (!a || json_is_null(a)) return 0;
  if (!json_is_array(a))
    return loom_err("%s: \"mlp_only_layers\" must be a list of layer indices", j->path);
  size_t k = 0;
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *x = json_array_get(a, i);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
      return loom_err("%s: mlp_only_layers[%zu] must be a layer index (an integer >= 0)", j->path,
                      i);
    json_int_t l = json_integer_value(x);
    if (l >= layers) continue;
    if (l > 255)
      return loom_err("%s: mlp_only_layers[%zu] = %lld: loom keeps dense layers among the first "
                      "256 only",
                      j->path, i, (long long)l);
    k += (size_t)snprintf(c->mlp_only_layers + k, sizeof c->mlp_only_layers - k, "%s%lld",
                          k ? "," : "", (long long)l);
    if (k >= sizeof c->mlp_only_layers)
      return loom_err("%s: \"mlp_only_layers\" lists too many layers", j->path);
  }
  return 0;
}

/* What the Qwen MoE families and Mixtral share: top-k, the auxiliary loss, the balancing
 * rate. HF adds router_aux_loss_coef * aux to the training loss only when
 * output_router_logits: the coefficient is taken only then. */
static int moe_common(const jcfg *j, loom_config_model *m, long top_k_def) {
  loom_config_moe *c = &m->moe;
  double coef, rate;
  bool logits;
  int rc = hf_json_int(j, "num_experts_per_tok", false, top_k_def, &c->top_k) ||
           hf_json_num(j, "router_aux_loss_coef", 0.001, &coef) ||
           hf_json_bool(j, "output_router_logits", false, &logits) ||
           hf_json_num(j, "loom_bias_update_rate", 0, &rate);
  if (rc) return LOOM_ERR;
  if (c->top_k > c->experts)
    return loom_err("%s: \"num_experts_per_tok\" = %ld is more than the %ld routed experts "
                    "(each token picks num_experts_per_tok of them)",
                    j->path, c->top_k, c->experts);
  c->aux_loss_coef = logits ? coef : 0;
  if (!logits && coef > 0)
    loom_log("note: %s: output_router_logits is false, so transformers trains this model "
             "without its load-balancing loss; model.moe.aux_loss_coef = 0 (set it to %g to "
             "train with it)",
             j->path, coef);
  c->bias_update_rate = rate;
  c->capacity_factor = 0; /* the HF classes are dropless */
  return 0;
}

/* Qwen2-MoE / Qwen3-MoE: num_experts, moe_intermediate_size, norm_topk_prob,
 * decoder_sparse_step, mlp_only_layers. */
static int moe_qwen(const jcfg *j, loom_config_model *m, long experts_def, long inter_def,
                    long top_k_def) {
  loom_config_moe *c = &m->moe;
  bool norm;
  int rc = expert_count(j, "num_experts", "num_local_experts", experts_def, &c->experts) ||
           hf_json_int(j, "moe_intermediate_size", false, inter_def, &c->intermediate) ||
           hf_json_bool(j, "norm_topk_prob", false, &norm) ||
           hf_json_int(j, "decoder_sparse_step", false, 1, &c->sparse_step) ||
           dense_layers(j, m->layers, c) || moe_common(j, m, top_k_def);
  if (rc) return LOOM_ERR;
  snprintf(c->norm_topk, sizeof c->norm_topk, "%s", norm ? "true" : "false");
  return 0;
}

/* ---- the families -------------------------------------------------------------------------- */

int hf_config_load_qwen3(const jcfg *j, loom_config_model *m, bool moe) {
  /* Qwen3Config: head_dim 128 unless given; Qwen3MoeConfig has none (hidden / heads) */
  hf_llama_defaults d = {32768, 1e-6, 10000.0, moe ? 0 : 128, false};
  if (hf_json_load_llama_with(j, m, &d, false)) return LOOM_ERR;
  snprintf(m->qk_norm, sizeof m->qk_norm, "true");
  if (!moe) return 0;
  m->moe.shared_intermediate = 0; /* Qwen3-MoE has no shared expert */
  return moe_qwen(j, m, 128, 768, 8);
}

int hf_config_load_qwen2_moe(const jcfg *j, loom_config_model *m) {
  bool bias;
  if (hf_json_bool(j, "qkv_bias", true, &bias)) return LOOM_ERR;
  hf_llama_defaults d = {32768, 1e-6, 10000.0, 0, bias};
  if (hf_json_load_llama_with(j, m, &d, false) ||
      hf_json_int(j, "shared_expert_intermediate_size", false, 5632, &m->moe.shared_intermediate))
    return LOOM_ERR;
  if (m->head_dim && m->heads && m->head_dim * m->heads != m->hidden)
    return loom_err("%s: \"head_dim\" = %ld, but Qwen2-MoE computes it as hidden_size / "
                    "num_attention_heads = %ld / %ld; remove head_dim or fix it", j->path,
                    m->head_dim, m->hidden, m->heads);
  snprintf(m->qk_norm, sizeof m->qk_norm, "false");
  return moe_qwen(j, m, 60, 1408, 4);
}

int hf_config_load_mixtral(const jcfg *j, loom_config_model *m) {
  hf_llama_defaults d = {4096 * 32, 1e-5, 1e6, 0, false};
  loom_config_moe *c = &m->moe;
  json_t *sw = json_object_get(j->o, "sliding_window");
  if (sw && !json_is_null(sw)) return refuse(j, "sliding_window", sw, "sliding-window attention");
  if (hf_json_load_llama_with(j, m, &d, false) ||
      expert_count(j, "num_local_experts", "num_experts", 8, &c->experts))
    return LOOM_ERR;
  /* every layer is an MoE layer of intermediate_size experts; the k weights renormalised */
  c->intermediate = m->intermediate;
  c->shared_intermediate = 0;
  c->sparse_step = 1;
  snprintf(c->mlp_only_layers, sizeof c->mlp_only_layers, "none");
  snprintf(c->norm_topk, sizeof c->norm_topk, "true");
  snprintf(m->qk_norm, sizeof m->qk_norm, "false");
  return moe_common(j, m, 2);
}

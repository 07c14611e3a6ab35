/* Private to the Hugging Face config.json code (hf_config.c, hf_config_vlm.c): typed getters
 * that name the file and key in their errors (hf_json.c), and the per-family builders and
 * parsers (hf_config.c, hf_config_vlm.c). */
#ifndef LOOM_HF_JSON_H
#define LOOM_HF_JSON_H
#include <jansson.h>

#include "loom/hf.h"

typedef struct {
  const char *path; /* named in errors: "DIR/config.json" or "DIR/config.json: text_config" */
  json_t *o;
} jcfg;

/* Typed getters (hf_json.c). Integer key; absent or null gives def (or an error when required). Must be positive. */
int hf_json_int(const jcfg *j, const char *key, bool required, long def, long *out);
/* Non-negative number; absent or null gives def. */
int hf_json_num(const jcfg *j, const char *key, double def, double *out);
int hf_json_bool(const jcfg *j, const char *key, bool def, bool *out);
/* A string key that must be one of allowed (NULL-terminated) when present. */
int hf_json_str_in(const jcfg *j, const char *key, const char *const *allowed, const char *why);
/* A boolean feature loom does not implement must be absent, null or false. */
int hf_json_off(const jcfg *j, const char *key, const char *what);

/* The text model's config object (hf_config.c) (architectures, model_type, dimensions). */
json_t *hf_json_text(const loom_model_spec *s);
/* Llama/Qwen2 text dimensions into m (arch, qkv_bias, tied too); mrope: rope_scaling may be
 * set (the caller checks it). */
int hf_json_load_llama(const jcfg *j, loom_config_model *m, bool qwen2, bool mrope);
/* What a family's transformers class assumes for keys its config.json may leave out. */
typedef struct {
  long max_seq;      /* max_position_embeddings */
  double eps, theta; /* rms_norm_eps, rope_theta */
  long head_dim;     /* 0: hidden_size / num_attention_heads */
  bool qkv_bias;     /* the family's q/k/v biases (set, not read) */
} hf_llama_defaults;
/* hf_json_load_llama with a family's defaults; also reads transformers v5's rope_parameters. */
int hf_json_load_llama_with(const jcfg *j, loom_config_model *m, const hf_llama_defaults *d,
                            bool mrope);

/* Qwen3, Qwen3-MoE, Qwen2-MoE and Mixtral (hf_config_moe.c). */
int hf_config_load_qwen3(const jcfg *j, loom_config_model *m, bool moe);
int hf_config_load_qwen2_moe(const jcfg *j, loom_config_model *m);
int hf_config_load_mixtral(const jcfg *j, loom_config_model *m);
/* Keys of features loom does not have (DeepSeek's MLA, several or ungated shared experts,
 * group-limited or sigmoid routing, router jitter, partial rotary, sliding-window layers):
 * an error naming the first one set. */
int hf_config_check_unsupported(const jcfg *j);

/* Vision-language configs (hf_config_vlm.c). */
json_t *hf_json_qwen_vl(const loom_model_spec *s, const loom_hf_token_ids *ids);
json_t *hf_json_llava(const loom_model_spec *s, const loom_hf_token_ids *ids);
int hf_config_load_qwen_vl(const jcfg *j, loom_config_model *m);
int hf_config_load_loom_llava(const jcfg *j, loom_config_model *m);
#endif

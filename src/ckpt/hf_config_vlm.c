/* config.json of the vision-language models: Qwen2_5_VLForConditionalGeneration (model_type
 * qwen2_5_vl: text fields at the top level, vision_config, rope_scaling mrope) and loom's
 * LLaVA-style model (model_type loom_llava: text_config, vision_config stating how the
 * encoder differs from CLIP). On import the vision encoder is the preset whose vision spec
 * equals vision_config (loom has no per-key vision settings), the text dimensions explicit. */
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/hf_json.h"
#include "loom/core.h"

/* ---- export ----------------------------------------------------------------------------- */

static void set_ids(json_t *o, const char *image_key, const loom_hf_token_ids *ids, bool frame) {
  if (ids->image >= 0) json_object_set_new(o, image_key, json_integer(ids->image));
  if (frame && ids->vision_start >= 0)
    json_object_set_new(o, "vision_start_token_id", json_integer(ids->vision_start));
  if (frame && ids->vision_end >= 0)
    json_object_set_new(o, "vision_end_token_id", json_integer(ids->vision_end));
}

json_t *hf_json_qwen_vl(const loom_model_spec *s, const loom_hf_token_ids *ids) {
  const loom_vision_spec *v = &s->vision;
  json_t *o = json_object(), *t = hf_json_text(s);
  json_object_set_new(o, "architectures", json_pack("[s]", "Qwen2_5_VLForConditionalGeneration"));
  json_object_set_new(o, "model_type", json_string("qwen2_5_vl"));
  json_object_del(t, "architectures");
  json_object_del(t, "model_type");
  json_object_del(t, "head_dim"); /* Qwen2.5-VL derives it: hidden / heads (checked on export) */
  json_object_update(o, t);
  json_decref(t);
  json_object_set_new(o, "rope_scaling",
                      json_pack("{s:s, s:[i,i,i]}", "type", "mrope", "mrope_section",
                                v->mrope_section[0], v->mrope_section[1], v->mrope_section[2]));
  set_ids(o, "image_token_id", ids, true);
  json_t *full = json_array();
  for (int i = 0; i < v->n_full; i++) json_array_append_new(full, json_integer(v->full_layers[i]));
  json_t *vc = json_object();
  json_object_set_new(vc, "depth", json_integer(v->depth));
  json_object_set_new(vc, "hidden_size", json_integer(v->hidden));
  json_object_set_new(vc, "intermediate_size", json_integer(v->intermediate));
  json_object_set_new(vc, "num_heads", json_integer(v->heads));
  json_object_set_new(vc, "in_chans", json_integer(3));
  json_object_set_new(vc, "in_channels", json_integer(3));
  json_object_set_new(vc, "patch_size", json_integer(v->patch));
  json_object_set_new(vc, "spatial_patch_size", json_integer(v->patch));
  json_object_set_new(vc, "spatial_merge_size", json_integer(v->merge));
  json_object_set_new(vc, "temporal_patch_size", json_integer(v->temporal));
  json_object_set_new(vc, "window_size", json_integer(v->window));
  json_object_set_new(vc, "fullatt_block_indexes", full);
  json_object_set_new(vc, "out_hidden_size", json_integer(s->hidden));
  json_object_set_new(vc, "hidden_act", json_string("silu"));
  json_object_set_new(o, "vision_config", vc);
  return o;
}

json_t *hf_json_llava(const loom_model_spec *s, const loom_hf_token_ids *ids) {
  const loom_vision_spec *v = &s->vision;
  json_t *o = json_object(), *t = hf_json_text(s);
  json_object_set_new(o, "architectures", json_pack("[s]", "LoomLlavaForConditionalGeneration"));
  json_object_set_new(o, "model_type", json_string("loom_llava"));
  json_object_set_new(o, "loom_note",
                      json_string("loom's LLaVA-style model, not transformers' "
                                  "LlavaForConditionalGeneration: the CLIP-named encoder has no "
                                  "class token and no pre-layernorm, its patch embedding has a "
                                  "bias, and a layernorm (feature_layernorm) is applied to every "
                                  "patch feature before the projector; see loom's "
                                  "docs/FORMATS-checkpoint.md"));
  json_object_del(t, "architectures");
  json_object_set_new(o, "text_config", t);
  int side = v->image_size / v->patch;
  json_t *vc = json_object();
  json_object_set_new(vc, "model_type", json_string("loom_llava_vision"));
  json_object_set_new(vc, "hidden_size", json_integer(v->hidden));
  json_object_set_new(vc, "intermediate_size", json_integer(v->intermediate));
  json_object_set_new(vc, "num_hidden_layers", json_integer(v->depth));
  json_object_set_new(vc, "num_attention_heads", json_integer(v->heads));
  json_object_set_new(vc, "num_channels", json_integer(3));
  json_object_set_new(vc, "image_size", json_integer(v->image_size));
  json_object_set_new(vc, "patch_size", json_integer(v->patch));
  json_object_set_new(vc, "hidden_act", json_string("gelu"));
  json_object_set_new(vc, "layer_norm_eps", json_real(v->norm_eps));
  json_object_set_new(vc, "class_token", json_false());
  json_object_set_new(vc, "pre_layernorm", json_false());
  json_object_set_new(vc, "patch_embedding_bias", json_true());
  json_object_set_new(vc, "feature_layernorm", json_true());
  json_object_set_new(o, "vision_config", vc);
  json_object_set_new(o, "projector_hidden_act", json_string("gelu"));
  json_object_set_new(o, "vision_feature_layer", json_integer(-1));
  json_object_set_new(o, "vision_feature_select_strategy", json_string("full"));
  json_object_set_new(o, "image_seq_length", json_integer(side * side));
  set_ids(o, "image_token_index", ids, false);
  json_object_set_new(o, "tie_word_embeddings", json_boolean(s->tied_embeddings));
  return o;
}

/* ---- import ----------------------------------------------------------------------------- */

static bool same_vision(const loom_vision_spec *a, const loom_vision_spec *b) {
  if (a->arch != b->arch || a->hidden != b->hidden || a->depth != b->depth ||
      a->heads != b->heads || a->intermediate != b->intermediate || a->patch != b->patch ||
      a->temporal != b->temporal || a->merge != b->merge || a->norm_eps != b->norm_eps)
    return false;
  if (a->arch == LOOM_VISION_LLAVA) return a->image_size == b->image_size;
  if (a->window != b->window || a->n_full != b->n_full || a->rope_theta != b->rope_theta)
    return false;
  for (int i = 0; i < a->n_full; i++)
    if (a->full_layers[i] != b->full_layers[i]) return false;
  for (int i = 0; i < 3; i++)
    if (a->mrope_section[i] != b->mrope_section[i]) return false;
  return true;
}

/* m->preset = the preset whose vision encoder is want, or an error naming the dimensions. */
static int find_preset(const jcfg *j, const loom_vision_spec *want, loom_config_model *m) {
  char names[256] = "";
  for (int i = 0; loom_model_preset_name(i); i++) {
    loom_model_spec s;
    if (loom_model_preset(&s, loom_model_preset_name(i))) return LOOM_ERR;
    if (s.vision.arch != want->arch) continue;
    if (same_vision(&s.vision, want)) {
      snprintf(m->preset, sizeof m->preset, "%s", loom_model_preset_name(i));
      return 0;
    }
    size_t k = strlen(names);
    snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", loom_model_preset_name(i));
  }
  return loom_err("%s: no loom preset has this vision encoder (depth %d, hidden %d, heads %d, "
                  "intermediate %d, patch %d, merge %d%s); loom's vision encoders come from "
                  "model.preset (%s): the model cannot be imported", j->path, want->depth,
                  want->hidden, want->heads, want->intermediate, want->patch, want->merge,
                  want->arch == LOOM_VISION_QWEN ? ", window, full-attention blocks, mrope "
                                                   "sections" : ", image size",
                  names[0] ? names : "none of this kind");
}

/* The object under key, as a jcfg named "<path>: key"; *path_out to free. */
static int sub_object(const jcfg *j, const char *key, jcfg *out, char **path_out) {
  json_t *o = json_object_get(j->o, key);
  *path_out = NULL;
  if (!json_is_object(o))
    return loom_err("%s: \"%s\" is missing or not an object; it describes the %s", j->path, key,
                    !strcmp(key, "text_config") ? "language model" : "vision encoder");
  *path_out = loom_sprintf("%s: %s", j->path, key);
  out->path = *path_out;
  out->o = o;
  return 0;
}

/* Integer that must equal want when present. */
static int int_is(const jcfg *j, const char *key, long want, const char *why) {
  json_t *v = json_object_get(j->o, key);
  if (!v || json_is_null(v) || (json_is_integer(v) && json_integer_value(v) == want)) return 0;
  return loom_err("%s: \"%s\" must be %ld (%s)", j->path, key, want, why);
}

static int bool_is(const jcfg *j, const char *key, bool want, const char *what) {
  json_t *v = json_object_get(j->o, key);
  if (json_is_boolean(v) && json_is_true(v) == want) return 0;
  return loom_err("%s: \"%s\" must be %s: loom's LLaVA-style encoder has %s%s", j->path, key,
                  want ? "true" : "false", want ? "" : "no ", what);
}

static int load_mrope(const jcfg *j, loom_vision_spec *v) {
  json_t *rs = json_object_get(j->o, "rope_scaling"), *sec = json_object_get(rs, "mrope_section");
  const char *type = json_string_value(json_object_get(rs, "type"));
  if (!type) type = json_string_value(json_object_get(rs, "rope_type"));
  if (!json_is_object(rs) || !type || (strcmp(type, "mrope") && strcmp(type, "default")) ||
      !json_is_array(sec) || json_array_size(sec) != 3)
    return loom_err("%s: \"rope_scaling\" must be {\"type\": \"mrope\", \"mrope_section\": [t, h, "
                    "w]} (Qwen2.5-VL's multimodal rotary positions; loom has no other scaling)",
                    j->path);
  for (int i = 0; i < 3; i++) {
    json_t *x = json_array_get(sec, (size_t)i);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
      return loom_err("%s: rope_scaling.mrope_section[%d] must be a non-negative integer",
                      j->path, i);
    v->mrope_section[i] = (int)json_integer_value(x);
  }
  return 0;
}

static int load_qwen_vision(const jcfg *jv, long text_hidden, loom_vision_spec *v) {
  static const char *const silu[] = {"silu", NULL};
  long depth, hidden, inter, heads, patch, merge, temporal, window, out_hidden;
  int rc = hf_json_int(jv, "depth", true, 0, &depth) ||
           hf_json_int(jv, "hidden_size", true, 0, &hidden) ||
           hf_json_int(jv, "intermediate_size", true, 0, &inter) ||
           hf_json_int(jv, "num_heads", true, 0, &heads) ||
           hf_json_int(jv, "patch_size", false, 14, &patch) ||
           hf_json_int(jv, "spatial_merge_size", false, 2, &merge) ||
           hf_json_int(jv, "temporal_patch_size", false, 2, &temporal) ||
           hf_json_int(jv, "window_size", false, 112, &window) ||
           hf_json_int(jv, "out_hidden_size", false, text_hidden, &out_hidden) ||
           int_is(jv, "in_chans", 3, "RGB input") || int_is(jv, "in_channels", 3, "RGB input") ||
           int_is(jv, "spatial_patch_size", patch, "the same as patch_size") ||
           hf_json_str_in(jv, "hidden_act", silu, " (SwiGLU MLP in the vision blocks)");
  if (rc) return LOOM_ERR;
  if (out_hidden != text_hidden)
    return loom_err("%s: out_hidden_size %ld differs from the text hidden_size %ld", jv->path,
                    out_hidden, text_hidden);
  json_t *full = json_object_get(jv->o, "fullatt_block_indexes");
  if (!json_is_array(full) || json_array_size(full) > 16)
    return loom_err("%s: \"fullatt_block_indexes\" must be a list of at most 16 block indices",
                    jv->path);
  v->arch = LOOM_VISION_QWEN;
  v->n_full = (int)json_array_size(full);
  for (int i = 0; i < v->n_full; i++) {
    json_t *x = json_array_get(full, (size_t)i);
    if (!json_is_integer(x))
      return loom_err("%s: fullatt_block_indexes[%d] must be an integer", jv->path, i);
    v->full_layers[i] = (int)json_integer_value(x);
  }
  v->depth = (int)depth, v->hidden = (int)hidden, v->intermediate = (int)inter;
  v->heads = (int)heads, v->patch = (int)patch, v->merge = (int)merge;
  v->temporal = (int)temporal, v->window = (int)window;
  v->rope_theta = 10000.0, v->norm_eps = 1e-6; /* fixed in Qwen2_5_VisionTransformer */
  return 0;
}

int hf_config_load_qwen_vl(const jcfg *j, loom_config_model *m) {
  loom_vision_spec v = {0};
  jcfg jv, jt = *j;
  char *vpath = NULL, *tpath = NULL;
  int rc = 0;
  /* published configs have the text fields at the top level; transformers >= 4.52 may nest
   * them in text_config */
  if (!json_object_get(j->o, "hidden_size") && json_object_get(j->o, "text_config"))
    rc = sub_object(j, "text_config", &jt, &tpath);
  rc = rc || hf_json_load_llama(&jt, m, true, true) || load_mrope(&jt, &v) ||
       sub_object(j, "vision_config", &jv, &vpath) || load_qwen_vision(&jv, m->hidden, &v) ||
       find_preset(&jv, &v, m);
  free(vpath), free(tpath);
  return rc ? LOOM_ERR : 0;
}

static int load_llava_vision(const jcfg *jv, loom_vision_spec *v) {
  static const char *const gelu[] = {"gelu", NULL};
  long depth, hidden, inter, heads, patch, image;
  int rc = hf_json_int(jv, "num_hidden_layers", true, 0, &depth) ||
           hf_json_int(jv, "hidden_size", true, 0, &hidden) ||
           hf_json_int(jv, "intermediate_size", true, 0, &inter) ||
           hf_json_int(jv, "num_attention_heads", true, 0, &heads) ||
           hf_json_int(jv, "patch_size", true, 0, &patch) ||
           hf_json_int(jv, "image_size", true, 0, &image) ||
           hf_json_num(jv, "layer_norm_eps", 1e-5, &v->norm_eps) ||
           int_is(jv, "num_channels", 3, "RGB input") ||
           hf_json_str_in(jv, "hidden_act", gelu, " (the erf GELU)") ||
           bool_is(jv, "class_token", false, "class token") ||
           bool_is(jv, "pre_layernorm", false, "pre-layernorm") ||
           bool_is(jv, "patch_embedding_bias", true, "a patch-embedding bias") ||
           bool_is(jv, "feature_layernorm", true, "a layernorm on every patch feature");
  if (rc) return LOOM_ERR;
  v->arch = LOOM_VISION_LLAVA;
  v->depth = (int)depth, v->hidden = (int)hidden, v->intermediate = (int)inter;
  v->heads = (int)heads, v->patch = (int)patch, v->image_size = (int)image;
  v->temporal = 1, v->merge = 1;
  return 0;
}

int hf_config_load_loom_llava(const jcfg *j, loom_config_model *m) {
  static const char *const gelu[] = {"gelu", NULL}, *const full[] = {"full", NULL};
  loom_vision_spec v = {0};
  jcfg jt, jv;
  char *tpath = NULL, *vpath = NULL;
  int rc = sub_object(j, "text_config", &jt, &tpath) ||
           sub_object(j, "vision_config", &jv, &vpath) ||
           hf_json_str_in(j, "projector_hidden_act", gelu, " (the erf GELU)") ||
           hf_json_str_in(j, "vision_feature_select_strategy", full, " (one token per patch)");
  json_t *layer = json_object_get(j->o, "vision_feature_layer");
  if (!rc && layer && !(json_is_integer(layer) && json_integer_value(layer) == -1))
    rc = loom_err("%s: \"vision_feature_layer\" must be -1: loom's projector reads the last "
                  "block's output", j->path);
  const char *type = rc ? NULL : json_string_value(json_object_get(jt.o, "model_type"));
  if (!rc && (!type || (strcmp(type, "llama") && strcmp(type, "qwen2"))))
    rc = loom_err("%s: \"model_type\" must be llama or qwen2 (the language model loom has)",
                  jt.path);
  if (!rc) rc = hf_json_load_llama(&jt, m, !strcmp(type, "qwen2"), false);
  if (!rc) rc = load_llava_vision(&jv, &v) || find_preset(&jv, &v, m);
  free(tpath), free(vpath);
  return rc ? LOOM_ERR : 0;
}

/* `loom ckpt import`: a Hugging Face directory (model.safetensors, or shards listed in
 * model.safetensors.index.json; GPT-2, Llama/Qwen2, Qwen2.5-VL or loom's LLaVA-style naming;
 * F32/BF16/F16) -> a loom weights-only checkpoint (model.safetensors in fp32 with loom names
 * and padded vocabulary, config.yaml; the directory's tokenizer.json, if any, as data.tokenizer),
 * written under OUT.tmp.<pid> and renamed into place.
 * Every tensor of the directory must be a parameter of the model its config describes (or a
 * known buffer), and every parameter must be there: errors name the tensors. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hf_family.h"
#include "ckpt/hf_source.h"
#include "loom/core.h"
#include "loom/hf.h"

static bool is_vision_name(const char *n) {
  return !strncmp(n, "visual.", 7) || !strncmp(n, "vision_tower.", 13) ||
         !strncmp(n, "multi_modal_projector.", 22);
}

/* "'a', 'b', ... and N more" of the names for which keep(name) holds; returns their count. */
static int list_names(const hf_source *s, bool (*keep)(const char *), char *buf, size_t cap) {
  int count = 0;
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < s->n; i++) {
    if (!keep(s->e[i].name)) continue;
    if (count < 5 && k < cap)
      k += (size_t)snprintf(buf + k, cap - k, "%s'%s'", count ? ", " : "", s->e[i].name);
    count++;
  }
  if (count > 5 && k < cap) snprintf(buf + k, cap - k, " and %d more", count - 5);
  return count;
}

/* The family from the names: GPT-2, Llama/Qwen2, Qwen2.5-VL (visual.* + model.*) or LLaVA
 * (vision_tower.* + multi_modal_projector.* + language_model.*). */
static int detect_arch(const hf_source *s, loom_arch *arch, loom_vision_arch *vision) {
  bool gpt2 = false, llama = false, visual = false, llava = false;
  for (int i = 0; i < s->n; i++) {
    const char *n = s->e[i].name;
    gpt2 |= !strcmp(n, "wte.weight") || !strncmp(n, "h.0.", 4);
    llama |= !strcmp(n, "model.embed_tokens.weight") || !strncmp(n, "model.layers.0.", 15);
    visual |= !strncmp(n, "visual.", 7);
    llava |= !strncmp(n, "language_model.", 15) || !strncmp(n, "vision_tower.", 13) ||
             !strncmp(n, "multi_modal_projector.", 22);
  }
  *vision = LOOM_VISION_NONE;
  if ((int)gpt2 + (int)(llama || visual) + (int)llava == 1) {
    *arch = gpt2 ? LOOM_ARCH_GPT2 : LOOM_ARCH_LLAMA;
    *vision = visual ? LOOM_VISION_QWEN : llava ? LOOM_VISION_LLAVA : LOOM_VISION_NONE;
    return 0;
  }
  if (gpt2 || llama || visual || llava)
    return loom_err("%s: the tensor names mix the naming of several families (GPT-2 wte/h.*, "
                    "Llama model.*, Qwen2.5-VL visual.*, LLaVA language_model.*/vision_tower.*); "
                    "give a directory holding one model", s->where);
  char first[256] = "";
  for (int i = 0; i < s->n && i < 3; i++)
    snprintf(first + strlen(first), sizeof first - strlen(first), "%s'%s'", i ? ", " : "",
             s->e[i].name);
  return loom_err("%s: unknown tensor naming (%s%s): expected Hugging Face GPT-2 names "
                  "(wte.weight, h.0.attn.c_attn.weight, ...), Llama/Qwen2 names "
                  "(model.embed_tokens.weight, model.layers.0.self_attn.q_proj.weight, ...), "
                  "Qwen2.5-VL names (visual.*, model.*) or loom's LLaVA names "
                  "(language_model.model.*, vision_tower.*, multi_modal_projector.*)",
                  s->where, s->n ? "first names: " : "no tensors", first);
}

static const char *family_name(loom_arch arch, loom_vision_arch v) {
  if (v == LOOM_VISION_QWEN) return "Qwen2.5-VL";
  if (v == LOOM_VISION_LLAVA) return "LLaVA-style";
  return arch == LOOM_ARCH_GPT2 ? "GPT-2" : "Llama/Qwen2";
}

/* The config's model and the tensors' family agree; a text-only config for VLM weights would
 * drop the vision encoder: name what would be lost. */
static int check_family(const hf_source *s, const char *src, const loom_model_spec *spec,
                        loom_arch arch, loom_vision_arch vision) {
  if (spec->arch == arch && spec->vision.arch == vision) return 0;
  /* Qwen2.5-VL's text tensors alone: the missing vision tensors are named later */
  if (spec->vision.arch == LOOM_VISION_QWEN && vision == LOOM_VISION_NONE &&
      arch == LOOM_ARCH_LLAMA)
    return 0;
  if (vision != LOOM_VISION_NONE && spec->vision.arch == LOOM_VISION_NONE) {
    char names[400];
    int n = list_names(s, is_vision_name, names, sizeof names);
    return loom_err("%s describes a text-only model, but the weights are a %s model with %d "
                    "vision tensor%s (%s): importing them as text-only would drop the vision "
                    "encoder and %s; use the model's own config.json (model_type %s)", src,
                    family_name(arch, vision), n, n > 1 ? "s" : "", names,
                    vision == LOOM_VISION_QWEN ? "merger" : "projector",
                    vision == LOOM_VISION_QWEN ? "qwen2_5_vl" : "loom_llava");
  }
  return loom_err("%s describes a %s model but the tensors have %s naming; give a config of "
                  "the same family", src, family_name(spec->arch, spec->vision.arch),
                  family_name(arch, vision));
}

/* The run config: --config, or config.json mapped onto the defaults. */
static int resolve_config(const hf_source *s, const char *dir, const loom_hf_import_opts *o,
                          loom_arch arch, loom_vision_arch vision, loom_config *cfg,
                          loom_model_spec *spec) {
  loom_config_defaults(cfg);
  char *json = loom_sprintf("%s/config.json", dir);
  const char *src = o->config_path ? o->config_path : json;
  int rc = 0;
  if (o->config_path) {
    rc = loom_config_load(cfg, o->config_path);
  } else if (!loom_path_exists(json)) {
    rc = loom_err("%s does not exist; it gives the model's dimensions: copy it from the "
                  "model's repository, or pass --config run.yaml", json);
  } else {
    rc = loom_hf_config_load(cfg, json, arch);
  }
  if (!rc && (loom_config_validate(cfg) || loom_model_spec_from_config(spec, &cfg->model)))
    rc = loom_err_prefix("%s gives an invalid model: ", src);
  if (!rc) rc = check_family(s, src, spec, arch, vision);
  free(json);
  return rc;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The planned names, sorted (for bsearch); free() the result. */
static const char **sorted_names(const loom_hf_tensor *t, int n) {
  const char **v = loom_malloc((size_t)(n + 1) * sizeof *v);
  for (int j = 0; j < n; j++) v[j] = t[j].name;
  qsort(v, (size_t)n, sizeof *v, cmp_str);
  return v;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

/* Why an unknown tensor may be there, for the first of them. */
static const char *unknown_hint(const char *name) {
  if (ends_with(name, ".gate.bias"))
    return " ('.gate.bias': a bias on the router's gate Linear, which loom's router does not "
           "have; DeepSeek-V3's selection-only bias is named gate.e_score_correction_bias)";
  if (ends_with(name, ".gate.e_score_correction_bias"))
    return " ('e_score_correction_bias': a selection-only expert bias, DeepSeek-V3's "
           "auxiliary-loss-free balancing, which the model holds only with "
           "model.moe.bias_update_rate > 0: config.json's loom_bias_update_rate)";
  if (strstr(name, ".shared_expert"))
    return " (a shared expert: Qwen2-MoE's, model_type qwen2_moe)";
  if (strstr(name, ".q_norm.") || strstr(name, ".k_norm."))
    return " (q/k norms: Qwen3's, model_type qwen3 or qwen3_moe)";
  return "";
}

/* Every HF tensor is a planned one or an ignorable buffer (noted); the others are named. */
static int check_names(const hf_source *s, const loom_hf_tensor *t, int n, bool tied) {
  int ignored = 0, unknown = 0;
  const char *example = NULL, *file = NULL, *first = NULL;
  char names[400] = "";
  size_t k = 0;
  const char **planned = sorted_names(t, n);
  for (int i = 0; i < s->n; i++) {
    const char *name = s->e[i].name;
    if (bsearch(&name, planned, (size_t)n, sizeof *planned, cmp_str)) continue;
    bool head = !strcmp(name, "lm_head.weight") || !strcmp(name, "language_model.lm_head.weight");
    if (loom_hf_is_ignorable(name) || (tied && head)) {
      if (!example) example = name;
      ignored++;
      continue;
    }
    if (!file) file = loom_st_path(s->e[i].file), first = name;
    if (unknown < 5 && k < sizeof names)
      k += (size_t)snprintf(names + k, sizeof names - k, "%s'%s'", unknown ? ", " : "", name);
    unknown++;
  }
  free(planned);
  char more[32] = "";
  if (unknown > 5) snprintf(more, sizeof more, " and %d more", unknown - 5);
  if (unknown)
    return loom_err("%s: %d tensor%s %s not part of the model described by the config (unknown "
                    "names, or features loom lacks): %s%s%s; importing without them would lose "
                    "them: check that config.json matches the weights", unknown > 1 ? s->where
                    : file, unknown, unknown > 1 ? "s" : "", unknown > 1 ? "are" : "is", names,
                    more, unknown_hint(first));
  if (ignored)
    loom_log("note: ignored %d tensor%s that %s not model parameters (e.g. %s: attention-mask "
             "buffers, rotary tables, or the tied lm_head copy)", ignored, ignored > 1 ? "s" : "",
             ignored > 1 ? "are" : "is", example);
  return 0;
}

static void fmt_shape(char *buf, size_t cap, int nd, const int64_t *sh) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < nd && k < cap; d++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)sh[d]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* The balancing bias of loom's router (gate.e_score_correction_bias) when the model holds
 * one: a directory without any (the HF classes have none) gives zeros, which select exactly
 * as no bias does. */
static bool zero_bias_ok(const hf_source *s, const loom_hf_tensor *t, int n, const char *name) {
  if (!ends_with(name, ".gate.e_score_correction_bias")) return false;
  for (int j = 0; j < n; j++)
    if (ends_with(t[j].name, ".gate.e_score_correction_bias") &&
        hf_source_find(s, t[j].name) >= 0)
      return false;
  return true;
}

/* Every planned tensor is in the directory; the missing ones are named. */
static int check_missing(const hf_source *s, const loom_hf_tensor *t, int n) {
  int missing = 0, zero = 0;
  char names[400] = "";
  size_t k = 0;
  for (int j = 0; j < n; j++) {
    if (hf_source_find(s, t[j].name) >= 0) continue;
    if (zero_bias_ok(s, t, n, t[j].name)) {
      zero++;
      continue;
    }
    if (missing < 5 && k < sizeof names)
      k += (size_t)snprintf(names + k, sizeof names - k, "%s'%s'", missing ? ", " : "",
                            t[j].name);
    missing++;
  }
  if (zero)
    loom_log("note: %s has no router balancing bias (gate.e_score_correction_bias); the %d MoE "
             "layer%s start%s from a zero bias", s->where, zero, zero > 1 ? "s" : "",
             zero > 1 ? "" : "s");
  if (!missing) return 0;
  char more[32] = "";
  if (missing > 5) snprintf(more, sizeof more, " and %d more", missing - 5);
  return loom_err("%s: %d tensor%s of the model described by the config %s missing: %s%s; the "
                  "weights do not match the config (or the checkpoint is incomplete)", s->where,
                  missing, missing > 1 ? "s" : "", missing > 1 ? "are" : "is", names,
                  more);
}

/* Read every planned tensor (checked shape, converted to fp32) into params. */
static int read_tensors(const hf_source *s, const loom_hf_tensor *t, int n, float *params) {
  size_t max = 1;
  for (int k = 0; k < n; k++)
    if (loom_hf_numel(&t[k]) > max) max = loom_hf_numel(&t[k]);
  float *buf = loom_malloc_for(max * sizeof(float), "the largest Hugging Face tensor");
  hf_fused_cache cache = {0};
  int rc = 0;
  for (int k = 0; k < n && !rc; k++) {
    int i = hf_source_find(s, t[k].name);
    if (i < 0 && zero_bias_ok(s, t, n, t[k].name)) continue; /* params are zeroed */
    if (i < 0) {
      rc = loom_err("%s: tensor '%s' is missing; the weights do not match the config (or the "
                    "checkpoint is incomplete)", s->where, t[k].name);
      break;
    }
    const hf_entry *e = &s->e[i];
    bool same = e->ndim == t[k].ndim;
    for (int dd = 0; same && dd < e->ndim; dd++) same = e->shape[dd] == t[k].shape[dd];
    if (!same) {
      char got[96], want[96], whole[192] = "";
      fmt_shape(got, sizeof got, e->ndim, e->shape);
      fmt_shape(want, sizeof want, t[k].ndim, t[k].shape);
      if (e->fused) {
        char fs[96];
        fmt_shape(fs, sizeof fs, loom_st_ndim(e->file, e->index), loom_st_shape(e->file, e->index));
        snprintf(whole, sizeof whole, " (a slice of the fused '%s' %s)", e->fused, fs);
      }
      rc = loom_err("%s: tensor '%s'%s has shape %s but the config needs %s; the config does "
                    "not match the weights", loom_st_path(e->file), t[k].name, whole, got, want);
      break;
    }
    rc = hf_source_read(s, i, buf, &cache);
    if (!rc) loom_hf_scatter(&t[k], buf, params);
  }
  hf_fused_cache_free(&cache);
  free(buf);
  return rc;
}

/* The Hugging Face directory's tokenizer.json, if it has one, copied to TMP/tokenizer.json;
 * data.tokenizer then names it at its final place OUT/tokenizer.json. */
static int copy_tokenizer(const char *tmp, const char *hf_dir, const char *out,
                          loom_config *cfg) {
  char *src = loom_sprintf("%s/tokenizer.json", hf_dir), *data;
  size_t len;
  int rc = 0;
  if (loom_path_exists(src)) {
    char *dst = loom_sprintf("%s/tokenizer.json", tmp), *final = loom_sprintf("%s/tokenizer.json", out);
    rc = loom_read_file(src, &data, &len);
    if (!rc) rc = loom_write_file_atomic(dst, data, len), free(data);
    if (!rc && strlen(final) >= sizeof cfg->data.tokenizer)
      rc = loom_err("the path '%s' is too long for data.tokenizer", final);
    if (!rc) snprintf(cfg->data.tokenizer, sizeof cfg->data.tokenizer, "%s", final);
    free(dst), free(final);
  }
  free(src);
  return rc;
}

static int write_checkpoint(const char *tmp, const char *hf_dir, const char *out,
                            const loom_param_layout *lay, const float *params, loom_config *cfg) {
  int rc = loom_mkdir_p(tmp);
  if (!rc) rc = copy_tokenizer(tmp, hf_dir, out, cfg);
  loom_st_writer *w = loom_st_writer_create();
  loom_st_writer_set_metadata(w, "format", "loom");
  loom_st_writer_set_metadata(w, "loom.source", hf_dir);
  for (int i = 0; i < lay->count && !rc; i++) {
    const loom_param *p = &lay->params[i];
    int64_t shape[2] = {p->shape[0], p->shape[1]};
    rc = loom_st_writer_add(w, p->name, LOOM_DT_F32, p->ndim, shape, params + p->offset);
  }
  char *mpath = loom_sprintf("%s/model.safetensors", tmp);
  char *cpath = loom_sprintf("%s/config.yaml", tmp);
  if (!rc) rc = loom_st_writer_write(w, mpath);
  if (!rc) rc = loom_config_save(cfg, cpath);
  loom_st_writer_free(w);
  free(mpath), free(cpath);
  return rc;
}

static int import_from(hf_source *s, const char *hf_dir, const char *out,
                       const loom_hf_import_opts *o) {
  loom_arch arch = LOOM_ARCH_GPT2;
  loom_vision_arch vision = LOOM_VISION_NONE;
  loom_config cfg;
  loom_model_spec spec;
  hf_family f;
  if (detect_arch(s, &arch, &vision) || resolve_config(s, hf_dir, o, arch, vision, &cfg, &spec))
    return LOOM_ERR;
  if (vision == LOOM_VISION_NONE && hf_family_of(&spec, &f) == 0 && f == HF_MIXTRAL)
    hf_source_mixtral_names(s); /* transformers v5 files name Mixtral's block mlp.* */
  loom_err_clear();
  loom_param_layout lay;
  loom_param_layout_build(&lay, &spec);
  loom_hf_tensor *t = NULL;
  int n = 0;
  int rc = loom_hf_plan(&spec, &lay, &t, &n);
  if (!rc) rc = check_names(s, t, n, spec.tied_embeddings);
  if (!rc) rc = check_missing(s, t, n);
  /* zeroed: padding rows stay 0 */
  float *params = loom_alloc_for(lay.total * sizeof(float), "the imported model's weights");
  if (!rc) rc = read_tensors(s, t, n, params);
  if (!rc) {
    char *tmp = loom_tmp_path(out);
    loom_rm_rf(tmp);
    loom_oom_cleanup_add(tmp);
    rc = write_checkpoint(tmp, hf_dir, out, &lay, params, &cfg);
    if (!rc) rc = loom_rename_dir_atomic(tmp, out);
    if (rc) loom_rm_rf(tmp);
    loom_oom_cleanup_remove(tmp);
    free(tmp);
  }
  loom_free(params);
  free(t);
  loom_param_layout_free(&lay);
  return rc;
}

int loom_hf_dir_model(const char *dir, loom_config *cfg) {
  hf_source s;
  loom_arch arch = LOOM_ARCH_GPT2;
  loom_vision_arch vision = LOOM_VISION_NONE;
  loom_model_spec spec;
  loom_hf_import_opts o = {NULL, false};
  int rc = hf_source_open(&s, dir);
  if (!rc) rc = detect_arch(&s, &arch, &vision) || resolve_config(&s, dir, &o, arch, vision, cfg,
                                                                   &spec);
  hf_source_free(&s);
  return rc ? LOOM_ERR : 0;
}

int loom_hf_import(const char *hf_dir, const char *out_dir, const loom_hf_import_opts *o) {
  char *out = loom_hf_clean_dir(out_dir);
  hf_source s = {0};
  int rc = loom_hf_check_out(hf_dir, out, o->force);
  if (!rc) rc = hf_source_open(&s, hf_dir);
  if (!rc) rc = import_from(&s, hf_dir, out, o);
  if (rc) loom_err_prefix("importing '%s' to '%s': ", hf_dir, out);
  hf_source_free(&s);
  free(out);
  return rc;
}

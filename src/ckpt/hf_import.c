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

#include "loom/core.h"
#include "loom/hf.h"

/* Every tensor of the HF directory: its HF name (without GPT-2's "transformer." prefix), the
 * file holding it and its index there. `where` names the file to blame for a missing tensor. */
typedef struct {
  int nfiles, n;
  loom_st_file **files;
  char **names;
  loom_st_file **file_of;
  int *index;
  char *where;
} hf_source;

static void source_free(hf_source *s) {
  for (int i = 0; i < s->nfiles; i++) loom_st_close(s->files[i]);
  for (int i = 0; i < s->n; i++) free(s->names[i]);
  free(s->files), free(s->names), free(s->file_of), free(s->index), free(s->where);
  memset(s, 0, sizeof *s);
}

static void source_add(hf_source *s, const char *name, loom_st_file *f, int idx) {
  s->names = loom_realloc(s->names, (size_t)(s->n + 1), sizeof *s->names);
  s->file_of = loom_realloc(s->file_of, (size_t)(s->n + 1), sizeof *s->file_of);
  s->index = loom_realloc(s->index, (size_t)(s->n + 1), sizeof *s->index);
  if (!strncmp(name, "transformer.", 12)) name += 12;
  s->names[s->n] = loom_strdup(name);
  s->file_of[s->n] = f;
  s->index[s->n++] = idx;
}

static int source_find(const hf_source *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->names[i], name)) return i;
  return -1;
}

static loom_st_file *open_file(hf_source *s, const char *path) {
  loom_st_file *f;
  if (loom_st_open(&f, path)) return NULL;
  s->files = loom_realloc(s->files, (size_t)(s->nfiles + 1), sizeof *s->files);
  s->files[s->nfiles++] = f;
  return f;
}

/* Shards listed by index.json's weight_map (each opened once). */
static int open_sharded(hf_source *s, const char *dir, const char *ipath) {
  json_error_t e;
  json_t *o = json_load_file(ipath, 0, &e);
  if (!o)
    return loom_err("%s:%d:%d: not valid JSON (%s); re-download or regenerate the index",
                    ipath, e.line, e.column, e.text);
  json_t *map = json_object_get(o, "weight_map");
  int rc = 0;
  if (!json_is_object(map))
    rc = loom_err("%s: no \"weight_map\" object; a sharded checkpoint's index maps every "
                  "tensor name to its shard file", ipath);
  const char *name;
  json_t *v;
  json_object_foreach(map, name, v) {
    if (rc) break;
    const char *file = json_string_value(v);
    if (!file || !file[0] || strchr(file, '/')) {
      rc = loom_err("%s: weight_map[\"%s\"] must be a shard file name in the same directory",
                    ipath, name);
      break;
    }
    char *path = loom_sprintf("%s/%s", dir, file);
    loom_st_file *f = NULL;
    for (int i = 0; i < s->nfiles && !f; i++)
      if (!strcmp(loom_st_path(s->files[i]), path)) f = s->files[i];
    if (!f && !loom_path_exists(path))
      rc = loom_err("%s lists shard '%s' (for tensor '%s') but %s does not exist; copy every "
                    "shard of the checkpoint into '%s'", ipath, file, name, path, dir);
    else if (!f && !(f = open_file(s, path)))
      rc = LOOM_ERR;
    int idx = f ? loom_st_find(f, name) : -1;
    if (!rc && idx < 0)
      rc = loom_err("%s says tensor '%s' is in '%s', but that file has no such tensor; the "
                    "index and the shards do not belong together", ipath, name, path);
    if (!rc) source_add(s, name, f, idx);
    free(path);
  }
  json_decref(o);
  return rc;
}

/* transformers >= 4.52 saves VLMs with the language model and vision tower under "model.":
 * rename to the published layout (Qwen2.5-VL: visual.*, model.*; LLaVA: vision_tower.*,
 * multi_modal_projector.*, language_model.model.*, language_model.lm_head). */
static void source_normalize(hf_source *s) {
  bool qwen = false, llava = false;
  for (int i = 0; i < s->n; i++) {
    qwen |= !strncmp(s->names[i], "model.visual.", 13);
    llava |= !strncmp(s->names[i], "model.vision_tower.", 19) ||
             !strncmp(s->names[i], "model.multi_modal_projector.", 28);
  }
  if (qwen == llava) return;
  static const char *const map[][2][2] = {
      {{"model.visual.", "visual."}, {"model.language_model.", "model."}},
      {{"model.vision_tower.", "vision_tower."},
       {"model.language_model.", "language_model.model."}}};
  for (int i = 0; i < s->n; i++) {
    char *n = s->names[i], *renamed = NULL;
    for (int k = 0; k < 2 && !renamed; k++) {
      const char *from = map[llava][k][0], *to = map[llava][k][1];
      if (!strncmp(n, from, strlen(from))) renamed = loom_sprintf("%s%s", to, n + strlen(from));
    }
    if (llava && !strncmp(n, "model.multi_modal_projector.", 28)) renamed = loom_strdup(n + 6);
    if (llava && !strcmp(n, "lm_head.weight"))
      renamed = loom_strdup("language_model.lm_head.weight");
    if (renamed) free(s->names[i]), s->names[i] = renamed;
  }
}

static int source_open(hf_source *s, const char *dir) {
  memset(s, 0, sizeof *s);
  if (!loom_is_dir(dir))
    return loom_err("'%s' is not a directory; give a Hugging Face model directory holding "
                    "model.safetensors (or model.safetensors.index.json and its shards)", dir);
  char *single = loom_sprintf("%s/model.safetensors", dir);
  char *ipath = loom_sprintf("%s/model.safetensors.index.json", dir);
  int rc = 0;
  if (loom_path_exists(ipath)) {
    s->where = loom_strdup(ipath);
    rc = open_sharded(s, dir, ipath);
  } else if (loom_path_exists(single)) {
    s->where = loom_strdup(single);
    loom_st_file *f = open_file(s, single);
    if (!f) rc = LOOM_ERR;
    for (int i = 0; f && i < loom_st_count(f); i++) source_add(s, loom_st_name(f, i), f, i);
  } else {
    char *bin = loom_sprintf("%s/pytorch_model.bin", dir);
    rc = loom_err("'%s' holds neither model.safetensors nor model.safetensors.index.json%s", dir,
                  loom_path_exists(bin) ? "; it has pytorch_model.bin: re-save the model with "
                                          "save_pretrained(..., safe_serialization=True)" : "");
    free(bin);
  }
  free(single), free(ipath);
  if (!rc) source_normalize(s);
  return rc;
}

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
    if (!keep(s->names[i])) continue;
    if (count < 5 && k < cap)
      k += (size_t)snprintf(buf + k, cap - k, "%s'%s'", count ? ", " : "", s->names[i]);
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
    const char *n = s->names[i];
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
             s->names[i]);
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

/* Every HF tensor is a planned one or an ignorable buffer (noted); the others are named. */
static int check_names(const hf_source *s, const loom_hf_tensor *t, int n, bool tied) {
  int ignored = 0, unknown = 0;
  const char *example = NULL, *file = NULL;
  char names[400] = "";
  size_t k = 0;
  for (int i = 0; i < s->n; i++) {
    bool planned = false;
    for (int j = 0; j < n && !planned; j++) planned = !strcmp(t[j].name, s->names[i]);
    if (planned) continue;
    bool head = !strcmp(s->names[i], "lm_head.weight") ||
                !strcmp(s->names[i], "language_model.lm_head.weight");
    if (loom_hf_is_ignorable(s->names[i]) || (tied && head)) {
      if (!example) example = s->names[i];
      ignored++;
      continue;
    }
    if (!file) file = loom_st_path(s->file_of[i]);
    if (unknown < 5 && k < sizeof names)
      k += (size_t)snprintf(names + k, sizeof names - k, "%s'%s'", unknown ? ", " : "",
                            s->names[i]);
    unknown++;
  }
  char more[32] = "";
  if (unknown > 5) snprintf(more, sizeof more, " and %d more", unknown - 5);
  if (unknown)
    return loom_err("%s: %d tensor%s %s not part of the model described by the config (unknown "
                    "names, or features loom lacks): %s%s; importing without them would lose "
                    "them: check that config.json matches the weights", unknown > 1 ? s->where
                    : file, unknown, unknown > 1 ? "s" : "", unknown > 1 ? "are" : "is", names,
                    more);
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

/* Every planned tensor is in the directory; the missing ones are named. */
static int check_missing(const hf_source *s, const loom_hf_tensor *t, int n) {
  int missing = 0;
  char names[400] = "";
  size_t k = 0;
  for (int j = 0; j < n; j++) {
    if (source_find(s, t[j].name) >= 0) continue;
    if (missing < 5 && k < sizeof names)
      k += (size_t)snprintf(names + k, sizeof names - k, "%s'%s'", missing ? ", " : "",
                            t[j].name);
    missing++;
  }
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
  int rc = 0;
  for (int k = 0; k < n && !rc; k++) {
    int i = source_find(s, t[k].name);
    if (i < 0) {
      rc = loom_err("%s: tensor '%s' is missing; the weights do not match the config (or the "
                    "checkpoint is incomplete)", s->where, t[k].name);
      break;
    }
    const loom_st_file *f = s->file_of[i];
    int idx = s->index[i], nd = loom_st_ndim(f, idx);
    const int64_t *sh = loom_st_shape(f, idx);
    bool same = nd == t[k].ndim;
    for (int dd = 0; same && dd < nd; dd++) same = sh[dd] == t[k].shape[dd];
    if (!same) {
      char got[96], want[96];
      fmt_shape(got, sizeof got, nd, sh);
      fmt_shape(want, sizeof want, t[k].ndim, t[k].shape);
      rc = loom_err("%s: tensor '%s' has shape %s but the config needs %s; the config does not "
                    "match the weights", loom_st_path(f), t[k].name, got, want);
      break;
    }
    rc = loom_st_read_f32(f, loom_st_name(f, idx), buf, loom_hf_numel(&t[k]));
    if (!rc) loom_hf_scatter(&t[k], buf, params);
  }
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

static int import_from(const hf_source *s, const char *hf_dir, const char *out,
                       const loom_hf_import_opts *o) {
  loom_arch arch = LOOM_ARCH_GPT2;
  loom_vision_arch vision = LOOM_VISION_NONE;
  loom_config cfg;
  loom_model_spec spec;
  if (detect_arch(s, &arch, &vision) || resolve_config(s, hf_dir, o, arch, vision, &cfg, &spec))
    return LOOM_ERR;
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

int loom_hf_import(const char *hf_dir, const char *out_dir, const loom_hf_import_opts *o) {
  char *out = loom_hf_clean_dir(out_dir);
  hf_source s = {0};
  int rc = loom_hf_check_out(hf_dir, out, o->force);
  if (!rc) rc = source_open(&s, hf_dir);
  if (!rc) rc = import_from(&s, hf_dir, out, o);
  if (rc) loom_err_prefix("importing '%s' to '%s': ", hf_dir, out);
  source_free(&s);
  free(out);
  return rc;
}

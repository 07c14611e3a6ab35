/* `loom ckpt export`: a loom checkpoint directory -> a Hugging Face directory (HF tensor names
 * and layouts, F32 or BF16, sharded with model.safetensors.index.json when larger than the
 * shard size, config.json, and the run's tokenizer as tokenizer.json so that the directory
 * generates text as it is), written under OUT.tmp.<pid> and renamed into place. Every value
 * of the checkpoint is written or the export is refused (loom_hf_plan_check; vocabulary
 * padding rows must be zero): never a silent subset. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/checkpoint.h"
#include "loom/core.h"
#include "loom/hf.h"
#include "loom/tokenizer.h"

/* A VLM's special token ids from the run's tokenizer (data.tokenizer, else
 * data.vqa_path/tokenizer.json), or -1 with a note when none is found. */
static void find_token_ids(const loom_config *cfg, const loom_model_spec *spec,
                           loom_hf_token_ids *ids) {
  ids->image = ids->vision_start = ids->vision_end = -1;
  if (spec->vision.arch == LOOM_VISION_NONE) return;
  char *paths[2] = {loom_strdup(cfg->data.tokenizer),
                    cfg->data.vqa_path[0] ? loom_sprintf("%s/tokenizer.json", cfg->data.vqa_path)
                                          : loom_strdup("")};
  for (int i = 0; i < 2 && ids->image < 0; i++) {
    loom_tokenizer *t;
    if (!paths[i][0] || !loom_path_exists(paths[i]) || loom_tokenizer_load(&t, paths[i]))
      continue;
    ids->image = loom_tokenizer_token_id(t, "<|image_pad|>");
    ids->vision_start = loom_tokenizer_token_id(t, "<|vision_start|>");
    ids->vision_end = loom_tokenizer_token_id(t, "<|vision_end|>");
    loom_tokenizer_free(t);
  }
  if (ids->image < 0)
    loom_log("note: no tokenizer with <|image_pad|> found (data.tokenizer '%s', '%s'): "
             "config.json gets no image token id", paths[0], paths[1]);
  free(paths[0]), free(paths[1]);
}

/* The run's tokenizer file (data.tokenizer, else data.vqa_path/tokenizer.json; as for
 * find_token_ids) if one exists, else NULL. */
static char *find_tokenizer(const loom_config *cfg) {
  if (cfg->data.tokenizer[0] && loom_path_exists(cfg->data.tokenizer) &&
      !loom_is_dir(cfg->data.tokenizer))
    return loom_strdup(cfg->data.tokenizer);
  if (!cfg->data.vqa_path[0]) return NULL;
  char *p = loom_sprintf("%s/tokenizer.json", cfg->data.vqa_path);
  if (loom_path_exists(p)) return p;
  free(p);
  return NULL;
}

/* The model of a loom checkpoint directory: config.yaml -> spec -> layout, then weights;
 * *tokenizer: the run's tokenizer file or NULL. */
static int load_checkpoint(const char *dir, loom_model_spec *spec, loom_param_layout *lay,
                           float **params, loom_hf_token_ids *ids, char **tokenizer) {
  *params = NULL;
  if (!loom_is_dir(dir))
    return loom_err("checkpoint '%s' is not a directory (expected e.g. "
                    "runs/<id>/final_checkpoint)", dir);
  if (loom_ckpt_check_readable(dir)) return LOOM_ERR; /* its marker lists a missing file */
  char *cfg_path = loom_sprintf("%s/config.yaml", dir);
  loom_config cfg;
  loom_config_defaults(&cfg);
  int rc = 0;
  if (!loom_path_exists(cfg_path))
    rc = loom_err("%s does not exist: '%s' is not a loom checkpoint directory (it needs "
                  "config.yaml and model.safetensors)", cfg_path, dir);
  else if (loom_config_load(&cfg, cfg_path) || loom_model_spec_from_config(spec, &cfg.model))
    rc = loom_err_prefix("%s: ", cfg_path);
  free(cfg_path);
  if (rc) return rc;
  find_token_ids(&cfg, spec, ids);
  *tokenizer = find_tokenizer(&cfg);
  if (!*tokenizer)
    loom_log("note: the run's tokenizer (data.tokenizer '%s') does not exist: the export has no "
             "tokenizer.json (give `loom generate` --tokenizer)", cfg.data.tokenizer);
  loom_param_layout_build(lay, spec);
  *params = loom_alloc_for(lay->total * sizeof(float), "the model's weights");
  if (!loom_ckpt_is_multi_rank(dir)) return loom_weights_read(dir, spec, lay, *params);
  /* pieces written by several ranks: assemble whole tensors through a one-process decoder
   * (its layout is lay's; it also holds gradients, so this path needs ~3x the weights) */
  loom_decoder *d;
  if (loom_decoder_create(&d, spec, 1, 1, false, false)) return LOOM_ERR;
  rc = loom_ckpt_load_weights(dir, d);
  for (int i = 0; i < lay->count && !rc; i++) {
    const loom_param *p = &lay->params[i], *q = loom_param_find(&d->layout, p->name);
    LOOM_ASSERT(q && q->numel == p->numel);
    memcpy(*params + p->offset, d->params + q->offset, p->numel * sizeof(float));
  }
  loom_decoder_free(d);
  return rc;
}

/* Shard index of each tensor (greedy in order, HF's rule: a new shard when the next tensor
 * would overflow a non-empty one); returns the number of shards. */
static int assign_shards(const loom_hf_tensor *t, int n, size_t esize, int64_t max_bytes,
                         int *shard, int64_t *total) {
  int s = 0;
  int64_t cur = 0;
  *total = 0;
  for (int i = 0; i < n; i++) {
    int64_t b = (int64_t)(loom_hf_numel(&t[i]) * esize);
    if (cur > 0 && cur + b > max_bytes) {
      s++;
      cur = 0;
    }
    shard[i] = s;
    cur += b;
    *total += b;
  }
  return s + 1;
}

static char *shard_name(int s, int nshards) {
  if (nshards == 1) return loom_strdup("model.safetensors");
  return loom_sprintf("model-%05d-of-%05d.safetensors", s + 1, nshards);
}

/* Write shard s: gather its tensors into HF layout, convert, write. */
static int write_shard(const char *dir, const loom_hf_tensor *t, int n, const int *shard, int s,
                       int nshards, const float *params, loom_dtype dt) {
  loom_st_writer *w = loom_st_writer_create();
  loom_st_writer_set_metadata(w, "format", "pt");
  float **bufs = loom_calloc((size_t)n, sizeof *bufs);
  int rc = 0;
  for (int i = 0; i < n && !rc; i++) {
    if (shard[i] != s) continue;
    float *buf = loom_malloc_for(loom_hf_numel(&t[i]) * sizeof(float) + 1, "one exported tensor");
    loom_hf_gather(&t[i], params, buf);
    if (dt == LOOM_DT_BF16) {
      rc = loom_st_writer_add_bf16_from_f32(w, t[i].name, t[i].ndim, t[i].shape, buf);
      free(buf); /* the writer keeps its own bf16 copy */
    } else {
      bufs[i] = buf;
      rc = loom_st_writer_add(w, t[i].name, LOOM_DT_F32, t[i].ndim, t[i].shape, buf);
    }
  }
  char *name = shard_name(s, nshards);
  char *path = loom_sprintf("%s/%s", dir, name);
  if (!rc) rc = loom_st_writer_write(w, path);
  loom_st_writer_free(w);
  for (int i = 0; i < n; i++) free(bufs[i]);
  free(bufs), free(name), free(path);
  return rc;
}

static int write_index(const char *dir, const loom_hf_tensor *t, int n, const int *shard,
                       int nshards, int64_t total) {
  json_t *map = json_object();
  for (int i = 0; i < n; i++) {
    char *name = shard_name(shard[i], nshards);
    json_object_set_new(map, t[i].name, json_string(name));
    free(name);
  }
  json_t *o = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total,
                        "weight_map", map);
  char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  char *path = loom_sprintf("%s/model.safetensors.index.json", dir);
  int rc = loom_write_file_atomic(path, text, strlen(text));
  free(text), free(path);
  json_decref(o);
  return rc;
}

static int write_config(const char *dir, const loom_model_spec *spec, loom_dtype dt,
                        const loom_hf_token_ids *ids) {
  char *json = loom_hf_config_json_ids(spec, dt, ids);
  if (!json) return LOOM_ERR; /* the model maps to no Hugging Face class (the plan says why) */
  char *text = loom_sprintf("%s\n", json);
  char *path = loom_sprintf("%s/config.json", dir);
  int rc = loom_write_file_atomic(path, text, strlen(text));
  free(json);
  free(text), free(path);
  return rc;
}

/* HF's vocab_size rows hold the vocabulary; the padding rows beyond it must be zero (as loom
 * keeps them) or they would be lost. */
static int check_padding(const loom_model_spec *spec, const loom_param_layout *lay,
                         const float *params) {
  for (int i = 0; i < lay->count; i++) {
    const loom_param *p = &lay->params[i];
    if (strcmp(p->name, "embed.weight") && strcmp(p->name, "lm_head.weight")) continue;
    size_t from = (size_t)spec->vocab_size * (size_t)p->shape[1];
    for (size_t j = from; j < p->numel; j++)
      if (params[p->offset + j] != 0.0f)
        return loom_err("%s row %zu (vocabulary padding beyond vocab_size %d) holds %g; the "
                        "Hugging Face model has vocab_size rows only, so this value would be "
                        "lost", p->name, j / (size_t)p->shape[1], spec->vocab_size,
                        (double)params[p->offset + j]);
  }
  return 0;
}

/* A copy of the run's tokenizer.json (Hugging Face tokenizers format) as DIR/tokenizer.json. */
static int copy_tokenizer(const char *dir, const char *tokenizer) {
  char *data, *path = loom_sprintf("%s/tokenizer.json", dir);
  size_t len;
  int rc = loom_read_file(tokenizer, &data, &len);
  if (rc) loom_err_prefix("data.tokenizer: ");
  else rc = loom_write_file_atomic(path, data, len), free(data);
  free(path);
  return rc;
}

static int export_to(const char *tmp, const loom_model_spec *spec, const loom_param_layout *lay,
                     const float *params, const loom_hf_export_opts *o,
                     const loom_hf_token_ids *ids, const char *tokenizer) {
  loom_hf_tensor *t;
  int n;
  if (loom_hf_plan(spec, lay, &t, &n)) return LOOM_ERR;
  if (check_padding(spec, lay, params)) {
    free(t);
    return LOOM_ERR;
  }
  int *shard = loom_malloc((size_t)n * sizeof *shard);
  int64_t total;
  int nshards = assign_shards(t, n, loom_dtype_size(o->dtype), o->max_shard_bytes, shard, &total);
  int rc = loom_mkdir_p(tmp);
  for (int s = 0; s < nshards && !rc; s++)
    rc = write_shard(tmp, t, n, shard, s, nshards, params, o->dtype);
  if (!rc && nshards > 1) rc = write_index(tmp, t, n, shard, nshards, total);
  if (!rc) rc = write_config(tmp, spec, o->dtype, ids);
  if (!rc && tokenizer) rc = copy_tokenizer(tmp, tokenizer);
  free(shard);
  free(t);
  return rc;
}

int loom_hf_export(const char *ckpt_dir, const char *out_dir, const loom_hf_export_opts *o) {
  if (o->dtype != LOOM_DT_F32 && o->dtype != LOOM_DT_BF16)
    return loom_err("export dtype must be F32 or BF16, not %s", loom_dtype_name(o->dtype));
  if (o->max_shard_bytes <= 0) return loom_err("the maximum shard size must be positive");
  char *out = loom_hf_clean_dir(out_dir);
  int rc = loom_hf_check_out(ckpt_dir, out, o->force);
  loom_model_spec spec;
  loom_param_layout lay = {0};
  float *params = NULL;
  loom_hf_token_ids ids;
  char *tokenizer = NULL;
  if (!rc) rc = load_checkpoint(ckpt_dir, &spec, &lay, &params, &ids, &tokenizer);
  if (!rc) {
    char *tmp = loom_tmp_path(out);
    loom_rm_rf(tmp);
    loom_oom_cleanup_add(tmp);
    rc = export_to(tmp, &spec, &lay, params, o, &ids, tokenizer);
    if (!rc) rc = loom_rename_dir_atomic(tmp, out);
    if (rc) loom_rm_rf(tmp);
    loom_oom_cleanup_remove(tmp);
    free(tmp);
  }
  if (rc) loom_err_prefix("exporting '%s' to '%s': ", ckpt_dir, out);
  loom_free(params);
  loom_param_layout_free(&lay);
  free(out), free(tokenizer);
  return rc;
}

/* Token-shard and vision-language data behind one interface for the run driver. VQA batches
 * are copied out of the loader (whose buffers live only until its next call) so that a step
 * can hold grad_accum of them. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/config_schema.h"
#include "loom/core.h"
#include "loom/data_source.h"
#include "loom/image.h"
#include "loom/tokenizer_check.h"
#include "loom/vqa.h"

typedef struct {
  loom_vqa_batch b;   /* points into the arrays below */
  int cap_images;
  int64_t cap_patches;
} vqa_copy;

struct loom_data_source {
  const loom_config *cfg;
  int A, B, T;
  loom_loader *text;
  loom_vqa_loader *vqa;
  loom_tokenizer *tok;
  vqa_copy *copies;   /* (A) */
  int patch_dim;      /* values per patch of the encoder (1176 Qwen, 588 LLaVA) */
  uint64_t skipped;   /* bad samples skipped (this rank), including restored counts */
  const void **ptrs;  /* (A) */
  char describe[LOOM_STR_MAX + 160];
};

/* data.tokenizer, checked when training starts (nothing else in loom train reads it; export
 * and generate do): it exists, parses, fits the model's vocabulary and is the tokenizer the
 * shards were written with (include/loom/tokenizer_check.h, generate's checks). "" trains
 * without one, and so does the schema's default (the demo's tokenizer) when that file is
 * absent: *note says so. */
static int check_tokenizer(const loom_data_source *s, const loom_model_spec *spec,
                           const char *shards, const char **note) {
  const char *path = s->cfg->data.tokenizer;
  const loom_config_key *key = loom_config_key_find("data.tokenizer");
  *note = "";
  if (!path[0]) return 0;
  if (key && !strcmp(path, key->def) && !loom_path_exists(path)) {
    *note = "; no tokenizer (data.tokenizer, the default, does not exist)";
    return 0;
  }
  if (loom_tokenizer_check_exists("data.tokenizer", path)) {
    char *missing = loom_strdup(loom_errmsg());
    loom_err("%s: set it to the tokenizer.json the shards were made with, or "
             "data.tokenizer=\"\" to train without one", missing);
    free(missing);
    return LOOM_ERR;
  }
  loom_tokenizer *t;
  if (loom_tokenizer_load(&t, path)) return loom_err_prefix("data.tokenizer: ");
  int rc = loom_tokenizer_check_model(t, path, spec->vocab_size,
                                      " for this model (data.tokenizer; or model.vocab_size)");
  if (!rc) rc = loom_tokenizer_check_shards(t, path, loom_loader_vocab_size(s->text), shards);
  loom_tokenizer_free(t);
  return rc;
}

/* Token shards: the training data (path = data.train_shards, without the held-out tail when
 * data.val_fraction > 0), or validation data (val: data.val_shards, or that tail). */
static int open_tokens(loom_data_source *s, const loom_model_spec *spec, int r, int w,
                       bool val) {
  const loom_config *cfg = s->cfg;
  double frac = cfg->data.val_fraction;
  bool own = val && cfg->data.val_shards[0]; /* validation shards of their own */
  const char *path = own ? cfg->data.val_shards : cfg->data.train_shards;
  const char *key = own ? "data.val_shards" : "data.train_shards";
  int rc = frac > 0 && !own ? loom_loader_open_part(&s->text, path, s->B, s->T, r, w,
                                                    (uint64_t)cfg->run.seed, frac, val)
                            : loom_loader_open(&s->text, path, s->B, s->T, r, w,
                                               (uint64_t)cfg->run.seed);
  if (rc) return loom_err_prefix("%s: ", key);
  if (cfg->data.pack_documents && loom_loader_pack_documents(s->text))
    return loom_err_prefix("%s: ", key);
  int32_t max_tok = loom_loader_max_token(s->text);
  if (max_tok >= spec->vocab_size)
    return loom_err("%s '%s' holds token id %d but the model's vocabulary has "
                    "%d tokens; set model.vocab_size >= %d (or use the matching tokenizer)",
                    key, path, max_tok, spec->vocab_size, max_tok + 1);
  const char *note = "";
  if (!val && check_tokenizer(s, spec, path, &note)) return LOOM_ERR;
  snprintf(s->describe, sizeof s->describe, "%s%s, %" PRIu64 " tokens%s", path,
           frac > 0 && !own ? (val ? " (held-out tail)" : " (without the held-out tail)") : "",
           loom_loader_total_tokens(s->text), note);
  return 0;
}

/* VQA samples of `path` (its `split` for a prepared directory). */
static int open_vqa(loom_data_source *s, const loom_model_spec *spec, int r, int w,
                    const char *path, const char *split) {
  const loom_config *cfg = s->cfg;
  if (cfg->data.pack_documents) /* the vqa loader puts one sample per sequence */
    return loom_err("data.pack_documents packs documents of token shards; data.format vqa "
                    "puts one sample per sequence (cut or padded to training.seq_len) and packs "
                    "nothing: set data.pack_documents=false");
  if (spec->vision.arch == LOOM_VISION_NONE)
    return loom_err("data.format is vqa but model.preset '%s' has no vision encoder; pick a "
                    "vision-language preset (tiny-qwen2.5-vl, small-qwen2.5-vl, qwen2.5-vl-7b, ...)",
                    cfg->model.preset);
  const loom_vision_spec *v = &spec->vision;
  bool qwen = v->arch == LOOM_VISION_QWEN && v->merge == LOOM_IMG_MERGE &&
              v->patch == LOOM_IMG_PATCH && v->temporal == LOOM_IMG_TEMPORAL;
  bool llava = v->arch == LOOM_VISION_LLAVA && v->merge == 1 && v->patch == LOOM_IMG_PATCH &&
               v->temporal <= 1 && v->image_size % LOOM_IMG_PATCH == 0;
  if (!qwen && !llava)
    return loom_err("data.format vqa builds Qwen2.5-VL batches (14 px patches of 2 frames, 2x2 "
                    "merge) or LLaVA batches (fixed-size images, 14 px patches of one frame, no "
                    "merge), but model.preset '%s' has %d px patches of %d frame(s), merge %d; "
                    "pick a preset of either kind", cfg->model.preset, v->patch, v->temporal,
                    v->merge);
  s->patch_dim = loom_vision_patch_values(v);
  if (loom_tokenizer_load(&s->tok, cfg->data.tokenizer)) return loom_err_prefix("data.tokenizer: ");
  if (loom_tokenizer_check_model(s->tok, cfg->data.tokenizer, spec->vocab_size,
                                 " for this model (data.tokenizer; or model.vocab_size)"))
    return LOOM_ERR;
  loom_vqa_options o = {path, split, s->tok, s->T, s->B,
                        cfg->data.image_min_pixels, cfg->data.image_max_pixels, r, w,
                        (uint64_t)cfg->run.seed, cfg->data.skip_bad_samples,
                        llava ? v->image_size : 0};
  if (loom_vqa_loader_open(&s->vqa, &o))
    return loom_err_prefix("%s: ", path == cfg->data.vqa_path ? "data.vqa_path" : "data.val_shards");
  s->copies = loom_calloc((size_t)s->A, sizeof *s->copies);
  s->ptrs = loom_calloc((size_t)s->A, sizeof *s->ptrs);
  snprintf(s->describe, sizeof s->describe, "%s (%s), %" PRIu64 " samples", path,
           loom_is_dir(path) ? split : "all", loom_vqa_loader_num_samples(s->vqa));
  return 0;
}

static loom_data_source *new_source(const loom_config *cfg) {
  loom_data_source *s = loom_calloc(1, sizeof *s);
  s->cfg = cfg;
  s->A = (int)cfg->training.grad_accum;
  s->B = (int)cfg->training.micro_batch_size;
  s->T = (int)cfg->training.seq_len;
  return s;
}

int loom_data_open(loom_data_source **out, const loom_config *cfg, const loom_model_spec *spec,
                   int dp_rank, int dp) {
  loom_data_source *s = new_source(cfg);
  int rc = !strcmp(cfg->data.format, "vqa")
               ? open_vqa(s, spec, dp_rank, dp, cfg->data.vqa_path, cfg->data.split)
               : open_tokens(s, spec, dp_rank, dp, false);
  if (rc) {
    loom_data_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

/* Samples in the val split of a prepared vqa directory (0 when it has none). */
static int vqa_val_count(const loom_config *cfg, size_t *n) {
  loom_vqa_dataset *d;
  uint64_t bad = 0;
  if (loom_vqa_dataset_open(&d, cfg->data.vqa_path, "val", cfg->data.skip_bad_samples, &bad))
    return loom_err_prefix("data.vqa_path (val split): ");
  *n = loom_vqa_dataset_count(d);
  loom_vqa_dataset_close(d);
  return 0;
}

int loom_data_open_val(loom_data_source **out, const loom_config *cfg,
                       const loom_model_spec *spec, int dp_rank, int dp) {
  *out = NULL;
  const loom_config_data *dc = &cfg->data;
  const loom_config_training *t = &cfg->training;
  bool vqa = !strcmp(dc->format, "vqa"), asked = t->eval_every > 0 || t->eval_batches > 0;
  /* both keys, or val_fraction with vqa data: refused by loom_config_validate */
  const char *vqa_path = dc->val_shards[0] ? dc->val_shards : dc->vqa_path;
  if (vqa && !dc->val_shards[0]) { /* a prepared directory's val split, if it has one */
    size_t n = 0;
    if (!loom_is_dir(dc->vqa_path) && asked)
      return loom_err("training.eval_every/eval_batches are set but data.vqa_path '%s' is an "
                      "annotation file with no val split; give validation samples with "
                      "data.val_shards", dc->vqa_path);
    if (!loom_is_dir(dc->vqa_path)) return 0;
    if (!strcmp(dc->split, "val"))
      return asked ? loom_err("data.split is val: training reads the val split, so it cannot "
                              "also be the validation data; train on the train split or give "
                              "data.val_shards") : 0;
    if (vqa_val_count(cfg, &n)) { /* e.g. an empty val split: an error only when asked */
      if (asked) return LOOM_ERR;
      loom_err_clear();
      return 0;
    }
    if (n == 0 && asked)
      return loom_err("training.eval_every/eval_batches are set but the val split of "
                      "data.vqa_path '%s' is empty; prepare the data with a val ratio or "
                      "give data.val_shards", dc->vqa_path);
    /* no evaluation asked for: a val split smaller than one batch is no validation data */
    size_t batch = (size_t)t->micro_batch_size * (size_t)t->grad_accum * (size_t)dp;
    if (n < batch && !asked) return 0;
  } else if (!vqa && !dc->val_shards[0] && dc->val_fraction <= 0) {
    if (asked)
      return loom_err("training.eval_every/eval_batches are set but there is no validation "
                      "data; set data.val_shards (token shards) or data.val_fraction (a "
                      "held-out fraction of data.train_shards)");
    return 0;
  }
  loom_data_source *s = new_source(cfg);
  int rc = vqa ? open_vqa(s, spec, dp_rank, dp, vqa_path, "val")
               : open_tokens(s, spec, dp_rank, dp, true);
  if (rc) {
    loom_data_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

uint64_t loom_data_batches_per_epoch(const loom_data_source *s) {
  uint64_t calls = s->text ? loom_loader_batches_per_epoch(s->text)
                           : loom_vqa_loader_batches_per_epoch(s->vqa);
  return calls / (uint64_t)s->A;
}

#define GROW(ptr, n) ((ptr) = loom_realloc((ptr), (size_t)(n), sizeof *(ptr)))

static void copy_batch(vqa_copy *c, const loom_vqa_batch *b, size_t pdim) {
  loom_vqa_batch *d = &c->b;
  size_t BT = (size_t)b->B * b->T;
  if (!d->input_ids) { /* fixed-size parts */
    GROW(d->input_ids, BT), GROW(d->targets, BT), GROW(d->position_ids, 3 * BT);
  }
  if (b->n_images > c->cap_images) {
    c->cap_images = b->n_images;
    GROW(d->grid_thw, 3 * b->n_images), GROW(d->image_row, b->n_images);
    GROW(d->image_token_offset, b->n_images), GROW(d->image_tokens, b->n_images);
  }
  if (b->total_patches > c->cap_patches) {
    c->cap_patches = b->total_patches;
    GROW(d->pixel_values, (size_t)b->total_patches * pdim);
  }
  d->B = b->B, d->T = b->T, d->n_images = b->n_images, d->total_patches = b->total_patches;
  d->n_targets = b->n_targets;
  memcpy(d->input_ids, b->input_ids, BT * sizeof(int32_t));
  memcpy(d->targets, b->targets, BT * sizeof(int32_t));
  memcpy(d->position_ids, b->position_ids, 3 * BT * sizeof(int32_t));
  memcpy(d->grid_thw, b->grid_thw, (size_t)3 * b->n_images * sizeof(int32_t));
  memcpy(d->image_row, b->image_row, (size_t)b->n_images * sizeof(int32_t));
  memcpy(d->image_token_offset, b->image_token_offset, (size_t)b->n_images * sizeof(int32_t));
  memcpy(d->image_tokens, b->image_tokens, (size_t)b->n_images * sizeof(int32_t));
  memcpy(d->pixel_values, b->pixel_values, (size_t)b->total_patches * pdim * sizeof(float));
}

int loom_data_next(loom_data_source *s, int32_t *tokens, int32_t *targets, const void **vqa) {
  size_t BT = (size_t)s->B * s->T;
  for (int a = 0; a < s->A; a++) {
    if (s->text) {
      if (loom_loader_next(s->text, tokens + a * BT, targets + a * BT)) return LOOM_ERR;
      continue;
    }
    loom_vqa_batch b;
    if (loom_vqa_loader_next(s->vqa, &b)) return LOOM_ERR;
    copy_batch(&s->copies[a], &b, (size_t)s->patch_dim);
    s->skipped += b.skipped_bad;
    memcpy(tokens + a * BT, b.input_ids, BT * sizeof(int32_t));
    memcpy(targets + a * BT, b.targets, BT * sizeof(int32_t));
    s->ptrs[a] = &s->copies[a].b;
  }
  if (vqa && s->vqa) memcpy(vqa, s->ptrs, (size_t)s->A * sizeof *vqa);
  return 0;
}

void loom_data_get_state(const loom_data_source *s, loom_loader_state *st) {
  if (s->text) {
    loom_loader_get_state(s->text, st);
    return;
  }
  loom_vqa_state v;
  loom_vqa_loader_get_state(s->vqa, &v);
  st->epoch = v.epoch;
  st->index = v.index;
}

int loom_data_set_state(loom_data_source *s, const loom_loader_state *st) {
  if (s->text) return loom_loader_set_state(s->text, st);
  loom_vqa_state v = {st->epoch, st->index, 0};
  return loom_vqa_loader_set_state(s->vqa, &v);
}

const char *loom_data_describe(const loom_data_source *s) { return s->describe; }

uint64_t loom_data_skipped(const loom_data_source *s, const char **last) {
  if (last) *last = s->vqa ? loom_vqa_loader_last_skip(s->vqa) : "";
  return s->skipped;
}

void loom_data_add_skipped(loom_data_source *s, uint64_t n) { s->skipped += n; }
int loom_data_is_vqa(const loom_data_source *s) { return s->vqa != NULL; }
int32_t loom_data_doc_eod(const loom_data_source *s) {
  return s->text ? loom_loader_doc_eod(s->text) : -1;
}

void loom_data_close(loom_data_source *s) {
  if (!s) return;
  if (s->text) loom_loader_close(s->text);
  if (s->vqa) loom_vqa_loader_close(s->vqa);
  if (s->tok) loom_tokenizer_free(s->tok);
  for (int a = 0; s->copies && a < s->A; a++) {
    loom_vqa_batch *d = &s->copies[a].b;
    free(d->input_ids), free(d->targets), free(d->position_ids), free(d->grid_thw);
    free(d->image_row), free(d->image_token_offset), free(d->image_tokens), free(d->pixel_values);
  }
  free(s->copies);
  free(s->ptrs);
  free(s);
}

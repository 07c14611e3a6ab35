/* The vision-language batch loader (contract in include/loom/vqa.h): epoch shuffles dealt
 * to data-parallel ranks as in the text loader; per sample: read, decode and patchify the
 * images, apply the chat template, cut or pad to T, targets on answers only, M-RoPE ids;
 * bad samples stop the call or are skipped and counted. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/vqa.h"

#define MAX_SKIP_LOGS 20

struct loom_vqa_loader {
  loom_vqa_options o;
  char *path, *split;
  loom_vqa_dataset *ds;
  loom_vqa_special sp;
  uint64_t N, S, bad_shards, order_epoch, skip_logs;
  uint64_t *order;
  uint8_t *bad; /* 1: known bad sample */
  loom_vqa_state st;
  char *last_skip;
  /* batch storage (B, T) and (3, B, T) */
  int32_t *input_ids, *targets, *mask, *pos, *deltas, *lengths, *ips;
  char **keys;
  /* per image, grown as needed */
  float *pix;
  int64_t pix_cap, total_patches;
  int n_images, img_cap;
  int32_t *grid, *row, *tok_off, *tokens;
  int64_t *patch_off;
  int64_t n_targets;
  int truncated;
};

int loom_vqa_loader_open(loom_vqa_loader **out, const loom_vqa_options *o) {
  *out = NULL;
  if (o->seq_len < 2 || o->micro_batch < 1 || o->world < 1 || o->rank < 0 || o->rank >= o->world)
    return loom_err("vqa loader: need seq_len >= 2 (got %d), micro_batch >= 1 (got %d) and "
                    "0 <= rank < world (got %d of %d)", o->seq_len, o->micro_batch, o->rank,
                    o->world);
  if (!o->tokenizer) return loom_err("vqa loader: no tokenizer given (data.tokenizer)");
  loom_vqa_loader *l = loom_calloc(1, sizeof *l);
  l->o = *o;
  if (!l->o.min_pixels) l->o.min_pixels = LOOM_IMG_MIN_PIXELS_DEFAULT;
  if (!l->o.max_pixels) l->o.max_pixels = LOOM_IMG_MAX_PIXELS_DEFAULT;
  l->path = loom_strdup(o->path ? o->path : "");
  l->split = loom_strdup(o->split ? o->split : "train");
  l->o.path = l->path;
  l->o.split = l->split;
  int rc = loom_vqa_special_ids(o->tokenizer, &l->sp);
  int sr, sw;
  if (rc == 0) /* check the pixel limits once, up front */
    rc = loom_smart_resize(28, 28, l->o.min_pixels, l->o.max_pixels, "limits", &sr, &sw);
  if (rc == 0) rc = loom_vqa_dataset_open(&l->ds, l->path, l->split, o->skip_bad, &l->bad_shards);
  if (rc == 0) {
    l->N = loom_vqa_dataset_count(l->ds);
    uint64_t per_call = (uint64_t)o->micro_batch * (uint64_t)o->world;
    l->S = l->N / per_call;
    if (l->S == 0)
      rc = loom_err("%s (split %s) holds %llu samples, fewer than one call needs: micro_batch "
                    "%d x data-parallel ranks %d = %llu", l->path, l->split,
                    (unsigned long long)l->N, o->micro_batch, o->world,
                    (unsigned long long)per_call);
  }
  if (rc) {
    loom_vqa_loader_close(l);
    return -1;
  }
  size_t BT = (size_t)o->micro_batch * (size_t)o->seq_len;
  l->order = loom_malloc(l->N * sizeof *l->order);
  l->bad = loom_calloc(l->N, 1);
  l->input_ids = loom_malloc(BT * sizeof(int32_t));
  l->targets = loom_malloc(BT * sizeof(int32_t));
  l->mask = loom_malloc(BT * sizeof(int32_t));
  l->pos = loom_malloc(3 * BT * sizeof(int32_t));
  l->deltas = loom_calloc((size_t)o->micro_batch, sizeof(int32_t));
  l->lengths = loom_calloc((size_t)o->micro_batch, sizeof(int32_t));
  l->ips = loom_calloc((size_t)o->micro_batch, sizeof(int32_t));
  l->keys = loom_calloc((size_t)o->micro_batch, sizeof(char *));
  l->order_epoch = UINT64_MAX;
  l->last_skip = loom_strdup("");
  *out = l;
  return 0;
}

static void make_order(loom_vqa_loader *l) {
  if (l->order_epoch == l->st.epoch) return;
  for (uint64_t i = 0; i < l->N; i++) l->order[i] = i;
  loom_rng rng;
  loom_rng_seed(&rng, l->o.seed ^ (0x9E3779B97F4A7C15ull * (l->st.epoch + 1)));
  for (uint64_t i = l->N - 1; i >= 1; i--) {
    uint64_t j = loom_rng_below(&rng, i + 1), t = l->order[i];
    l->order[i] = l->order[j];
    l->order[j] = t;
  }
  l->order_epoch = l->st.epoch;
}

/* Values per patch: Qwen's two frames, or one frame for fixed-size (LLaVA-style) images. */
static size_t patch_dim(const loom_vqa_loader *l) {
  return l->o.fixed_size > 0 ? LOOM_IMG_PATCH_DIM_FIXED : LOOM_IMG_PATCH_DIM;
}

/* Room for one more image of `patches` rows. */
static void grow_images(loom_vqa_loader *l, int64_t patches) {
  if (l->n_images == l->img_cap) {
    l->img_cap = l->img_cap ? 2 * l->img_cap : 16;
    size_t c = (size_t)l->img_cap;
    l->grid = loom_realloc(l->grid, 3 * c, sizeof *l->grid);
    l->row = loom_realloc(l->row, c, sizeof *l->row);
    l->tok_off = loom_realloc(l->tok_off, c, sizeof *l->tok_off);
    l->tokens = loom_realloc(l->tokens, c, sizeof *l->tokens);
    l->patch_off = loom_realloc(l->patch_off, c, sizeof *l->patch_off);
  }
  if (l->total_patches + patches > l->pix_cap) {
    l->pix_cap = 2 * (l->total_patches + patches);
    l->pix = loom_realloc(l->pix, (size_t)l->pix_cap * patch_dim(l), sizeof(float));
  }
}

typedef struct {
  int n;
  float **patches;
  loom_vision_grid *g;
  long *tokens;
  int *w, *h;
} prepared;

static void prepared_free(prepared *p) {
  for (int k = 0; k < p->n; k++) free(p->patches[k]);
  free(p->patches);
  free(p->g);
  free(p->tokens);
  free(p->w);
  free(p->h);
}

static int prepare_images(const loom_vqa_loader *l, const loom_vqa_sample *s, prepared *p) {
  int n = s->n_images;
  memset(p, 0, sizeof *p);
  p->patches = loom_calloc((size_t)n + 1, sizeof *p->patches);
  p->g = loom_calloc((size_t)n + 1, sizeof *p->g);
  p->tokens = loom_calloc((size_t)n + 1, sizeof *p->tokens);
  p->w = loom_calloc((size_t)n + 1, sizeof *p->w);
  p->h = loom_calloc((size_t)n + 1, sizeof *p->h);
  for (int k = 0; k < n; k++) {
    char *where = n > 1 ? loom_sprintf("%s, image %d", s->where, k) : loom_strdup(s->where);
    int rc = l->o.fixed_size > 0
                 ? loom_image_prepare_fixed(s->images[k], s->image_len[k], l->o.fixed_size, where,
                                            &p->patches[k], &p->g[k], &p->w[k], &p->h[k])
                 : loom_image_prepare(s->images[k], s->image_len[k], l->o.min_pixels,
                                      l->o.max_pixels, where, &p->patches[k], &p->g[k], &p->w[k],
                                      &p->h[k]);
    free(where);
    if (rc) return -1;
    p->tokens[k] = p->g[k].tokens;
    p->n = k + 1;
  }
  return 0;
}

/* Check that the prompt with its images fits in T. */
static int check_fit(const loom_vqa_loader *l, const loom_vqa_sample *s, const prepared *p,
                     const loom_vqa_seq *q) {
  if (q->prompt_end <= (size_t)l->o.seq_len) return 0;
  long vt = 0;
  for (int k = 0; k < p->n; k++) vt += p->tokens[k];
  return loom_err("%s: the prompt up to its last image is %zu tokens (%d image%s: %dx%d px -> "
                  "%ld vision tokens%s), more than seq_len %d: raise training.seq_len%s",
                  s->where, q->prompt_end, p->n, p->n == 1 ? "" : "s", p->w[0], p->h[0], vt,
                  p->n > 1 ? " in all" : "", l->o.seq_len,
                  l->o.fixed_size > 0 ? " (the encoder takes fixed-size images)"
                                      : " or lower data.image_max_pixels");
}

/* Write row b from a sample's sequence and prepared images. */
static int write_row(loom_vqa_loader *l, int b, const loom_vqa_sample *s, const prepared *p,
                     const loom_vqa_seq *q) {
  const int T = l->o.seq_len, B = l->o.micro_batch;
  int32_t *in = l->input_ids + (size_t)b * T, *tg = l->targets + (size_t)b * T,
          *mk = l->mask + (size_t)b * T;
  int len = q->n < (size_t)T ? (int)q->n : T;
  for (int t = 0; t < T; t++) {
    in[t] = t < len ? q->ids[t] : l->sp.pad;
    mk[t] = t < len;
    size_t nx = (size_t)t + 1;
    tg[t] = nx < q->n && q->is_target[nx] ? q->ids[nx] : LOOM_VQA_IGNORE;
    if (tg[t] != LOOM_VQA_IGNORE) l->n_targets++;
  }
  for (size_t i = (size_t)T + 1; i < q->n; i++)
    if (q->is_target[i]) {
      l->truncated++;
      break;
    }
  int first = l->n_images;
  for (int k = 0; k < p->n; k++) {
    grow_images(l, p->g[k].patches);
    int m = l->n_images++;
    l->grid[3 * m] = p->g[k].grid_t;
    l->grid[3 * m + 1] = p->g[k].grid_h;
    l->grid[3 * m + 2] = p->g[k].grid_w;
    l->row[m] = b;
    l->tok_off[m] = (int32_t)q->image_start[k];
    l->tokens[m] = (int32_t)p->tokens[k];
    l->patch_off[m] = l->total_patches;
    memcpy(l->pix + (size_t)l->total_patches * patch_dim(l), p->patches[k],
           (size_t)p->g[k].patches * patch_dim(l) * sizeof(float));
    l->total_patches += p->g[k].patches;
  }
  l->ips[b] = p->n;
  l->lengths[b] = len;
  free(l->keys[b]);
  l->keys[b] = loom_strdup(s->key);
  if (l->o.fixed_size > 0) { /* 1D positions in all three rows (the model has no M-RoPE) */
    for (int k = 0; k < 3; k++)
      for (int t = 0; t < T; t++) l->pos[(size_t)k * B * T + (size_t)b * T + t] = t < len ? t : 1;
    l->deltas[b] = 0;
    return 0;
  }
  return loom_vqa_mrope(in, T, len, &l->sp, l->grid + 3 * first, p->n, l->pos + (size_t)b * T,
                        (size_t)B * T, &l->deltas[b]);
}

/* Read sample idx into row b; -1 (with the message) when the sample is bad. */
static int fill_row(loom_vqa_loader *l, int b, uint64_t idx) {
  loom_vqa_sample s;
  prepared p = {0};
  loom_vqa_seq q = {0};
  int rc = loom_vqa_dataset_get(l->ds, (size_t)idx, &s);
  if (rc) return -1;
  rc = prepare_images(l, &s, &p);
  if (rc == 0) rc = loom_vqa_build_seq(l->o.tokenizer, &l->sp, &s, p.tokens, &q);
  if (rc == 0) rc = check_fit(l, &s, &p, &q);
  if (rc == 0) rc = write_row(l, b, &s, &p, &q);
  loom_vqa_seq_free(&q);
  prepared_free(&p);
  loom_vqa_sample_free(&s);
  return rc;
}

static void note_skip(loom_vqa_loader *l) {
  free(l->last_skip);
  l->last_skip = loom_strdup(loom_errmsg());
  if (l->skip_logs++ < MAX_SKIP_LOGS)
    loom_log("data: skipping bad sample (data.skip_bad_samples): %s", l->last_skip);
  else if (l->skip_logs == MAX_SKIP_LOGS + 1)
    loom_log("data: more bad samples skipped; counted in skipped_bad");
}

int loom_vqa_loader_next(loom_vqa_loader *l, loom_vqa_batch *b) {
  const int B = l->o.micro_batch;
  make_order(l);
  l->n_images = 0;
  l->total_patches = 0;
  l->n_targets = 0;
  l->truncated = 0;
  uint64_t skipped = 0;
  for (int r = 0; r < B; r++) {
    uint64_t p = (l->st.index * (uint64_t)B + (uint64_t)r) * (uint64_t)l->o.world +
                 (uint64_t)l->o.rank;
    for (uint64_t j = 0;; j++) {
      if (j >= l->N)
        return loom_err("every sample of %s (split %s) is bad; the last one: %s", l->path,
                        l->split, l->last_skip);
      uint64_t idx = l->order[(p + j) % l->N];
      if (l->bad[idx]) {
        skipped++;
        continue;
      }
      if (fill_row(l, r, idx) == 0) break;
      if (!l->o.skip_bad) return -1; /* the message names the sample; state unchanged */
      l->bad[idx] = 1;
      skipped++;
      note_skip(l);
    }
  }
  l->st.skipped_bad += skipped;
  if (++l->st.index == l->S) {
    l->st.epoch++;
    l->st.index = 0;
  }
  memset(b, 0, sizeof *b);
  b->B = B;
  b->T = l->o.seq_len;
  b->input_ids = l->input_ids;
  b->targets = l->targets;
  b->attention_mask = l->mask;
  b->position_ids = l->pos;
  b->rope_deltas = l->deltas;
  b->lengths = l->lengths;
  b->images_per_sample = l->ips;
  b->n_images = l->n_images;
  b->total_patches = l->total_patches;
  b->pixel_values = l->pix;
  b->grid_thw = l->grid;
  b->image_row = l->row;
  b->image_patch_offset = l->patch_off;
  b->image_token_offset = l->tok_off;
  b->image_tokens = l->tokens;
  b->n_targets = l->n_targets;
  b->truncated = l->truncated;
  b->skipped_bad = skipped;
  b->skipped_bad_total = l->st.skipped_bad;
  b->keys = (const char *const *)l->keys;
  return 0;
}

void loom_vqa_loader_get_state(const loom_vqa_loader *l, loom_vqa_state *s) { *s = l->st; }

int loom_vqa_loader_set_state(loom_vqa_loader *l, const loom_vqa_state *s) {
  if (s->index >= l->S)
    return loom_err("vqa loader state index %llu is outside the %llu batches per epoch of %s: "
                    "the data, micro_batch or data-parallel width changed since the state was "
                    "saved", (unsigned long long)s->index, (unsigned long long)l->S, l->path);
  l->st = *s;
  return 0;
}

uint64_t loom_vqa_loader_num_samples(const loom_vqa_loader *l) { return l->N; }
uint64_t loom_vqa_loader_batches_per_epoch(const loom_vqa_loader *l) { return l->S; }
uint64_t loom_vqa_loader_bad_shards(const loom_vqa_loader *l) { return l->bad_shards; }
const char *loom_vqa_loader_last_skip(const loom_vqa_loader *l) { return l->last_skip; }

void loom_vqa_loader_close(loom_vqa_loader *l) {
  if (!l) return;
  loom_vqa_dataset_close(l->ds);
  for (int b = 0; l->keys && b < l->o.micro_batch; b++) free(l->keys[b]);
  free(l->keys);
  free(l->path);
  free(l->split);
  free(l->order);
  free(l->bad);
  free(l->last_skip);
  free(l->input_ids);
  free(l->targets);
  free(l->mask);
  free(l->pos);
  free(l->deltas);
  free(l->lengths);
  free(l->ips);
  free(l->pix);
  free(l->grid);
  free(l->row);
  free(l->tok_off);
  free(l->tokens);
  free(l->patch_off);
  free(l);
}

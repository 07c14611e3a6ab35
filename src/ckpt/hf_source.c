/* The tensors of a Hugging Face directory for `loom ckpt import` (hf_source.h): one
 * model.safetensors or the shards of model.safetensors.index.json, names normalised (GPT-2's
 * "transformer." prefix; the "model." prefixes transformers >= 4.52 gives VLMs), and
 * transformers v5's fused expert tensors split into the per-expert tensors of 4.x:
 *   {P}.experts.gate_up_proj [E, 2I, H] -> {P}.experts.{e}.gate_proj.weight = rows [0, I) of
 *                                          expert e, up_proj.weight = rows [I, 2I)
 *   {P}.experts.down_proj [E, H, I]     -> {P}.experts.{e}.down_proj.weight = expert e
 * (transformers' conversion_mapping: MergeModulelist(dim=0) then Concatenate(dim=1) of
 * gate_proj and up_proj; the experts compute act(x gate^T) * (x up^T) after
 * linear(x, gate_up_proj[e]).chunk(2, dim=-1)). Each slice is contiguous in the fused tensor. */
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hf_source.h"
#include "loom/core.h"

void hf_source_free(hf_source *s) {
  for (int i = 0; i < s->nfiles; i++) loom_st_close(s->files[i]);
  for (int i = 0; i < s->n; i++) free(s->e[i].name), free(s->e[i].fused);
  free(s->files), free(s->e), free(s->order), free(s->where);
  memset(s, 0, sizeof *s);
}

/* A whole tensor of file f (or, with fused, a slice given by the caller afterwards). */
static hf_entry *add(hf_source *s, const char *name, loom_st_file *f, int idx) {
  s->e = loom_realloc(s->e, (size_t)(s->n + 1), sizeof *s->e);
  hf_entry *e = &s->e[s->n++];
  memset(e, 0, sizeof *e);
  if (!strncmp(name, "transformer.", 12)) name += 12;
  e->name = loom_strdup(name);
  e->file = f;
  e->index = idx;
  e->ndim = loom_st_ndim(f, idx);
  if (e->ndim > LOOM_HF_MAX_DIMS) e->ndim = LOOM_HF_MAX_DIMS + 1; /* never matches a plan */
  for (int d = 0; d < e->ndim && d < LOOM_HF_MAX_DIMS; d++) e->shape[d] = loom_st_shape(f, idx)[d];
  return e;
}

/* qsort_r is not C11: the entries being sorted are passed through this file's one slot */
static const hf_source *sorting;
static int by_name(const void *a, const void *b) {
  return strcmp(sorting->e[*(const int *)a].name, sorting->e[*(const int *)b].name);
}

static void reindex(hf_source *s) {
  s->order = loom_realloc(s->order, (size_t)s->n + 1, sizeof *s->order);
  for (int i = 0; i < s->n; i++) s->order[i] = i;
  sorting = s;
  qsort(s->order, (size_t)s->n, sizeof *s->order, by_name);
  sorting = NULL;
}

int hf_source_find(const hf_source *s, const char *name) {
  if (!s->order) { /* while the source is being built */
    for (int i = 0; i < s->n; i++)
      if (!strcmp(s->e[i].name, name)) return i;
    return -1;
  }
  int lo = 0, hi = s->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(s->e[s->order[mid]].name, name);
    if (!c) return s->order[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
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
    return loom_err("%s:%d:%d: not valid JSON (%s); re-download or regenerate the index", ipath,
                    e.line, e.column, e.text);
  json_t *map = json_object_get(o, "weight_map");
  int rc = 0;
  if (!json_is_object(map))
    rc = loom_err("%s: no \"weight_map\" object; a sharded checkpoint's index maps every "
                  "tensor name to its shard file",
                  ipath);
  const char *name;
  json_t *v;
  json_object_foreach(map, name, v) {
    if (rc) break;
    const char *file = json_string_value(v);
    if (!file || !file[0] || strchr(file, '/')) {
      rc = loom_err("%s: weight_map[\"%s\"] must be a shard file name in the same directory", ipath,
                    name);
      break;
    }
    char *path = loom_sprintf("%s/%s", dir, file);
    loom_st_file *f = NULL;
    for (int i = 0; i < s->nfiles && !f; i++)
      if (!strcmp(loom_st_path(s->files[i]), path)) f = s->files[i];
    if (!f && !loom_path_exists(path))
      rc = loom_err("%s lists shard '%s' (for tensor '%s') but %s does not exist; copy every "
                    "shard of the checkpoint into '%s'",
                    ipath, file, name, path, dir);
    else if (!f && !(f = open_file(s, path))) rc = LOOM_ERR;
    int idx = f ? loom_st_find(f, name) : -1;
    if (!rc && idx < 0)
      rc = loom_err("%s says tensor '%s' is in '%s', but that file has no such tensor; the "
                    "index and the shards do not belong together",
                    ipath, name, path);
    if (!rc) add(s, name, f, idx);
    free(path);
  }
  json_decref(o);
  return rc;
}

/* transformers >= 4.52 saves VLMs with the language model and vision tower under "model.":
 * rename to the published layout (Qwen2.5-VL: visual.*, model.*; LLaVA: vision_tower.*,
 * multi_modal_projector.*, language_model.model.*, language_model.lm_head). */
static void normalize_vlm(hf_source *s) {
  bool qwen = false, llava = false;
  for (int i = 0; i < s->n; i++) {
    qwen |= !strncmp(s->e[i].name, "model.visual.", 13);
    llava |= !strncmp(s->e[i].name, "model.vision_tower.", 19) ||
             !strncmp(s->e[i].name, "model.multi_modal_projector.", 28);
  }
  if (qwen == llava) return;
  static const char *const map[][2][2] = {
      {{"model.visual.", "visual."}, {"model.language_model.", "model."}},
      {{"model.vision_tower.", "vision_tower."},
       {"model.language_model.", "language_model.model."}}};
  for (int i = 0; i < s->n; i++) {
    char *n = s->e[i].name, *renamed = NULL;
    for (int k = 0; k < 2 && !renamed; k++) {
      const char *from = map[llava][k][0], *to = map[llava][k][1];
      if (!strncmp(n, from, strlen(from))) renamed = loom_sprintf("%s%s", to, n + strlen(from));
    }
    if (llava && !strncmp(n, "model.multi_modal_projector.", 28)) renamed = loom_strdup(n + 6);
    if (llava && !strcmp(n, "lm_head.weight"))
      renamed = loom_strdup("language_model.lm_head.weight");
    if (renamed) free(s->e[i].name), s->e[i].name = renamed;
  }
}

/* name = <head>experts.<suffix> with <head> ending in ".mlp." (the fused tensors have no
 * ".weight"): the length of <head>, else 0. */
static size_t fused_head(const char *name, const char *suffix) {
  const char *at = strstr(name, ".mlp.experts.");
  if (!at || strcmp(at + 13, suffix)) return 0;
  return (size_t)(at - name) + 5; /* up to and including ".mlp." */
}

static void fmt_shape(char *buf, size_t cap, int nd, const int64_t *sh) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < nd && k < cap; d++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)sh[d]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* Entry i, a fused gate_up_proj (up = true) or down_proj: replaced by its per-expert slices. */
static int split_fused(hf_source *s, int i, bool gate_up, size_t head) {
  hf_entry whole = s->e[i];
  char shape[96];
  fmt_shape(shape, sizeof shape, whole.ndim, whole.shape);
  if (whole.ndim != 3 || (gate_up && whole.shape[1] % 2))
    return loom_err("%s: tensor '%s' has shape %s; transformers' fused expert layout is %s",
                    loom_st_path(whole.file), whole.name, shape,
                    gate_up ? "[experts, 2 * moe_intermediate_size, hidden_size]"
                            : "[experts, hidden_size, moe_intermediate_size]");
  int64_t E = whole.shape[0], rows = gate_up ? whole.shape[1] / 2 : whole.shape[1];
  int64_t cols = whole.shape[2];
  /* the fused entry's slot takes the last entry; its slices are appended */
  s->e[i] = s->e[--s->n];
  for (int64_t e = 0; e < E; e++)
    for (int part = 0; part < (gate_up ? 2 : 1); part++) {
      const char *proj = !gate_up ? "down_proj" : part ? "up_proj" : "gate_proj";
      char *name =
          loom_sprintf("%.*sexperts.%lld.%s.weight", (int)head, whole.name, (long long)e, proj);
      hf_entry *x = add(s, name, whole.file, whole.index);
      free(name);
      x->ndim = 2;
      x->shape[0] = rows, x->shape[1] = cols;
      x->offset = (size_t)(e * (gate_up ? 2 : 1) + part) * (size_t)(rows * cols);
      x->fused = loom_strdup(whole.name);
    }
  free(whole.name);
  return 0;
}

static int split_all_fused(hf_source *s) {
  for (int i = 0; i < s->n;) {
    size_t up = fused_head(s->e[i].name, "gate_up_proj"),
           down = fused_head(s->e[i].name, "down_proj");
    if (!up && !down) {
      i++;
      continue;
    }
    if (split_fused(s, i, up > 0, up ? up : down)) return LOOM_ERR; /* e[i] is another now */
  }
  return 0;
}

int hf_source_open(hf_source *s, const char *dir) {
  memset(s, 0, sizeof *s);
  if (!loom_is_dir(dir))
    return loom_err("'%s' is not a directory; give a Hugging Face model directory holding "
                    "model.safetensors (or model.safetensors.index.json and its shards)",
                    dir);
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
    for (int i = 0; f && i < loom_st_count(f); i++) add(s, loom_st_name(f, i), f, i);
  } else {
    char *bin = loom_sprintf("%s/pytorch_model.bin", dir);
    rc = loom_err("'%s' holds neither model.safetensors nor model.safetensors.index.json%s", dir,
                  loom_path_exists(bin) ? "; it has pytorch_model.bin: re-save the model with "
                                          "save_pretrained(..., safe_serialization=True)"
                                        : "");
    free(bin);
  }
  free(single), free(ipath);
  if (!rc) normalize_vlm(s);
  if (!rc) rc = split_all_fused(s);
  if (!rc) reindex(s);
  for (int k = 1; !rc && k < s->n; k++) { /* a slice of a fused tensor and a whole one */
    const hf_entry *a = &s->e[s->order[k - 1]], *b = &s->e[s->order[k]];
    if (strcmp(a->name, b->name)) continue;
    if (a->fused || b->fused)
      rc = loom_err("%s: tensor '%s' is there twice: whole and as a slice of the fused '%s'; "
                    "give one layout of the experts",
                    s->where, a->name, a->fused ? a->fused : b->fused);
    else
      rc = loom_err("%s: tensor '%s' is there twice (with and without GPT-2's 'transformer.' "
                    "prefix); give one copy",
                    s->where, a->name);
  }
  if (rc) hf_source_free(s);
  return rc;
}

/* "model.layers.<digits>." prefix length of n, else 0. */
static size_t layer_prefix(const char *n) {
  if (strncmp(n, "model.layers.", 13)) return 0;
  const char *p = n + 13;
  if (!isdigit((unsigned char)*p)) return 0;
  while (isdigit((unsigned char)*p)) p++;
  return *p == '.' ? (size_t)(p + 1 - n) : 0;
}

void hf_source_mixtral_names(hf_source *s) {
  static const char *const proj[3][2] = {{"gate_proj.weight", "w1.weight"},
                                         {"up_proj.weight", "w3.weight"},
                                         {"down_proj.weight", "w2.weight"}};
  for (int i = 0; i < s->n; i++) {
    const char *n = s->e[i].name;
    size_t k = layer_prefix(n);
    if (!k || strncmp(n + k, "mlp.", 4)) continue;
    const char *rest = n + k + 4, *tail = rest;
    char *renamed = NULL;
    if (!strncmp(rest, "gate.", 5)) {
      renamed = loom_sprintf("%.*sblock_sparse_moe.%s", (int)k, n, rest);
    } else if (!strncmp(rest, "experts.", 8)) { /* experts.<e>.<proj> */
      tail = strchr(rest + 8, '.');
      for (int p = 0; tail && p < 3 && !renamed; p++)
        if (!strcmp(tail + 1, proj[p][0]))
          renamed = loom_sprintf("%.*sblock_sparse_moe.%.*s%s", (int)k, n, (int)(tail + 1 - rest),
                                 rest, proj[p][1]);
    }
    if (renamed) free(s->e[i].name), s->e[i].name = renamed;
  }
  reindex(s);
}

void hf_fused_cache_free(hf_fused_cache *c) {
  loom_free(c->buf);
  memset(c, 0, sizeof *c);
}

int hf_source_read(const hf_source *s, int i, float *dst, hf_fused_cache *cache) {
  const hf_entry *e = &s->e[i];
  size_t n = 1;
  for (int d = 0; d < e->ndim; d++) n *= (size_t)e->shape[d];
  const char *name = loom_st_name(e->file, e->index);
  if (!e->fused) return loom_st_read_f32(e->file, name, dst, n);
  if (cache->file != e->file || cache->index != e->index || !cache->buf) {
    size_t all = (size_t)loom_st_numel(e->file, e->index);
    loom_free(cache->buf);
    cache->buf = loom_malloc_for(all * sizeof(float), "a fused expert tensor");
    cache->file = e->file, cache->index = e->index;
    if (loom_st_read_f32(e->file, name, cache->buf, all)) {
      hf_fused_cache_free(cache);
      return LOOM_ERR;
    }
  }
  memcpy(dst, cache->buf + e->offset, n * sizeof(float));
  return 0;
}

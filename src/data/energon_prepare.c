/* `loom data prepare DIR --split 9,1,0`, non-interactive `energon prepare`: find the *.tar
 * shards, index each one (sample key -> part offsets), check samples against the field map,
 * assign shards to train/val/test by the ratios, and write .nv-meta/{dataset.yaml,
 * split.yaml, .info.yaml, index.json}, each atomically. */
#include <dirent.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "loom/core.h"
#include "loom/tar.h"
#include "loom/vqa.h"

#define MAX_WARNINGS 20
#define KEY_MAX 1024

typedef struct {
  char **v;
  size_t n, cap;
} strvec;

static void strvec_push(strvec *s, char *x) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->v = loom_realloc(s->v, s->cap, sizeof *s->v);
  }
  s->v[s->n++] = x;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Relative paths of the *.tar files under dir/rel, hidden entries (and .nv-meta) skipped. */
static int find_shards(const char *dir, const char *rel, strvec *out, int depth) {
  char *path = rel[0] ? loom_sprintf("%s/%s", dir, rel) : loom_strdup(dir);
  DIR *d = opendir(path);
  if (!d) {
    int rc = loom_err("cannot read directory %s", path);
    free(path);
    return rc;
  }
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char *r = rel[0] ? loom_sprintf("%s/%s", rel, e->d_name) : loom_strdup(e->d_name);
    char *full = loom_sprintf("%s/%s", dir, r);
    size_t nl = strlen(e->d_name);
    if (loom_is_dir(full)) {
      if (depth < 8) rc = find_shards(dir, r, out, depth + 1);
      free(r);
    } else if (nl > 4 && !strcmp(e->d_name + nl - 4, ".tar")) {
      strvec_push(out, r);
      r = NULL;
    } else {
      free(r);
    }
    free(full);
  }
  closedir(d);
  free(path);
  return rc;
}

typedef struct {
  size_t problems, printed;
} warn_state;

static void warn(warn_state *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(warn_state *w, const char *fmt, ...) {
  w->problems++;
  if (w->printed++ >= MAX_WARNINGS) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "warning: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

/* The field map's required extensions: image alternatives, context, answers. */
typedef struct {
  char image[4][16];
  int n_image;
  char context[16], answers[16];
  const char *context_spec, *answers_spec;
} required;

static void required_of(const loom_field_map *f, required *r) {
  memset(r, 0, sizeof *r);
  const char *p = f->image;
  while (*p && r->n_image < 4) {
    size_t k = strcspn(p, ",");
    size_t c = k < 15 ? k : 15;
    memcpy(r->image[r->n_image], p, c);
    r->image[r->n_image++][c] = 0;
    p += k;
    while (*p == ',' || *p == ' ') p++;
  }
  loom_field_map_ext(f->context, r->context, sizeof r->context);
  loom_field_map_ext(f->answers, r->answers, sizeof r->answers);
  r->context_spec = f->context;
  r->answers_spec = f->answers;
}

static void check_parts(warn_state *w, const char *shard, const char *key, json_t *parts,
                        const required *r) {
  int has_image = 0;
  for (int i = 0; i < r->n_image; i++) has_image |= json_object_get(parts, r->image[i]) != NULL;
  if (!has_image)
    warn(w, "shard %s, sample %s: missing image (field_map image: %s)", shard, key, r->image[0]);
  if (!json_object_get(parts, r->context))
    warn(w, "shard %s, sample %s: missing its %s (field_map context: %s)", shard, key,
         r->context, r->context_spec);
  if (!json_object_get(parts, r->answers))
    warn(w, "shard %s, sample %s: missing its %s (field_map answers: %s)", shard, key,
         r->answers, r->answers_spec);
}

/* Index one shard into a JSON object {path, size, samples: [...], error?, damage?}. */
static json_t *index_shard(const char *dir, const char *rel, const required *req, warn_state *w,
                           size_t *n_samples) {
  char *path = loom_sprintf("%s/%s", dir, rel);
  loom_tar_index ix;
  json_t *sh = json_pack("{s:s}", "path", rel);
  json_t *samples = json_array();
  *n_samples = 0;
  if (loom_tar_scan(path, &ix)) {
    warn(w, "%s", loom_errmsg());
    struct stat st;
    json_object_set_new(sh, "size", json_integer(stat(path, &st) ? 0 : (json_int_t)st.st_size));
    json_object_set_new(sh, "error", json_string(loom_errmsg()));
    json_object_set_new(sh, "samples", samples);
    free(path);
    return sh;
  }
  json_object_set_new(sh, "size", json_integer((json_int_t)ix.file_size));
  loom_u64map *seen = loom_u64map_new(ix.n + 1);
  json_t *cur = NULL, *cur_parts = NULL;
  char key[KEY_MAX], cur_key[KEY_MAX] = "";
  for (size_t i = 0; i < ix.n; i++) {
    const char *ext;
    if (loom_wds_split_name(ix.members[i].name, key, sizeof key, &ext)) continue;
    if (!cur || strcmp(key, cur_key)) {
      uint64_t h = loom_hash64(key, strlen(key), 0), dummy;
      if (loom_u64map_get(seen, h, &dummy))
        warn(w, "shard %s, sample %s: its parts are not consecutive in the tar (WebDataset "
             "groups consecutive members): the later group is a separate sample", rel, key);
      loom_u64map_put(seen, h, 1);
      cur_parts = json_object();
      cur = json_pack("{s:s, s:o}", "key", key, "parts", cur_parts);
      json_array_append_new(samples, cur);
      snprintf(cur_key, sizeof cur_key, "%s", key);
    }
    if (json_object_get(cur_parts, ext))
      warn(w, "shard %s, sample %s: part %s appears twice; the last one is used", rel, key, ext);
    json_object_set_new(cur_parts, ext, json_pack("[I, I]", (json_int_t)ix.members[i].offset,
                                                  (json_int_t)ix.members[i].size));
  }
  if (ix.damage) {
    json_object_set_new(sh, "damage", json_string(ix.damage));
    const char *ext;
    int keyed = ix.damaged_name && !loom_wds_split_name(ix.damaged_name, key, sizeof key, &ext);
    if (keyed) {
      json_t *bad = cur && !strcmp(key, cur_key) ? cur : NULL;
      if (!bad) {
        bad = json_pack("{s:s, s:{}}", "key", key, "parts");
        json_array_append_new(samples, bad);
      }
      json_object_set_new(bad, "error", json_string(ix.damage));
      warn(w, "shard %s, sample %s: %s", rel, key, ix.damage);
    } else {
      warn(w, "shard %s: %s; the samples before it are kept", rel, ix.damage);
    }
  } else if (ix.no_end_marker) {
    json_object_set_new(sh, "no_end_marker", json_true());
  }
  for (size_t i = 0; i < json_array_size(samples); i++) {
    json_t *s = json_array_get(samples, i);
    if (!json_object_get(s, "error"))
      check_parts(w, rel, json_string_value(json_object_get(s, "key")),
                  json_object_get(s, "parts"), req);
  }
  *n_samples = json_array_size(samples);
  json_object_set_new(sh, "samples", samples);
  loom_u64map_free(seen);
  loom_tar_index_free(&ix);
  free(path);
  return sh;
}

/* ---- writing .nv-meta ------------------------------------------------------------------ */

static int write_text(const char *meta, const char *name, const char *text) {
  char *p = loom_sprintf("%s/%s", meta, name);
  int rc = loom_write_file_atomic(p, text, strlen(text));
  free(p);
  return rc;
}

typedef struct {
  char *s;
  size_t n, cap;
} sbuf;

static void sb(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb(sbuf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (b->s && (size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    b->cap = 2 * (b->n + (size_t)k + 64);
    b->s = loom_realloc(b->s, b->cap, 1);
  }
}

/* A YAML double-quoted scalar (JSON escaping is valid YAML). */
static char *yq(const char *s) {
  json_t *j = json_string(s);
  char *out = json_dumps(j, JSON_ENCODE_ANY);
  json_decref(j);
  return out;
}

static const char *split_names[3] = {"train", "val", "test"};

static int write_meta(const char *dir, json_t *shards, const int *split_of, int keep_yaml,
                      const double ratios[3]) {
  char *meta = loom_sprintf("%s/.nv-meta", dir);
  int rc = loom_mkdir_p(meta);
  if (rc == 0 && !keep_yaml)
    rc = write_text(meta, "dataset.yaml",
                    "# written by loom data prepare (Megatron-Energon field map)\n"
                    "sample_type:\n  __module__: megatron.energon\n  __class__: VQASample\n"
                    "field_map:\n  image: jpg\n  context: json[question]\n  answers: txt\n");
  sbuf split = {0}, info = {0};
  sb(&split, "# written by loom data prepare: ratio %g,%g,%g (whole shards, name order)\n"
             "exclude: []\nsplit_parts:\n", ratios[0], ratios[1], ratios[2]);
  sb(&info, "# written by loom data prepare\nshard_counts:\n");
  size_t n = json_array_size(shards);
  for (int s = 0; s < 3; s++) {
    int any = 0;
    for (size_t i = 0; i < n; i++) any |= split_of[i] == s;
    sb(&split, "  %s:%s\n", split_names[s], any ? "" : " []");
    for (size_t i = 0; i < n; i++)
      if (split_of[i] == s) {
        char *q = yq(json_string_value(json_object_get(json_array_get(shards, i), "path")));
        sb(&split, "  - %s\n", q);
        free(q);
      }
  }
  for (size_t i = 0; i < n; i++) {
    json_t *sh = json_array_get(shards, i);
    char *q = yq(json_string_value(json_object_get(sh, "path")));
    sb(&info, "  %s: %zu\n", q, json_array_size(json_object_get(sh, "samples")));
    free(q);
  }
  if (rc == 0) rc = write_text(meta, "split.yaml", split.s);
  if (rc == 0) rc = write_text(meta, ".info.yaml", info.s);
  free(split.s);
  free(info.s);
  if (rc == 0) {
    json_t *root = json_pack("{s:s, s:i, s:O}", "format", "loom-energon-index", "version", 1,
                             "shards", shards);
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    size_t len = strlen(text);
    text[len] = '\n';
    char *p = loom_sprintf("%s/index.json", meta);
    rc = loom_write_file_atomic(p, text, len + 1);
    free(p);
    free(text);
  }
  free(meta);
  return rc;
}

/* Shard i goes to the split in whose cumulative share its middle sample falls. */
static void assign_splits(const size_t *counts, size_t n, const double r[3], int *split_of) {
  double total = 0, sum = r[0] + r[1] + r[2];
  for (size_t i = 0; i < n; i++) total += (double)counts[i];
  double b1 = total * r[0] / sum, b2 = total * (r[0] + r[1]) / sum, start = 0;
  for (size_t i = 0; i < n; i++) {
    double mid = start + (double)counts[i] / 2.0;
    if (r[0] > 0 && mid < b1) split_of[i] = 0;
    else if (r[1] > 0 && mid < b2) split_of[i] = 1;
    else if (r[2] > 0) split_of[i] = 2;
    else split_of[i] = r[1] > 0 ? 1 : 0; /* rounding at the end of the last share */
    start += (double)counts[i];
  }
}

int loom_energon_prepare(const char *dir, const double ratios[3], const loom_prepare_options *o,
                         loom_prepare_report *rep) {
  memset(rep, 0, sizeof *rep);
  if (!loom_is_dir(dir)) return loom_err("%s is not a directory of tar shards", dir);
  strvec shards = {0};
  if (find_shards(dir, "", &shards, 0)) return -1;
  if (shards.n == 0) {
    free(shards.v);
    return loom_err("%s holds no .tar shards: write WebDataset shards (N.jpg, N.json, N.txt per "
                    "sample) or run `loom data synth-vqa --out %s`", dir, dir);
  }
  qsort(shards.v, shards.n, sizeof *shards.v, cmp_str);
  char *yaml = loom_sprintf("%s/.nv-meta/dataset.yaml", dir);
  int keep_yaml = loom_path_exists(yaml);
  free(yaml);
  loom_field_map fm = {loom_strdup("jpg"), loom_strdup("json[question]"), loom_strdup("txt")};
  if (keep_yaml) {
    loom_field_map_free(&fm);
    if (loom_energon_read_field_map(dir, &fm)) {
      for (size_t i = 0; i < shards.n; i++) free(shards.v[i]);
      free(shards.v);
      return -1;
    }
  }
  required req;
  required_of(&fm, &req);
  warn_state w = {0, 0};
  json_t *arr = json_array();
  size_t *counts = loom_calloc(shards.n, sizeof *counts);
  int *split_of = loom_calloc(shards.n, sizeof *split_of);
  for (size_t i = 0; i < shards.n; i++) {
    json_t *sh = index_shard(dir, shards.v[i], &req, &w, &counts[i]);
    if (json_object_get(sh, "error")) rep->bad_shards++;
    rep->samples += counts[i];
    json_array_append_new(arr, sh);
    if (!o->quiet && (i + 1) % 100 == 0) fprintf(stderr, "indexed %zu/%zu shards\n", i + 1, shards.n);
  }
  if (w.printed > MAX_WARNINGS)
    fprintf(stderr, "warning: ... and %zu more problems (see .nv-meta/index.json)\n",
            w.printed - MAX_WARNINGS);
  assign_splits(counts, shards.n, ratios, split_of);
  rep->shards = shards.n;
  rep->problems = w.problems;
  for (size_t i = 0; i < shards.n; i++) {
    rep->split_shards[split_of[i]]++;
    rep->split_samples[split_of[i]] += counts[i];
  }
  int rc = 0;
  if (o->strict && w.problems)
    rc = loom_err("%zu problems in %s (listed above); --strict refuses to prepare it", w.problems,
                  dir);
  if (rc == 0) rc = write_meta(dir, arr, split_of, keep_yaml, ratios);
  json_decref(arr);
  free(counts);
  free(split_of);
  for (size_t i = 0; i < shards.n; i++) free(shards.v[i]);
  free(shards.v);
  loom_field_map_free(&fm);
  return rc;
}

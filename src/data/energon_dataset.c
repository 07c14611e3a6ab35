/* Reading one split of a prepared Energon-style directory: split.yaml names the shards,
 * index.json gives each sample's part offsets, dataset.yaml's field map says which parts
 * are the image, the question (context) and the answer. Samples are read with pread at the
 * indexed offsets; the tar header before each part is re-checked. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/tar.h"
#include "loom/vqa.h"

typedef struct {
  const char *path; /* relative, owned by the index tree (alive while the dataset is) */
  char *full;
  uint64_t size;    /* bytes, as index.json records and stat confirmed */
} shard;

typedef struct {
  uint32_t shard;
  json_t *sample; /* borrowed from the index tree */
} sample_ref;

typedef struct {
  char *dir;
  json_t *index;
  loom_field_map fm;
  shard *shards;
  size_t n_shards;
  sample_ref *samples;
  size_t n;
} energon;

void *loom_energon_open(const char *dir, const char *split, bool skip_bad, uint64_t *bad_shards);
size_t loom_energon_count(const void *e);
int loom_energon_get(void *e, size_t i, loom_vqa_sample *s);
void loom_energon_close(void *e);

static json_t *find_shard(json_t *index, const char *path) {
  json_t *arr = json_object_get(index, "shards");
  for (size_t i = 0; i < json_array_size(arr); i++) {
    json_t *sh = json_array_get(arr, i);
    const char *p = json_string_value(json_object_get(sh, "path"));
    if (p && !strcmp(p, path)) return sh;
  }
  return NULL;
}

static json_t *split_list(const char *dir, const char *split) {
  char *path = loom_sprintf("%s/.nv-meta/split.yaml", dir);
  json_t *root = loom_energon_yaml_load(path), *list = NULL;
  if (root) {
    json_t *parts = json_object_get(json_object_get(root, "split_parts"), split);
    if (json_is_array(parts)) list = json_incref(parts);
    else if (!parts || json_is_null(parts)) list = json_array();
    else loom_err("%s: split_parts.%s is not a list of shards", path, split);
    json_decref(root);
  }
  free(path);
  return list;
}

/* Add the shard's samples, or report it. Returns -1 on a fatal error. */
static int add_shard(energon *e, json_t *sh, const char *rel, bool skip_bad, uint64_t *bad) {
  char *full = loom_sprintf("%s/%s", e->dir, rel);
  struct stat st;
  const char *err = json_string_value(json_object_get(sh, "error"));
  char *msg = NULL;
  if (err) msg = loom_sprintf("%s", err);
  else if (stat(full, &st)) msg = loom_sprintf("shard %s is missing (%s)", full, strerror(errno));
  if (msg) {
    int rc = 0;
    if (skip_bad) (*bad)++;
    else rc = loom_err("%s: remove it and re-run `loom data prepare %s`, or set "
                       "data.skip_bad_samples: true to skip it", msg, e->dir);
    free(msg);
    free(full);
    return rc;
  }
  json_t *jsize = json_object_get(sh, "size"), *samples = json_object_get(sh, "samples");
  if (!json_is_integer(jsize) || json_integer_value(jsize) < 0 ||
      (samples && !json_is_array(samples))) {
    int rc = loom_err("%s/.nv-meta/index.json: the entry of shard %s needs an integer \"size\" "
                      ">= 0 and a \"samples\" list: re-run `loom data prepare %s`", e->dir, rel,
                      e->dir);
    free(full);
    return rc;
  }
  json_int_t want = json_integer_value(jsize);
  if ((json_int_t)st.st_size != want || !S_ISREG(st.st_mode)) {
    int rc = loom_err("shard %s changed since `loom data prepare` (%lld bytes, the index says "
                      "%lld): re-run `loom data prepare %s`", full, (long long)st.st_size,
                      (long long)want, e->dir);
    free(full);
    return rc;
  }
  e->shards[e->n_shards] =
      (shard){json_string_value(json_object_get(sh, "path")), full, (uint64_t)want};
  size_t ns = json_array_size(samples);
  e->samples = loom_realloc(e->samples, e->n + ns + 1, sizeof *e->samples);
  for (size_t k = 0; k < ns; k++)
    e->samples[e->n++] = (sample_ref){(uint32_t)e->n_shards, json_array_get(samples, k)};
  e->n_shards++;
  return 0;
}

void *loom_energon_open(const char *dir, const char *split, bool skip_bad, uint64_t *bad_shards) {
  if (strcmp(split, "train") && strcmp(split, "val") && strcmp(split, "test")) {
    loom_err("split '%s' is not one of train, val, test", split);
    return NULL;
  }
  energon *e = loom_calloc(1, sizeof *e);
  e->dir = loom_strdup(dir);
  *bad_shards = 0;
  json_t *list = NULL;
  int rc = (e->index = loom_energon_index_load(dir)) ? 0 : -1;
  if (rc == 0) rc = loom_energon_read_field_map(dir, &e->fm);
  if (rc == 0 && !(list = split_list(dir, split))) rc = -1;
  if (rc == 0) {
    e->shards = loom_calloc(json_array_size(list) + 1, sizeof *e->shards);
  }
  for (size_t i = 0; rc == 0 && i < json_array_size(list); i++) {
    const char *rel = json_string_value(json_array_get(list, i));
    json_t *sh = rel ? find_shard(e->index, rel) : NULL;
    if (!sh)
      rc = loom_err("%s/.nv-meta/split.yaml lists shard '%s' that index.json does not hold: "
                    "re-run `loom data prepare %s`", dir, rel ? rel : "?", dir);
    else
      rc = add_shard(e, sh, rel, skip_bad, bad_shards);
  }
  json_decref(list);
  if (rc == 0 && e->n == 0)
    rc = loom_err("split '%s' of %s holds no samples: re-run `loom data prepare %s --split "
                  "9,1,0` with a share for it%s", split, dir, dir,
                  *bad_shards ? " (its shards are all unreadable)" : "");
  if (rc) {
    loom_energon_close(e);
    return NULL;
  }
  return e;
}

size_t loom_energon_count(const void *p) { return ((const energon *)p)->n; }

/* Read a part's bytes; the tar header before it must still be valid. */
static int read_part(const energon *e, const shard *sh, const char *where, const char *ext,
                     json_t *part, uint8_t **out, size_t *len) {
  json_t *joff = json_array_get(part, 0), *jsz = json_array_get(part, 1);
  json_int_t off = json_integer_value(joff), size = json_integer_value(jsz);
  /* Offsets come from a file: check them against the shard before allocating. */
  if (!json_is_array(part) || json_array_size(part) != 2 || !json_is_integer(joff) ||
      !json_is_integer(jsz) || off < 512 || size < 0 || (uint64_t)off > sh->size ||
      (uint64_t)size > sh->size - (uint64_t)off)
    return loom_err("%s: index.json gives part %s as %s, not [offset >= 512, size] inside the "
                    "%llu-byte shard: re-run `loom data prepare %s`", where, ext,
                    json_is_array(part) && json_is_integer(joff) && json_is_integer(jsz)
                        ? "an out-of-range [offset, size]" : "something other than "
                                                             "[offset, size]",
                    (unsigned long long)sh->size, e->dir);
  int fd = open(sh->full, O_RDONLY);
  if (fd < 0) return loom_err("%s: cannot open %s: %s", where, sh->full, strerror(errno));
  uint8_t hdr[512];
  uint8_t *buf = loom_malloc((size_t)size + 1);
  int ok = pread(fd, hdr, 512, off - 512) == 512 && loom_tar_header_ok(hdr) &&
           pread(fd, buf, (size_t)size, off) == (ssize_t)size;
  close(fd);
  if (!ok) {
    free(buf);
    return loom_err("%s: part %s at offset %lld is no longer where the index says (the shard "
                    "changed?): re-run `loom data prepare %s`", where, ext, (long long)off,
                    e->dir);
  }
  buf[size] = 0;
  *out = buf;
  *len = (size_t)size;
  return 0;
}

/* json[a][b] -> the string at that path of the parsed part. */
static char *json_field(const char *where, const char *spec, const char *text, size_t len) {
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_DECODE_ANY, &je), *v = root; /* a NUL is an error */
  if (!root) {
    loom_err("%s: its json part is not valid JSON (%s): fix the sample or set "
             "data.skip_bad_samples: true", where, je.text);
    return NULL;
  }
  const char *p = strchr(spec, '[');
  while (p && *p == '[' && v) {
    const char *q = strchr(p, ']');
    if (!q) break;
    char key[128];
    snprintf(key, sizeof key, "%.*s", (int)(q - p - 1), p + 1);
    v = json_object_get(v, key);
    p = q + 1;
  }
  if (json_is_array(v)) v = json_array_get(v, 0); /* answers: a list, take the first */
  char *out = NULL;
  if (json_is_string(v)) out = loom_strdup(json_string_value(v));
  else if (json_is_integer(v)) out = loom_sprintf("%lld", (long long)json_integer_value(v));
  else loom_err("%s: its json part has no string at %s (the field map's path)", where, spec);
  json_decref(root);
  return out;
}

/* A text field: the txt bytes (trailing whitespace trimmed) or a json path. */
static char *text_field(const char *where, const char *spec, uint8_t *data, size_t len) {
  if (!strncmp(spec, "json", 4) && spec[4] == '[')
    return json_field(where, spec, (char *)data, len);
  const uint8_t *nul = memchr(data, 0, len);
  if (nul) {
    loom_err("%s: its %s part holds a NUL byte at offset %zu (text parts are UTF-8 text): fix "
             "the sample or set data.skip_bad_samples: true", where, spec,
             (size_t)(nul - data));
    return NULL;
  }
  while (len && (data[len - 1] == '\n' || data[len - 1] == '\r' || data[len - 1] == ' '))
    len--;
  return loom_sprintf("%.*s", (int)len, (char *)data);
}

static int missing(const char *where, const char *what, const char *spec) {
  return loom_err("%s: missing its %s (field_map: %s): add it to the shard or set "
                  "data.skip_bad_samples: true to skip such samples", where, what, spec);
}

int loom_energon_get(void *p, size_t i, loom_vqa_sample *s) {
  energon *e = p;
  memset(s, 0, sizeof *s);
  const sample_ref *r = &e->samples[i];
  const shard *sh = &e->shards[r->shard];
  const char *key = json_string_value(json_object_get(r->sample, "key"));
  json_t *parts = json_object_get(r->sample, "parts");
  if (!key || !json_is_object(parts))
    return loom_err("shard %s, sample %zu of the split: index.json gives it no \"key\" string "
                    "or no \"parts\" object: re-run `loom data prepare %s`", sh->path, i,
                    e->dir);
  char *where = loom_sprintf("shard %s, sample %s", sh->path, key);
  const char *err = json_string_value(json_object_get(r->sample, "error"));
  char ext_c[16], ext_a[16], img_ext[16] = "";
  loom_field_map_ext(e->fm.context, ext_c, sizeof ext_c);
  loom_field_map_ext(e->fm.answers, ext_a, sizeof ext_a);
  json_t *img = NULL;
  for (const char *q = e->fm.image; *q && !img;) {
    size_t k = strcspn(q, ",");
    snprintf(img_ext, sizeof img_ext, "%.*s", (int)k, q);
    img = json_object_get(parts, img_ext);
    q += k;
    while (*q == ',' || *q == ' ') q++;
  }
  int rc = 0;
  if (err) rc = loom_err("%s: %s: re-create the shard or set data.skip_bad_samples: true", where,
                         err);
  else if (!img) rc = missing(where, "image", e->fm.image);
  else if (!json_object_get(parts, ext_c)) rc = missing(where, ext_c, e->fm.context);
  else if (!json_object_get(parts, ext_a)) rc = missing(where, ext_a, e->fm.answers);
  uint8_t *ctx = NULL, *ans = NULL, *jpg = NULL;
  size_t lc = 0, la = 0, lj = 0;
  if (rc == 0) rc = read_part(e, sh, where, img_ext, img, &jpg, &lj);
  if (rc == 0) rc = read_part(e, sh, where, ext_c, json_object_get(parts, ext_c), &ctx, &lc);
  if (rc == 0) rc = read_part(e, sh, where, ext_a, json_object_get(parts, ext_a), &ans, &la);
  char *q = NULL, *a = NULL;
  if (rc == 0 && !(q = text_field(where, e->fm.context, ctx, lc))) rc = -1;
  if (rc == 0 && !(a = text_field(where, e->fm.answers, ans, la))) rc = -1;
  if (rc) {
    free(where);
    free(jpg);
    free(ctx);
    free(ans);
    free(q);
    return -1;
  }
  s->key = loom_sprintf("%s/%s", sh->path, key);
  s->where = where;
  s->n_images = 1;
  s->images = loom_malloc(sizeof *s->images);
  s->image_len = loom_malloc(sizeof *s->image_len);
  s->turns = loom_malloc(2 * sizeof *s->turns);
  s->images[0] = jpg;
  s->image_len[0] = lj;
  s->n_turns = 2;
  s->turns[0] = (loom_vqa_turn){LOOM_VQA_USER, q};
  s->turns[1] = (loom_vqa_turn){LOOM_VQA_ASSISTANT, a};
  if (!strcmp(ext_c, "json")) s->json = (char *)ctx;
  else if (!strcmp(ext_a, "json")) s->json = (char *)ans;
  if ((char *)ctx != s->json) free(ctx);
  if ((char *)ans != s->json) free(ans);
  return 0;
}

void loom_energon_close(void *p) {
  energon *e = p;
  if (!e) return;
  for (size_t i = 0; i < e->n_shards; i++) free(e->shards[i].full);
  free(e->shards);
  free(e->samples);
  json_decref(e->index);
  loom_field_map_free(&e->fm);
  free(e->dir);
  free(e);
}

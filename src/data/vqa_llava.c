/* LLaVA-style annotations: a JSON array (.json) or one object per line (.jsonl) of
 * {"id", "image": path | [paths], "conversations": [{"from": "human"|"user", "value"},
 * {"from": "gpt"|"assistant", "value"}, ...]}. Entries are validated at open; an invalid
 * entry (or a .jsonl line that is not JSON) is kept with its error, which get() reports
 * naming the file and entry, so the loader can stop or skip it. Images are read at get()
 * relative to the annotation file's directory. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/vqa.h"

typedef struct {
  char *where;  /* "anno.jsonl entry 12 (id "x")" */
  char *key;    /* "anno.jsonl#12" */
  char *error;  /* non-NULL: the entry is invalid */
  int n_images;
  char **images; /* resolved paths */
  int n_turns;
  loom_vqa_turn *turns;
} entry;

struct loom_llava {
  char *path, *dir, *base;
  entry *e;
  size_t n;
};

static char *where_of(const loom_llava *a, size_t i, json_t *obj) {
  json_t *id = json_is_object(obj) ? json_object_get(obj, "id") : NULL;
  if (json_is_string(id))
    return loom_sprintf("%s entry %zu (id \"%s\")", a->base, i, json_string_value(id));
  if (json_is_integer(id))
    return loom_sprintf("%s entry %zu (id %lld)", a->base, i, (long long)json_integer_value(id));
  return loom_sprintf("%s entry %zu", a->base, i);
}

static char *resolve(const loom_llava *a, const char *p) {
  return p[0] == '/' ? loom_strdup(p) : loom_sprintf("%s/%s", a->dir, p);
}

/* Fill e from obj; returns an error message (malloc'd) or NULL. */
static char *parse_entry(const loom_llava *a, json_t *obj, entry *e) {
  if (!json_is_object(obj)) return loom_strdup("is not a JSON object");
  json_t *img = json_object_get(obj, "image"), *conv = json_object_get(obj, "conversations");
  if (img && !json_is_null(img)) {
    size_t n = json_is_array(img) ? json_array_size(img) : 1;
    e->images = loom_calloc(n + 1, sizeof *e->images);
    for (size_t k = 0; k < n; k++) {
      json_t *p = json_is_array(img) ? json_array_get(img, k) : img;
      if (!json_is_string(p) || !json_string_length(p))
        return loom_strdup("\"image\" must be a path or a list of paths");
      e->images[e->n_images++] = resolve(a, json_string_value(p));
    }
  }
  if (!json_is_array(conv) || json_array_size(conv) == 0)
    return loom_strdup("needs a non-empty \"conversations\" list");
  size_t nt = json_array_size(conv);
  e->turns = loom_calloc(nt, sizeof *e->turns);
  for (size_t k = 0; k < nt; k++) {
    json_t *t = json_array_get(conv, k);
    json_t *from = json_object_get(t, "from"), *value = json_object_get(t, "value");
    if (!json_is_string(from) || !json_is_string(value))
      return loom_sprintf("conversations[%zu] needs string \"from\" and \"value\"", k);
    const char *f = json_string_value(from);
    loom_vqa_role role;
    if (!strcmp(f, "human") || !strcmp(f, "user")) role = LOOM_VQA_USER;
    else if (!strcmp(f, "gpt") || !strcmp(f, "assistant")) role = LOOM_VQA_ASSISTANT;
    else if (!strcmp(f, "system")) continue; /* loom's template has no system turn */
    else return loom_sprintf("conversations[%zu] has \"from\": \"%s\" (want human or gpt)", k, f);
    e->turns[e->n_turns].role = role;
    e->turns[e->n_turns++].text = loom_strdup(json_string_value(value));
  }
  if (e->n_turns == 0) /* only system turns: nothing of the conversation would remain */
    return loom_strdup("has only system turns in \"conversations\" (it needs human and gpt "
                       "turns)");
  return NULL;
}

static void add_entry(loom_llava *a, size_t *cap, json_t *obj, const char *syntax_error) {
  if (a->n == *cap) {
    *cap = *cap ? 2 * *cap : 256;
    a->e = loom_realloc(a->e, *cap, sizeof *a->e);
  }
  entry *e = &a->e[a->n];
  memset(e, 0, sizeof *e);
  e->where = where_of(a, a->n, obj);
  e->key = loom_sprintf("%s#%zu", a->base, a->n);
  e->error = syntax_error ? loom_strdup(syntax_error) : parse_entry(a, obj, e);
  a->n++;
}

static int load_jsonl(loom_llava *a, char *text) {
  size_t cap = 0, line = 0;
  for (char *p = text; *p;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    line++;
    const char *q = p;
    while (*q == ' ' || *q == '\t' || *q == '\r') q++;
    if (*q) {
      json_error_t je;
      json_t *obj = json_loads(p, 0, &je);
      char *msg = obj ? NULL : loom_sprintf("line %zu is not valid JSON: %s", line, je.text);
      add_entry(a, &cap, obj, msg);
      free(msg);
      json_decref(obj);
    }
    if (!nl) break;
    p = nl + 1;
  }
  return 0;
}

static int load_json(loom_llava *a, const char *text, size_t len) {
  json_error_t je;
  json_t *root = json_loadb(text, len, 0, &je); /* a NUL byte is an error, not the end */
  if (!root)
    return loom_err("%s: not valid JSON at line %d, column %d: %s (a .jsonl file holds one "
                    "object per line)", a->path, je.line, je.column, je.text);
  if (!json_is_array(root)) {
    json_decref(root);
    return loom_err("%s: want a JSON list of {\"id\", \"image\", \"conversations\"} entries",
                    a->path);
  }
  size_t cap = 0;
  for (size_t i = 0; i < json_array_size(root); i++)
    add_entry(a, &cap, json_array_get(root, i), NULL);
  json_decref(root);
  return 0;
}

int loom_llava_open(loom_llava **out, const char *path) {
  *out = NULL;
  char *text;
  size_t len;
  if (loom_read_file(path, &text, &len)) return loom_err_prefix("LLaVA annotations: ");
  loom_llava *a = loom_calloc(1, sizeof *a);
  a->path = loom_strdup(path);
  const char *slash = strrchr(path, '/');
  a->dir = slash ? loom_sprintf("%.*s", (int)(slash - path), path) : loom_strdup(".");
  a->base = loom_strdup(slash ? slash + 1 : path);
  size_t pl = strlen(path);
  int jsonl = pl > 6 && !strcmp(path + pl - 6, ".jsonl");
  const char *nul = memchr(text, 0, len);
  int rc = 0;
  if (jsonl && nul) { /* load_jsonl reads NUL-terminated lines: do not stop there silently */
    size_t line = 1;
    for (const char *p = text; p < nul; p++) line += *p == '\n';
    rc = loom_err("%s: line %zu holds a NUL byte (offset %zu): a .jsonl file is UTF-8 text, one "
                  "JSON object per line", path, line, (size_t)(nul - text));
  }
  if (rc == 0) rc = jsonl ? load_jsonl(a, text) : load_json(a, text, len);
  free(text);
  if (rc == 0 && a->n == 0) rc = loom_err("%s: no entries", path);
  if (rc) {
    loom_llava_close(a);
    return -1;
  }
  *out = a;
  return 0;
}

size_t loom_llava_count(const loom_llava *a) { return a->n; }

int loom_llava_get(const loom_llava *a, size_t i, loom_vqa_sample *s) {
  memset(s, 0, sizeof *s);
  const entry *e = &a->e[i];
  if (e->error) return loom_err("%s: %s: fix the annotation or set data.skip_bad_samples: true",
                                e->where, e->error);
  s->key = loom_strdup(e->key);
  s->where = loom_strdup(e->where);
  s->images = loom_calloc((size_t)e->n_images + 1, sizeof *s->images);
  s->image_len = loom_calloc((size_t)e->n_images + 1, sizeof *s->image_len);
  s->turns = loom_calloc((size_t)e->n_turns + 1, sizeof *s->turns);
  for (int k = 0; k < e->n_images; k++) {
    char *data;
    if (!loom_path_exists(e->images[k])) {
      int rc = loom_err("%s: image file %s is missing: fix the path (relative to the "
                        "annotation file's directory) or set data.skip_bad_samples: true",
                        e->where, e->images[k]);
      loom_vqa_sample_free(s);
      return rc;
    }
    if (loom_read_file(e->images[k], &data, &s->image_len[k])) {
      loom_err_prefix("%s: ", e->where);
      loom_vqa_sample_free(s);
      return -1;
    }
    s->images[k] = (uint8_t *)data;
    s->n_images = k + 1;
  }
  for (int k = 0; k < e->n_turns; k++) {
    s->turns[k].role = e->turns[k].role;
    s->turns[k].text = loom_strdup(e->turns[k].text);
  }
  s->n_turns = e->n_turns;
  return 0;
}

void loom_llava_close(loom_llava *a) {
  if (!a) return;
  for (size_t i = 0; i < a->n; i++) {
    entry *e = &a->e[i];
    free(e->where);
    free(e->key);
    free(e->error);
    for (int k = 0; k < e->n_images; k++) free(e->images[k]);
    free(e->images);
    for (int k = 0; k < e->n_turns; k++) free(e->turns[k].text);
    free(e->turns);
  }
  free(a->e);
  free(a->path);
  free(a->dir);
  free(a->base);
  free(a);
}

void loom_vqa_sample_free(loom_vqa_sample *s) {
  if (!s) return;
  free(s->key);
  free(s->where);
  for (int k = 0; k < s->n_images; k++) free(s->images[k]);
  free(s->images);
  free(s->image_len);
  for (int k = 0; k < s->n_turns; k++) free(s->turns[k].text);
  free(s->turns);
  free(s->json);
  memset(s, 0, sizeof *s);
}

/* JSON Lines corpora (one document a line, its text in a field, as Hugging Face datasets
 * export them) and reading a whole corpus file as one text (`loom data train-tokenizer`). */
#include <stdlib.h>

#include "data/corpus_internal.h"
#include "loom/core.h"
#include "loom/corpus.h"

bool loom_corpus_blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!memchr(" \t\n\v\f\r", s[i], 6)) return false;
  return true;
}

static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT:
      return "an object";
    case JSON_ARRAY:
      return "a list";
    case JSON_STRING:
      return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
      return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
      return "a boolean";
    default:
      return "null";
  }
}

/* "a, b, c" (the first few keys of o), malloc'd. */
static char *key_list(json_t *o) {
  size_t cap = 160, n = 0;
  char *out = loom_calloc(cap, 1);
  const char *key;
  json_t *v;
  int k = 0;
  json_object_foreach(o, key, v) {
    if (k++ == 8) {
      snprintf(out + n, cap - n, ", ...");
      break;
    }
    n += (size_t)snprintf(out + n, cap - n, "%s'%.30s'", k > 1 ? ", " : "", key);
    if (n >= cap) break;
  }
  return out;
}

int loom_corpus_jsonl_text(const char *path, uint64_t line, const char *s, size_t len,
                           const char *field, json_t **doc, const char **text, size_t *n) {
  *doc = NULL;
  *text = NULL;
  *n = 0;
  if (loom_corpus_blank(s, len)) return 0;
  json_error_t je;
  json_t *o = json_loadb(s, len, JSON_ALLOW_NUL, &je);
  if (!o)
    return loom_err("%s:%llu: not valid JSON (%s, column %d); JSON Lines holds one JSON "
                    "object a line",
                    path, (unsigned long long)line, je.text, je.column);
  int rc = 0;
  json_t *v = json_object_get(o, field);
  if (!json_is_object(o)) {
    rc = loom_err("%s:%llu: %s, not a JSON object; JSON Lines holds one object a line, its "
                  "text in a field (--field)",
                  path, (unsigned long long)line, type_name(o));
  } else if (!v) {
    char *keys = key_list(o);
    rc = loom_err("%s:%llu: no field '%s' (the object has %s%s); name the text field with "
                  "--field",
                  path, (unsigned long long)line, field, *keys ? "" : "no fields", keys);
    free(keys);
  } else if (!json_is_string(v)) {
    rc = loom_err("%s:%llu: field '%s' is %s, not a string; name the text field with --field", path,
                  (unsigned long long)line, field, type_name(v));
  }
  if (rc) {
    json_decref(o);
    return rc;
  }
  *doc = o;
  *text = json_string_value(v);
  *n = json_string_length(v);
  return 0;
}

/* ---- a whole file as one text --------------------------------------------------------------- */

typedef struct {
  char *v;
  size_t n, cap;
} buf;

static void buf_add(buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    b->cap = 2 * (b->n + n + 1);
    b->v = loom_realloc(b->v, b->cap, 1);
  }
  memcpy(b->v + b->n, s, n);
  b->n += n;
  b->v[b->n] = 0;
}

static int read_all(const char *path, buf *b) {
  loom_text_in *in;
  if (loom_text_in_open(&in, path)) return LOOM_ERR;
  char chunk[1 << 16];
  size_t n;
  int rc;
  while ((rc = loom_text_in_read(in, chunk, sizeof chunk, &n)) == 0 && n > 0) buf_add(b, chunk, n);
  loom_text_in_close(in);
  buf_add(b, "", 0);
  return rc;
}

/* The documents of JSON Lines text all (the file path), joined by sep into *out. */
static int join_jsonl(const char *path, const buf *all, const char *field, const char *sep,
                      buf *out) {
  uint64_t line = 0, docs = 0, blank_docs = 0;
  for (size_t at = 0; at < all->n;) {
    const char *s = all->v + at, *nl = memchr(s, '\n', all->n - at);
    size_t len = nl ? (size_t)(nl - s) : all->n - at;
    at += len + 1;
    line++;
    json_t *doc;
    const char *text;
    size_t n;
    if (loom_corpus_jsonl_text(path, line, s, len, field, &doc, &text, &n)) return LOOM_ERR;
    if (!doc) continue;
    if (loom_corpus_blank(text, n)) {
      blank_docs++;
    } else {
      if (docs++) buf_add(out, sep, strlen(sep));
      buf_add(out, text, n);
    }
    json_decref(doc);
  }
  if (docs) return 0;
  if (blank_docs)
    return loom_err("%s: every document's '%s' is empty or blank (%llu documents): there is no "
                    "text to use; check --field",
                    path, field, (unsigned long long)blank_docs);
  return loom_err("%s: holds no documents (%llu line%s, all blank); give a JSON Lines file "
                  "with one object a line",
                  path, (unsigned long long)line, line == 1 ? "" : "s");
}

int loom_corpus_read_text(const char *path, const char *field, const char *sep, char **text,
                          size_t *len) {
  buf all = {0}, out = {0};
  int rc = read_all(path, &all);
  if (!rc && all.n == 0)
    rc = loom_err("%s: the file is empty: there is no text in it; remove it from the inputs", path);
  else if (!rc && loom_corpus_is_jsonl(path))
    rc = join_jsonl(path, &all, field ? field : "text", sep, &out);
  else if (!rc && loom_corpus_blank(all.v, all.n))
    rc = loom_err("%s: holds only whitespace (%zu bytes): there is no text in it; remove it "
                  "from the inputs",
                  path, all.n);
  if (rc || !loom_corpus_is_jsonl(path)) {
    free(out.v);
    out = all;
  } else {
    free(all.v);
  }
  if (rc) {
    free(out.v);
    return rc;
  }
  *text = out.v;
  *len = out.n;
  return 0;
}

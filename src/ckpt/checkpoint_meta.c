/* A checkpoint's JSON metadata, checked field by field so that a damaged or hand-edited
 * trainer_state.json or index.json is a clear error naming the file and the field (never a
 * NULL dereference, a negative step reaching the optimizer, or a path outside the
 * checkpoint). The writers are in checkpoint.c (state_json, write_index). */
#include <ctype.h>
#include <limits.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "ckpt/checkpoint_meta.h"

/* A hex string of 1..16 digits (how the writer stores 64-bit words) into *out. */
static int hex_word(json_t *v, const char *path, const char *field, uint64_t *out) {
  const char *s = json_string_value(v);
  size_t n = s ? strlen(s) : 0;
  bool ok = s && n >= 1 && n <= 16 && n == json_string_length(v);
  for (size_t i = 0; ok && i < n; i++) ok = isxdigit((unsigned char)s[i]);
  if (!ok)
    return loom_err("%s: \"%s\" must be a string of 1 to 16 hex digits; the checkpoint is "
                    "damaged (resume from another checkpoint)", path, field);
  *out = strtoull(s, NULL, 16);
  return 0;
}

/* A non-negative integer field (min 1 for step); absent is an error unless optional. */
static int count(json_t *o, const char *key, const char *path, long min, bool optional,
                 long *out) {
  json_t *v = json_object_get(o, key);
  if (!v && optional) return *out = 0, 0;
  if (!json_is_integer(v) || json_integer_value(v) < min)
    return loom_err("%s: \"%s\" must be an integer >= %ld%s; the checkpoint is damaged (resume "
                    "from another checkpoint)", path, key, min, v ? "" : " (it is missing)");
  *out = (long)json_integer_value(v);
  return 0;
}

static int state_fields(json_t *o, const char *path, loom_train_state *ts) {
  if (!json_is_object(o))
    return loom_err("%s: expected a JSON object; the checkpoint is damaged", path);
  long epoch, index;
  json_t *loader = json_object_get(o, "loader");
  if (!json_is_object(loader))
    return loom_err("%s: \"loader\" must be an object {epoch, index, batch_windows}; the "
                    "checkpoint is damaged", path);
  if (count(o, "step", path, 1, false, &ts->step) ||
      count(loader, "epoch", path, 0, false, &epoch) ||
      count(loader, "index", path, 0, false, &index) ||
      count(loader, "batch_windows", path, 0, true, &ts->loader_batch_windows) ||
      count(o, "tokens_seen", path, 0, false, &ts->tokens_seen) ||
      count(o, "skipped_bad_samples", path, 0, true, &ts->skipped_bad)) /* absent in old ones */
    return LOOM_ERR;
  ts->loader.epoch = (uint64_t)epoch;
  ts->loader.index = (uint64_t)index;
  json_t *el = json_object_get(o, "elapsed");
  if (!json_is_number(el) || !isfinite(json_number_value(el)) || json_number_value(el) < 0)
    return loom_err("%s: \"elapsed\" must be a number of seconds >= 0; the checkpoint is damaged",
                    path);
  ts->elapsed = json_number_value(el);
  if (hex_word(json_object_get(o, "config_hash"), path, "config_hash", &ts->config_hash))
    return LOOM_ERR;
  json_t *rng = json_object_get(o, "rng");
  if (!json_is_array(rng) || json_array_size(rng) != 4)
    return loom_err("%s: \"rng\" must be a list of 4 hex words; the checkpoint is damaged", path);
  uint64_t any = 0;
  for (size_t i = 0; i < 4; i++) {
    if (hex_word(json_array_get(rng, i), path, "rng", &ts->rng.s[i])) return LOOM_ERR;
    any |= ts->rng.s[i];
  }
  if (!any)
    return loom_err("%s: \"rng\" is all zero, which is not a state the generator can reach; the "
                    "checkpoint is damaged", path);
  return 0;
}

int loom_ckpt_state_parse(const char *text, size_t len, const char *path, loom_train_state *ts) {
  json_error_t e;
  json_t *o = json_loadb(text, len, 0, &e);
  if (!o)
    return loom_err("%s:%d: not valid JSON (%s); the checkpoint is damaged", path, e.line, e.text);
  loom_train_state t;
  memset(&t, 0, sizeof t);
  int rc = state_fields(o, path, &t);
  json_decref(o);
  if (!rc) *ts = t;
  return rc;
}

int loom_ckpt_state_read(const char *path, loom_train_state *ts) {
  char *text;
  size_t len;
  if (loom_read_file(path, &text, &len)) return LOOM_ERR;
  int rc = loom_ckpt_state_parse(text, len, path, ts);
  free(text);
  return rc;
}

void loom_ckpt_names_free(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

int loom_ckpt_index_parse(const char *text, size_t len, const char *path, const char *kind,
                          char ***names, int *n) {
  *names = NULL;
  *n = 0;
  json_error_t e;
  json_t *o = json_loadb(text, len, 0, &e);
  if (!o)
    return loom_err("%s:%d: not valid JSON (%s); the checkpoint index is damaged", path, e.line,
                    e.text);
  char key[64];
  snprintf(key, sizeof key, "%s_files", kind);
  json_t *list = json_is_object(o) ? json_object_get(o, key) : NULL;
  int rc = 0;
  if (!json_is_array(list) || json_array_size(list) > 1000000) {
    rc = loom_err("%s: \"%s\" is missing or not a list of file names; the checkpoint index is "
                  "damaged", path, key);
  } else {
    size_t count = json_array_size(list);
    char **out = loom_calloc(count + 1, sizeof *out);
    for (size_t i = 0; i < count && !rc; i++) {
      json_t *v = json_array_get(list, i);
      const char *s = json_string_value(v);
      if (!s || !*s || strlen(s) != json_string_length(v) || strchr(s, '/') || !strcmp(s, ".") ||
          !strcmp(s, ".."))
        rc = loom_err("%s: \"%s\" entry %zu must be the name of a file in the checkpoint "
                      "directory (no '/', not . or ..); the checkpoint index is damaged", path,
                      key, i + 1);
      else
        out[i] = loom_strdup(s);
    }
    if (rc) {
      loom_ckpt_names_free(out, (int)count);
    } else {
      *names = out;
      *n = (int)count;
    }
  }
  json_decref(o);
  return rc;
}

/* json integer v in [lo, hi] */
static bool int_in(json_t *v, json_int_t lo, json_int_t hi) {
  return json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi;
}

int loom_ckpt_pieces_check(const void *pieces_json, const char *path) {
  json_t *o = (json_t *)pieces_json;
  if (!json_is_object(o))
    return loom_err("%s: metadata 'loom.pieces' is not a JSON object; the checkpoint is damaged",
                    path);
  const char *key;
  json_t *d;
  json_object_foreach(o, key, d) {
    const char *bad = NULL;
    json_t *gs = json_object_get(d, "gshape"), *ls = json_object_get(d, "lshape");
    if (!json_is_object(d)) bad = "the entry";
    else if (!json_is_string(json_object_get(d, "tensor"))) bad = "tensor";
    else if (!json_is_array(ls) || json_array_size(ls) != 2 || !int_in(json_array_get(ls, 0), 0, INT_MAX) ||
             !int_in(json_array_get(ls, 1), 0, INT_MAX))
      bad = "lshape";
    else if (gs && (!json_is_array(gs) || json_array_size(gs) != 2 ||
                    !int_in(json_array_get(gs, 0), 0, INT_MAX) ||
                    !int_in(json_array_get(gs, 1), 0, INT_MAX)))
      bad = "gshape";
    else if (!int_in(json_object_get(d, "split_dim"), -1, 1)) bad = "split_dim";
    else if (!int_in(json_object_get(d, "split_start"), 0, INT_MAX)) bad = "split_start";
    else if (!int_in(json_object_get(d, "begin"), 0, LLONG_MAX)) bad = "begin";
    if (bad)
      return loom_err("%s: metadata 'loom.pieces' entry '%.200s': %s is missing or out of range "
                      "(see docs/FORMATS-checkpoint.md); the checkpoint is damaged", path, key,
                      bad);
  }
  return 0;
}

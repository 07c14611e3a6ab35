/* Reading a shard set's manifest (written by src/data/shard_set.c): the shard paths,
 * resolved against the manifest's directory, with the tokens the manifest promises for each,
 * checked field by field so a damaged or hand-edited manifest is an error naming the field. */
#include <jansson.h>
#include <libgen.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/shard.h"

bool loom_shard_is_manifest(const char *path) {
  size_t n = strlen(path);
  return n > 5 && !strcmp(path + n - 5, ".json") && !loom_is_dir(path);
}

/* The directory of path (malloc'd), "." for a bare name. */
static char *dir_of(const char *path) {
  char *copy = loom_strdup(path);
  char *d = loom_strdup(dirname(copy));
  free(copy);
  return d;
}

static int bad(const char *path, const char *what) {
  return loom_err("%s: %s; the manifest is damaged: re-create the shards with 'loom data "
                  "tokenize --shard-size'",
                  path, what);
}

static int read_entries(const char *path, json_t *list, loom_shard_manifest *m) {
  char *dir = dir_of(path);
  m->shards = loom_calloc(json_array_size(list) + 1, sizeof *m->shards);
  int rc = 0;
  for (size_t i = 0; i < json_array_size(list) && !rc; i++) {
    json_t *e = json_array_get(list, i), *p = json_object_get(e, "path");
    json_t *t = json_object_get(e, "tokens");
    const char *name = json_string_value(p);
    if (!name || !*name || strlen(name) != json_string_length(p) || !json_is_integer(t) ||
        json_integer_value(t) < 0) {
      char what[96];
      snprintf(what, sizeof what, "shards[%zu] needs a \"path\" and a \"tokens\" count >= 0", i);
      rc = bad(path, what);
      break;
    }
    m->shards[i].path = name[0] == '/' ? loom_strdup(name) : loom_sprintf("%s/%s", dir, name);
    m->shards[i].tokens = (uint64_t)json_integer_value(t);
    m->tokens += m->shards[i].tokens;
    m->n++;
  }
  free(dir);
  return rc;
}

int loom_shard_manifest_read(const char *path, loom_shard_manifest *m) {
  memset(m, 0, sizeof *m);
  m->eod = -1;
  json_error_t je;
  json_t *o = json_load_file(path, 0, &je);
  if (!o) {
    if (!loom_path_exists(path))
      return loom_err("%s: no such file; give a shard file, a directory of shards, a glob or "
                      "the manifest 'loom data tokenize --shard-size' wrote",
                      path);
    return loom_err("%s:%d: not valid JSON (%s); is it a shard manifest?", path, je.line, je.text);
  }
  json_t *format = json_object_get(o, "format"), *list = json_object_get(o, "shards");
  json_t *vocab = json_object_get(o, "vocab_size"), *eod = json_object_get(o, "end_of_document");
  int rc = 0;
  if (!json_is_string(format) || strcmp(json_string_value(format), LOOM_SHARD_MANIFEST_FORMAT))
    rc = loom_err("%s: not a loom shard manifest (\"format\" is not \"%s\"); give the manifest "
                  "'loom data tokenize --shard-size' wrote, a shard or a directory of shards",
                  path, LOOM_SHARD_MANIFEST_FORMAT);
  else if (!json_is_integer(vocab) || json_integer_value(vocab) < 1 ||
           json_integer_value(vocab) > INT32_MAX)
    rc = bad(path, "\"vocab_size\" must be an integer in [1, 2^31)");
  else if (eod && !json_is_null(eod) &&
           (!json_is_integer(eod) || json_integer_value(eod) < 0 ||
            json_integer_value(eod) >= json_integer_value(vocab)))
    rc = bad(path, "\"end_of_document\" must be null or a token id below vocab_size");
  else if (!json_is_array(list) || json_array_size(list) == 0)
    rc = bad(path, "\"shards\" must be a non-empty list");
  if (!rc) {
    m->vocab_size = (uint32_t)json_integer_value(vocab);
    if (json_is_integer(eod)) m->eod = (int32_t)json_integer_value(eod);
    rc = read_entries(path, list, m);
  }
  json_decref(o);
  if (rc) loom_shard_manifest_free(m);
  return rc;
}

int loom_shard_manifest_check(const char *manifest, const char *shard, uint64_t tokens,
                              const loom_shard_header *h, const loom_shard_manifest *m) {
  const char *redo = "the shards changed since the manifest was written: re-create them with "
                     "'loom data tokenize --shard-size'";
  if (h->count != tokens)
    return loom_err("%s: holds %llu tokens, but the manifest %s says %llu; %s", shard,
                    (unsigned long long)h->count, manifest, (unsigned long long)tokens, redo);
  if (h->vocab_size != m->vocab_size)
    return loom_err("%s: vocab_size %u, but the manifest %s says %u; %s", shard, h->vocab_size,
                    manifest, m->vocab_size, redo);
  if ((h->has_eod ? h->eod_token : -1) != m->eod)
    return loom_err("%s: end-of-document token %d, but the manifest %s says %d; %s", shard,
                    h->has_eod ? (int)h->eod_token : -1, manifest, (int)m->eod, redo);
  return 0;
}

void loom_shard_manifest_free(loom_shard_manifest *m) {
  for (size_t i = 0; i < m->n; i++) free(m->shards[i].path);
  free(m->shards);
  memset(m, 0, sizeof *m);
}

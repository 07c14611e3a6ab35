/* A token stream written as a set of shards of a fixed token count with a manifest
 * (`loom data tokenize --shard-size`; format in include/loom/shard.h and
 * docs/FORMATS-data.md). Shards are written under staging names and renamed into place only
 * when every one is complete, then the manifest is written (atomically): a failed run leaves
 * the earlier files of that name as they were. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/shard.h"

struct loom_shard_set {
  char *prefix;   /* PREFIX of PREFIX_<n>.bin */
  char *manifest; /* PREFIX.manifest.json, or DIR/manifest.json */
  uint32_t vocab_size;
  int32_t eod;          /* -1: none recorded */
  uint64_t per_shard;   /* tokens a shard holds (the last may hold fewer) */
  loom_shard_writer *w; /* the shard being written, or NULL */
  char **staged;        /* (n) staging names of the shards written */
  uint64_t *tokens;     /* (n) tokens of each */
  int n;
  uint64_t total;
};

static char *shard_name(const loom_shard_set *s, int i) {
  return loom_sprintf("%s_%06d.bin", s->prefix, i);
}

/* The staging name of shard i: PREFIX_<i>.bin.part.<pid>. */
static char *staged_name(const loom_shard_set *s, int i) {
  char *final = shard_name(s, i);
  char *p = loom_sprintf("%s.part.%ld", final, (long)getpid());
  free(final);
  return p;
}

int loom_shard_set_open(loom_shard_set **out, const char *path, uint32_t vocab_size, int32_t eod,
                        uint64_t shard_tokens) {
  *out = NULL;
  if (shard_tokens == 0) return loom_err("%s: a shard size of 0 tokens", path);
  if (vocab_size == 0) return loom_err("%s: cannot write shards with vocab_size 0", path);
  if (eod >= 0 && (uint32_t)eod >= vocab_size)
    return loom_err("%s: end-of-document token %d is outside the vocabulary [0, %u)", path,
                    (int)eod, vocab_size);
  loom_shard_set *s = loom_calloc(1, sizeof *s);
  size_t n = strlen(path);
  if (loom_is_dir(path) || (n && path[n - 1] == '/')) { /* DIR: DIR/shard_<n>.bin */
    const char *sep = n && path[n - 1] == '/' ? "" : "/";
    s->prefix = loom_sprintf("%s%sshard", path, sep);
    s->manifest = loom_sprintf("%s%smanifest.json", path, sep);
  } else { /* PREFIX or PREFIX.bin */
    bool bin = n > 4 && !strcmp(path + n - 4, ".bin");
    s->prefix = loom_strndup(path, bin ? n - 4 : n);
    s->manifest = loom_sprintf("%s.manifest.json", s->prefix);
  }
  s->vocab_size = vocab_size;
  s->eod = eod;
  s->per_shard = shard_tokens;
  *out = s;
  return 0;
}

const char *loom_shard_set_manifest(const loom_shard_set *s) { return s->manifest; }

static int next_shard(loom_shard_set *s) {
  char *staged = staged_name(s, s->n);
  int rc = loom_shard_writer_open(&s->w, staged, s->vocab_size);
  if (!rc && s->eod >= 0) rc = loom_shard_writer_set_eod(s->w, s->eod);
  if (rc) {
    if (s->w) loom_shard_writer_abort(s->w);
    s->w = NULL;
    free(staged);
    return LOOM_ERR;
  }
  s->staged = loom_realloc(s->staged, (size_t)s->n + 1, sizeof *s->staged);
  s->tokens = loom_realloc(s->tokens, (size_t)s->n + 1, sizeof *s->tokens);
  s->staged[s->n] = staged;
  s->tokens[s->n] = 0;
  s->n++;
  return 0;
}

static int finish_shard(loom_shard_set *s) {
  int rc = loom_shard_writer_close(s->w); /* renamed to its staging name */
  s->w = NULL;
  return rc;
}

int loom_shard_set_append(loom_shard_set *s, const int32_t *tokens, size_t n) {
  while (n > 0) {
    if (!s->w && next_shard(s)) return LOOM_ERR;
    uint64_t room = s->per_shard - s->tokens[s->n - 1];
    size_t k = n < room ? n : (size_t)room;
    if (loom_shard_writer_append(s->w, tokens, k)) return LOOM_ERR;
    s->tokens[s->n - 1] += k;
    s->total += k;
    tokens += k, n -= k;
    if (s->tokens[s->n - 1] == s->per_shard && finish_shard(s)) return LOOM_ERR;
  }
  return 0;
}

uint64_t loom_shard_set_count(const loom_shard_set *s) { return s->total; }

static void set_free(loom_shard_set *s) {
  for (int i = 0; i < s->n; i++) free(s->staged[i]);
  free(s->staged);
  free(s->tokens);
  free(s->prefix);
  free(s->manifest);
  free(s);
}

void loom_shard_set_abort(loom_shard_set *s) {
  if (!s) return;
  if (s->w) loom_shard_writer_abort(s->w);
  for (int i = 0; i < s->n; i++) unlink(s->staged[i]);
  set_free(s);
}

/* The manifest: the shards (names relative to the manifest's directory), their tokens, the
 * vocabulary, the end-of-document token and what the caller knows (tokenizer, inputs). */
static char *manifest_text(const loom_shard_set *s, const loom_shard_provenance *pv) {
  json_t *shards = json_array(), *inputs = json_array();
  for (int i = 0; i < s->n; i++) {
    char *name = shard_name(s, i);
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    json_array_append_new(
        shards, json_pack("{s:s, s:I}", "path", base, "tokens", (json_int_t)s->tokens[i]));
    free(name);
  }
  for (int i = 0; pv && i < pv->n_inputs; i++)
    json_array_append_new(inputs, json_pack("{s:s, s:I, s:I}", "path", pv->inputs[i], "bytes",
                                            (json_int_t)pv->input_bytes[i], "documents",
                                            (json_int_t)pv->input_documents[i]));
  json_t *o =
      json_pack("{s:s, s:i, s:I, s:s, s:I, s:I}", "format", LOOM_SHARD_MANIFEST_FORMAT, "version",
                1, "vocab_size", (json_int_t)s->vocab_size, "dtype",
                loom_shard_dtype_for_vocab(s->vocab_size) == LOOM_SHARD_U16 ? "uint16" : "uint32",
                "tokens", (json_int_t)s->total, "shard_tokens", (json_int_t)s->per_shard);
  json_object_set_new(o, "end_of_document", s->eod >= 0 ? json_integer(s->eod) : json_null());
  if (pv) {
    json_object_set_new(o, "documents", json_integer((json_int_t)pv->documents));
    json_object_set_new(o, "tokenizer",
                        json_pack("{s:s, s:s, s:I}", "path", pv->tokenizer, "hash",
                                  pv->tokenizer_hash, "vocab_size", (json_int_t)s->vocab_size));
    json_object_set_new(o, "inputs", inputs);
  } else {
    json_decref(inputs);
  }
  json_object_set_new(o, "shards", shards);
  char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(o);
  char *out = loom_sprintf("%s\n", text);
  free(text);
  return out;
}

int loom_shard_set_close(loom_shard_set *s, const loom_shard_provenance *pv, int *shards,
                         int *removed) {
  *shards = 0;
  *removed = 0;
  if (s->w && finish_shard(s)) {
    loom_shard_set_abort(s);
    return LOOM_ERR;
  }
  int rc = 0;
  for (int i = 0; i < s->n && !rc; i++) { /* every shard is complete: into place */
    char *final = shard_name(s, i);
    if (rename(s->staged[i], final) != 0)
      rc = loom_err("cannot rename '%s' to '%s': %s", s->staged[i], final, strerror(errno));
    else s->staged[i][0] = 0; /* nothing left to remove */
    free(final);
  }
  char *text = rc ? NULL : manifest_text(s, pv);
  if (!rc) rc = loom_write_file_atomic(s->manifest, text, strlen(text));
  free(text);
  /* shards of an earlier, longer run of the same name would join a directory's stream */
  for (int i = s->n; !rc; i++) {
    char *stale = shard_name(s, i);
    bool gone = unlink(stale) != 0;
    free(stale);
    if (gone) break;
    (*removed)++;
  }
  if (rc) {
    for (int i = 0; i < s->n; i++)
      if (s->staged[i][0]) unlink(s->staged[i]);
    set_free(s);
    return LOOM_ERR;
  }
  *shards = s->n;
  set_free(s);
  return 0;
}

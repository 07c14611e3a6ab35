/* Helpers shared by the data-area C tests: a scratch directory per test, small file
 * writers, a hand-made byte-level BPE tokenizer.json, and running the `loom` executable. */
#ifndef LOOM_DATA_TEST_UTIL_H
#define LOOM_DATA_TEST_UTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "run_loom.h"
#include "loom/core.h"
#include "loom/tokenizer.h"

/* "<dir>/<name>", malloc'd; dir is created. */
static inline char *scratch_path(const char *dir, const char *name) {
  loom_mkdir_p(dir);
  return loom_sprintf("%s/%s", dir, name);
}

static inline void write_text(const char *path, const char *text) {
  if (loom_write_file_atomic(path, text, strlen(text))) {
    fprintf(stderr, "cannot write %s: %s\n", path, loom_errmsg());
    exit(2);
  }
}

static inline int contains(const char *hay, const char *needle) {
  return hay && strstr(hay, needle) != NULL;
}

/* The tokenizer.json spelling of a byte string, JSON-escaped (quotes and backslashes). */
static inline char *json_spell(const char *bytes) {
  char *s = loom_bytes_to_token_str((const uint8_t *)bytes, strlen(bytes));
  char *out = malloc(2 * strlen(s) + 1), *o = out;
  for (const char *p = s; *p; p++) {
    if (*p == '"' || *p == '\\') *o++ = '\\';
    *o++ = *p;
  }
  *o = 0;
  free(s);
  return out;
}

/* A tiny tokenizer.json: the 256 byte tokens (id = byte value), merges (pairs of byte
 * strings, in rank order) each adding the next id, then <|endoftext|>. pairs_format: merges as ["a","b"] instead of "a b". pre_tokenizer is raw
 * JSON; model_type the model.type. Returns malloc'd JSON text. */
static inline char *tiny_tokenizer_json(const char *const (*merges)[2], int n_merges,
                                        int pairs_format, const char *model_type,
                                        const char *pre_tokenizer) {
  size_t cap = 1 << 16, len = 0;
  char *j = malloc(cap);
#define APPEND(...)                                                                    \
  do {                                                                                 \
    int n_ = snprintf(j + len, cap - len, __VA_ARGS__);                                \
    if ((size_t)n_ >= cap - len) {                                                     \
      cap *= 2;                                                                        \
      j = realloc(j, cap);                                                             \
      snprintf(j + len, cap - len, __VA_ARGS__);                                       \
    }                                                                                  \
    len += (size_t)n_;                                                                 \
  } while (0)
  int eot = 256 + n_merges;
  APPEND("{\"version\": \"1.0\", \"added_tokens\": [{\"id\": %d, \"content\": "
         "\"<|endoftext|>\", \"special\": true}], \"normalizer\": null, \"pre_tokenizer\": %s, "
         "\"post_processor\": null, \"decoder\": null, \"model\": {\"type\": \"%s\", "
         "\"vocab\": {", eot, pre_tokenizer, model_type);
  for (int b = 0; b < 256; b++) {
    char one[2] = {(char)b, 0};
    char *s = b ? json_spell(one) : NULL;
    if (b == 0) { /* NUL cannot go through strlen: spell it directly */
      char *t = loom_bytes_to_token_str((const uint8_t *)"\0", 1);
      s = loom_strdup(t);
      free(t);
    }
    APPEND("%s\"%s\": %d", b ? ", " : "", s, b);
    free(s);
  }
  for (int k = 0; k < n_merges; k++) {
    char *cat = loom_sprintf("%s%s", merges[k][0], merges[k][1]);
    char *s = json_spell(cat);
    APPEND(", \"%s\": %d", s, 256 + k);
    free(s);
    free(cat);
  }
  APPEND(", \"<|endoftext|>\": %d}, \"merges\": [", eot);
  for (int k = 0; k < n_merges; k++) {
    char *a = json_spell(merges[k][0]), *b = json_spell(merges[k][1]);
    if (pairs_format)
      APPEND("%s[\"%s\", \"%s\"]", k ? ", " : "", a, b);
    else
      APPEND("%s\"%s %s\"", k ? ", " : "", a, b);
    free(a);
    free(b);
  }
  APPEND("]}}\n");
#undef APPEND
  return j;
}

#define GPT2_PRETOK "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}"

/* ---- running loom -------------------------------------------------------------------- */

/* Run `loom ARGS` (shell text) in dir, capturing stdout and stderr (tests/run_loom.h). */
static inline run_result run_loom(const char *dir, const char *args) { return loom_run_in(dir, args); }

#endif

/* Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json: parsing and
 * validation of the supported subset (see include/loom/tokenizer.h), encoding (added
 * tokens, regex pre-tokenization, merges by rank with a heap, per-piece cache) and
 * byte-exact decoding. */
#include <jansson.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/tokenizer.h"

/* How many unused ids a tokenizer.json may leave below its largest id. */
#define LOOM_TOKENIZER_ID_GAPS 65536

typedef struct {
  char *content; /* verbatim bytes matched in the text */
  size_t len;
  int32_t id;
  int lstrip, rstrip; /* absorb whitespace on that side */
} added_token;

#define CACHE_MAX_ENTRIES 262144 /* pieces remembered before the cache is reset */
#define CACHE_MAX_PIECE 256      /* longer pieces are not cached (bytes) */

struct loom_tokenizer {
  char *path;
  int vocab_size;        /* 1 + largest id */
  size_t id_limit;       /* ids must lie below: vocab entries + added tokens + LOOM_TOKENIZER_ID_GAPS
                          * (set before parsing) */
  loom_strtab *by_str;   /* tokenizer.json spelling -> index into str_ids */
  int32_t *str_ids;      /* (strtab count) */
  size_t str_ids_cap;
  loom_strtab *id_bytes; /* index = id order of insertion; see id_index */
  int64_t *id_index;     /* (vocab_size) id -> index in id_bytes, -1 unused */
  loom_strtab *by_bytes; /* raw bytes -> index into bytes_ids (ignore_merges lookups) */
  int32_t *bytes_ids;
  int32_t byte_id[256];  /* id of each single-byte token */
  loom_u64map *merges;   /* (a << 32 | b) -> (rank << 32 | merged id) */
  int ignore_merges;
  loom_regex *re;        /* NULL: the whole segment is one piece */
  int split_rule;        /* where a text may be cut without changing its encoding (SPLIT_*) */
  added_token *added;
  size_t n_added;
  uint8_t added_first[256]; /* 1 if some added token starts with this byte */
  const char *normalizer;   /* "NFC" when requested but not applied, else NULL */
  loom_strtab *cache;       /* piece bytes -> cache entry */
  uint64_t *cache_off;      /* (entries) offset into cache_ids */
  uint32_t *cache_n;        /* (entries) token count */
  int32_t *cache_ids;
  size_t cache_ids_len, cache_ids_cap, cache_cap;
};

/* Where loom_tokenizer_can_split may cut a text: never (an unknown pre-tokenizer regex, none,
 * or added tokens that strip or hold whitespace), after a newline between two printable ASCII
 * characters (GPT-2's regex), or after a newline before one (Qwen2 and Llama 3's regexes). */
enum { SPLIT_NEVER, SPLIT_GPT2, SPLIT_QWEN2 };

/* ---- small vectors ----------------------------------------------------------------------- */

typedef struct {
  int32_t *v;
  size_t n, cap;
} ivec;

static void ivec_push(ivec *a, int32_t x) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 256;
    a->v = loom_realloc(a->v, a->cap, sizeof *a->v);
  }
  a->v[a->n++] = x;
}

/* ---- loading ------------------------------------------------------------------------------ */

static int32_t str_lookup(const loom_tokenizer *t, const char *s, size_t len) {
  int64_t i = loom_strtab_find(t->by_str, s, len);
  return i < 0 ? -1 : t->str_ids[i];
}

/* Register spelling -> id; a spelling seen again keeps its first id. */
static void str_register(loom_tokenizer *t, const char *s, size_t len, int32_t id) {
  int added;
  int64_t i = loom_strtab_intern(t->by_str, s, len, &added);
  if (!added) return;
  if ((size_t)i >= t->str_ids_cap) {
    t->str_ids_cap = t->str_ids_cap ? 2 * t->str_ids_cap : 1024;
    t->str_ids = loom_realloc(t->str_ids, t->str_ids_cap, sizeof *t->str_ids);
  }
  t->str_ids[i] = id;
}

static int parse_vocab(loom_tokenizer *t, json_t *vocab) {
  if (!json_is_object(vocab))
    return loom_err("%s: model.vocab is missing or not an object {token: id}", t->path);
  const char *key;
  json_t *val;
  json_int_t max_id = -1;
  json_object_foreach(vocab, key, val) {
    json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
    if (id < 0 || (size_t)id >= t->id_limit)
      return loom_err("%s: model.vocab['%s'] = %lld is not an id in [0, %zu): ids must be below "
                      "the number of tokens the file defines (model.vocab entries + "
                      "added_tokens) plus %d for gaps; renumber the vocabulary from 0", t->path, key,
                      (long long)(json_is_integer(val) ? json_integer_value(val) : -1),
                      t->id_limit, LOOM_TOKENIZER_ID_GAPS);
    if (id > max_id) max_id = id;
    str_register(t, key, strlen(key), (int32_t)id);
  }
  if (max_id < 0) return loom_err("%s: model.vocab is empty", t->path);
  t->vocab_size = (int)max_id + 1;
  return 0;
}

/* Grow id tables to cover ids < n (added tokens may lie beyond the vocab). */
static void ensure_ids(loom_tokenizer *t, int n) {
  if (t->id_index && n <= t->vocab_size) return;
  int old = t->id_index ? t->vocab_size : 0;
  t->id_index = loom_realloc(t->id_index, (size_t)n, sizeof *t->id_index);
  for (int i = old; i < n; i++) t->id_index[i] = -1;
  if (n > t->vocab_size) t->vocab_size = n;
}

static int set_id_bytes(loom_tokenizer *t, int32_t id, const void *bytes, size_t len) {
  ensure_ids(t, id + 1);
  int64_t idx = loom_strtab_intern(t->id_bytes, bytes, len, NULL);
  t->id_index[id] = idx;
  return 0;
}

/* id -> bytes for every vocab entry; raw bytes -> id for ignore_merges. */
static int build_id_tables(loom_tokenizer *t, json_t *vocab) {
  ensure_ids(t, t->vocab_size);
  const char *key;
  json_t *val;
  size_t cap = json_object_size(vocab) + 1;
  t->bytes_ids = loom_malloc(cap * sizeof *t->bytes_ids);
  json_object_foreach(vocab, key, val) {
    int32_t id = (int32_t)json_integer_value(val);
    if (t->id_index[id] >= 0)
      return loom_err("%s: model.vocab gives id %d to two tokens (one is '%s')", t->path,
                      (int)id, key);
    size_t n;
    uint8_t *b = loom_token_str_to_bytes(key, &n);
    set_id_bytes(t, id, b, n);
    int added;
    int64_t bi = loom_strtab_intern(t->by_bytes, b, n, &added);
    if (added) t->bytes_ids[bi] = id;
    free(b);
  }
  return 0;
}

static int find_byte_tokens(loom_tokenizer *t) {
  for (int b = 0; b < 256; b++) {
    char s[4];
    uint8_t one = (uint8_t)b;
    char *spelled = loom_bytes_to_token_str(&one, 1);
    snprintf(s, sizeof s, "%s", spelled);
    free(spelled);
    t->byte_id[b] = str_lookup(t, s, strlen(s));
    if (t->byte_id[b] < 0)
      return loom_err("%s: model.vocab lacks the byte-level token '%s' for byte 0x%02X; loom "
                      "needs all 256 byte tokens (train with the ByteLevel alphabet)",
                      t->path, s, b);
  }
  return 0;
}

/* One merge entry as its two spellings; *a and *b point into the json or into buf. */
static int merge_parts(loom_tokenizer *t, json_t *m, size_t k, const char **a, size_t *alen,
                       const char **b, size_t *blen) {
  if (json_is_string(m)) {
    const char *s = json_string_value(m), *sp = strchr(s, ' ');
    if (!sp || strchr(sp + 1, ' '))
      return loom_err("%s: model.merges[%zu] = '%s' is not two tokens separated by one space",
                      t->path, k, s);
    *a = s, *alen = (size_t)(sp - s), *b = sp + 1, *blen = strlen(sp + 1);
    return 0;
  }
  if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
      json_is_string(json_array_get(m, 1))) {
    *a = json_string_value(json_array_get(m, 0)), *alen = strlen(*a);
    *b = json_string_value(json_array_get(m, 1)), *blen = strlen(*b);
    return 0;
  }
  return loom_err("%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", t->path, k);
}

static int parse_merges(loom_tokenizer *t, json_t *merges) {
  if (!json_is_array(merges))
    return loom_err("%s: model.merges is missing or not a list", t->path);
  size_t n = json_array_size(merges);
  t->merges = loom_u64map_new(n);
  char *buf = NULL;
  size_t bufcap = 0;
  for (size_t k = 0; k < n; k++) {
    const char *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    if (merge_parts(t, json_array_get(merges, k), k, &a, &alen, &b, &blen)) goto fail;
    if (alen + blen + 1 > bufcap) {
      bufcap = 2 * (alen + blen + 1);
      buf = loom_realloc(buf, bufcap, 1);
    }
    memcpy(buf, a, alen);
    memcpy(buf + alen, b, blen);
    int32_t ia = str_lookup(t, a, alen), ib = str_lookup(t, b, blen);
    int32_t im = str_lookup(t, buf, alen + blen);
    if (ia < 0 || ib < 0 || im < 0) {
      const char *miss = ia < 0 ? a : ib < 0 ? b : buf;
      int mlen = (int)(ia < 0 ? alen : ib < 0 ? blen : alen + blen);
      loom_err("%s: model.merges[%zu] ('%.*s' + '%.*s'): token '%.*s' is not in model.vocab",
               t->path, k, (int)alen, a, (int)blen, b, mlen, miss);
      goto fail;
    }
    uint64_t key = (uint64_t)ia << 32 | (uint32_t)ib;
    if (!loom_u64map_get(t->merges, key, NULL))
      loom_u64map_put(t->merges, key, (uint64_t)k << 32 | (uint32_t)im);
  }
  free(buf);
  return 0;
fail:
  free(buf);
  return -1;
}

static int json_flag(json_t *obj, const char *key, int dflt) {
  json_t *v = json_object_get(obj, key);
  return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int parse_added_token(loom_tokenizer *t, json_t *a, size_t k) {
  json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
  if (!json_is_integer(id) || !json_is_string(content) || json_string_length(content) == 0)
    return loom_err("%s: added_tokens[%zu] needs an integer 'id' and a non-empty 'content'",
                    t->path, k);
  if (json_integer_value(id) < 0 || (size_t)json_integer_value(id) >= t->id_limit)
    return loom_err("%s: added_tokens[%zu] ('%s') has id %lld, not in [0, %zu): ids must be "
                    "below the number of tokens the file defines (model.vocab entries + "
                    "added_tokens) plus %d for gaps", t->path, k, json_string_value(content),
                    (long long)json_integer_value(id), t->id_limit, LOOM_TOKENIZER_ID_GAPS);
  if (json_flag(a, "single_word", 0))
    return loom_err("%s: added_tokens[%zu] ('%s') sets single_word, which loom does not "
                    "support; set it to false", t->path, k, json_string_value(content));
  int32_t aid = (int32_t)json_integer_value(id);
  size_t have_len;
  const char *have = loom_tokenizer_token_bytes(t, aid, &have_len);
  if (have && (have_len != json_string_length(content) ||
               memcmp(have, json_string_value(content), have_len)))
    return loom_err("%s: added_tokens[%zu] ('%s') has id %d, which is already the id of "
                    "another token ('%.*s'); give it an unused id", t->path, k,
                    json_string_value(content), (int)aid, (int)have_len, have);
  added_token *at = &t->added[t->n_added++];
  at->len = json_string_length(content);
  at->content = loom_malloc(at->len + 1);
  memcpy(at->content, json_string_value(content), at->len + 1);
  at->id = (int32_t)json_integer_value(id);
  at->lstrip = json_flag(a, "lstrip", 0);
  at->rstrip = json_flag(a, "rstrip", 0);
  t->added_first[(uint8_t)at->content[0]] = 1;
  set_id_bytes(t, at->id, at->content, at->len);
  str_register(t, at->content, at->len, at->id);
  return 0;
}

static int parse_added_tokens(loom_tokenizer *t, json_t *list) {
  if (!list || json_is_null(list)) return 0;
  if (!json_is_array(list)) return loom_err("%s: added_tokens is not a list", t->path);
  t->added = loom_calloc(json_array_size(list) + 1, sizeof *t->added);
  for (size_t k = 0; k < json_array_size(list); k++)
    if (parse_added_token(t, json_array_get(list, k), k)) return -1;
  return 0;
}

static int check_model_options(loom_tokenizer *t, json_t *model) {
  json_t *v = json_object_get(model, "dropout");
  if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0.0))
    return loom_err("%s: model.dropout is set; loom encodes deterministically, set it to null",
                    t->path);
  const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    v = json_object_get(model, keys[i]);
    if (v && json_is_string(v) && json_string_length(v) > 0)
      return loom_err("%s: model.%s is '%s'; loom supports byte-level BPE without "
                      "prefixes/suffixes (GPT-2, Qwen2)", t->path, keys[i], json_string_value(v));
  }
  t->ignore_merges = json_flag(model, "ignore_merges", 0);
  return 0;
}

static int parse_model(loom_tokenizer *t, json_t *root) {
  json_t *model = json_object_get(root, "model");
  if (!json_is_object(model)) return loom_err("%s: no 'model' object; is this a tokenizer.json?", t->path);
  json_t *type = json_object_get(model, "type");
  if (!json_is_string(type))
    return loom_err("%s: model.type is missing; loom supports byte-level BPE tokenizers "
                    "(GPT-2, Qwen2)", t->path);
  if (strcmp(json_string_value(type), "BPE") != 0)
    return loom_err("%s: model.type is '%s'; loom supports byte-level BPE tokenizers (GPT-2, "
                    "Qwen2)", t->path, json_string_value(type));
  if (check_model_options(t, model)) return -1;
  json_t *vocab = json_object_get(model, "vocab");
  if (parse_vocab(t, vocab) || build_id_tables(t, vocab) || find_byte_tokens(t)) return -1;
  return parse_merges(t, json_object_get(model, "merges"));
}

static const char *json_type_of(json_t *o) {
  json_t *v = json_object_get(o, "type");
  return json_is_string(v) ? json_string_value(v) : "?";
}

/* ByteLevel pre-tokenizer step; *use_regex receives its flag. */
static int parse_byte_level(loom_tokenizer *t, json_t *p, int *use_regex) {
  if (json_flag(p, "add_prefix_space", 0))
    return loom_err("%s: pre_tokenizer ByteLevel has add_prefix_space true, which loom does "
                    "not support; set it to false", t->path);
  *use_regex = json_flag(p, "use_regex", 1);
  return 0;
}

static int parse_split(loom_tokenizer *t, json_t *p) {
  json_t *pat = json_object_get(p, "pattern");
  json_t *rx = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
  json_t *beh = json_object_get(p, "behavior");
  if (!json_is_string(rx))
    return loom_err("%s: pre_tokenizer Split needs pattern {\"Regex\": ...}", t->path);
  if (!json_is_string(beh) || strcmp(json_string_value(beh), "Isolated") != 0 ||
      json_flag(p, "invert", 0))
    return loom_err("%s: pre_tokenizer Split must have behavior 'Isolated' and invert false "
                    "(as Qwen2 and Llama 3 do)", t->path);
  if (loom_regex_compile(&t->re, json_string_value(rx)))
    return loom_err_prefix("%s: ", t->path);
  const char *pattern = json_string_value(rx);
  t->split_rule = !strcmp(pattern, LOOM_GPT2_PATTERN) ? SPLIT_GPT2
                  : !strcmp(pattern, LOOM_QWEN2_PATTERN) || !strcmp(pattern, LOOM_LLAMA3_PATTERN)
                      ? SPLIT_QWEN2
                      : SPLIT_NEVER;
  return 0;
}

static int unsupported_pretok(loom_tokenizer *t, const char *what) {
  return loom_err("%s: pre_tokenizer %s is not supported; loom supports ByteLevel (GPT-2) or "
                  "Sequence[Split(Regex, Isolated), ByteLevel(use_regex false)] (Qwen2)",
                  t->path, what);
}

static int parse_pre_tokenizer(loom_tokenizer *t, json_t *root) {
  json_t *p = json_object_get(root, "pre_tokenizer");
  if (!json_is_object(p)) return unsupported_pretok(t, "null");
  int use_regex = 0;
  if (!strcmp(json_type_of(p), "ByteLevel")) {
    if (parse_byte_level(t, p, &use_regex)) return -1;
  } else if (!strcmp(json_type_of(p), "Sequence")) {
    json_t *list = json_object_get(p, "pretokenizers");
    size_t n = json_array_size(list);
    if (n < 1 || n > 2 || strcmp(json_type_of(json_array_get(list, n - 1)), "ByteLevel"))
      return unsupported_pretok(t, "Sequence (of other steps)");
    if (n == 2 && strcmp(json_type_of(json_array_get(list, 0)), "Split"))
      return unsupported_pretok(t, json_type_of(json_array_get(list, 0)));
    if (n == 2 && parse_split(t, json_array_get(list, 0))) return -1;
    if (parse_byte_level(t, json_array_get(list, n - 1), &use_regex)) return -1;
    if (n == 2 && use_regex)
      return loom_err("%s: a Split followed by ByteLevel(use_regex true) is not supported; "
                      "set use_regex false", t->path);
  } else {
    return unsupported_pretok(t, json_type_of(p));
  }
  if (use_regex && loom_regex_compile(&t->re, LOOM_GPT2_PATTERN)) return -1;
  if (use_regex) t->split_rule = SPLIT_GPT2;
  return 0;
}

/* Added tokens that absorb whitespace beside them, or hold whitespace (one could span a
 * newline), make every cut unsafe. */
static void check_split_rule(loom_tokenizer *t) {
  for (size_t k = 0; k < t->n_added; k++) {
    const added_token *a = &t->added[k];
    bool space = a->lstrip || a->rstrip;
    for (size_t i = 0; i < a->len && !space; i++)
      space = memchr(" \t\n\v\f\r", a->content[i], 6) != NULL;
    if (space) t->split_rule = SPLIT_NEVER;
  }
}

static int parse_normalizer(loom_tokenizer *t, json_t *root) {
  json_t *n = json_object_get(root, "normalizer");
  if (!n || json_is_null(n)) return 0;
  const char *type = json_type_of(n);
  if (!strcmp(type, "NFC")) {
    t->normalizer = "NFC";
    return 0;
  }
  if (!strcmp(type, "Sequence") && json_array_size(json_object_get(n, "normalizers")) == 0)
    return 0;
  return loom_err("%s: normalizer '%s' is not supported (loom supports none, or NFC, which it "
                  "does not apply)", t->path, type);
}

static int parse_root(loom_tokenizer *t, json_t *root) {
  if (!json_is_object(root)) return loom_err("%s: top level is not a JSON object", t->path);
  /* Every id indexes tables sized by the largest id: bound ids by what the file defines, so
   * a small file cannot ask for a huge table (a 108-byte file with id 2^30-1 meant 8 GiB).
   * Gaps are legal (a trained vocabulary smaller than asked for, with special tokens appended
   * at fixed ids after it, as `loom data synth-vqa` does): up to LOOM_TOKENIZER_ID_GAPS
   * unused ids, a few hundred KiB of tables at most. */
  json_t *model = json_object_get(root, "model"), *added = json_object_get(root, "added_tokens");
  t->id_limit = json_object_size(json_object_get(model, "vocab")) + json_array_size(added) +
                LOOM_TOKENIZER_ID_GAPS;
  if (t->id_limit > (1u << 30)) t->id_limit = 1u << 30;
  if (parse_model(t, root) || parse_added_tokens(t, json_object_get(root, "added_tokens")) ||
      parse_pre_tokenizer(t, root) || parse_normalizer(t, root))
    return -1;
  check_split_rule(t);
  return 0;
}

int loom_tokenizer_load(loom_tokenizer **out, const char *path) {
  *out = NULL;
  if (!loom_path_exists(path))
    return loom_err("%s: no such file; pass a tokenizer.json (train one with 'loom data "
                    "train-tokenizer' or build GPT-2's with scripts/build_gpt2_tokenizer.mjs)", path);
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root)
    return loom_err("%s: invalid JSON at line %d column %d: %s; is it a tokenizer.json?", path,
                    je.line, je.column, je.text);
  loom_tokenizer *t = loom_calloc(1, sizeof *t);
  t->path = loom_strdup(path);
  t->by_str = loom_strtab_new();
  t->id_bytes = loom_strtab_new();
  t->by_bytes = loom_strtab_new();
  t->cache = loom_strtab_new();
  int rc = parse_root(t, root);
  json_decref(root);
  if (rc) {
    loom_tokenizer_free(t);
    return -1;
  }
  *out = t;
  return 0;
}

void loom_tokenizer_free(loom_tokenizer *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n_added; i++) free(t->added[i].content);
  free(t->added);
  loom_regex_free(t->re);
  loom_u64map_free(t->merges);
  loom_strtab_free(t->by_str);
  loom_strtab_free(t->id_bytes);
  loom_strtab_free(t->by_bytes);
  loom_strtab_free(t->cache);
  free(t->str_ids);
  free(t->id_index);
  free(t->bytes_ids);
  free(t->cache_off);
  free(t->cache_n);
  free(t->cache_ids);
  free(t->path);
  free(t);
}

int loom_tokenizer_vocab_size(const loom_tokenizer *t) { return t->vocab_size; }

int loom_tokenizer_token_id(const loom_tokenizer *t, const char *token) {
  return str_lookup(t, token, strlen(token));
}

const char *loom_tokenizer_token_bytes(const loom_tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->vocab_size || t->id_index[id] < 0) return NULL;
  return (const char *)loom_strtab_get(t->id_bytes, t->id_index[id], len);
}

const char *loom_tokenizer_normalizer(const loom_tokenizer *t) { return t->normalizer; }

/* ---- BPE on one piece ----------------------------------------------------------------- */

typedef struct {
  uint32_t rank, pos; /* merge rank; start index of the left symbol (ties: leftmost) */
  int32_t a, b;       /* the symbols when pushed (stale entries no longer match) */
} merge_cand;

typedef struct {
  merge_cand *v;
  size_t n, cap;
} cand_heap;

static int cand_less(const merge_cand *x, const merge_cand *y) {
  return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static void heap_push(cand_heap *h, merge_cand c) {
  if (h->n == h->cap) {
    h->cap = h->cap ? 2 * h->cap : 64;
    h->v = loom_realloc(h->v, h->cap, sizeof *h->v);
  }
  size_t i = h->n++;
  while (i > 0 && cand_less(&c, &h->v[(i - 1) / 2])) {
    h->v[i] = h->v[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->v[i] = c;
}

static merge_cand heap_pop(cand_heap *h) {
  merge_cand top = h->v[0], last = h->v[--h->n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && cand_less(&h->v[c + 1], &h->v[c])) c++;
    if (!cand_less(&h->v[c], &last)) break;
    h->v[i] = h->v[c];
    i = c;
  }
  if (h->n) h->v[i] = last;
  return top;
}

/* Working state for one piece: a doubly linked list of symbols over byte positions. */
typedef struct {
  int32_t *sym;       /* (m) symbol id at each live position */
  int32_t *prev, *next; /* (m) neighbours, -1 / m at the ends */
  uint8_t *dead;      /* (m) 1 once absorbed by its left neighbour */
  cand_heap heap;
  size_t cap;
} bpe_work;

static void work_reserve(bpe_work *w, size_t m) {
  if (m <= w->cap) return;
  w->cap = m;
  w->sym = loom_realloc(w->sym, m, sizeof *w->sym);
  w->prev = loom_realloc(w->prev, m, sizeof *w->prev);
  w->next = loom_realloc(w->next, m, sizeof *w->next);
  w->dead = loom_realloc(w->dead, m, 1);
}

static void work_free(bpe_work *w) {
  free(w->sym);
  free(w->prev);
  free(w->next);
  free(w->dead);
  free(w->heap.v);
}

static void push_pair(const loom_tokenizer *t, bpe_work *w, int32_t i, size_t m) {
  if (i < 0 || w->next[i] >= (int32_t)m) return;
  uint64_t v;
  int32_t a = w->sym[i], b = w->sym[w->next[i]];
  if (loom_u64map_get(t->merges, (uint64_t)a << 32 | (uint32_t)b, &v))
    heap_push(&w->heap, (merge_cand){(uint32_t)(v >> 32), (uint32_t)i, a, b});
}

/* Merge the piece's bytes by rank; appends the resulting ids to out. */
static void bpe_piece(const loom_tokenizer *t, bpe_work *w, const uint8_t *p, size_t m,
                      ivec *out) {
  work_reserve(w, m);
  w->heap.n = 0;
  for (size_t i = 0; i < m; i++) {
    w->sym[i] = t->byte_id[p[i]];
    w->prev[i] = (int32_t)i - 1;
    w->next[i] = (int32_t)i + 1;
    w->dead[i] = 0;
  }
  for (size_t i = 0; i + 1 < m; i++) push_pair(t, w, (int32_t)i, m);
  while (w->heap.n) {
    merge_cand c = heap_pop(&w->heap);
    int32_t i = (int32_t)c.pos, j = w->next[i];
    if (w->dead[i] || j >= (int32_t)m || w->sym[i] != c.a || w->sym[j] != c.b) continue;
    uint64_t v;
    loom_u64map_get(t->merges, (uint64_t)c.a << 32 | (uint32_t)c.b, &v);
    w->sym[i] = (int32_t)(uint32_t)v;
    w->dead[j] = 1;
    w->next[i] = w->next[j];
    if (w->next[j] < (int32_t)m) w->prev[w->next[j]] = i;
    push_pair(t, w, w->prev[i], m);
    push_pair(t, w, i, m);
  }
  for (int32_t i = 0; i < (int32_t)m; i = w->next[i]) ivec_push(out, w->sym[i]);
}

/* ---- piece cache ------------------------------------------------------------------------ */

static void cache_reset(loom_tokenizer *t) {
  loom_strtab_free(t->cache);
  t->cache = loom_strtab_new();
  t->cache_ids_len = 0;
}

static void cache_store(loom_tokenizer *t, const char *p, size_t m, const int32_t *ids, size_t n) {
  if (m > CACHE_MAX_PIECE) return;
  if (loom_strtab_count(t->cache) >= CACHE_MAX_ENTRIES) cache_reset(t);
  int64_t e = loom_strtab_intern(t->cache, p, m, NULL);
  if ((size_t)e >= t->cache_cap) {
    t->cache_cap = t->cache_cap ? 2 * t->cache_cap : 4096;
    t->cache_off = loom_realloc(t->cache_off, t->cache_cap, sizeof *t->cache_off);
    t->cache_n = loom_realloc(t->cache_n, t->cache_cap, sizeof *t->cache_n);
  }
  if (t->cache_ids_len + n > t->cache_ids_cap) {
    while (t->cache_ids_len + n > t->cache_ids_cap)
      t->cache_ids_cap = t->cache_ids_cap ? 2 * t->cache_ids_cap : 16384;
    t->cache_ids = loom_realloc(t->cache_ids, t->cache_ids_cap, sizeof *t->cache_ids);
  }
  memcpy(t->cache_ids + t->cache_ids_len, ids, n * sizeof *ids);
  t->cache_off[e] = t->cache_ids_len;
  t->cache_n[e] = (uint32_t)n;
  t->cache_ids_len += n;
}

/* ---- encoding --------------------------------------------------------------------------- */

typedef struct {
  loom_tokenizer *t;
  bpe_work work;
  ivec out;
} encode_ctx;

static int encode_piece(void *vctx, const char *p, size_t m) {
  encode_ctx *c = vctx;
  loom_tokenizer *t = c->t;
  int64_t e = m <= CACHE_MAX_PIECE ? loom_strtab_find(t->cache, p, m) : -1;
  if (e >= 0) {
    for (uint32_t k = 0; k < t->cache_n[e]; k++) ivec_push(&c->out, t->cache_ids[t->cache_off[e] + k]);
    return 0;
  }
  size_t start = c->out.n;
  int64_t whole = t->ignore_merges ? loom_strtab_find(t->by_bytes, p, m) : -1;
  if (whole >= 0)
    ivec_push(&c->out, t->bytes_ids[whole]);
  else
    bpe_piece(t, &c->work, (const uint8_t *)p, m, &c->out);
  cache_store(t, p, m, c->out.v + start, c->out.n - start);
  return 0;
}

/* Pre-tokenize and encode a segment that holds no added token. */
static int encode_segment(encode_ctx *c, const char *s, size_t n) {
  if (n == 0) return 0;
  if (!c->t->re) return encode_piece(c, s, n);
  return loom_regex_split(c->t->re, s, n, encode_piece, c);
}

/* Longest added token starting at text[i], or NULL. */
static const added_token *added_at(const loom_tokenizer *t, const char *text, size_t len, size_t i) {
  const added_token *best = NULL;
  for (size_t k = 0; k < t->n_added; k++) {
    const added_token *a = &t->added[k];
    if (a->len <= len - i && (!best || a->len > best->len) && !memcmp(text + i, a->content, a->len))
      best = a;
  }
  return best;
}

static int is_space(char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); }

int loom_tokenizer_encode(loom_tokenizer *t, const char *text, size_t len, int32_t **ids,
                          size_t *n) {
  encode_ctx c = {.t = t};
  size_t seg = 0; /* start of the pending segment */
  int rc = 0;
  for (size_t i = 0; i < len && rc == 0; i++) {
    if (!t->added_first[(uint8_t)text[i]]) continue;
    const added_token *a = added_at(t, text, len, i);
    if (!a) continue;
    size_t seg_end = i, after = i + a->len;
    if (a->lstrip)
      while (seg_end > seg && is_space(text[seg_end - 1])) seg_end--;
    if (a->rstrip)
      while (after < len && is_space(text[after])) after++;
    rc = encode_segment(&c, text + seg, seg_end - seg);
    ivec_push(&c.out, a->id);
    seg = after;
    i = after - 1;
  }
  if (rc == 0 && seg < len) rc = encode_segment(&c, text + seg, len - seg);
  work_free(&c.work);
  if (rc) {
    free(c.out.v);
    return loom_err_prefix("%s: encoding: ", t->path);
  }
  *ids = c.out.v ? c.out.v : loom_malloc(sizeof(int32_t));
  *n = c.out.n;
  return 0;
}

static bool graphic(unsigned char c) { return c > 0x20 && c < 0x7f; }

/* Why these cuts are exact: the pre-tokenizer splits each segment between added tokens into
 * pieces that are encoded alone, and none of the supported regexes looks behind, so the
 * pieces from p on are the same whether the text starts at p or earlier. Before p, the
 * newline at p-1 ends a piece in both texts: no alternative matches a newline followed by a
 * printable character, and the only lookahead, \s+(?!\S), decides alike at a printable
 * character and at the end of the text when the newline is alone in its whitespace run
 * (GPT-2; Qwen2's \s*[\r\n]+ and [\r\n]* take the whole run either way). Added tokens
 * neither strip nor hold whitespace (check_split_rule) and none starts at p, so none spans
 * the cut. tests/data/test_tokenize_split.c checks every cut of random texts. */
bool loom_tokenizer_can_split(const loom_tokenizer *t, const char *text, size_t len, size_t p) {
  if (t->split_rule == SPLIT_NEVER || p < 2 || p >= len || text[p - 1] != '\n') return false;
  unsigned char at = (unsigned char)text[p], before = (unsigned char)text[p - 2];
  if (!graphic(at) || t->added_first[at]) return false;
  return t->split_rule == SPLIT_QWEN2 || graphic(before);
}

/* ---- decoding --------------------------------------------------------------------------- */

int loom_tokenizer_decode(const loom_tokenizer *t, const int32_t *ids, size_t n, char **text,
                          size_t *len) {
  size_t total = 0, blen;
  for (size_t i = 0; i < n; i++) {
    if (!loom_tokenizer_token_bytes(t, ids[i], &blen))
      return loom_err("%s: cannot decode token id %d at position %zu: not in the vocabulary "
                      "(size %d); was the data tokenized with another tokenizer?",
                      t->path, (int)ids[i], i, t->vocab_size);
    total += blen;
  }
  char *out = loom_malloc(total + 1);
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    const char *b = loom_tokenizer_token_bytes(t, ids[i], &blen);
    memcpy(out + o, b, blen);
    o += blen;
  }
  out[o] = 0;
  *text = out;
  *len = o;
  return 0;
}

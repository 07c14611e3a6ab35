/* Byte-level BPE trainer. The text is cut at literal "<|endoftext|>" and pre-tokenized with
 * the GPT-2 regex; unique pieces are kept once with their counts ("words"). Pair counts over
 * the words are built once and then updated only for the words that contain the merged
 * pair, with a lazy max-heap to find the most frequent pair (ties: smallest (a, b) ids).
 * The result is written as a Hugging Face tokenizer.json. */
#include <jansson.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/tokenizer.h"

#define EOT "<|endoftext|>"

typedef struct {
  uint64_t off;   /* first symbol in sym[] */
  uint32_t len;   /* current number of symbols (shrinks as merges apply) */
  int64_t count;  /* occurrences of the piece in the text */
} word;

typedef struct {
  uint32_t *w; /* indices of words that contained the pair when it appeared (may be stale) */
  uint32_t n, cap;
  int64_t count;      /* current total occurrences */
  uint32_t last_word;   /* dedupe: last word appended + 1 */
  uint32_t pushed_step; /* merge step + 1 in which it was last pushed on the heap */
  int32_t a, b;
} pair_info;

typedef struct {
  int64_t count;
  uint32_t pair;
} heap_ent;

typedef struct {
  /* corpus */
  loom_strtab *pieces; /* unique piece bytes -> word index */
  word *words;
  size_t nwords, words_cap;
  int32_t *sym;        /* all words' symbols back to back */
  /* pairs */
  loom_u64map *pair_idx; /* (a << 32 | b) -> index into pairs */
  pair_info *pairs;
  size_t npairs, pairs_cap;
  heap_ent *heap;
  size_t nheap, heap_cap;
  /* tokens: id -> bytes */
  loom_strtab *tok;  /* index == id */
  int32_t (*merges)[2];
  size_t nmerges;
  uint32_t *stamp;   /* (nwords) last merge step that rewrote the word + 1 */
  uint32_t *touched; /* pairs created in the current step */
  size_t ntouched, touched_cap;
} trainer;

/* ---- collecting the words -------------------------------------------------------------- */

static int add_piece(void *ctx, const char *p, size_t n) {
  trainer *tr = ctx;
  int added;
  int64_t w = loom_strtab_intern(tr->pieces, p, n, &added);
  if (added) {
    if (tr->nwords == tr->words_cap) {
      tr->words_cap = tr->words_cap ? 2 * tr->words_cap : 4096;
      tr->words = loom_realloc(tr->words, tr->words_cap, sizeof *tr->words);
    }
    tr->words[w] = (word){0, (uint32_t)n, 0};
    tr->nwords++;
  }
  tr->words[w].count++;
  return 0;
}

static int collect_words(trainer *tr, const char *text, size_t len) {
  loom_regex *re;
  if (loom_regex_compile(&re, LOOM_GPT2_PATTERN)) return -1;
  size_t pos = 0;
  int rc = 0;
  while (pos <= len && rc == 0) {
    const char *hit = memmem(text + pos, len - pos, EOT, strlen(EOT));
    size_t end = hit ? (size_t)(hit - text) : len;
    rc = loom_regex_split(re, text + pos, end - pos, add_piece, tr);
    pos = end + strlen(EOT);
    if (!hit) break;
  }
  loom_regex_free(re);
  return rc;
}

/* Byte token ids follow GPT-2's order: id k is the k-th byte in code point order of its
 * unicode stand-in. */
static void init_byte_tokens(trainer *tr, int32_t byte_id[256]) {
  int32_t order[256];
  for (int b = 0; b < 256; b++) order[b] = b;
  for (int i = 1; i < 256; i++) /* insertion sort by mapped code point */
    for (int j = i; j > 0 && loom_byte_to_unicode((uint8_t)order[j]) <
                                 loom_byte_to_unicode((uint8_t)order[j - 1]); j--) {
      int32_t x = order[j];
      order[j] = order[j - 1];
      order[j - 1] = x;
    }
  for (int k = 0; k < 256; k++) {
    uint8_t b = (uint8_t)order[k];
    loom_strtab_intern(tr->tok, &b, 1, NULL);
    byte_id[b] = k;
  }
}

static void words_to_symbols(trainer *tr) {
  int32_t byte_id[256];
  init_byte_tokens(tr, byte_id);
  size_t total = 0;
  for (size_t w = 0; w < tr->nwords; w++) total += tr->words[w].len;
  tr->sym = loom_malloc((total + 1) * sizeof *tr->sym);
  size_t o = 0;
  for (size_t w = 0; w < tr->nwords; w++) {
    size_t n;
    const uint8_t *p = loom_strtab_get(tr->pieces, (int64_t)w, &n);
    tr->words[w].off = o;
    for (size_t i = 0; i < n; i++) tr->sym[o++] = byte_id[p[i]];
  }
  tr->stamp = loom_calloc(tr->nwords + 1, sizeof *tr->stamp);
}

/* ---- pair bookkeeping ------------------------------------------------------------------- */

static uint32_t pair_get(trainer *tr, int32_t a, int32_t b) {
  uint64_t key = (uint64_t)a << 32 | (uint32_t)b, v;
  if (loom_u64map_get(tr->pair_idx, key, &v)) return (uint32_t)v;
  if (tr->npairs == tr->pairs_cap) {
    tr->pairs_cap = tr->pairs_cap ? 2 * tr->pairs_cap : 4096;
    tr->pairs = loom_realloc(tr->pairs, tr->pairs_cap, sizeof *tr->pairs);
  }
  tr->pairs[tr->npairs] = (pair_info){.a = a, .b = b};
  loom_u64map_put(tr->pair_idx, key, tr->npairs);
  return (uint32_t)tr->npairs++;
}

static void pair_add_word(pair_info *p, uint32_t w) {
  if (p->last_word == w + 1) return;
  p->last_word = w + 1;
  if (p->n == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 4;
    p->w = loom_realloc(p->w, p->cap, sizeof *p->w);
  }
  p->w[p->n++] = w;
}

static int heap_before(const trainer *tr, heap_ent x, heap_ent y) {
  if (x.count != y.count) return x.count > y.count;
  const pair_info *px = &tr->pairs[x.pair], *py = &tr->pairs[y.pair];
  return px->a != py->a ? px->a < py->a : px->b < py->b;
}

static void heap_push(trainer *tr, heap_ent e) {
  if (tr->nheap == tr->heap_cap) {
    tr->heap_cap = tr->heap_cap ? 2 * tr->heap_cap : 4096;
    tr->heap = loom_realloc(tr->heap, tr->heap_cap, sizeof *tr->heap);
  }
  size_t i = tr->nheap++;
  while (i > 0 && heap_before(tr, e, tr->heap[(i - 1) / 2])) {
    tr->heap[i] = tr->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  tr->heap[i] = e;
}

static heap_ent heap_pop(trainer *tr) {
  heap_ent top = tr->heap[0], last = tr->heap[--tr->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= tr->nheap) break;
    if (c + 1 < tr->nheap && heap_before(tr, tr->heap[c + 1], tr->heap[c])) c++;
    if (!heap_before(tr, tr->heap[c], last)) break;
    tr->heap[i] = tr->heap[c];
    i = c;
  }
  if (tr->nheap) tr->heap[i] = last;
  return top;
}

/* Add (sign +1) or remove (-1) the word's adjacent pairs from the counts. When adding, pairs
 * that involve `fresh` (the newest token) record the word and are marked touched. */
static void count_word(trainer *tr, uint32_t w, int sign, int32_t fresh) {
  word *wd = &tr->words[w];
  const int32_t *s = tr->sym + wd->off;
  for (uint32_t i = 0; i + 1 < wd->len; i++) {
    uint32_t p = pair_get(tr, s[i], s[i + 1]);
    tr->pairs[p].count += sign * wd->count;
    if (sign < 0 || (fresh >= 0 && s[i] != fresh && s[i + 1] != fresh)) continue;
    pair_add_word(&tr->pairs[p], w);
    if (fresh < 0) continue;
    if (tr->ntouched == tr->touched_cap) {
      tr->touched_cap = tr->touched_cap ? 2 * tr->touched_cap : 1024;
      tr->touched = loom_realloc(tr->touched, tr->touched_cap, sizeof *tr->touched);
    }
    tr->touched[tr->ntouched++] = p;
  }
}

static void initial_counts(trainer *tr) {
  tr->pair_idx = loom_u64map_new(1 << 16);
  for (uint32_t w = 0; w < tr->nwords; w++) count_word(tr, w, +1, -1);
  for (uint32_t p = 0; p < tr->npairs; p++)
    if (tr->pairs[p].count > 0) heap_push(tr, (heap_ent){tr->pairs[p].count, p});
}

/* ---- merging ------------------------------------------------------------------------------ */

/* Replace every (a, b) in the word by c, left to right. */
static void rewrite_word(trainer *tr, uint32_t w, int32_t a, int32_t b, int32_t c) {
  word *wd = &tr->words[w];
  int32_t *s = tr->sym + wd->off;
  uint32_t o = 0;
  for (uint32_t i = 0; i < wd->len; i++) {
    if (i + 1 < wd->len && s[i] == a && s[i + 1] == b) {
      s[o++] = c;
      i++;
    } else {
      s[o++] = s[i];
    }
  }
  wd->len = o;
}

static void apply_merge(trainer *tr, uint32_t p, int32_t c, uint32_t step) {
  pair_info *pi = &tr->pairs[p];
  int32_t a = pi->a, b = pi->b;
  uint32_t *list = pi->w, n = pi->n; /* detach: count_word may grow tr->pairs */
  pi->w = NULL, pi->n = pi->cap = 0;
  tr->ntouched = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t w = list[k];
    if (tr->stamp[w] == step + 1) continue;
    tr->stamp[w] = step + 1;
    count_word(tr, w, -1, -1);
    rewrite_word(tr, w, a, b, c);
    count_word(tr, w, +1, c);
  }
  free(list);
  for (size_t k = 0; k < tr->ntouched; k++) {
    pair_info *q = &tr->pairs[tr->touched[k]];
    if (q->count <= 0 || q->pushed_step == step + 1) continue;
    q->pushed_step = step + 1;
    heap_push(tr, (heap_ent){q->count, tr->touched[k]});
  }
}

/* Most frequent pair with count >= 2, or -1. */
static int64_t best_pair(trainer *tr) {
  while (tr->nheap) {
    heap_ent e = heap_pop(tr);
    int64_t now = tr->pairs[e.pair].count;
    if (now != e.count) {
      if (now > 0) heap_push(tr, (heap_ent){now, e.pair});
      continue;
    }
    return now >= 2 ? (int64_t)e.pair : -1;
  }
  return -1;
}

static void learn(trainer *tr, int n_merges) {
  tr->merges = loom_malloc((size_t)(n_merges > 0 ? n_merges : 1) * sizeof *tr->merges);
  for (int step = 0; step < n_merges; step++) {
    int64_t p = best_pair(tr);
    if (p < 0) break;
    int32_t a = tr->pairs[p].a, b = tr->pairs[p].b;
    size_t la, lb;
    const uint8_t *ba = loom_strtab_get(tr->tok, a, &la), *bb = loom_strtab_get(tr->tok, b, &lb);
    uint8_t *cat = loom_malloc(la + lb);
    memcpy(cat, ba, la);
    memcpy(cat + la, bb, lb);
    int added;
    int32_t c = (int32_t)loom_strtab_intern(tr->tok, cat, la + lb, &added);
    free(cat);
    LOOM_ASSERT(added); /* BPE never recreates an existing token */
    tr->merges[tr->nmerges][0] = a;
    tr->merges[tr->nmerges][1] = b;
    tr->nmerges++;
    apply_merge(tr, (uint32_t)p, c, (uint32_t)step);
  }
}

/* ---- writing tokenizer.json ---------------------------------------------------------------- */

static json_t *token_json(const trainer *tr, int32_t id) {
  size_t n;
  const uint8_t *b = loom_strtab_get(tr->tok, id, &n);
  char *s = loom_bytes_to_token_str(b, n);
  json_t *j = json_string(s);
  free(s);
  return j;
}

static json_t *byte_level(int add_prefix_space, int trim_offsets) {
  return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space",
                   add_prefix_space, "trim_offsets", trim_offsets, "use_regex", 1);
}

static json_t *model_json(const trainer *tr, int32_t eot_id) {
  json_t *vocab = json_object(), *merges = json_array();
  size_t ntok = loom_strtab_count(tr->tok);
  for (size_t id = 0; id < ntok; id++) {
    json_t *s = token_json(tr, (int32_t)id);
    json_object_set_new(vocab, json_string_value(s), json_integer((json_int_t)id));
    json_decref(s);
  }
  json_object_set_new(vocab, EOT, json_integer(eot_id));
  for (size_t k = 0; k < tr->nmerges; k++)
    json_array_append_new(merges, json_pack("[o, o]", token_json(tr, tr->merges[k][0]),
                                            token_json(tr, tr->merges[k][1])));
  return json_pack("{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:o, s:o}", "type", "BPE",
                   "dropout", "unk_token", "continuing_subword_prefix", "",
                   "end_of_word_suffix", "", "fuse_unk", 0, "byte_fallback", 0,
                   "ignore_merges", 0, "vocab", vocab, "merges", merges);
}

static int write_json(const trainer *tr, const char *path) {
  int32_t eot_id = (int32_t)loom_strtab_count(tr->tok);
  json_t *added = json_pack("[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}]", "id", eot_id, "content", EOT,
                            "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                            "special", 1);
  json_t *root = json_pack("{s:s, s:n, s:n, s:o, s:n, s:o, s:o, s:o, s:o}", "version", "1.0",
                           "truncation", "padding", "added_tokens", added, "normalizer",
                           "pre_tokenizer", byte_level(0, 1), "post_processor",
                           byte_level(1, 0), "decoder", byte_level(1, 1), "model",
                           model_json(tr, eot_id));
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!s) return loom_err("cannot serialize the trained tokenizer (out of memory?)");
  size_t n = strlen(s);
  s[n] = '\n'; /* overwrite the NUL: write_file_atomic takes a length */
  int rc = loom_write_file_atomic(path, s, n + 1);
  free(s);
  return rc;
}

static void trainer_free(trainer *tr) {
  loom_strtab_free(tr->pieces);
  loom_strtab_free(tr->tok);
  loom_u64map_free(tr->pair_idx);
  for (size_t p = 0; p < tr->npairs; p++) free(tr->pairs[p].w);
  free(tr->pairs);
  free(tr->words);
  free(tr->sym);
  free(tr->heap);
  free(tr->merges);
  free(tr->stamp);
  free(tr->touched);
}

int loom_tokenizer_train(const char *text, size_t len, int vocab_size, const char *out_json_path) {
  if (vocab_size < 257 || vocab_size > (1 << 24))
    return loom_err("vocab size %d is out of range: byte-level BPE needs 256 byte tokens + "
                    "<|endoftext|>, so use 257 .. 16777216", vocab_size);
  trainer tr = {.pieces = loom_strtab_new(), .tok = loom_strtab_new()};
  int rc = collect_words(&tr, text, len);
  if (rc == 0) {
    words_to_symbols(&tr);
    initial_counts(&tr);
    learn(&tr, vocab_size - 257);
    rc = write_json(&tr, out_json_path);
  }
  trainer_free(&tr);
  return rc;
}

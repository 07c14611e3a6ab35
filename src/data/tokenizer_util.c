/* Building blocks of the byte-level BPE tokenizer and trainer: GPT-2's byte <-> unicode
 * mapping, UTF-8 helpers, a byte-string interning table, a u64 -> u64 hash map, and the
 * PCRE2 pre-tokenizer regex with "Isolated" splitting. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/tokenizer.h"

/* ---- byte <-> unicode ------------------------------------------------------------------ */

/* The 68 non-printable bytes are 0..32, 127..160 and 173; they map to U+0100.. in order.
 * Pure arithmetic, so there is no table to initialize (and no thread-safety question). */
uint32_t loom_byte_to_unicode(uint8_t b) {
  if (b <= 32) return 256u + b;
  if (b >= 127 && b <= 160) return 256u + 33u + (uint32_t)(b - 127);
  if (b == 173) return 256u + 33u + 34u;
  return b;
}

int loom_unicode_to_byte(uint32_t cp) {
  if (cp < 256) return loom_byte_to_unicode((uint8_t)cp) == cp ? (int)cp : -1;
  if (cp < 256 + 33) return (int)(cp - 256);
  if (cp < 256 + 33 + 34) return (int)(cp - 256 - 33 + 127);
  if (cp == 256 + 33 + 34) return 173;
  return -1;
}

/* Append the UTF-8 encoding of cp (< 0x110000) to out; returns bytes written (1..4). */
static int utf8_put(uint32_t cp, char *out) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Decode one UTF-8 character at s[0..n); returns its length (>= 1) and the code point, or
 * length 1 with *cp = 0xFFFFFFFF for an invalid sequence. */
static size_t utf8_get(const uint8_t *s, size_t n, uint32_t *cp) {
  uint8_t c = s[0];
  size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || len > n) {
    *cp = 0xFFFFFFFFu;
    return 1;
  }
  uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) {
      *cp = 0xFFFFFFFFu;
      return 1;
    }
    v = (v << 6) | (s[i] & 0x3Fu);
  }
  *cp = v;
  return len;
}

char *loom_bytes_to_token_str(const uint8_t *bytes, size_t len) {
  char *s = loom_malloc(2 * len + 1); /* every mapped code point is < 0x800: 2 bytes at most */
  size_t o = 0;
  for (size_t i = 0; i < len; i++) o += (size_t)utf8_put(loom_byte_to_unicode(bytes[i]), s + o);
  s[o] = 0;
  return s;
}

uint8_t *loom_token_str_to_bytes(const char *s, size_t *len) {
  size_t n = strlen(s), o = 0;
  uint8_t *out = loom_malloc(n + 1);
  const uint8_t *u = (const uint8_t *)s;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t k = utf8_get(u + i, n - i, &cp);
    int b = cp == 0xFFFFFFFFu ? -1 : loom_unicode_to_byte(cp);
    if (b >= 0) {
      out[o++] = (uint8_t)b;
    } else {
      memcpy(out + o, u + i, k); /* outside the mapping: keep its own bytes */
      o += k;
    }
    i += k;
  }
  *len = o;
  return out;
}

/* ---- byte-string interning table ------------------------------------------------------- */

struct loom_strtab {
  uint8_t *arena;   /* all strings back to back */
  size_t arena_len, arena_cap;
  uint64_t *off;    /* (count) start of string i in arena */
  uint32_t *len;    /* (count) its length */
  size_t count, cap;
  int64_t *slots;   /* (nslots) open addressing: string index or -1 */
  size_t nslots;
};

static uint64_t str_hash(const void *p, size_t n) { return loom_hash64(p, n, 0x51ed270b27c5f3a9ull); }

loom_strtab *loom_strtab_new(void) {
  loom_strtab *s = loom_calloc(1, sizeof *s);
  s->nslots = 64;
  s->slots = loom_malloc(s->nslots * sizeof *s->slots);
  for (size_t i = 0; i < s->nslots; i++) s->slots[i] = -1;
  return s;
}

void loom_strtab_free(loom_strtab *s) {
  if (!s) return;
  free(s->arena);
  free(s->off);
  free(s->len);
  free(s->slots);
  free(s);
}

size_t loom_strtab_count(const loom_strtab *s) { return s->count; }

const uint8_t *loom_strtab_get(const loom_strtab *s, int64_t idx, size_t *len) {
  *len = s->len[idx];
  return s->arena + s->off[idx];
}

/* Slot holding the string, or the empty slot where it would go. */
static size_t strtab_slot(const loom_strtab *s, const void *bytes, size_t len, uint64_t h) {
  size_t mask = s->nslots - 1, i = (size_t)h & mask;
  for (;; i = (i + 1) & mask) {
    int64_t k = s->slots[i];
    if (k < 0) return i;
    if (s->len[k] == len && memcmp(s->arena + s->off[k], bytes, len) == 0) return i;
  }
}

static void strtab_grow_slots(loom_strtab *s) {
  size_t n = s->nslots * 2;
  int64_t *slots = loom_malloc(n * sizeof *slots);
  for (size_t i = 0; i < n; i++) slots[i] = -1;
  for (size_t k = 0; k < s->count; k++) {
    size_t i = (size_t)str_hash(s->arena + s->off[k], s->len[k]) & (n - 1);
    while (slots[i] >= 0) i = (i + 1) & (n - 1);
    slots[i] = (int64_t)k;
  }
  free(s->slots);
  s->slots = slots;
  s->nslots = n;
}

static void strtab_append(loom_strtab *s, const void *bytes, size_t len) {
  if (s->count == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->off = loom_realloc(s->off, s->cap, sizeof *s->off);
    s->len = loom_realloc(s->len, s->cap, sizeof *s->len);
  }
  if (s->arena_len + len > s->arena_cap) {
    while (s->arena_len + len > s->arena_cap) s->arena_cap = s->arena_cap ? 2 * s->arena_cap : 1024;
    s->arena = loom_realloc(s->arena, s->arena_cap, 1);
  }
  if (len) memcpy(s->arena + s->arena_len, bytes, len);
  s->off[s->count] = s->arena_len;
  s->len[s->count] = (uint32_t)len;
  s->arena_len += len;
  s->count++;
}

int64_t loom_strtab_intern(loom_strtab *s, const void *bytes, size_t len, int *added) {
  uint64_t h = str_hash(bytes, len);
  size_t i = strtab_slot(s, bytes, len, h);
  if (added) *added = 0;
  if (s->slots[i] >= 0) return s->slots[i];
  strtab_append(s, bytes, len);
  s->slots[i] = (int64_t)(s->count - 1);
  if (added) *added = 1;
  if (2 * s->count > s->nslots) strtab_grow_slots(s);
  return (int64_t)(s->count - 1);
}

int64_t loom_strtab_find(const loom_strtab *s, const void *bytes, size_t len) {
  return s->slots[strtab_slot(s, bytes, len, str_hash(bytes, len))];
}

/* ---- u64 -> u64 hash map --------------------------------------------------------------- */

struct loom_u64map {
  uint64_t *keys, *vals; /* (cap) */
  uint8_t *used;         /* (cap) 1 when the slot holds a key */
  size_t cap, count;
};

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void u64map_alloc(loom_u64map *m, size_t cap) {
  m->cap = cap;
  m->keys = loom_malloc(cap * sizeof *m->keys);
  m->vals = loom_malloc(cap * sizeof *m->vals);
  m->used = loom_calloc(cap, 1);
}

loom_u64map *loom_u64map_new(size_t expected) {
  loom_u64map *m = loom_calloc(1, sizeof *m);
  size_t cap = 16;
  while (cap < 2 * expected) cap *= 2;
  u64map_alloc(m, cap);
  return m;
}

void loom_u64map_free(loom_u64map *m) {
  if (!m) return;
  free(m->keys);
  free(m->vals);
  free(m->used);
  free(m);
}

size_t loom_u64map_count(const loom_u64map *m) { return m->count; }

static size_t u64map_slot(const loom_u64map *m, uint64_t key) {
  size_t mask = m->cap - 1, i = (size_t)mix64(key) & mask;
  while (m->used[i] && m->keys[i] != key) i = (i + 1) & mask;
  return i;
}

static void u64map_grow(loom_u64map *m) {
  loom_u64map old = *m;
  u64map_alloc(m, old.cap * 2);
  for (size_t i = 0; i < old.cap; i++) {
    if (!old.used[i]) continue;
    size_t j = u64map_slot(m, old.keys[i]);
    m->used[j] = 1;
    m->keys[j] = old.keys[i];
    m->vals[j] = old.vals[i];
  }
  free(old.keys);
  free(old.vals);
  free(old.used);
}

void loom_u64map_put(loom_u64map *m, uint64_t key, uint64_t value) {
  size_t i = u64map_slot(m, key);
  if (!m->used[i]) {
    m->used[i] = 1;
    m->keys[i] = key;
    m->count++;
  }
  m->vals[i] = value;
  if (2 * m->count > m->cap) u64map_grow(m);
}

int loom_u64map_get(const loom_u64map *m, uint64_t key, uint64_t *value) {
  size_t i = u64map_slot(m, key);
  if (!m->used[i]) return 0;
  if (value) *value = m->vals[i];
  return 1;
}

/* ---- pre-tokenizer regex --------------------------------------------------------------- */

struct loom_regex {
  pcre2_code *code;
  pcre2_match_data *md;
  pcre2_match_context *mctx;
  pcre2_jit_stack *jit_stack;
};

/* The pattern with \s and \S spelled as the Unicode White_Space property. Under PCRE2_UCP,
 * PCRE2 (10.42) defines \s as \p{Z} or \h or \v, and \h lists U+180E MONGOLIAN VOWEL
 * SEPARATOR, which Unicode 6.3 moved from Zs to Cf; Python's `regex` (which GPT-2's encoder
 * and Hugging Face's references run) and Rust's `regex` (tokenizers) define \s as White_Space.
 * \p{White_Space} is valid inside a character class too, so [^\s\p{L}] stays one class.
 * Other escapes (\\s is a backslash then 's') and \Q...\E literals are copied verbatim. */
static char *regex_unicode_spaces(const char *pattern) {
  size_t n = strlen(pattern), o = 0;
  char *out = loom_malloc(n * 8 + 1); /* "\s" (2 bytes) becomes 16 at most */
  for (size_t i = 0; i < n; i++) {
    if (pattern[i] != '\\' || i + 1 == n) {
      out[o++] = pattern[i];
      continue;
    }
    char e = pattern[++i];
    if (e == 's' || e == 'S') {
      const char *rep = e == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
      memcpy(out + o, rep, strlen(rep));
      o += strlen(rep);
    } else if (e == 'Q') { /* literal up to \E (or the end) */
      const char *end = strstr(pattern + i + 1, "\\E");
      size_t stop = end ? (size_t)(end - pattern) + 2 : n;
      memcpy(out + o, pattern + i - 1, stop - (i - 1));
      o += stop - (i - 1);
      i = stop - 1;
    } else {
      out[o++] = '\\';
      out[o++] = e;
    }
  }
  out[o] = 0;
  return out;
}

int loom_regex_compile(loom_regex **out, const char *pattern) {
  *out = NULL;
  int ec;
  PCRE2_SIZE eoff;
  uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  char *pat = regex_unicode_spaces(pattern);
  pcre2_code *code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &ec, &eoff, NULL);
  free(pat);
  if (!code) { /* report the error (and its offset) in the pattern as the user wrote it */
    int ec0;
    PCRE2_SIZE eoff0;
    pcre2_code *orig = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &ec0,
                                     &eoff0, NULL);
    if (!orig) ec = ec0, eoff = eoff0;
    pcre2_code_free(orig);
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(ec, msg, sizeof msg);
    return loom_err("cannot compile the pre-tokenizer regex at offset %zu: %s (pattern: %s)",
                    (size_t)eoff, (const char *)msg, pattern);
  }
  loom_regex *re = loom_calloc(1, sizeof *re);
  re->code = code;
  re->md = pcre2_match_data_create(1, NULL);
  re->mctx = pcre2_match_context_create(NULL);
  /* Long whitespace runs backtrack through `\s+(?!\S)`: give JIT a roomy stack. */
  if (pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0) {
    re->jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
    if (re->jit_stack) pcre2_jit_stack_assign(re->mctx, NULL, re->jit_stack);
  }
  *out = re;
  return 0;
}

void loom_regex_free(loom_regex *re) {
  if (!re) return;
  pcre2_match_data_free(re->md);
  pcre2_match_context_free(re->mctx);
  if (re->jit_stack) pcre2_jit_stack_free(re->jit_stack);
  pcre2_code_free(re->code);
  free(re);
}

/* Length of the UTF-8 character (or single invalid byte) at text[i]. */
static size_t char_len_at(const char *text, size_t len, size_t i) {
  uint32_t cp;
  return utf8_get((const uint8_t *)text + i, len - i, &cp);
}

int loom_regex_split(loom_regex *re, const char *text, size_t len, loom_piece_fn fn, void *ctx) {
  size_t pos = 0;   /* end of the last emitted piece */
  size_t start = 0; /* where the next search begins */
  while (start < len) {
    int rc = pcre2_match(re->code, (PCRE2_SPTR)text, len, start, 0, re->md, re->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return loom_err("pre-tokenizer regex failed at byte %zu: %s", start, (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
    size_t ms = ov[0], me = ov[1];
    if (ms > pos && fn(ctx, text + pos, ms - pos)) return -1;
    if (me > ms) {
      if (fn(ctx, text + ms, me - ms)) return -1;
      pos = start = me;
    } else {
      pos = ms; /* empty match: nothing to emit; step over one character */
      if (ms >= len) break; /* an empty match at the very end (e.g. "$"): nothing follows */
      start = ms + char_len_at(text, len, ms);
    }
  }
  if (len > pos && fn(ctx, text + pos, len - pos)) return -1;
  return 0;
}

/* loom tokenizer: byte-level BPE (GPT-2, Qwen2 style) loaded from a Hugging Face
 * tokenizer.json, a byte-level BPE trainer that writes such a file, and the synthetic demo
 * corpus generator (the text side of the data pipeline).
 *
 * Supported tokenizer.json (everything else is refused with an error naming the file):
 *   model.type "BPE" with vocab {token: id} and merges either as "a b" strings or as
 *     ["a", "b"] pairs; ignore_merges honoured; dropout null; no subword prefix/suffix;
 *     all 256 byte-level tokens present in the vocab (so unk_token / byte_fallback, which
 *     are accepted, never come into play).
 *   pre_tokenizer ByteLevel (use_regex true: the GPT-2 regex; add_prefix_space false), or
 *     Sequence[Split{Regex, behavior "Isolated", invert false}, ByteLevel{use_regex false}]
 *     (Qwen2, Llama 3). Regexes run through PCRE2 with UTF + UCP + JIT.
 *   normalizer null, or "NFC", which loom does NOT apply: loom_tokenizer_normalizer()
 *     returns "NFC" so callers can warn; text already in NFC tokenizes identically.
 *   added_tokens: matched verbatim (leftmost, longest) in the raw text before
 *     pre-tokenization, with lstrip/rstrip honoured (ASCII whitespace); single_word is
 *     refused.
 *   post_processor / decoder: ignored (loom never inserts BOS/EOS; decode is byte-exact).
 *
 * Text is bytes. Invalid UTF-8 is accepted: the regex runs with PCRE2_MATCH_INVALID_UTF,
 * so invalid sequences never join a match; every maximal run of bytes that no match
 * covers becomes its own pre-token and is encoded byte-level like any other. Hence
 * decode(encode(x)) == x for ANY byte string x. (For valid UTF-8 the supported regexes
 * cover every character, so only invalid bytes fall in such runs.)
 *
 * `\s` / `\S` are the Unicode White_Space property (loom rewrites them to \p{White_Space}
 * before PCRE2 compiles a pattern; PCRE2's own UCP \s adds U+180E): the same set as Python's
 * `regex` (OpenAI's GPT-2 encoder) and Oniguruma (HF's tokenizers), checked on every code
 * point by tests/data/pretok_check.py. JavaScript's \s differs on U+0085 and U+FEFF, so the
 * JS cross-check corpus avoids those characters.
 * Ids: every id (vocab and added tokens) must be below the number of tokens the file
 * defines (vocab entries + added tokens), checked before tables are sized; an added token
 * may not take the id of a different token.
 * A loom_tokenizer is not thread-safe (it keeps a piece cache and regex match data): use
 * one per thread. */
#ifndef LOOM_TOKENIZER_H
#define LOOM_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct loom_tokenizer loom_tokenizer;

/* Load a tokenizer.json. On error *t is NULL and the message names the file. */
int loom_tokenizer_load(loom_tokenizer **t, const char *path);
void loom_tokenizer_free(loom_tokenizer *t);

/* Encode len bytes of text. *ids is malloc'd (free() it), *n tokens. Added tokens found
 * in the text (e.g. "<|endoftext|>") become their ids. */
int loom_tokenizer_encode(loom_tokenizer *t, const char *text, size_t len, int32_t **ids,
                          size_t *n);
/* Decode ids back to bytes; *text is malloc'd and NUL-terminated (not counted in *len).
 * An id outside [0, vocab_size) or an unused id is an error. */
int loom_tokenizer_decode(const loom_tokenizer *t, const int32_t *ids, size_t n, char **text,
                          size_t *len);
/* 1 + the largest id of the vocab and the added tokens. */
int loom_tokenizer_vocab_size(const loom_tokenizer *t);
/* Id of a token given in its tokenizer.json spelling (e.g. "Ġthe", "<|endoftext|>"), or -1. */
int loom_tokenizer_token_id(const loom_tokenizer *t, const char *token);
/* The id's bytes (not NUL-terminated; *len bytes), or NULL for an unused id. */
const char *loom_tokenizer_token_bytes(const loom_tokenizer *t, int32_t id, size_t *len);
/* "NFC" when the file asks for a normalizer loom does not apply, else NULL. */
const char *loom_tokenizer_normalizer(const loom_tokenizer *t);

/* Whether text[0, len) may be cut at byte p without changing its encoding:
 * encode(text) == encode(text[0, p)) followed by encode(text[p, len)). Conservative: true only
 * after a newline followed by a printable ASCII character (and, for GPT-2's regex, preceded
 * by one), for the GPT-2, Qwen2 and Llama 3 pre-tokenizer regexes and added tokens that
 * neither strip nor hold whitespace; false for any other tokenizer. What `loom data tokenize`
 * cuts a long text at to encode its parts in parallel. */
bool loom_tokenizer_can_split(const loom_tokenizer *t, const char *text, size_t len, size_t p);

/* Train byte-level BPE on text: GPT-2 pre-tokenizer regex, ids 0..255 the byte tokens
 * (in GPT-2's byte order), then one id per merge until vocab_size - 1 ids, then
 * <|endoftext|> as an added special token (so vocab_size in all). Literal "<|endoftext|>"
 * in the text separates documents and is not learned. Stops early when no pair occurs
 * twice. Writes a Hugging Face tokenizer.json (merges as pairs) atomically. Pair counts
 * are kept over unique pre-tokens weighted by their counts and updated incrementally, so
 * 2 MB of text trains in about a second. vocab_size must be in [257, 1<<24]. */
int loom_tokenizer_train(const char *text, size_t len, int vocab_size,
                         const char *out_json_path);

/* ---- building blocks shared by the loader, the trainer and tools ------------------- */

/* GPT-2's pre-tokenizer regex (ByteLevel use_regex) and Qwen2's Split regex. */
#define LOOM_GPT2_PATTERN                                                                \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define LOOM_QWEN2_PATTERN                                                               \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+" \
  "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Llama 3's Split regex: Qwen2's with digits in groups of up to three. */
#define LOOM_LLAMA3_PATTERN                                                              \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
  "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* GPT-2's byte <-> unicode mapping: printable bytes map to themselves, the other 68 to
 * U+0100.. in byte order. loom_byte_to_unicode(b) is a code point; loom_unicode_to_byte
 * returns the byte or -1 for a code point outside the mapping. */
uint32_t loom_byte_to_unicode(uint8_t b);
int loom_unicode_to_byte(uint32_t cp);
/* Token bytes -> tokenizer.json spelling (malloc'd, NUL-terminated UTF-8). */
char *loom_bytes_to_token_str(const uint8_t *bytes, size_t len);
/* tokenizer.json spelling -> bytes (malloc'd, *len). Characters outside the mapping
 * contribute their own UTF-8 bytes (as HF's ByteLevel decoder does). */
uint8_t *loom_token_str_to_bytes(const char *s, size_t *len);

/* Byte-string interning table: maps byte strings to dense indices 0, 1, 2, ... */
typedef struct loom_strtab loom_strtab;
loom_strtab *loom_strtab_new(void);
void loom_strtab_free(loom_strtab *s);
/* Index of the string, adding it when absent (*added = 1 then; added may be NULL). */
int64_t loom_strtab_intern(loom_strtab *s, const void *bytes, size_t len, int *added);
int64_t loom_strtab_find(const loom_strtab *s, const void *bytes, size_t len); /* or -1 */
size_t loom_strtab_count(const loom_strtab *s);
const uint8_t *loom_strtab_get(const loom_strtab *s, int64_t idx, size_t *len);

/* u64 -> u64 open-addressing hash map (keys are arbitrary; no deletion). */
typedef struct loom_u64map loom_u64map;
loom_u64map *loom_u64map_new(size_t expected);
void loom_u64map_free(loom_u64map *m);
void loom_u64map_put(loom_u64map *m, uint64_t key, uint64_t value);
int loom_u64map_get(const loom_u64map *m, uint64_t key, uint64_t *value); /* 1 if found */
size_t loom_u64map_count(const loom_u64map *m);

/* Pre-tokenizer regex: PCRE2 compiled with UTF | UCP | MATCH_INVALID_UTF and JIT.
 * loom_regex_split calls fn for each piece of text[0, len) in order: every match, and
 * every maximal run of bytes between matches ("Isolated" behaviour), never empty. */
typedef struct loom_regex loom_regex;
int loom_regex_compile(loom_regex **re, const char *pattern);
void loom_regex_free(loom_regex *re);
typedef int (*loom_piece_fn)(void *ctx, const char *piece, size_t len);
int loom_regex_split(loom_regex *re, const char *text, size_t len, loom_piece_fn fn,
                     void *ctx);

/* ---- synthetic demo corpus ---------------------------------------------------------- */
/* Deterministic English-like short stories from a small probabilistic grammar (named
 * characters, places, objects, simple plots, quoted dialogue, recurring sentences with
 * variations), separated by a blank line. Whole stories only: stops before exceeding
 * `bytes` (at least one story). *text malloc'd, NUL-terminated, *len bytes. */
int loom_synth_text(size_t bytes, uint64_t seed, char **text, size_t *len);

#endif

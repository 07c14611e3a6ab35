/* Fuzz harness: tokenizer.json loading and encode/decode. Input: the tokenizer.json bytes, a
 * NUL byte, then the text to encode (no NUL: the whole input is the JSON and a fixed text is
 * encoded). Invariants beyond memory safety: every id encode returns lies in
 * [0, vocab_size) and decodes; without added tokens that strip whitespace (lstrip/rstrip),
 * decode(encode(text)) == text byte for byte (byte-level BPE is lossless). */
#include <jansson.h>

#include "fuzz_util.h"
#include "loom/core.h"
#include "loom/tokenizer.h"

static const char default_text[] = "Hello world, it's 2024!\n\n  \xc2\xa0tabs\tand \xe1\xa0\x8e"
                                   "spaces   end <|endoftext|> x";

/* 1 if an added token absorbs whitespace (the round trip then legitimately loses it). */
static int strips_whitespace(const char *path) {
  json_t *root = json_load_file(path, 0, NULL);
  json_t *added = json_object_get(root, "added_tokens");
  int strips = 0;
  for (size_t k = 0; k < json_array_size(added); k++) {
    json_t *a = json_array_get(added, k);
    strips |= json_is_true(json_object_get(a, "lstrip")) || json_is_true(json_object_get(a, "rstrip"));
  }
  json_decref(root);
  return strips;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t json_len = nul ? (size_t)(nul - data) : size;
  const char *text = nul ? (const char *)nul + 1 : default_text;
  size_t text_len = nul ? size - json_len - 1 : sizeof default_text - 1;
  const char *path = fuzz_input_file(data, json_len, ".json");
  loom_tokenizer *t;
  if (loom_tokenizer_load(&t, path)) return 0;
  int32_t *ids = NULL;
  size_t n = 0;
  if (loom_tokenizer_encode(t, text, text_len, &ids, &n) == 0) {
    int vocab = loom_tokenizer_vocab_size(t);
    for (size_t i = 0; i < n; i++)
      if (ids[i] < 0 || ids[i] >= vocab)
        FUZZ_FINDING("encode returned id %d at position %zu outside [0, %d)", (int)ids[i], i, vocab);
    char *back = NULL;
    size_t back_len = 0;
    if (loom_tokenizer_decode(t, ids, n, &back, &back_len))
      FUZZ_FINDING("ids from encode do not decode: %s", loom_errmsg());
    if ((back_len != text_len || memcmp(back, text, text_len)) && !strips_whitespace(path))
      FUZZ_FINDING("decode(encode(text)) differs from the %zu-byte text (%zu bytes back)",
                   text_len, back_len);
    free(back);
    free(ids);
  }
  loom_tokenizer_free(t);
  return 0;
}

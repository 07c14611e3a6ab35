/* loom_tokenizer_can_split: every cut it allows leaves the encoding unchanged, encode(text) ==
 * encode(text[0, p)) + encode(text[p, len)), over every position of random texts built from
 * the characters that decide pre-tokenizer boundaries (newlines, CR, tabs, spaces, Unicode
 * spaces, letters, digits, punctuation, quotes and contractions, invalid UTF-8, the
 * end-of-text token) — for the GPT-2, Qwen2 and Llama 3 regexes, on hand-made merges and on
 * a tokenizer trained on the synthetic corpus. Cuts are found often enough to matter, and
 * never where they are not known to be exact (added tokens that strip whitespace, an unknown
 * regex, no regex). This is what makes `loom data tokenize` on N threads byte-identical to
 * one. */
#include <jansson.h>

#include "data_test_util.h"

#define DIR "tokenize-split.tmp"

static const char *const MERGES[][2] = {{"h", "e"},  {"l", "l"},   {"he", "ll"}, {" ", "t"},
                                        {".", "\n"}, {"\n", "\n"}, {"a", "b"},   {"1", "2"}};
#define N_MERGES ((int)(sizeof MERGES / sizeof MERGES[0]))

static const char *const ATOMS[] = {
    "a",
    "b",
    "Z",
    "he",
    "ll",
    "\xc3\xa9",
    "1",
    "2",
    "123",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    ".",
    ",",
    "\"",
    "'s",
    "'",
    "!?",
    "\xc2\xa0",
    "\xe3\x80\x80",
    "\xff",
    "<|endoftext|>",
    " t",
};
#define N_ATOMS (sizeof ATOMS / sizeof ATOMS[0])

static loom_tokenizer *load(const char *name, const char *json) {
  char *path = scratch_path(DIR, name);
  write_text(path, json);
  loom_tokenizer *t;
  int rc = loom_tokenizer_load(&t, path);
  CHECK(rc == 0, "load %s: %s", name, loom_errmsg());
  free(path);
  return rc ? NULL : t;
}

static char *split_pretok(const char *pattern) {
  json_t *pat = json_string(pattern);
  char *pj = json_dumps(pat, JSON_ENCODE_ANY);
  json_decref(pat);
  char *pre = loom_sprintf("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                           "\"pattern\": {\"Regex\": %s}, \"behavior\": \"Isolated\", \"invert\": "
                           "false}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
                           pj);
  free(pj);
  return pre;
}

static bool same_split(loom_tokenizer *t, const char *s, size_t len, size_t p) {
  int32_t *w, *a, *b;
  size_t nw, na, nb;
  loom_tokenizer_encode(t, s, len, &w, &nw);
  loom_tokenizer_encode(t, s, p, &a, &na);
  loom_tokenizer_encode(t, s + p, len - p, &b, &nb);
  bool same = nw == na + nb && !memcmp(w, a, na * sizeof *a) && !memcmp(w + na, b, nb * sizeof *b);
  free(w), free(a), free(b);
  return same;
}

/* Every allowed cut of `texts` random texts is exact; returns the number of cuts allowed. */
static long check_cuts(loom_tokenizer *t, const char *what, int texts, uint64_t seed) {
  loom_rng rng;
  loom_rng_seed(&rng, seed);
  long cuts = 0, bad = 0;
  char s[512];
  for (int k = 0; k < texts; k++) {
    size_t len = 0;
    int atoms = 1 + (int)loom_rng_below(&rng, 24);
    for (int i = 0; i < atoms; i++) {
      const char *a = ATOMS[loom_rng_below(&rng, N_ATOMS)];
      memcpy(s + len, a, strlen(a));
      len += strlen(a);
    }
    for (size_t p = 0; p <= len; p++) {
      if (!loom_tokenizer_can_split(t, s, len, p)) continue;
      cuts++;
      if (!same_split(t, s, len, p) && bad++ < 5)
        CHECK(false, "%s: the cut at %zu of \"%.*s\" changes the encoding", what, p, (int)len, s);
    }
  }
  CHECK(bad == 0, "%s: %ld of %ld cuts change the encoding", what, bad, cuts);
  return cuts;
}

static void test_patterns(void) {
  const struct {
    const char *name, *pattern; /* NULL: ByteLevel(use_regex true), GPT-2's regex */
  } cases[] = {{"gpt2", NULL},
               {"gpt2-split", LOOM_GPT2_PATTERN},
               {"qwen2", LOOM_QWEN2_PATTERN},
               {"llama3", LOOM_LLAMA3_PATTERN}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char *pre = cases[c].pattern ? split_pretok(cases[c].pattern) : loom_strdup(GPT2_PRETOK);
    char *json = tiny_tokenizer_json(MERGES, N_MERGES, 1, "BPE", pre);
    loom_tokenizer *t = load(cases[c].name, json);
    if (t) {
      long cuts = check_cuts(t, cases[c].name, 4000, 17 + c);
      CHECK(cuts > 300, "%s: only %ld cuts allowed", cases[c].name, cuts);
      /* the rule itself: after "\n" before a printable character */
      CHECK(loom_tokenizer_can_split(t, "ab.\nCd", 6, 4), "%s: '.\\n|C'", cases[c].name);
      CHECK(!loom_tokenizer_can_split(t, "ab.\n Cd", 7, 4), "%s: not before a space",
            cases[c].name);
      CHECK(!loom_tokenizer_can_split(t, "ab.\n<|endoftext|>", 17, 4),
            "%s: not before an added token", cases[c].name);
      CHECK(!loom_tokenizer_can_split(t, "ab.\nC", 5, 5) && !loom_tokenizer_can_split(t, "x", 1, 0),
            "%s: never at the ends", cases[c].name);
    }
    loom_tokenizer_free(t);
    free(json), free(pre);
  }
}

/* Whitespace-absorbing added tokens, an unknown regex or no regex: no cut at all. */
static void test_never(void) {
  char *json = tiny_tokenizer_json(MERGES, N_MERGES, 1, "BPE", GPT2_PRETOK);
  const char *const edits[][2] = {{"\"special\": true", "\"special\": true, \"rstrip\": true"},
                                  {"\"special\": true", "\"special\": true, \"lstrip\": true"}};
  for (int e = 0; e < 2; e++) {
    char *at = strstr(json, edits[e][0]);
    char *j =
        loom_sprintf("%.*s%s%s", (int)(at - json), json, edits[e][1], at + strlen(edits[e][0]));
    loom_tokenizer *t = load(e ? "lstrip.json" : "rstrip.json", j);
    if (t) CHECK(check_cuts(t, "strip", 300, 5) == 0, "an added token strips whitespace");
    loom_tokenizer_free(t);
    free(j);
  }
  free(json);
  char *pre = split_pretok("\\s+|\\S+");
  json = tiny_tokenizer_json(MERGES, N_MERGES, 1, "BPE", pre);
  loom_tokenizer *t = load("other.json", json);
  if (t) CHECK(check_cuts(t, "other regex", 300, 6) == 0, "an unknown regex");
  loom_tokenizer_free(t);
  free(json), free(pre);
  json = tiny_tokenizer_json(MERGES, N_MERGES, 1, "BPE",
                             "{\"type\": \"ByteLevel\", \"use_regex\": false}");
  t = load("noregex.json", json);
  if (t) CHECK(check_cuts(t, "no regex", 300, 7) == 0, "no regex: the whole text is one piece");
  loom_tokenizer_free(t);
  free(json);
}

/* A tokenizer with many merges, trained on the synthetic stories, on its own corpus cut at
 * every allowed newline: the parts encode to the whole. */
static void test_trained(void) {
  char *text;
  size_t len;
  loom_synth_text(60000, 3, &text, &len);
  char *path = scratch_path(DIR, "trained.json");
  CHECK(loom_tokenizer_train(text, len, 600, path) == 0, "train: %s", loom_errmsg());
  loom_tokenizer *t;
  if (loom_tokenizer_load(&t, path) == 0) {
    check_cuts(t, "trained", 2000, 9);
    int32_t *whole, *part;
    size_t nw, np, at = 0, start = 0, parts = 0;
    loom_tokenizer_encode(t, text, len, &whole, &nw);
    bool same = true;
    for (size_t p = 1; p <= len && same; p++) {
      if (p < len && !loom_tokenizer_can_split(t, text, len, p)) continue;
      loom_tokenizer_encode(t, text + start, p - start, &part, &np);
      same = at + np <= nw && !memcmp(whole + at, part, np * sizeof *part);
      at += np, start = p, parts++;
      free(part);
    }
    CHECK(same && at == nw, "the corpus cut at every newline encodes as a whole (%zu parts)",
          parts);
    CHECK(parts > 100, "cuts in the stories: %zu", parts);
    free(whole);
    loom_tokenizer_free(t);
  }
  free(text), free(path);
}

int main(void) {
  loom_rm_rf(DIR);
  test_patterns();
  test_never();
  test_trained();
  loom_rm_rf(DIR);
  return harness_finish("test_tokenize_split");
}

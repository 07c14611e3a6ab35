/* Byte-level BPE tokenizer: load errors (missing file, malformed JSON, wrong model type,
 * unknown merge token, missing byte token, unsupported pre-tokenizer), both merges encodings
 * loading to the same tokenizer, hand-checked encodings (merge ranks, GPT-2 regex pieces,
 * added tokens, Qwen2 regex), invalid UTF-8 handling, decode(encode(x)) == x on random
 * bytes, the trainer (determinism, layout), and encode speed on 2 MB of text. */
#include <jansson.h>

#include "data_test_util.h"

#define DIR "data-tokenizer.tmp"

static const char *const MERGES[][2] = {
    {" ", "t"}, {"h", "e"}, {" t", "he"}, {"l", "l"}, {"e", "ll"}, {"h", "ell"}, {"hell", "o"},
};
#define N_MERGES 7

static loom_tokenizer *load_json(const char *name, const char *json) {
  char *p = scratch_path(DIR, name);
  write_text(p, json);
  loom_tokenizer *t = NULL;
  int rc = loom_tokenizer_load(&t, p);
  CHECK(rc == 0, "load %s: %s", name, loom_errmsg());
  free(p);
  return t;
}

/* Load expecting failure; returns whether the message contains `want`. */
static int load_fails_with(const char *name, const char *json, const char *want) {
  char *p = scratch_path(DIR, name);
  if (json) write_text(p, json);
  loom_tokenizer *t = NULL;
  int rc = loom_tokenizer_load(&t, p);
  int ok = rc == -1 && t == NULL && contains(loom_errmsg(), want) && contains(loom_errmsg(), p);
  if (!ok) fprintf(stderr, "  %s: rc %d, message: %s\n", name, rc, loom_errmsg());
  loom_tokenizer_free(t);
  free(p);
  return ok;
}

/* s with the first `from` replaced by `to` (malloc'd). */
static char *replace_once(const char *s, const char *from, const char *to) {
  const char *at = strstr(s, from);
  CHECK(at != NULL, "fixture lacks '%s'", from);
  if (!at) return loom_strdup(s);
  return loom_sprintf("%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
}

static void test_load_errors(void) {
  char *tiny = tiny_tokenizer_json(MERGES, N_MERGES, 0, "BPE", GPT2_PRETOK);
  CHECK(load_fails_with("missing.json", NULL, "no such file"), "missing file");
  CHECK(load_fails_with("bad.json", "{\"model\": {\"type\": \"BPE\",", "invalid JSON"),
        "malformed JSON");
  char *wp = tiny_tokenizer_json(MERGES, N_MERGES, 0, "WordPiece", GPT2_PRETOK);
  CHECK(load_fails_with("wp.json", wp, "model.type is 'WordPiece'; loom supports byte-level BPE"),
        "wrong model type");
  free(wp);
  const char *bad_merge[][2] = {{"x", "y"}, {"q", "zz"}};
  char *bm = tiny_tokenizer_json(bad_merge, 1, 1, "BPE", GPT2_PRETOK);
  char *hole = strstr(bm, "\"xy\": 256"); /* drop the merged token from the vocab */
  CHECK(hole != NULL, "fixture");
  if (hole) memcpy(hole, "\"x_\"", 4);
  CHECK(load_fails_with("bm.json", bm, "token 'xy' is not in model.vocab"), "merge token");
  free(bm);
  char *nb = replace_once(tiny, "\"a\": 97", "\"aa\": 97"); /* drop the byte token 'a' */
  CHECK(load_fails_with("nobyte.json", nb, "lacks the byte-level token 'a'"), "byte token");
  free(nb);
  char *ws = tiny_tokenizer_json(MERGES, N_MERGES, 0, "BPE", "{\"type\": \"Whitespace\"}");
  CHECK(load_fails_with("ws.json", ws, "pre_tokenizer Whitespace is not supported"), "pretok");
  free(ws);
  char *sw = replace_once(tiny, "\"special\": true", "\"single_word\": true");
  CHECK(load_fails_with("sw.json", sw, "single_word"), "single_word");
  free(sw);
  free(tiny);
}

/* ids of tokens given by their byte strings */
static int32_t tid(loom_tokenizer *t, const char *bytes) {
  char *s = loom_bytes_to_token_str((const uint8_t *)bytes, strlen(bytes));
  int32_t id = loom_tokenizer_token_id(t, s);
  free(s);
  return id;
}

static int encodes_to(loom_tokenizer *t, const char *text, const char *const *want, int nwant) {
  int32_t *ids;
  size_t n;
  if (loom_tokenizer_encode(t, text, strlen(text), &ids, &n)) return 0;
  int ok = (int)n == nwant;
  for (int i = 0; ok && i < nwant; i++) {
    int32_t w = !strcmp(want[i], "<EOT>") ? loom_tokenizer_token_id(t, "<|endoftext|>") : tid(t, want[i]);
    ok = ids[i] == w;
  }
  if (!ok) {
    fprintf(stderr, "  '%s' ->", text);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
  }
  free(ids);
  return ok;
}

#define ENC(t, text, ...)                                                             \
  do {                                                                                \
    const char *w_[] = {__VA_ARGS__};                                                 \
    CHECK(encodes_to(t, text, w_, (int)(sizeof w_ / sizeof w_[0])), "encode '%s'", text); \
  } while (0)

static void test_known_encodings(loom_tokenizer *t) {
  CHECK(loom_tokenizer_vocab_size(t) == 256 + N_MERGES + 1, "vocab %d", loom_tokenizer_vocab_size(t));
  ENC(t, "the", "t", "he");                   /* (t,h) is no merge; (h,e) is */
  ENC(t, " the", " the");                     /* Ġ t, h e, then Ġt he */
  ENC(t, "hello", "he", "ll", "o");           /* (h,e) outranks (l,l): "hell" never forms */
  ENC(t, " hello", " ", "he", "ll", "o");
  ENC(t, "lll", "ll", "l");                   /* equal ranks: leftmost first */
  ENC(t, "the  cat's", "t", "he", " ", " ", "c", "a", "t", "'", "s"); /* \s+(?!\S), 's */
  ENC(t, "a<|endoftext|>b", "a", "<EOT>", "b");
  ENC(t, "<|endoftext|><|endoftext|>", "<EOT>", "<EOT>");
  int32_t *ids;
  size_t n = 1;
  CHECK(loom_tokenizer_encode(t, "", 0, &ids, &n) == 0 && n == 0, "empty text: no tokens");
  free(ids);
}

static void test_merge_encodings(void) {
  char *a = tiny_tokenizer_json(MERGES, N_MERGES, 0, "BPE", GPT2_PRETOK);
  char *b = tiny_tokenizer_json(MERGES, N_MERGES, 1, "BPE", GPT2_PRETOK);
  CHECK(strstr(a, "\"\xc4\xa0 t\"") && strstr(b, "[\"\xc4\xa0\", \"t\"]"), "fixtures differ in format");
  loom_tokenizer *ta = load_json("strings.json", a), *tb = load_json("pairs.json", b);
  if (ta && tb) {
    const char *text = " the hello world, it's the thell hello  \n";
    int32_t *ia, *ib;
    size_t na, nb;
    loom_tokenizer_encode(ta, text, strlen(text), &ia, &na);
    loom_tokenizer_encode(tb, text, strlen(text), &ib, &nb);
    CHECK(na == nb && !memcmp(ia, ib, na * sizeof *ia), "same ids from both merges encodings");
    free(ia);
    free(ib);
    test_known_encodings(ta);
    test_known_encodings(tb);
  }
  loom_tokenizer_free(ta);
  loom_tokenizer_free(tb);
  free(a);
  free(b);
}

/* Qwen2 layout (Split + ByteLevel(use_regex false)), NFC flagged, ignore_merges, and
 * added tokens with lstrip / rstrip. */
static void test_qwen2_layout(void) {
  json_t *pat = json_string(LOOM_QWEN2_PATTERN);
  char *pj = json_dumps(pat, JSON_ENCODE_ANY);
  char *pre = loom_sprintf("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                           "\"pattern\": {\"Regex\": %s}, \"behavior\": \"Isolated\", \"invert\": "
                           "false}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}", pj);
  char *base = tiny_tokenizer_json(MERGES, N_MERGES, 1, "BPE", pre);
  char *q = replace_once(base, "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}");
  loom_tokenizer *t = load_json("qwen2.json", q);
  if (t) {
    CHECK(loom_tokenizer_normalizer(t) && !strcmp(loom_tokenizer_normalizer(t), "NFC"), "NFC flagged");
    ENC(t, "IT'S 123 hello", "I", "T", "'", "S", " ", "1", "2", "3", " ", "he", "ll", "o");
  }
  loom_tokenizer_free(t);
  char *im = replace_once(q, "\"model\": {", "\"model\": {\"ignore_merges\": true, ");
  t = load_json("ignore.json", im);
  if (t) ENC(t, "hello hell", "hello", " ", "he", "ll"); /* whole piece in vocab: kept */
  loom_tokenizer_free(t);
  char *ls = replace_once(base, "\"special\": true", "\"special\": true, \"lstrip\": true");
  t = load_json("lstrip.json", ls);
  if (t) ENC(t, "a \t<|endoftext|> b", "a", "<EOT>", " ", "b");
  loom_tokenizer_free(t);
  char *rs = replace_once(base, "\"special\": true", "\"special\": true, \"rstrip\": true");
  t = load_json("rstrip.json", rs);
  if (t) ENC(t, "a <|endoftext|> \n b", "a", " ", "<EOT>", "b");
  loom_tokenizer_free(t);
  char *bad = replace_once(pre, "Isolated", "Removed");
  char *bj = tiny_tokenizer_json(MERGES, N_MERGES, 1, "BPE", bad);
  CHECK(load_fails_with("removed.json", bj, "behavior 'Isolated'"), "Split behavior");
  char *badrx = replace_once(pre, "(?i:", "(?i:(");
  char *rj = tiny_tokenizer_json(MERGES, N_MERGES, 1, "BPE", badrx);
  CHECK(load_fails_with("badrx.json", rj, "cannot compile the pre-tokenizer regex"), "bad regex");
  free(rj), free(badrx), free(bj), free(bad), free(rs), free(ls), free(im), free(q), free(base);
  free(pre), free(pj);
  json_decref(pat);
}

/* Collect regex pieces as "|"-joined text. */
static int join_piece(void *ctx, const char *p, size_t n) {
  char *buf = ctx;
  strcat(buf, "|");
  strncat(buf, p, n);
  return 0;
}

static void expect_pieces(const char *pattern, const char *text, size_t len, const char *want) {
  loom_regex *re;
  char got[4096] = "";
  CHECK(loom_regex_compile(&re, pattern) == 0, "compile: %s", loom_errmsg());
  loom_regex_split(re, text, len, join_piece, got);
  CHECK(!strcmp(got, want), "pieces of '%s': got '%s' want '%s'", text, got, want);
  loom_regex_free(re);
}

static void test_regexes(void) {
  const char *s = "Hello world's  test\t\n 123 4567 IT'S ok!!  ";
  expect_pieces(LOOM_GPT2_PATTERN, s, strlen(s),
                "|Hello| world|'s| | test|\t\n| 123| 4567| IT|'|S| ok|!!|  ");
  expect_pieces(LOOM_QWEN2_PATTERN, s, strlen(s),
                "|Hello| world|'s| | test|\t\n| |1|2|3| |4|5|6|7| IT|'S| ok|!!|  ");
  /* invalid UTF-8 never joins a match: it becomes its own piece */
  const char bad[] = "ab\xff\xfe" "cd \xe6\x97 ef\xc0\xaf";
  expect_pieces(LOOM_GPT2_PATTERN, bad, sizeof bad - 1, "|ab|\xff\xfe|cd| |\xe6\x97| ef|\xc0\xaf");
  expect_pieces(LOOM_GPT2_PATTERN, "caf\xc3\xa9 \xce\xba\xcf\x8c\xcf\x83\xce\xbc\xce\xb5", 16,
                "|caf\xc3\xa9| \xce\xba\xcf\x8c\xcf\x83\xce\xbc\xce\xb5");
  /* empty matches (a Split regex "\s+|$", or "x*") emit nothing and never read past the
   * text: the texts sit in buffers of exactly their length, so ASan sees text[len] */
  char *t1 = malloc(5), *t2 = malloc(5);
  memcpy(t1, "ab cd", 5), memcpy(t2, "abxxc", 5);
  expect_pieces("\\s+|$", t1, 5, "|ab| |cd");
  expect_pieces("x*", t2, 5, "|a|b|xx|c"); /* empty matches at 0, 1, 4 and 5 (Python's too) */
  free(t1), free(t2);
  /* \s is Unicode White_Space (as in Python's regex): U+180E MONGOLIAN VOWEL SEPARATOR is
   * not (PCRE2's own \s says it is); U+00A0, U+2028 and U+3000 are (pieces as Python's
   * regex gives them with the same pattern) */
  expect_pieces(LOOM_GPT2_PATTERN, "a \xe1\xa0\x8e" "b", 6, "|a| \xe1\xa0\x8e|b");
  expect_pieces(LOOM_GPT2_PATTERN, "a\xc2\xa0\xe2\x80\xa8\xe3\x80\x80" "b", 10,
                "|a|\xc2\xa0\xe2\x80\xa8|\xe3\x80\x80|b");
  /* only the escapes \s and \S change: a literal backslash-s and \Q...\E stay literal */
  expect_pieces("\\\\s", "a\\sb", 4, "|a|\\s|b");
  expect_pieces("\\Q\\s\\E", "x\\sy s", 6, "|x|\\s|y s");
}

static void test_byte_mapping(void) {
  int seen[324] = {0}, bad = 0;
  for (int b = 0; b < 256; b++) {
    uint32_t cp = loom_byte_to_unicode((uint8_t)b);
    bad += cp >= 324 || seen[cp]++ || loom_unicode_to_byte(cp) != b;
  }
  CHECK(bad == 0, "byte <-> unicode is a bijection (%d bad)", bad);
  CHECK(loom_byte_to_unicode(' ') == 0x120 && loom_byte_to_unicode('\n') == 0x10A &&
            loom_byte_to_unicode(0x7F) == 0x121 && loom_byte_to_unicode(0xAD) == 0x143 &&
            loom_byte_to_unicode('A') == 'A' && loom_byte_to_unicode(0xE9) == 0xE9,
        "GPT-2's mapping (space -> U+0120 'G-dot', newline -> U+010A, 0xAD -> U+0143)");
  CHECK(loom_unicode_to_byte(0x144) == -1 && loom_unicode_to_byte(0x20) == -1, "outside");
  size_t n;
  uint8_t *b = loom_token_str_to_bytes("\xc4\xa0the\xc4\x8a\xe6\x97\xa5", &n);
  CHECK(n == 8 && !memcmp(b, " the\n\xe6\x97\xa5", 8), "spelling -> bytes (unmapped chars kept)");
  free(b);
}

static int round_trips(loom_tokenizer *t, const char *x, size_t len) {
  int32_t *ids;
  size_t n, blen;
  char *back;
  if (loom_tokenizer_encode(t, x, len, &ids, &n)) return 0;
  int ok = loom_tokenizer_decode(t, ids, n, &back, &blen) == 0 && blen == len &&
           !memcmp(back, x, len);
  free(ids);
  if (ok) free(back);
  return ok;
}

static void test_round_trip_random(loom_tokenizer *t, const char *what) {
  static const char *cases[] = {"\xff\xfe", "abc\x80" "def", "\xe6\x97", "\xc0\xaf", "\xed\xa0\x80",
                                " \xff  \xfe\n", "\xf4\x90\x80\x80", "a\0b", "<|endoftext|>\xff"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECK(round_trips(t, cases[i], i == 7 ? 3 : strlen(cases[i])), "%s: fixed case %zu", what, i);
  loom_rng r;
  loom_rng_seed(&r, 7);
  char buf[600];
  int bad = 0;
  for (int k = 0; k < 400; k++) {
    size_t len = (size_t)loom_rng_below(&r, sizeof buf);
    int ascii = k % 2; /* half mostly-text, half arbitrary bytes */
    for (size_t i = 0; i < len; i++) {
      uint64_t v = loom_rng_below(&r, 256);
      buf[i] = ascii && v < 200 ? " aeht'lsox\n\t"[v % 12] : (char)v;
    }
    bad += !round_trips(t, buf, len);
  }
  CHECK(bad == 0, "%s: %d of 400 random byte strings fail decode(encode(x)) == x", what, bad);
}

static void test_decode_errors(loom_tokenizer *t) {
  int32_t ids[] = {5, 999999};
  char *text;
  size_t len;
  CHECK(loom_tokenizer_decode(t, ids, 2, &text, &len) == -1 &&
            contains(loom_errmsg(), "cannot decode token id 999999 at position 1"),
        "decode error: %s", loom_errmsg());
}

static char *synth(size_t bytes, size_t *len) {
  char *text;
  loom_synth_text(bytes, 1, &text, len);
  return text;
}

static void test_trainer(void) {
  size_t len;
  char *text = synth(300000, &len);
  char *p1 = scratch_path(DIR, "t1.json"), *p2 = scratch_path(DIR, "t2.json");
  CHECK(loom_tokenizer_train(text, len, 400, p1) == 0, "train: %s", loom_errmsg());
  CHECK(loom_tokenizer_train(text, len, 400, p2) == 0, "train again");
  char *a = slurp(p1), *b = slurp(p2);
  CHECK(!strcmp(a, b) && strlen(a) > 1000, "training is deterministic");
  CHECK(contains(a, "\"merges\": [\n") && contains(a, "\"type\": \"ByteLevel\""), "layout");
  loom_tokenizer *t = NULL;
  CHECK(loom_tokenizer_load(&t, p1) == 0, "trained loads: %s", loom_errmsg());
  if (t) {
    CHECK(loom_tokenizer_vocab_size(t) == 400, "vocab %d", loom_tokenizer_vocab_size(t));
    CHECK(loom_tokenizer_token_id(t, "<|endoftext|>") == 399, "eot id");
    CHECK(loom_tokenizer_token_id(t, "!") == 0 && loom_tokenizer_token_id(t, "\xc4\x80") == 188,
          "byte tokens in GPT-2 order");
    int32_t *ids;
    size_t n;
    loom_tokenizer_encode(t, text, len, &ids, &n);
    CHECK(n < len / 2, "compresses the training text: %zu tokens for %zu bytes", n, len);
    free(ids);
    test_round_trip_random(t, "trained");
  }
  loom_tokenizer_free(t);
  /* documents separated by a literal <|endoftext|>: it is never learned */
  const char *docs = "abcabcabc<|endoftext|>abcabcabc<|endoftext|>abcabc";
  CHECK(loom_tokenizer_train(docs, strlen(docs), 300, p2) == 0, "train docs");
  char *c = slurp(p2);
  CHECK(!contains(c, "\"<|\"") && !contains(c, "endoftext\",") && contains(c, "\"abc\""), "eot unlearned");
  CHECK(loom_tokenizer_train(docs, strlen(docs), 100, p2) == -1 &&
            contains(loom_errmsg(), "vocab size 100 is out of range"), "small vocab error");
  free(c);
  free(a);
  free(b);
  free(p1);
  free(p2);
  free(text);
}

static void test_long_runs(loom_tokenizer *t) {
  size_t n = 200000;
  char *s = malloc(n);
  memset(s, ' ', n);
  CHECK(round_trips(t, s, n), "200k spaces");
  memset(s, 'l', n);
  CHECK(round_trips(t, s, n), "200k letters in one piece");
  free(s);
}

/* Encode ~2 MB and report the speed; must take < 3 s. */
static void test_speed(void) {
  size_t len;
  char *text = synth(2000000, &len);
  char *p = scratch_path(DIR, "speed.json");
  CHECK(loom_tokenizer_train(text, len, 512, p) == 0, "train 512");
  loom_tokenizer *t = NULL;
  loom_tokenizer_load(&t, p);
  char *varied = NULL;
  size_t vlen = 0;
  char *vpath = loom_sprintf("%s/tests/data/corpus_varied.txt", LOOM_SOURCE_DIR);
  loom_read_file(vpath, &varied, &vlen);
  char *mixed = malloc(len);
  for (size_t i = 0; i < len; i++) mixed[i] = vlen ? varied[i % vlen] : 'x';
  const char *names[] = {"synthetic stories", "varied corpus repeated"};
  const char *texts[] = {text, mixed};
  for (int k = 0; t && k < 2; k++) {
    int32_t *ids;
    size_t n;
    double t0 = loom_now();
    int rc = loom_tokenizer_encode(t, texts[k], len, &ids, &n);
    double dt = loom_now() - t0;
    printf("encode %s: %.2f MB in %.3f s (%.1f MB/s), %zu tokens\n", names[k], len / 1e6, dt,
           len / 1e6 / dt, n);
    CHECK(rc == 0 && dt < 3.0, "encoding 2 MB took %.2f s", dt);
    free(ids);
  }
  loom_tokenizer_free(t);
  free(vpath);
  free(varied);
  free(mixed);
  free(p);
  free(text);
}

int main(void) {
  loom_rm_rf(DIR);
  test_load_errors();
  test_merge_encodings();
  test_regexes();
  test_byte_mapping();
  test_qwen2_layout();
  char *json = tiny_tokenizer_json(MERGES, N_MERGES, 1, "BPE", GPT2_PRETOK);
  loom_tokenizer *t = load_json("tiny.json", json);
  if (t) {
    test_round_trip_random(t, "tiny");
    test_decode_errors(t);
    test_long_runs(t);
  }
  loom_tokenizer_free(t);
  free(json);
  test_trainer();
  test_speed();
  loom_rm_rf(DIR);
  return harness_finish("test_tokenizer");
}

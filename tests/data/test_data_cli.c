/* `loom data` end to end: --help of every subcommand; synth-text determinism; the demo
 * pipeline synth-text -> train-tokenizer -> tokenize -> inspect-shard; encode/decode round
 * trip; --eot; and errors (stderr, exit status 1, no output file, no temp file left). */
#include "data_test_util.h"
#include "loom/shard.h"

#define DIR "data-cli.tmp"

static void test_help(void) {
  const char *subs[] = {"synth-text", "train-tokenizer", "tokenize", "encode", "decode",
                        "inspect-shard"};
  run_result r = run_loom(DIR, "data --help");
  CHECK(r.status == 0 && contains(r.out, "train-tokenizer"), "data --help");
  run_done(&r);
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    char *a = loom_sprintf("data %s --help", subs[i]);
    r = run_loom(DIR, a);
    CHECK(r.status == 0 && contains(r.out, "usage: loom data") && contains(r.out, subs[i]),
          "%s", a);
    run_done(&r);
    free(a);
  }
}

static void test_synth(void) {
  run_result r = run_loom(DIR, "data synth-text --out " DIR "/s1.txt --bytes 20000 --seed 4");
  CHECK(r.status == 0 && contains(r.out, "bytes of stories"), "synth-text: %s", r.err);
  run_done(&r);
  r = run_loom(DIR, "data synth-text --out " DIR "/s2.txt --bytes 20000 --seed 4");
  run_done(&r);
  r = run_loom(DIR, "data synth-text --out " DIR "/s3.txt --bytes 20000 --seed 5");
  run_done(&r);
  char *a = slurp(DIR "/s1.txt"), *b = slurp(DIR "/s2.txt"), *c = slurp(DIR "/s3.txt");
  CHECK(!strcmp(a, b) && strcmp(a, c) != 0, "same seed same text, other seed other text");
  CHECK(strlen(a) <= 20000 && strlen(a) > 15000, "size %zu", strlen(a));
  CHECK(contains(a, "\n\n") && contains(a, "\" said ") && contains(a, "named"), "stories");
  free(a), free(b), free(c);
}

static long long field(const char *text, const char *key) {
  const char *p = strstr(text, key);
  return p ? atoll(p + strlen(key)) : -1;
}

static void test_pipeline(void) {
  run_result r = run_loom(DIR, "data synth-text --out " DIR "/corpus.txt --bytes 200000 --seed 1");
  run_done(&r);
  r = run_loom(DIR, "data train-tokenizer --vocab-size 300 --out " DIR "/tok.json " DIR "/corpus.txt");
  CHECK(r.status == 0 && contains(r.out, "vocab 300"), "train-tokenizer: %s%s", r.out, r.err);
  run_done(&r);
  r = run_loom(DIR, "data tokenize --tokenizer " DIR "/tok.json --out " DIR "/train.bin " DIR "/corpus.txt");
  CHECK(r.status == 0 && contains(r.out, "tokens/byte"), "tokenize: %s", r.err);
  long long n = field(r.out, "");
  run_done(&r);
  r = run_loom(DIR, "data inspect-shard --tokenizer " DIR "/tok.json --count 8 " DIR "/train.bin");
  CHECK(r.status == 0 && field(r.out, "tokens: ") == n && contains(r.out, "dtype: uint16") &&
            contains(r.out, "vocab_size: 300") && contains(r.out, "decoded: \""),
        "inspect-shard: %s%s", r.out, r.err);
  run_done(&r);
  /* --eot ends each of two files (documents): two more tokens, recorded as version 2 */
  r = run_loom(DIR, "data tokenize --eot --tokenizer " DIR "/tok.json --out " DIR "/two.bin " DIR
                    "/corpus.txt " DIR "/corpus.txt");
  CHECK(r.status == 0 && field(r.out, "") == 2 * n + 2, "--eot count: %s", r.out);
  run_done(&r);
  loom_shard_header h;
  int32_t *tok;
  CHECK(loom_shard_read(DIR "/two.bin", &h, &tok) == 0 && tok[n] == 299 && tok[2 * n + 1] == 299,
        "eot id after each document");
  CHECK(h.version == 2 && h.has_eod && h.eod_token == 299, "header: version %u, eod %d/%d",
        h.version, h.has_eod, h.eod_token);
  free(tok);
  r = run_loom(DIR, "data inspect-shard --count 2 " DIR "/two.bin");
  CHECK(r.status == 0 && field(r.out, "version: ") == 2 && field(r.out, "end_of_document: ") == 299,
        "inspect-shard of a version-2 shard: %s%s", r.out, r.err);
  run_done(&r);
  /* without --eot: version 1, as before */
  CHECK(loom_shard_read_header(DIR "/train.bin", &h) == 0 && h.version == 1 && !h.has_eod,
        "plain shard stays version 1");
}

static void test_encode_decode(void) {
  run_result r = run_loom(DIR, "data encode --tokenizer " DIR "/tok.json --text 'Mia said, \"Hi!\"  '");
  CHECK(r.status == 0 && strlen(r.out) > 2, "encode: %s", r.err);
  char *ids = loom_strdup(r.out);
  ids[strcspn(ids, "\n")] = 0;
  run_done(&r);
  char *args = loom_sprintf("data decode --tokenizer " DIR "/tok.json %s", ids);
  r = run_loom(DIR, args);
  CHECK(r.status == 0 && !strcmp(r.out, "Mia said, \"Hi!\"  "), "decode gives '%s'", r.out);
  run_done(&r);
  free(args);
  free(ids);
  r = run_loom(DIR, "data encode --json --tokenizer " DIR "/tok.json --text 'a<|endoftext|>'");
  CHECK(r.status == 0 && contains(r.out, "{\"ids\": [") && contains(r.out, ", 299]}"), "--json: %s", r.out);
  run_done(&r);
}

/* Expect exit 1, a message on stderr containing `want`, and no `out` file or temp file. */
static void expect_fail(const char *args, const char *want, const char *out) {
  run_result r = run_loom(DIR, args);
  CHECK(r.status == 1 && contains(r.err, want) && !strcmp(r.out, ""), "'%s': status %d err '%s'",
        args, r.status, r.err);
  if (out) CHECK(!loom_path_exists(out), "'%s' left %s", args, out);
  run_done(&r);
  CHECK(system("ls " DIR " | grep -q '\\.tmp\\.'") != 0, "temp file left by '%s'", args);
}

static void test_errors(void) {
  expect_fail("data tokenize --tokenizer " DIR "/tok.json --out " DIR "/x.bin " DIR "/nope.txt",
              "nope.txt", DIR "/x.bin");
  expect_fail("data tokenize --tokenizer " DIR "/missing.json --out " DIR "/x.bin " DIR "/corpus.txt",
              "missing.json: no such file", DIR "/x.bin");
  expect_fail("data tokenize --tokenizer " DIR "/corpus.txt --out " DIR "/x.bin " DIR "/corpus.txt",
              "invalid JSON", DIR "/x.bin");
  expect_fail("data train-tokenizer --vocab-size 10 --out " DIR "/t.json " DIR "/corpus.txt",
              "vocab size 10 is out of range", DIR "/t.json");
  expect_fail("data train-tokenizer --out " DIR "/t.json " DIR "/corpus.txt", "--vocab-size is required",
              DIR "/t.json");
  expect_fail("data decode --tokenizer " DIR "/tok.json 5 999999", "cannot decode token id 999999", NULL);
  expect_fail("data decode --tokenizer " DIR "/tok.json 5 x", "'x' is not a token id", NULL);
  expect_fail("data inspect-shard " DIR "/corpus.txt", "not a loom token shard", NULL);
  expect_fail("data synth-text --bytes 10", "--out is required", NULL);
  expect_fail("data synth-text --out " DIR "/s.txt --bytes ten", "--bytes 'ten' is not an integer",
              DIR "/s.txt");
  expect_fail("data frobnicate", "unknown subcommand 'frobnicate'", NULL);
  expect_fail("data encode --tokenizer " DIR "/tok.json --bogus", "unknown option '--bogus'", NULL);
}

int main(void) {
  loom_rm_rf(DIR);
  loom_mkdir_p(DIR);
  test_help();
  test_synth();
  test_pipeline();
  test_encode_decode();
  test_errors();
  loom_rm_rf(DIR);
  return harness_finish("test_data_cli");
}

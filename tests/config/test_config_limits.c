/* Limits found by fuzzing (tests/fuzz/regress/config, hf_config): strings that config.yaml
 * could not hold exactly are escaped by the dump (C1 controls, NEL, LS/PS, U+FFFE/FFFF) or
 * refused at load (invalid UTF-8, NUL); integer keys that the code holds in an int are
 * range-checked instead of truncated; model sizes whose products would overflow are errors
 * naming the keys; Hugging Face config.json integers past INT_MAX are refused. */
#include "config_test_util.h"
#include "loom/hf.h"
#include "loom/model.h"

#define SCRATCH "config-limits.tmp"

/* run.name=<s> through the dump and back: the reloaded config is identical (same hash). */
static void round_trip_name(const char *s, const char *what) {
  loom_config c, back;
  loom_config_defaults(&c);
  loom_config_defaults(&back);
  memset(c.run.name, 0, sizeof c.run.name);
  snprintf(c.run.name, sizeof c.run.name, "%s", s);
  CHECK(loom_config_validate(&c) == 0, "%s: %s", what, loom_errmsg());
  char *yaml = loom_config_to_yaml(&c);
  int rc = loom_config_load(&back, scratch(SCRATCH, "name.yaml", yaml));
  CHECK(rc == 0, "%s: the dump does not load: %s\n%s", what, loom_errmsg(), yaml);
  CHECK(rc == 0 && !strcmp(back.run.name, s), "%s: reloaded as [%s]", what, back.run.name);
  CHECK(rc == 0 && loom_config_hash(&back) == loom_config_hash(&c), "%s: hash changed", what);
  free(yaml);
}

static void test_unicode_strings(void) {
  round_trip_name("a\xc2\x80" "b", "U+0080 (C1 control)");
  round_trip_name("a\xc2\x85" "b", "U+0085 NEL (a reader folds a raw one to a space)");
  round_trip_name("a\xc2\x9f" "b", "U+009F");
  round_trip_name("x\xe2\x80\xa8y\xe2\x80\xa9z", "U+2028/2029 line and paragraph separators");
  round_trip_name("\xef\xbf\xbe\xef\xbf\xbf", "U+FFFE/FFFF non-characters");
  round_trip_name("\xef\xbb\xbf" "bom", "U+FEFF");
  round_trip_name("esc\x1b[0m \t\r\n", "C0 controls");
  round_trip_name("caf\xc3\xa9 \xf0\x9f\x99\x82", "printable non-ASCII stays as it is");
  loom_config c;
  loom_config_defaults(&c);
  snprintf(c.run.name, sizeof c.run.name, "caf\xc3\xa9");
  char *yaml = loom_config_to_yaml(&c);
  CHECK(strstr(yaml, "name: \"caf\xc3\xa9\"\n") != NULL, "printable UTF-8 written raw:\n%s", yaml);
  free(yaml);
  snprintf(c.run.name, sizeof c.run.name, "a\xc2\x85" "b");
  yaml = loom_config_to_yaml(&c);
  CHECK(strstr(yaml, "name: \"a\\Nb\"\n") != NULL, "NEL escaped as \\N:\n%s", yaml);
  free(yaml);
}

static void test_rejected_strings(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(loom_config_override(&c, "run.name=a\xdd\xd2" "b") != 0, "invalid UTF-8 accepted");
  CHECK_MSG("command-line override", "run.name is not UTF-8 text", "byte 2 (0xdd)");
  CHECK(loom_config_override(&c, "run.name=\xc0\xaf") != 0, "overlong '/' accepted");
  CHECK(loom_config_override(&c, "run.name=\xed\xa0\x80") != 0, "UTF-16 surrogate accepted");
  CHECK(loom_config_override(&c, "run.name=\xf4\x90\x80\x80") != 0, "U+110000 accepted");
  CHECK(loom_config_override(&c, "run.name=ok\xc3\xa9") == 0, "valid UTF-8: %s", loom_errmsg());
  /* a NUL escape in YAML would silently cut the string */
  loom_config_defaults(&c);
  const char *path = scratch(SCRATCH, "nul.yaml", "run:\n  seed: 3\n  name: \"ab\\0cd\"\n");
  CHECK(loom_config_load(&c, path) != 0, "NUL accepted");
  CHECK_MSG("nul.yaml:3:", "run.name contains a NUL character");
  CHECK(c.run.seed == 1337, "a failed load leaves the config untouched");
  /* validation catches what code (not the loader) put there */
  loom_config_defaults(&c);
  strcpy(c.run.output_dir, "runs\xff");
  CHECK(loom_config_validate(&c) != 0, "validate accepted invalid UTF-8");
  CHECK_MSG("invalid config: ", "run.output_dir is not UTF-8 text");
}

/* override, then validation must fail naming all substrings */
static void invalid(const char *ov, const char *s1, const char *s2) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(loom_config_override(&c, ov) == 0, "%s: %s", ov, loom_errmsg());
  CHECK(loom_config_validate(&c) != 0, "%s should not validate", ov);
  CHECK_MSG("invalid config: ", s1, s2);
}

static void test_int_ranges(void) {
  invalid("model.layers=4294967298", "model.layers = 4294967298 is out of range",
          "between -2147483648 and 2147483647");
  invalid("training.micro_batch_size=2147483648", "training.micro_batch_size = 2147483648",
          "32-bit int");
  invalid("parallel.dp=-4294967295", "parallel.dp = -4294967295", "between");
  invalid("data.image_max_pixels=9000000000", "data.image_max_pixels = 9000000000", "between");
  invalid("vision.parallel.zero=4294967295", "vision.parallel.zero = 4294967295", "between");
  /* the rank count dp*tp*pp*sp must fit an int even when each factor does */
  loom_config c;
  loom_config_defaults(&c);
  c.parallel.dp = c.parallel.tp = 65536;
  CHECK(loom_config_validate(&c) != 0, "65536*65536 ranks accepted");
  CHECK_MSG("parallel.dp*tp*pp*sp*cp = 65536*65536*1*1*1 is out of range", "at most 2147483647");
  loom_config_defaults(&c);
  c.parallel.pp = 2;
  c.parallel.vpp = 1L << 30;
  CHECK(loom_config_validate(&c) != 0, "pp*vpp past INT_MAX accepted");
  CHECK_MSG("parallel.pp*vpp = 2*1073741824");
  /* keys held in a long keep the long range */
  loom_config_defaults(&c);
  CHECK(loom_config_override(&c, "run.seed=-9223372036854775808") == 0 &&
            loom_config_override(&c, "training.steps=9000000000") == 0 &&
            loom_config_validate(&c) == 0,
        "long keys: %s", loom_errmsg());
}

static int spec_of(const char *const *ov, loom_model_spec *s) {
  loom_config c;
  loom_config_defaults(&c);
  for (int i = 0; ov[i]; i++)
    if (loom_config_override(&c, ov[i])) return -2;
  return loom_model_spec_from_config(s, &c.model);
}

static void test_model_sizes(void) {
  loom_model_spec s;
  const char *vocab[] = {"model.vocab_size=2147483647", NULL};
  CHECK(spec_of(vocab, &s) == -1, "padded vocab past INT_MAX accepted");
  CHECK_MSG("model.vocab_size = 2147483647 rounded up to a multiple of "
            "model.vocab_pad_multiple = 64 is 2147483648", "past the limit of 2147483647");
  const char *vocab_ok[] = {"model.vocab_size=2147483584", NULL}; /* 64 * 33554431 */
  int rc = spec_of(vocab_ok, &s);
  CHECK(rc != 0 || s.padded_vocab == 2147483584, "largest paddable vocab: %d", s.padded_vocab);
  const char *heads[] = {"model.preset=", "model.arch=llama", "model.hidden=64", "model.layers=1",
                         "model.heads=65536", "model.kv_heads=1", "model.head_dim=65536",
                         "model.vocab_size=10", "model.max_seq=8", "model.intermediate=8", NULL};
  CHECK(spec_of(heads, &s) == -1, "heads*head_dim past INT_MAX accepted");
  CHECK_MSG("model.heads * model.head_dim = 4294967296 is past the limit of 2147483647");
  const char *layers[] = {"model.layers=65537", NULL};
  CHECK(spec_of(layers, &s) == -1, "65537 layers accepted");
  CHECK_MSG("model.layers = 65537 is past the limit of 65536 blocks");
  const char *big[] = {"model.hidden=1048576", "model.heads=16", "model.intermediate=4194304",
                       "model.layers=1024", NULL};
  CHECK(spec_of(big, &s) == -1, "a 1.5e16-parameter model accepted");
  CHECK_MSG("parameters, past the limit of 1.41e+14 (2^47)");
  const char *wide[] = {"model.preset=",     "model.arch=gpt2",     "model.hidden=1073741824",
                        "model.heads=1",     "model.layers=1",      "model.vocab_size=10",
                        "model.max_seq=8",   NULL};
  CHECK(spec_of(wide, &s) == -1, "4*hidden default past INT_MAX accepted");
  CHECK_MSG("model.intermediate defaults to 4 * model.hidden = 4 * 1073741824");
  const char *trunc[] = {"model.layers=4294967298", NULL};
  CHECK(spec_of(trunc, &s) == -1, "layers truncated to int");
  CHECK_MSG("model.layers = 4294967298 is out of range");
  const char *fine[] = {"model.preset=gpt2-124m", NULL};
  CHECK(spec_of(fine, &s) == 0 && loom_model_count_params(&s, false) == 124439808,
        "gpt2-124m still resolves (124439808 parameters): %s", loom_errmsg());
}

static int hf_load(const char *json) {
  loom_config c;
  loom_config_defaults(&c);
  return loom_hf_config_load(&c, scratch(SCRATCH, "config.json", json), LOOM_ARCH_GPT2);
}

static void test_hf_ints(void) {
  CHECK(hf_load("{\"model_type\":\"gpt2\",\"vocab_size\":512,\"n_embd\":2305843009213693952,"
                "\"n_layer\":2,\"n_head\":4}") != 0, "n_embd 2^61 accepted");
  CHECK_MSG("config.json: \"n_embd\" = 2305843009213693952 is too large", "at most 2147483647");
  CHECK(hf_load("{\"model_type\":\"gpt2\",\"vocab_size\":512,\"n_embd\":1073741824,"
                "\"n_layer\":2,\"n_head\":4}") != 0, "default n_inner past INT_MAX accepted");
  CHECK_MSG("\"n_inner\" is absent, so it is 4 * n_embd = 4294967296");
  CHECK(hf_load("{\"model_type\":\"gpt2\",\"vocab_size\":512,\"n_embd\":128,"
                "\"n_layer\":2,\"n_head\":4}") == 0, "a small gpt2: %s", loom_errmsg());
}

int main(void) {
  test_unicode_strings();
  test_rejected_strings();
  test_int_ranges();
  test_model_sizes();
  test_hf_ints();
  return harness_finish("config_limits");
}

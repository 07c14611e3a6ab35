/* A checkpoint's JSON metadata (src/ckpt/checkpoint_meta.c): a trainer_state.json or
 * index.json written by loom parses back field for field, and every kind of damage found by
 * fuzzing (tests/fuzz/regress/ckpt_meta) is an error naming the file and the field rather
 * than a crash, an internal error in the optimizer or a path outside the checkpoint. */
#include <jansson.h>

#include "harness.h"
#include "loom/core.h"
#include "ckpt/checkpoint_meta.h"

#define STATE(step, rng, hash, extra)                                                         \
  "{\"step\": " step ", \"rng\": " rng ", \"loader\": {\"epoch\": 1, \"index\": 160, "        \
  "\"batch_windows\": 8}, \"config_hash\": " hash ", \"tokens_seen\": 10240, \"elapsed\": 1.5" \
  extra "}"
#define RNG "[\"9a3c1d2e4f506172\", \"1\", \"ffffffffffffffff\", \"0\"]"

static int state(const char *text, loom_train_state *ts) {
  return loom_ckpt_state_parse(text, strlen(text), "ck/trainer_state.json", ts);
}

static void bad_state(const char *text, const char *what) {
  loom_train_state ts;
  memset(&ts, 0x5a, sizeof ts);
  loom_train_state before = ts;
  CHECK(state(text, &ts) != 0, "accepted: %s", text);
  CHECK(strstr(loom_errmsg(), "ck/trainer_state.json") && strstr(loom_errmsg(), what),
        "want \"%s\" in: %s", what, loom_errmsg());
  CHECK(memcmp(&ts, &before, sizeof ts) == 0, "a failed parse left *ts changed");
}

static void test_state(void) {
  loom_train_state ts;
  CHECK(state(STATE("20", RNG, "\"c0ffee0123456789\"", ", \"skipped_bad_samples\": 3"), &ts) == 0,
        "%s", loom_errmsg());
  CHECK(ts.step == 20 && ts.loader.epoch == 1 && ts.loader.index == 160 &&
            ts.loader_batch_windows == 8 && ts.tokens_seen == 10240 && ts.elapsed == 1.5 &&
            ts.skipped_bad == 3 && ts.config_hash == 0xc0ffee0123456789ull &&
            ts.rng.s[0] == 0x9a3c1d2e4f506172ull && ts.rng.s[1] == 1 &&
            ts.rng.s[2] == UINT64_MAX && ts.rng.s[3] == 0,
        "fields of a good trainer_state.json");
  CHECK(state("{\"step\": 1, \"rng\": [\"1\",\"2\",\"3\",\"4\"], \"loader\": {\"epoch\": 0, "
              "\"index\": 0}, \"config_hash\": \"0\", \"tokens_seen\": 0, \"elapsed\": 0}",
              &ts) == 0 && ts.skipped_bad == 0 && ts.loader_batch_windows == 0,
        "older checkpoints without batch_windows / skipped_bad_samples: %s", loom_errmsg());
  bad_state(STATE("-5", RNG, "\"1\"", ""), "\"step\" must be an integer >= 1");
  bad_state(STATE("0", RNG, "\"1\"", ""), "\"step\" must be an integer >= 1");
  bad_state(STATE("2.5", RNG, "\"1\"", ""), "\"step\"");
  bad_state(STATE("3", "[1, 2, 3, 4]", "\"1\"", ""), "\"rng\" must be a string of 1 to 16 hex");
  bad_state(STATE("3", "[\"0\", \"0\", \"0\", \"0\"]", "\"1\"", ""), "\"rng\" is all zero");
  bad_state(STATE("3", "[\"1\", \"2\", \"3\"]", "\"1\"", ""), "list of 4 hex words");
  bad_state(STATE("3", RNG, "\"xyz\"", ""), "\"config_hash\" must be a string of 1 to 16 hex");
  bad_state(STATE("3", RNG, "\"10000000000000000\"", ""), "\"config_hash\"");
  bad_state(STATE("3", RNG, "17", ""), "\"config_hash\"");
  bad_state(STATE("3", RNG, "\"1\"", ", \"skipped_bad_samples\": -1"), "\"skipped_bad_samples\"");
  bad_state(STATE("3", RNG, "\"1\"", ", \"skipped_bad_samples\": \"2\""), "\"skipped_bad_samples\"");
  bad_state("{\"step\": 3, \"rng\": " RNG ", \"loader\": 7, \"config_hash\": \"1\", "
            "\"tokens_seen\": 0, \"elapsed\": 0}", "\"loader\" must be an object");
  bad_state("{\"step\": 3, \"rng\": " RNG ", \"loader\": {\"epoch\": 0, \"index\": -1}, "
            "\"config_hash\": \"1\", \"tokens_seen\": 0, \"elapsed\": 0}", "\"index\"");
  bad_state("{\"step\": 3, \"rng\": " RNG ", \"loader\": {\"epoch\": 0, \"index\": 0}, "
            "\"config_hash\": \"1\", \"tokens_seen\": 0, \"elapsed\": -1}", "\"elapsed\"");
  bad_state("{\"step\": 3, \"rng\": " RNG ", \"loader\": {\"epoch\": 0, \"index\": 0}, "
            "\"config_hash\": \"1\", \"elapsed\": 0}", "\"tokens_seen\" must be an integer >= 0 "
            "(it is missing)");
  bad_state("[1, 2]", "expected a JSON object");
  bad_state("{\"step\": 3,", "not valid JSON");
}

static void test_index(void) {
  static const char good[] = "{\"format\": \"loom-sharded\", \"version\": 1, \"model_files\": "
                             "[\"model-tp0.safetensors\", \"model-tp1.safetensors\"], "
                             "\"optimizer_files\": []}";
  char **names;
  int n;
  int rc = loom_ckpt_index_parse(good, strlen(good), "ck/index.json", "model", &names, &n);
  CHECK(rc == 0 && n == 2 && !strcmp(names[0], "model-tp0.safetensors") &&
            !strcmp(names[1], "model-tp1.safetensors"),
        "model files: %s", loom_errmsg());
  if (rc == 0) loom_ckpt_names_free(names, n);
  CHECK(loom_ckpt_index_parse(good, strlen(good), "ck/index.json", "optimizer", &names, &n) == 0 &&
            n == 0,
        "empty optimizer list: %s", loom_errmsg());
  loom_ckpt_names_free(names, n);
  static const char *const bad[] = {
      "{\"model_files\": [7]}",   "{\"model_files\": [null]}",
      "{\"model_files\": [\"../../etc/passwd\"]}", "{\"model_files\": [\"..\"]}",
      "{\"model_files\": [\"\"]}", "{\"model_files\": [\"a/b\"]}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    names = (char **)1;
    CHECK(loom_ckpt_index_parse(bad[i], strlen(bad[i]), "ck/index.json", "model", &names, &n) != 0 &&
              names == NULL && n == 0,
          "accepted: %s", bad[i]);
    CHECK(strstr(loom_errmsg(), "ck/index.json: \"model_files\" entry 1 must be the name of a "
                                "file in the checkpoint directory"),
          "%s: %s", bad[i], loom_errmsg());
  }
  CHECK(loom_ckpt_index_parse(good, strlen(good), "ck/index.json", "gradients", &names, &n) != 0 &&
            strstr(loom_errmsg(), "\"gradients_files\" is missing"),
        "missing list: %s", loom_errmsg());
  static const char nul[] = "{\"model_files\": [\"a\\u0000b\"]}";
  CHECK(loom_ckpt_index_parse(nul, strlen(nul), "ck/index.json", "model", &names, &n) != 0 &&
            strstr(loom_errmsg(), "ck/index.json:1: not valid JSON"),
        "a NUL in a file name: %s", loom_errmsg());
}

/* loom.pieces metadata text -> 0 / -1 from loom_ckpt_pieces_check */
static int pieces(const char *text) {
  json_t *o = json_loads(text, 0, NULL);
  int rc = loom_ckpt_pieces_check(o, "ck/model-r1.safetensors");
  json_decref(o);
  return rc;
}

static void test_pieces(void) {
  CHECK(pieces("{\"layers.0.attn.q.weight\": {\"tensor\": \"layers.0.attn.q.weight\", "
               "\"gshape\": [128, 128], \"lshape\": [64, 128], \"split_dim\": 0, "
               "\"split_start\": 64, \"begin\": 0}}") == 0,
        "a piece as loom writes it: %s", loom_errmsg());
  static const struct {
    const char *json, *field;
  } bad[] = {
      {"{\"x\": {\"tensor\": \"x\", \"lshape\": [-1, 4], \"split_dim\": 0, \"split_start\": 0, "
       "\"begin\": 0}}", "lshape"},
      {"{\"x\": {\"tensor\": \"x\", \"lshape\": [4294967296, 4], \"split_dim\": 0, "
       "\"split_start\": 0, \"begin\": 0}}", "lshape"},
      {"{\"x\": {\"tensor\": \"x\", \"lshape\": [1, 4], \"split_dim\": 7, \"split_start\": 0, "
       "\"begin\": 0}}", "split_dim"},
      {"{\"x\": {\"tensor\": \"x\", \"lshape\": [1, 4], \"split_dim\": 0, \"split_start\": -3, "
       "\"begin\": 0}}", "split_start"},
      {"{\"x\": {\"tensor\": \"x\", \"lshape\": [1, 4], \"split_dim\": 0, \"split_start\": 0, "
       "\"begin\": -1}}", "begin"},
      {"{\"x\": {\"lshape\": [1, 4], \"split_dim\": 0, \"split_start\": 0, \"begin\": 0}}",
       "tensor"},
      {"{\"x\": 5}", "the entry"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK(pieces(bad[i].json) != 0, "accepted: %s", bad[i].json);
    char want[96];
    snprintf(want, sizeof want, "entry 'x': %s is missing or out of range", bad[i].field);
    CHECK(strstr(loom_errmsg(), "ck/model-r1.safetensors: metadata 'loom.pieces'") &&
              strstr(loom_errmsg(), want),
          "want \"%s\" in: %s", want, loom_errmsg());
  }
  CHECK(pieces("[1]") != 0 && strstr(loom_errmsg(), "is not a JSON object"), "array: %s",
        loom_errmsg());
}

int main(void) {
  test_state();
  test_index();
  test_pieces();
  return harness_finish("test_ckpt_meta");
}

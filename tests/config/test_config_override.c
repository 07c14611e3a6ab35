/* Command-line overrides: every Hydra form (a.b=c, +a.b=c, ++a.b=c, ~a.b, ~a.b=v), value
 * typing and quoting, and each error (message names the override string and the problem). */
#include "config_test_util.h"

static loom_config fresh(void) {
  loom_config c;
  loom_config_defaults(&c);
  return c;
}

static void test_set_forms(void) {
  loom_config c = fresh();
  CHECK(loom_config_override(&c, "training.lr=1e-3") == 0, "%s", loom_errmsg());
  CHECK(c.training.lr == 1e-3, "=");
  CHECK(loom_config_override(&c, "+training.steps=77") == 0, "%s", loom_errmsg());
  CHECK(c.training.steps == 77, "+ behaves like = for schema keys");
  CHECK(loom_config_override(&c, "++training.dtype=BF16") == 0, "%s", loom_errmsg());
  CHECK(!strcmp(c.training.dtype, "bf16"), "++ and enum canonicalisation");
  CHECK(loom_config_override(&c, "checkpoint.save_final=off") == 0, "%s", loom_errmsg());
  CHECK(!c.checkpoint.save_final, "bool");
  CHECK(loom_config_override(&c, "run.name='my run, v2'") == 0, "%s", loom_errmsg());
  CHECK(!strcmp(c.run.name, "my run, v2"), "single-quoted string with comma: %s", c.run.name);
  CHECK(loom_config_override(&c, "run.name=\"say \\\"hi\\\"\"") == 0, "%s", loom_errmsg());
  CHECK(!strcmp(c.run.name, "say \"hi\""), "double-quoted with escapes: %s", c.run.name);
  CHECK(loom_config_override(&c, "run.name=") == 0 && !strcmp(c.run.name, ""),
        "empty value is the empty string");
  CHECK(loom_config_override(&c, "model.qkv_bias=''") == 0 && !strcmp(c.model.qkv_bias, ""),
        "quoted empty enum value");
  CHECK(loom_config_override(&c, " training.seq_len = 128 ") == 0 && c.training.seq_len == 128,
        "whitespace around key and value");
  CHECK(loom_config_override(&c, "training.lr='2e-3'") == 0 && c.training.lr == 2e-3,
        "quoted number for a float key");
}

static void test_delete_forms(void) {
  loom_config c = fresh(), d = fresh();
  loom_config_override(&c, "training.lr=1e-3");
  loom_config_override(&c, "run.name=abc");
  CHECK(loom_config_override(&c, "~training.lr") == 0 && c.training.lr == d.training.lr,
        "~key resets: %s", loom_errmsg());
  CHECK(loom_config_override(&c, "~run.name=xyz") != 0, "~key=value with another value");
  CHECK_MSG("command-line override '~run.name=xyz'", "run.name is abc, not xyz",
            "nothing was reset");
  CHECK(!strcmp(c.run.name, "abc"), "failed ~key=value leaves the value");
  CHECK(loom_config_override(&c, "~run.name=abc") == 0 && !strcmp(c.run.name, ""),
        "~key=value with the current value resets: %s", loom_errmsg());
  loom_config_override(&c, "training.steps=5");
  CHECK(loom_config_override(&c, "~training.steps=5.0") != 0, "~ value parsed by type");
  CHECK_MSG("expected an integer for training.steps");
  CHECK(loom_config_override(&c, "~training.steps=+5") == 0 && c.training.steps == 200,
        "~key=value compares typed values: %s", loom_errmsg());
  CHECK(memcmp(&c, &d, sizeof c) == 0, "all keys back to defaults, byte for byte");
}

static void test_errors(void) {
  loom_config c = fresh(), before = fresh();
  CHECK(loom_config_override(&c, "training.lrr=1") != 0, "unknown key");
  CHECK_MSG("command-line override 'training.lrr=1': unknown key 'training.lrr'; did you "
            "mean 'training.lr'?");
  CHECK(loom_config_override(&c, "+training.new_key=1") != 0, "+ of a non-schema key");
  CHECK_MSG("'+training.new_key=1'", "unknown key 'training.new_key'");
  CHECK(loom_config_override(&c, "~training.lrr") != 0, "~ of unknown key");
  CHECK_MSG("'~training.lrr'", "did you mean 'training.lr'?");
  CHECK(loom_config_override(&c, "training.lr=[1,2]") != 0, "list");
  CHECK_MSG("command-line override 'training.lr=[1,2]': training.lr takes a float, not a list");
  CHECK(loom_config_override(&c, "run.name={a: 1}") != 0, "mapping");
  CHECK_MSG("run.name takes a string, not a mapping");
  CHECK(loom_config_override(&c, "training.lr=[1,2") != 0, "unterminated list");
  CHECK_MSG("unterminated list");
  CHECK(loom_config_override(&c, "training.steps=abc") != 0, "type");
  CHECK_MSG("'training.steps=abc': expected an integer for training.steps, found 'abc'");
  CHECK(loom_config_override(&c, "training.lr=inf") != 0, "inf");
  CHECK_MSG("infinity and NaN are not allowed");
  CHECK(loom_config_override(&c, "training.lr_schedule=cos") != 0, "enum");
  CHECK_MSG("must be one of constant, linear, cosine", "did you mean 'cosine'?");
  CHECK(loom_config_override(&c, "training.lr") != 0, "missing =");
  CHECK_MSG("'training.lr': missing '=value'", "~training.lr");
  CHECK(loom_config_override(&c, "training=1") != 0, "section");
  CHECK_MSG("'training' is a section, not a key", "training.steps=");
  CHECK(loom_config_override(&c, "=5") != 0, "empty key");
  CHECK_MSG("missing key name");
  CHECK(loom_config_override(&c, "training.lr=null") != 0, "null");
  CHECK_MSG("training.lr has no value (null)");
  CHECK(loom_config_override(&c, "training.lr=1e-3,1e-4") != 0, "sweep");
  CHECK_MSG("Hydra sweep");
  CHECK(loom_config_override(&c, "run.name=${oc.env:USER}") != 0, "interpolation");
  CHECK_MSG("interpolations");
  CHECK(loom_config_override(&c, "run.name='abc") != 0, "unterminated quote");
  CHECK_MSG("unterminated '-quoted value");
  CHECK(loom_config_override(&c, "run.name='a'b") != 0, "text after quote");
  CHECK_MSG("text after the closing ' quote");
  CHECK(loom_config_override(&c, "training.steps=99999999999999999999") != 0, "overflow");
  CHECK_MSG("out of range");
  CHECK(memcmp(&c, &before, sizeof c) == 0, "failed overrides change nothing");
}

int main(void) {
  test_set_forms();
  test_delete_forms();
  test_errors();
  return harness_finish("test_config_override");
}

/* Command-line overrides: every Hydra form (a.b=c, +a.b=c, ++a.b=c, ~a.b, ~a.b=v), value
 * typing and quoting, and each error (message names the override string and the problem). */
#include <unistd.h>

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
  CHECK(loom_config_override(&c, "+new_key=1") != 0, "+ of an undotted non-schema key");
  CHECK_MSG("'+new_key=1'", "user key 'new_key' needs a dotted name");
  CHECK(loom_config_override(&c, "exp.new_key=1") != 0, "plain = of an unknown key");
  CHECK_MSG("unknown key 'exp.new_key'", "use +exp.new_key=VALUE");
  CHECK(loom_config_override(&c, "+exp.a=[1,2]") != 0, "user key list");
  CHECK_MSG("user key exp.a takes one value (text or a number), not a list");
  CHECK(loom_config_override(&c, "+exp.a=null") != 0, "user key null");
  CHECK(loom_config_override(&c, "+exp.a=1,2") != 0, "user key comma");
  CHECK_MSG("a sweep (loom train -m)");
  CHECK(loom_config_override(&c, "+exp.9a=1") != 0, "user key bad name");
  CHECK_MSG("not a valid user key name");
  CHECK(loom_config_override(&c, "~exp.absent") != 0, "~ of an absent key");
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

/* +key / ++key / key= / ~key on user keys (Hydra's append). */
static void test_user_keys(void) {
  loom_config c = fresh();
  CHECK(loom_config_override(&c, "+exp.hypothesis=warmup_helps") == 0, "+key: %s",
        loom_errmsg());
  CHECK(c.nuser == 1 && !strcmp(loom_config_user_get(&c, "exp.hypothesis"), "warmup_helps"),
        "user key stored");
  CHECK(loom_config_override(&c, "+training.new_key=1") == 0, "+ in a schema section: %s",
        loom_errmsg());
  CHECK(loom_config_override(&c, "+exp.hypothesis=other") != 0, "+ of a set user key");
  CHECK_MSG("user key exp.hypothesis is already set (to 'warmup_helps'); use "
            "++exp.hypothesis=VALUE");
  CHECK(!strcmp(loom_config_user_get(&c, "exp.hypothesis"), "warmup_helps"), "unchanged");
  CHECK(loom_config_override(&c, "++exp.hypothesis=b") == 0 &&
        !strcmp(loom_config_user_get(&c, "exp.hypothesis"), "b"), "++ replaces");
  CHECK(loom_config_override(&c, "exp.hypothesis='c, d'") == 0 &&
        !strcmp(loom_config_user_get(&c, "exp.hypothesis"), "c, d"), "= replaces, quoted");
  CHECK(loom_config_override(&c, "++exp.new=3") == 0 && c.nuser == 3, "++ adds");
  CHECK(loom_config_override(&c, "+training.lr=0.5") == 0 && c.training.lr == 0.5 &&
        c.nuser == 3, "+ of a schema key is =");
  CHECK(loom_config_override(&c, "~training.new_key") == 0 && c.nuser == 2 &&
        !loom_config_user_get(&c, "training.new_key") &&
        !strcmp(c.user[0].name, "exp.hypothesis") && !strcmp(c.user[1].name, "exp.new"),
        "~ removes, order kept");
  /* the dump keeps them and loads back identically */
  char *y = loom_config_to_yaml(&c);
  CHECK(strstr(y, "\n+exp.hypothesis: \"c, d\"\n+exp.new: \"3\"\n") != NULL, "dumped:\n%s", y);
  char path[] = "/tmp/loom-user-keys-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0 && write(fd, y, strlen(y)) == (ssize_t)strlen(y), "temp file");
  close(fd);
  loom_config back = fresh();
  CHECK(loom_config_load(&back, path) == 0, "reload: %s", loom_errmsg());
  char *y2 = loom_config_to_yaml(&back);
  CHECK(!strcmp(y, y2), "reloads identically");
  CHECK(loom_config_hash(&c) == loom_config_hash(&back), "same hash");
  unlink(path);
  free(y);
  free(y2);
  /* limits */
  loom_config m = fresh();
  for (int i = 0; i < LOOM_USER_KEYS_MAX; i++) {
    char e[64];
    snprintf(e, sizeof e, "+exp.k%d=%d", i, i);
    CHECK(loom_config_override(&m, e) == 0, "%s: %s", e, loom_errmsg());
  }
  CHECK(loom_config_override(&m, "+exp.one_more=1") != 0, "past the limit");
  CHECK_MSG("at most 32 user keys");
}

/* run.tags: lists on the command line, normalised text, errors. */
static void test_tags(void) {
  loom_config c = fresh();
  CHECK(loom_config_override(&c, "run.tags=[ablation, 'warm up']") == 0 &&
        !strcmp(c.run.tags, "ablation,warm up"), "list: '%s' %s", c.run.tags, loom_errmsg());
  CHECK(loom_config_override(&c, "run.tags=solo") == 0 && !strcmp(c.run.tags, "solo"), "one");
  CHECK(loom_config_override(&c, "run.tags=[]") == 0 && !strcmp(c.run.tags, ""), "empty");
  CHECK(loom_config_override(&c, "run.tags=[a,a]") != 0, "repeated");
  CHECK_MSG("tag 'a' is given twice");
  CHECK(loom_config_override(&c, "run.tags=[a,,b]") != 0, "empty tag");
  CHECK_MSG("tag 2 is empty");
  CHECK(loom_config_override(&c, "run.notes='x, y'") == 0 && !strcmp(c.run.notes, "x, y"),
        "notes");
}

int main(void) {
  test_user_keys();
  test_tags();
  test_set_forms();
  test_delete_forms();
  test_errors();
  return harness_finish("test_config_override");
}

/* `loom config` end to end: show (defaults, file + overrides, output equals the library's
 * to_yaml and loads back), schema, --help, and that errors go to stderr with exit status 1. */
#include <sys/wait.h>

#include "config_test_util.h"
#include "run_loom.h"

#define SCRATCH "config-cli.tmp"

/* Run `loom config ARGS` (ARGS is shell text) capturing stdout and stderr. */
static run_result run_config(const char *args) {
  char *full = loom_sprintf("config %s", args);
  run_result r = loom_run_in(SCRATCH, full);
  free(full);
  return r;
}

static void done(run_result *r) { run_done(r); }

static void test_show_defaults(void) {
  run_result r = run_config("show");
  loom_config c;
  loom_config_defaults(&c);
  char *want = loom_config_to_yaml(&c);
  CHECK(r.status == 0 && !strcmp(r.out, want), "show with no file prints the defaults\n%s%s",
        r.out, r.err);
  free(want);
  done(&r);
}

static void test_show_file_and_overrides(void) {
  char *args = loom_sprintf("show '%s' training.lr=1e-3 '~run.seed' '+run.name=cli test'",
                            fixture("nested.yaml"));
  run_result r = run_config(args);
  free(args);
  loom_config c, back;
  loom_config_defaults(&c);
  loom_config_load(&c, fixture("nested.yaml"));
  loom_config_override(&c, "training.lr=1e-3");
  loom_config_override(&c, "~run.seed");
  loom_config_override(&c, "+run.name=cli test");
  char *want = loom_config_to_yaml(&c);
  CHECK(r.status == 0 && !strcmp(r.out, want), "show file + overrides\n%s%s", r.out, r.err);
  CHECK(strstr(r.out, "  seed: 1337\n") && strstr(r.out, "  name: \"cli test\"\n"),
        "overrides applied in order");
  loom_config_defaults(&back);
  CHECK(loom_config_load(&back, scratch(SCRATCH, "shown.yaml", r.out)) == 0 &&
            memcmp(&back, &c, sizeof c) == 0,
        "printed YAML loads back identically: %s", loom_errmsg());
  free(want);
  done(&r);
}

static void test_schema_and_help(void) {
  run_result r = run_config("schema");
  CHECK(r.status == 0, "schema exit %d: %s", r.status, r.err);
  CHECK(strstr(r.out, "KEY") && strstr(r.out, "DEFAULT") && strstr(r.out, "MEANING"), "header");
  CHECK(strstr(r.out, "training.lr ") && strstr(r.out, "0.0003") && strstr(r.out, "float"),
        "training.lr row");
  CHECK(strstr(r.out, "one of: constant, linear, cosine"), "enum values listed");
  int lines = 0; /* the table ends at the blank line before the footer */
  const char *end = strstr(r.out, "\n\n");
  for (const char *p = r.out; *p && (!end || p <= end); p++) lines += *p == '\n';
  CHECK(lines == (int)loom_config_nkeys + 1, "header + %zu keys, got %d lines", loom_config_nkeys, lines);
  CHECK(end && strstr(end, "+KEY=VALUE adds a user key") && strstr(end, "GROUP=OPTION"),
        "footer on user keys and config groups");
  done(&r);
  r = run_config("--help");
  CHECK(r.status == 0 && strstr(r.out, "usage: loom config show") && strstr(r.out, "~key"),
        "--help\n%s", r.out);
  done(&r);
}

/* `loom config ARGS` must fail with status 1, an empty stdout and all substrings in stderr. */
static void expect_fail(const char *args, const char *s1, const char *s2) {
  run_result r = run_config(args);
  CHECK(r.status == 1, "'%s' exit %d (want 1)", args, r.status);
  CHECK(!*r.out, "'%s' printed to stdout: %s", args, r.out);
  CHECK(strstr(r.err, s1) && (!s2 || strstr(r.err, s2)), "'%s' stderr: %s", args, r.err);
  done(&r);
}

static void test_errors(void) {
  char *a = loom_sprintf("show '%s'", fixture("unknown_key.yaml"));
  expect_fail(a, "unknown_key.yaml:7: unknown key 'training.lrr'", "did you mean 'training.lr'");
  free(a);
  expect_fail("show training.lrr=1", "command-line override 'training.lrr=1'", "training.lr");
  expect_fail("show training.steps=-1", "training.steps = -1", ">= 0"); /* 0: initial weights only */
  expect_fail("show missing.yaml", "'missing.yaml' does not exist", NULL);
  a = loom_sprintf("show '%s' '%s'", fixture("dotted.yaml"), fixture("nested.yaml"));
  expect_fail(a, "is not an override", "only the first argument may be a config file");
  free(a);
  expect_fail("show training.lr=1 stray", "'stray' is not an override", NULL);
  expect_fail("show --bogus", "unknown option '--bogus'", NULL);
  expect_fail("bogus", "unknown subcommand 'bogus'", NULL);
  expect_fail("", "usage: loom config", NULL);
}

int main(void) {
  test_show_defaults();
  test_show_file_and_overrides();
  test_schema_and_help();
  test_errors();
  loom_rm_rf(SCRATCH);
  return harness_finish("test_config_cli");
}

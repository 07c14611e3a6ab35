/* `loom config` end to end: show (defaults, file + overrides, output equals the library's
 * to_yaml but for the preset's values of the model keys, and loads back to the same model),
 * schema, --help, and that errors go to stderr with exit status 1. */
#include <sys/wait.h>

#include "config_test_util.h"
#include "loom/model.h"
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

/* out (what `config show` printed for c) is the library's YAML of c line for line, but for the
 * model keys the preset fills in: their line is "  KEY: VALUE  # from model.preset P". It loads
 * back to c but for those keys, and to the same model spec. */
static void check_shown(const char *out, const loom_config *c, const char *what) {
  char *want = loom_config_to_yaml(c), *note = loom_sprintf("  # from model.preset %s\n",
                                                            c->model.preset);
  const char *a = out, *b = want;
  int differ = 0, noted = 0;
  while (*a && *b) {
    size_t la = strcspn(a, "\n") + 1, lb = strcspn(b, "\n") + 1;
    char *line = loom_strndup(a, la);
    if (la != lb || strncmp(a, b, la)) {
      bool ok = strstr(line, note) && !strncmp(a, b, strcspn(b, ":") + 1);
      differ += !ok;
      noted += ok;
      CHECK(ok, "%s: '%.*s' differs from '%.*s'", what, (int)la - 1, a, (int)lb - 1, b);
    }
    free(line);
    a += la, b += lb;
  }
  CHECK(!*a && !*b && !differ && noted >= 5, "%s: same lines, %d with the preset's values", what,
        noted);
  loom_config back, same = *c;
  loom_config_defaults(&back);
  CHECK(loom_config_load(&back, scratch(SCRATCH, "shown.yaml", out)) == 0, "%s loads back: %s",
        what, loom_errmsg());
  same.model = back.model; /* the preset's values written out */
  CHECK(!memcmp(&back, &same, sizeof same), "%s: loads back to the config but for the model", what);
  loom_model_spec s1, s2;
  CHECK(!loom_model_spec_from_config(&s1, &c->model) &&
            !loom_model_spec_from_config(&s2, &back.model) && !memcmp(&s1, &s2, sizeof s1),
        "%s: the model built from what was printed is the config's", what);
  free(want), free(note);
}

static void test_show_defaults(void) {
  run_result r = run_config("show");
  loom_config c;
  loom_config_defaults(&c);
  CHECK(r.status == 0, "show with no file: exit %d %s", r.status, r.err);
  check_shown(r.out, &c, "show with no file prints the defaults");
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
  CHECK(r.status == 0, "show file + overrides: exit %d %s", r.status, r.err);
  check_shown(r.out, &c, "show file + overrides");
  CHECK(strstr(r.out, "  seed: 1337\n") && strstr(r.out, "  name: \"cli test\"\n"),
        "overrides applied in order");
  (void)back;
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

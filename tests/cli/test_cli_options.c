/* The table-driven CLI option parser (src/cli/options.c): values as "--x V" and "--x=V",
 * flags, a flag's opposite (the last one given wins), aliases, repeatable options through a
 * callback (and its error), greedy values, positional arguments in order, "--", --help, and
 * the errors: unknown option with "did you mean", a missing value, a value given to a flag;
 * the hidden --list-options (in a child process: it exits). The readers beside it, with the
 * same table: subcommand dispatch, the first positional argument, argv without some options. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/options.h"
#include "harness.h"
#include "loom/core.h"

typedef struct {
  char seen[256];
  int n;
} log_ctx;

static int on_tag(const char *v, void *ctx) {
  log_ctx *l = ctx;
  if (!strcmp(v, "bad")) return loom_err("a tag may not be 'bad'");
  if (!strcmp(v, "dup")) return loom_err("--tag must not be 'dup'"); /* names the option */
  snprintf(l->seen + strlen(l->seen), sizeof l->seen - strlen(l->seen), "%s;", v);
  l->n++;
  return 0;
}

typedef struct {
  const char *model, *out;
  bool dry, stop;
  log_ctx tags;
  loom_cli_parser p;
} parsed;

/* The demo table, storing into r. */
#define DEMO_OPTS(r)                                                                       \
  {LOOM_OPT_VALUE("--model", &(r)->model),                                                 \
   {.name = "--output", .alias = "-o", .value = &(r)->out},                                \
   LOOM_OPT_FLAG("--dry-run", &(r)->dry),                                                  \
   {.name = "--tag", .each = on_tag, .greedy = false},                                     \
   {.name = "--tags", .each = on_tag, .greedy = true},                                     \
   LOOM_OPT_FLAG("--stop", &(r)->stop),                                                    \
   LOOM_OPT_OFF("--go-on", &(r)->stop),                                                    \
   {0}}

/* Parse a NULL-terminated argument list (argv[0] is the command) with stderr captured. */
static int parse(parsed *r, char *err, size_t errn, const char **args) {
  memset(r, 0, sizeof *r);
  int argc = 0;
  while (args[argc]) argc++;
  const loom_cli_opt opts[] = DEMO_OPTS(r);
  r->p = (loom_cli_parser){.command = "demo", .opts = opts, .ctx = &r->tags};
  fflush(stderr);
  FILE *tmp = tmpfile();
  int saved = dup(2);
  dup2(fileno(tmp), 2);
  int rc = loom_cli_parse(&r->p, argc, (char **)args, 1);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(tmp);
  size_t n = fread(err, 1, errn - 1, tmp);
  err[n] = 0;
  fclose(tmp);
  return rc;
}

/* A flag and its opposite on one bool: the last one given wins. */
static void test_off(void) {
  parsed r;
  char err[512];
  int rc = parse(&r, err, sizeof err, (const char *[]){"demo", "--stop", "--go-on", NULL});
  CHECK(rc == LOOM_CLI_OK && !r.stop, "--stop --go-on: off (%d)", rc);
  free(r.p.pos);
  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "--go-on", "--stop", NULL});
  CHECK(rc == LOOM_CLI_OK && r.stop, "--go-on --stop: on");
  free(r.p.pos);
  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "--go-on=1", NULL});
  CHECK(rc == LOOM_CLI_BAD && strstr(err, "takes no value"), "the opposite takes no value: %s",
        err);
  free(r.p.pos);
}

/* The first positional argument, options and their values skipped as the parser reads them. */
static void test_first_positional(void) {
  parsed r = {0};
  const loom_cli_opt opts[] = DEMO_OPTS(&r);
  static const struct {
    const char *args[8];
    int want;
  } cases[] = {
      {{"runs", "show", "x"}, 1},
      {{"runs", "--model", "m", "show"}, 3},
      {{"runs", "--model=m", "show"}, 2},
      {{"runs", "--dry-run", "-o", "f", "show"}, 4},
      {{"runs", "--tags", "a", "b", "--stop", "show"}, 5}, /* greedy values are not positional */
      {{"runs", "--unknown", "show"}, 2},                  /* an unknown option: a flag */
      {{"runs", "--model", "m", "--", "--show"}, 4},       /* after "--": the next one */
      {{"runs", "--model", "m"}, -1},
      {{"runs", "--"}, -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int argc = 0;
    while (cases[i].args[argc]) argc++;
    int at = loom_cli_first_positional(opts, argc, (char **)cases[i].args, 1);
    CHECK(at == cases[i].want, "case %zu: first positional at %d, want %d", i, at, cases[i].want);
  }
}

static void joined(char *buf, size_t n, char **args, int count) {
  buf[0] = 0;
  for (int i = 0; i < count; i++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? " " : "", args[i]);
}

/* argv without some options, both forms, their values (greedy ones too), "--" kept whole. */
static void test_without(void) {
  parsed r = {0};
  const loom_cli_opt opts[] = DEMO_OPTS(&r);
  static const char *const drop[] = {"--model", "--tags", "--dry-run", NULL};
  const char *args[] = {"train", "a.yaml", "--model", "m", "x=1", "--model=n", "-o", "f",
                        "--tags", "t1", "t2", "--dry-run", "--stop", "--", "--model", "k", NULL};
  int argc = 0;
  while (args[argc]) argc++;
  char *out[32], text[256];
  int n = loom_cli_without(opts, argc, (char **)args, 1, drop, out);
  joined(text, sizeof text, out, n);
  CHECK(!strcmp(text, "a.yaml x=1 -o f --stop -- --model k"), "without: '%s'", text);
  static const char *const none[] = {NULL};
  n = loom_cli_without(opts, argc, (char **)args, 1, none, out);
  CHECK(n == argc - 1, "nothing dropped: %d of %d", n, argc - 1);
  const char *tail[] = {"eval", "ck", "--model", NULL}; /* a value missing at the end */
  n = loom_cli_without(opts, 3, (char **)tail, 1, drop, out);
  CHECK(n == 1 && !strcmp(out[0], "ck"), "a trailing option without its value: %d", n);
}

/* Subcommand dispatch: the index, help, none, and an unknown name or option (stderr). */
static void test_subcommand(void) {
  static const char *const names[] = {"show", "validate", NULL};
  CHECK(loom_cli_subcommand("demo", 3, (char *[]){"demo", "validate", "f", NULL}, names, NULL) == 1,
        "a subcommand's index");
  CHECK(loom_cli_subcommand("demo", 1, (char *[]){"demo", NULL}, names, NULL) == LOOM_CLI_SUB_NONE,
        "none");
  const char *helps[] = {"-h", "--help", "help"};
  for (int i = 0; i < 3; i++)
    CHECK(loom_cli_subcommand("demo", 2, (char *[]){"demo", (char *)helps[i], NULL}, names,
                              NULL) == LOOM_CLI_SUB_HELP, "%s", helps[i]);
  fflush(stderr);
  FILE *tmp = tmpfile();
  int saved = dup(2);
  dup2(fileno(tmp), 2);
  int a = loom_cli_subcommand("demo", 2, (char *[]){"demo", "shw", NULL}, names, " (extra)");
  int b = loom_cli_subcommand("demo", 2, (char *[]){"demo", "--pp", NULL}, names, NULL);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(tmp);
  char err[512];
  err[fread(err, 1, sizeof err - 1, tmp)] = 0;
  fclose(tmp);
  CHECK(a == LOOM_CLI_SUB_BAD && b == LOOM_CLI_SUB_BAD, "unknown: %d %d", a, b);
  CHECK(strstr(err, "loom demo: unknown subcommand 'shw' (extra); did you mean 'show'?"),
        "an unknown subcommand: %s", err);
  CHECK(strstr(err, "loom demo: unknown option '--pp' (options follow the subcommand"),
        "an option before the subcommand: %s", err);
}

int main(void) {
  parsed r;
  char err[512];
  int rc = parse(&r, err, sizeof err,
                 (const char *[]){"demo", "a.yaml", "--model", "gpt2", "x=1", "--output=o.svg",
                                  "--dry-run", "--tag", "t1", "--tag=t2", "--tags", "t3", "t4",
                                  "--", "--not-an-option", "-", NULL});
  CHECK(rc == LOOM_CLI_OK, "rc %d: %s", rc, err);
  CHECK(r.model && !strcmp(r.model, "gpt2"), "--model V");
  CHECK(r.out && !strcmp(r.out, "o.svg"), "--output=V");
  CHECK(r.dry, "flag");
  CHECK(!strcmp(r.tags.seen, "t1;t2;t3;t4;"), "repeatable and greedy values in order: %s",
        r.tags.seen);
  CHECK(r.p.npos == 4 && !strcmp(r.p.pos[0], "a.yaml") && !strcmp(r.p.pos[1], "x=1") &&
            !strcmp(r.p.pos[2], "--not-an-option") && !strcmp(r.p.pos[3], "-"),
        "positional arguments in order, '--' ends options: %d", r.p.npos);
  CHECK(err[0] == 0, "no message on success: %s", err);
  free(r.p.pos);

  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "-o", "f.png", "--model", "m", "--model", "n", NULL});
  CHECK(rc == LOOM_CLI_OK && !strcmp(r.out, "f.png") && !strcmp(r.model, "n"), "alias; last value wins");
  free(r.p.pos);

  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "x", "--help", "--bogus", NULL});
  CHECK(rc == LOOM_CLI_HELP, "--help before an error: %d", rc);
  free(r.p.pos);
  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "-h", NULL});
  CHECK(rc == LOOM_CLI_HELP, "-h: %d", rc);
  free(r.p.pos);

  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "--modle", "gpt2", NULL});
  CHECK(rc == LOOM_CLI_BAD && strstr(err, "loom demo: unknown option '--modle'; did you mean "
                                          "'--model'? (see loom demo --help)"), "typo: %s", err);
  free(r.p.pos);
  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "--dry-rn=1", NULL});
  CHECK(rc == LOOM_CLI_BAD && strstr(err, "unknown option '--dry-rn'; did you mean '--dry-run'?"),
        "typo with =value: %s", err);
  free(r.p.pos);
  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "--zzzzzzzz", NULL});
  CHECK(rc == LOOM_CLI_BAD && strstr(err, "unknown option '--zzzzzzzz' (see") && !strstr(err, "did you"),
        "nothing near: no suggestion: %s", err);
  free(r.p.pos);
  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "a", "--model", NULL});
  CHECK(rc == LOOM_CLI_BAD && strstr(err, "missing value after '--model'"), "missing value: %s", err);
  free(r.p.pos);
  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "--dry-run=yes", NULL});
  CHECK(rc == LOOM_CLI_BAD && strstr(err, "takes no value"), "flag with a value: %s", err);
  free(r.p.pos);
  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "--tag", "ok", "--tag", "bad", NULL});
  CHECK(rc == LOOM_CLI_BAD && strstr(err, "loom demo: --tag: a tag may not be 'bad'"),
        "callback error: %s", err);
  free(r.p.pos);
  rc = parse(&r, err, sizeof err, (const char *[]){"demo", "--tag", "dup", NULL});
  CHECK(rc == LOOM_CLI_BAD && strstr(err, "loom demo: --tag must not be 'dup' (see") &&
            !strstr(err, "--tag: --tag"),
        "a callback message that names its option: the name once: %s", err);
  free(r.p.pos);

  /* --list-options (anywhere before "--"): the table, "=" after options taking a value, exit 0 */
  int fds[2];
  LOOM_ASSERT(pipe(fds) == 0);
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    parse(&r, err, sizeof err, (const char *[]){"demo", "x", "--list-options", "--bogus", NULL});
    _exit(3); /* not reached when --list-options exits */
  }
  close(fds[1]);
  char listed[256] = {0};
  size_t got = 0;
  ssize_t k;
  while ((k = read(fds[0], listed + got, sizeof listed - 1 - got)) > 0) got += (size_t)k;
  close(fds[0]);
  int st;
  waitpid(child, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "--list-options exits 0 (status %d)", st);
  CHECK(!strcmp(listed, "--model=\n--output=\n-o=\n--dry-run\n--tag=\n--tags=\n--stop\n--go-on\n"),
        "--list-options prints the table: '%s'", listed);
  test_off();
  test_first_positional();
  test_without();
  test_subcommand();
  return harness_finish("test_cli_options");
}

/* The table-driven CLI option parser (src/cli/options.c): values as "--x V" and "--x=V",
 * flags, aliases, repeatable options through a callback (and its error), greedy values,
 * positional arguments in order, "--", --help, and the errors: unknown option with "did
 * you mean", a missing value, a value given to a flag; the hidden --list-options (in a child
 * process: it exits). */
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
  bool dry;
  log_ctx tags;
  loom_cli_parser p;
} parsed;

/* Parse a NULL-terminated argument list (argv[0] is the command) with stderr captured. */
static int parse(parsed *r, char *err, size_t errn, const char **args) {
  memset(r, 0, sizeof *r);
  int argc = 0;
  while (args[argc]) argc++;
  const loom_cli_opt opts[] = {LOOM_OPT_VALUE("--model", &r->model),
                               {.name = "--output", .alias = "-o", .value = &r->out},
                               LOOM_OPT_FLAG("--dry-run", &r->dry),
                               {.name = "--tag", .each = on_tag, .greedy = false},
                               {.name = "--tags", .each = on_tag, .greedy = true},
                               {0}};
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
  CHECK(!strcmp(listed, "--model=\n--output=\n-o=\n--dry-run\n--tag=\n--tags=\n"),
        "--list-options prints the table: '%s'", listed);
  return harness_finish("test_cli_options");
}

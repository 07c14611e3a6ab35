/* Helpers shared by the schedule tests: fixture paths, parsing inline text, checks that an
 * error message holds given substrings, and running the `loom` executable. */
#ifndef LOOM_SCHED_TEST_UTIL_H
#define LOOM_SCHED_TEST_UTIL_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "loom/core.h"
#include "loom/sched.h"

static inline const char *source_dir(void) {
  const char *s = getenv("LOOM_SOURCE_DIR");
  return s && *s ? s : LOOM_SOURCE_DIR;
}

/* Path of tests/sched/fixtures/<name> (static buffer). */
static inline const char *fixture(const char *name) {
  static char buf[4096];
  snprintf(buf, sizeof buf, "%s/tests/sched/fixtures/%s", source_dir(), name);
  return buf;
}

/* True when msg contains every NULL-terminated substring; prints the message otherwise. */
static inline int contains_all(const char *msg, ...) {
  va_list ap;
  va_start(ap, msg);
  int ok = 1;
  for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
    if (!strstr(msg, s)) {
      fprintf(stderr, "  message lacks \"%s\":\n  %s\n", s, msg);
      ok = 0;
    }
  va_end(ap);
  return ok;
}
#define CHECK_MSG(...) CHECK(contains_all(loom_errmsg(), __VA_ARGS__, (const char *)NULL), \
                             "error message: %s", loom_errmsg())

/* Parse text that must be syntactically fine, then validate it: the validation status. */
static inline int parse_and_validate(const char *text) {
  loom_schedule s;
  if (loom_sched_parse(&s, text, "inline.txt")) {
    fprintf(stderr, "  unexpected parse error: %s\n", loom_errmsg());
    return -2;
  }
  int rc = loom_sched_validate(&s);
  loom_sched_free(&s);
  return rc;
}

typedef struct {
  int status;
  char *out, *err;
} run_result;

static inline char *slurp(const char *path) {
  char *text = NULL;
  if (loom_read_file(path, &text, NULL)) return loom_strdup("");
  return text;
}

/* Run `loom ARGS` (shell text) from the build directory, capturing stdout and stderr. */
static inline run_result run_loom(const char *args) {
  const char *bin = getenv("LOOM_BIN");
  loom_mkdir_p("sched-cli.tmp");
  char *cmd = loom_sprintf("'%s' %s >sched-cli.tmp/out.txt 2>sched-cli.tmp/err.txt",
                           bin && *bin ? bin : "./loom", args);
  int st = system(cmd);
  free(cmd);
  run_result r = {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp("sched-cli.tmp/out.txt"),
                  slurp("sched-cli.tmp/err.txt")};
  return r;
}

static inline void run_done(run_result *r) {
  free(r->out);
  free(r->err);
}
#endif

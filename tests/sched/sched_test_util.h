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
#include "run_loom.h"
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

/* Run `loom ARGS` (shell text) from the build directory, capturing stdout and stderr. */
static inline run_result run_loom(const char *args) { return loom_run_in("sched-cli.tmp", args); }
#endif

/* Helpers shared by the config tests: fixture paths, scratch YAML files written into the
 * build directory, and checks that a load/override fails with a message containing given
 * substrings. */
#ifndef LOOM_CONFIG_TEST_UTIL_H
#define LOOM_CONFIG_TEST_UTIL_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loom/config_schema.h"
#include "loom/config.h"
#include "loom/core.h"

static inline const char *source_dir(void) {
  const char *s = getenv("LOOM_SOURCE_DIR");
  return s && *s ? s : LOOM_SOURCE_DIR;
}

/* Path of tests/config/fixtures/<name> (static buffer). */
static inline const char *fixture(const char *name) {
  static char buf[4096];
  snprintf(buf, sizeof buf, "%s/tests/config/fixtures/%s", source_dir(), name);
  return buf;
}

/* Write text to <dir>/<name> in the current (build) directory; returns the path. */
static inline const char *scratch(const char *dir, const char *name, const char *text) {
  static char buf[4096];
  loom_mkdir_p(dir);
  snprintf(buf, sizeof buf, "%s/%s", dir, name);
  if (loom_write_file_atomic(buf, text, strlen(text))) {
    fprintf(stderr, "cannot write %s: %s\n", buf, loom_errmsg());
    exit(2);
  }
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
#endif

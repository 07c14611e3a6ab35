/* Error messages (thread-local), panics for broken invariants, and stderr logging. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"

static _Thread_local char err_buf[4096];

int loom_err(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_buf, sizeof err_buf, fmt, ap);
  va_end(ap);
  return LOOM_ERR;
}

int loom_err_prefix(const char *fmt, ...) {
  char old[sizeof err_buf];
  memcpy(old, err_buf, sizeof old);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err_buf, sizeof err_buf, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n < sizeof err_buf) {
    size_t room = sizeof err_buf - (size_t)n;
    size_t len = strnlen(old, room - 1);
    memcpy(err_buf + n, old, len);
    err_buf[(size_t)n + len] = 0;
  }
  return LOOM_ERR;
}

const char *loom_errmsg(void) { return err_buf[0] ? err_buf : "unknown error"; }
void loom_err_clear(void) { err_buf[0] = 0; }

void loom_panic(const char *file, int line, const char *what) {
  fprintf(stderr, "loom: internal error at %s:%d: %s\n", file, line, what);
  abort();
}

void loom_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

/* Running the `loom` executable from a C test: the one "run loom and capture" helper of the
 * C tests ($LOOM_BIN, else ./loom; stdout and stderr captured through files in a scratch
 * directory; the exit status, -1 when it did not exit normally). */
#ifndef LOOM_TEST_RUN_LOOM_H
#define LOOM_TEST_RUN_LOOM_H
#include <stdlib.h>
#include <sys/wait.h>

#include "loom/core.h"

typedef struct {
  int status;     /* exit status, -1 when killed or not started */
  char *out, *err; /* stdout and stderr (malloc'd, "" when empty) */
} run_result;

static inline const char *loom_bin(void) {
  const char *b = getenv("LOOM_BIN");
  return b && *b ? b : "./loom";
}

/* The whole file as a string ("" when it cannot be read). */
static inline char *slurp(const char *path) {
  char *text = NULL;
  if (loom_read_file(path, &text, NULL)) return loom_strdup("");
  return text;
}

/* Run `loom ARGS` (ARGS is shell text) capturing its output in dir/out.txt, dir/err.txt. */
static inline run_result loom_run_in(const char *dir, const char *args) {
  loom_mkdir_p(dir);
  char *o = loom_sprintf("%s/out.txt", dir), *e = loom_sprintf("%s/err.txt", dir);
  char *cmd = loom_sprintf("'%s' %s >'%s' 2>'%s'", loom_bin(), args, o, e);
  int st = system(cmd);
  run_result r = {st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(o), slurp(e)};
  free(cmd);
  free(o);
  free(e);
  return r;
}

static inline void run_done(run_result *r) {
  free(r->out);
  free(r->err);
}
#endif

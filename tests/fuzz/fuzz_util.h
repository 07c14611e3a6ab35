/* Shared by the fuzz harnesses (tests/fuzz/fuzz_*.c): the input as a file on disk for the
 * parsers that take a path, and FINDING reports for broken invariants that no sanitizer sees.
 * A harness is one LLVMFuzzerTestOneInput; it is linked either with libFuzzer (make fuzz,
 * clang) or with replay_main.c (every build: the regression inputs and the seed corpus run
 * as a CTest test). */
#ifndef LOOM_FUZZ_UTIL_H
#define LOOM_FUZZ_UTIL_H
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_tmp_dir[64];

/* At exit: the per-process input directory and the files in it. */
static inline void fuzz_tmp_remove(void) {
  DIR *d = opendir(fuzz_tmp_dir);
  if (d) {
    char p[384];
    for (struct dirent *e; (e = readdir(d));)
      if (e->d_name[0] != '.') {
        snprintf(p, sizeof p, "%s/%s", fuzz_tmp_dir, e->d_name);
        unlink(p);
      }
    closedir(d);
  }
  rmdir(fuzz_tmp_dir);
}

/* Path of a file holding data[0..size) (one file per process and suffix, rewritten on each
 * call; the directory is removed at exit). */
static inline const char *fuzz_input_file(const uint8_t *data, size_t size, const char *suffix) {
  static char path[128];
  if (!fuzz_tmp_dir[0]) {
    snprintf(fuzz_tmp_dir, sizeof fuzz_tmp_dir, "/tmp/loom-fuzz.XXXXXX");
    if (!mkdtemp(fuzz_tmp_dir)) abort();
    atexit(fuzz_tmp_remove);
  }
  snprintf(path, sizeof path, "%s/input%s", fuzz_tmp_dir, suffix ? suffix : "");
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) abort();
  return path;
}

/* Copy of the input with a terminating NUL (parsers of text). Caller frees. */
static inline char *fuzz_input_string(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) abort();
  memcpy(s, data, size);
  s[size] = 0;
  return s;
}

/* A documented invariant does not hold: say which, then abort so both libFuzzer and the
 * replay driver report the input. */
#define FUZZ_FINDING(...)                            \
  do {                                               \
    fprintf(stderr, "FINDING: " __VA_ARGS__);        \
    fprintf(stderr, "\n");                           \
    abort();                                         \
  } while (0)

#endif

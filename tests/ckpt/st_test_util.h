/* Helpers shared by the safetensors C tests: a scratch directory under the build dir, raw
 * file writers for hand-made (corrupt) files, and running the `loom` binary (LOOM_BIN). */
#ifndef LOOM_TEST_ST_UTIL_H
#define LOOM_TEST_ST_UTIL_H
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "loom/core.h"
#include "run_loom.h"

/* mkdtemp under the current directory (CTest runs tests in the build directory). */
static inline char *st_scratch_dir(const char *prefix) {
  char *tmpl = loom_sprintf("%s_XXXXXX", prefix);
  if (!mkdtemp(tmpl)) {
    perror("mkdtemp");
    exit(2);
  }
  return tmpl;
}

static inline void st_write_bytes(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
    perror(path);
    exit(2);
  }
}

/* u64 header length (strlen(header)), the header, then data_len bytes 0,1,2,... */
static inline void st_write_raw(const char *path, const char *header, size_t data_len) {
  size_t n = strlen(header), total = 8 + n + data_len;
  unsigned char *buf = malloc(total);
  for (int b = 0; b < 8; b++) buf[b] = (unsigned char)((uint64_t)n >> (8 * b));
  memcpy(buf + 8, header, n);
  for (size_t i = 0; i < data_len; i++) buf[8 + n + i] = (unsigned char)i;
  st_write_bytes(path, buf, total);
  free(buf);
}

/* Number of entries in dir whose name contains needle. */
static inline int st_count_entries(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, needle)) n++;
  closedir(d);
  return n;
}

/* Run `$LOOM_BIN args` with stdout/stderr captured into malloc'd strings; returns the exit
 * code (or -1 when LOOM_BIN is unset or the process did not exit normally). */
static inline int st_run_loom(const char *scratch, const char *args, char **out, char **err) {
  *out = *err = NULL;
  if (!getenv("LOOM_BIN")) return -1;
  run_result r = loom_run_in(scratch, args); /* tests/run_loom.h */
  *out = r.out;
  *err = r.err;
  return r.status;
}
#endif

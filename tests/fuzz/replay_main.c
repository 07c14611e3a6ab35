/* Replays fuzz inputs through one harness without libFuzzer: every file named on the command
 * line, and every file in every directory named, in sorted order. This is how the regression
 * inputs (tests/fuzz/regress/<target>/) and the seed corpus (tests/fuzz/corpus/<target>/) run
 * in the ordinary CTest suite, under whatever sanitizers the build has. A crash or a FINDING
 * aborts with the input's name printed first. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open '%s'\n", path);
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) abort();
  fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
  /* a private copy of exactly n bytes, so reads past the end are caught by ASan */
  uint8_t *exact = malloc(n ? n : 1);
  if (!exact) abort();
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  long count = 0, failed = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) continue; /* a target may have no regressions yet */
    if (!S_ISDIR(st.st_mode)) {
      if (replay_file(argv[i])) failed++;
      count++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) continue;
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      names = realloc(names, (n + 1) * sizeof *names);
      size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
      names[n] = malloc(len);
      snprintf(names[n++], len, "%s/%s", argv[i], e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, by_name);
    for (size_t k = 0; k < n; k++) {
      if (replay_file(names[k])) failed++;
      count++;
      free(names[k]);
    }
    free(names);
  }
  printf("%ld passed, %ld failed\n", count - failed, failed);
  if (count == 0) {
    fprintf(stderr, "replay: no inputs found\n");
    return 1;
  }
  return failed ? 1 : 0;
}

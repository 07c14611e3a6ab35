/* Checked allocation and small string helpers. The only raw malloc/calloc/realloc/
 * aligned_alloc calls of loom are here: every allocation comes through loom_alloc_at and its
 * siblings (the loom_alloc, loom_malloc, ... macros of core.h pass __FILE__/__LINE__), and
 * running out of memory is one message that says what was being allocated, how much, where,
 * on which rank and what to do, then exit status LOOM_EXIT_OOM -- never abort(). */
#include <dirent.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loom/core.h"

static loom_oom_handler oom_handler = NULL;
static int oom_rank = 0, oom_world = 1;

void loom_set_oom_handler(loom_oom_handler fn) { oom_handler = fn; }

void loom_set_rank(int rank, int world) {
  oom_rank = rank;
  oom_world = world;
}

/* Temporary directories removed on the way out (fixed slots: no allocation when memory is
 * short). */
static char cleanup_dirs[LOOM_OOM_CLEANUP_MAX][4096];

void loom_oom_cleanup_add(const char *dir) {
  for (int i = 0; i < LOOM_OOM_CLEANUP_MAX; i++)
    if (!cleanup_dirs[i][0] && strlen(dir) < sizeof cleanup_dirs[i]) {
      memcpy(cleanup_dirs[i], dir, strlen(dir) + 1);
      return;
    }
}

void loom_oom_cleanup_remove(const char *dir) {
  for (int i = 0; i < LOOM_OOM_CLEANUP_MAX; i++)
    if (!strcmp(cleanup_dirs[i], dir)) cleanup_dirs[i][0] = 0;
}

/* rm -r of path (a buffer of cap bytes holding len of them) without loom's allocation helpers,
 * which would come back here: what cannot be opened stays. */
static void remove_tree(char *path, size_t len, size_t cap) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (d) {
      struct dirent *e;
      while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || len + n + 2 > cap) continue;
        path[len] = '/';
        memcpy(path + len + 1, e->d_name, n + 1);
        remove_tree(path, len + 1 + n, cap);
        path[len] = 0;
      }
      closedir(d);
    }
    rmdir(path);
  } else {
    unlink(path);
  }
}

/* "37.25 GiB" */
static void human_bytes(char *buf, size_t cap, double bytes) {
  static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, u++;
  if (u == 0) snprintf(buf, cap, "%.0f bytes", bytes);
  else snprintf(buf, cap, "%.*f %s", bytes < 10 ? 2 : 1, bytes, unit[u]);
}

/* The call site relative to the source tree ("src/model/decoder_memory.c"), not the absolute
 * path the build passed to the compiler. */
static const char *short_path(const char *file) {
  const char *roots[] = {"/src/", "/tests/", "/include/"};
  for (size_t i = 0; i < sizeof roots / sizeof *roots; i++) {
    const char *at = strstr(file, roots[i]);
    if (at) return at + 1;
  }
  return file;
}

void loom_oom(size_t n, size_t size, const char *what, const char *file, int line) {
  /* the first thread to run out reports and exits; others that follow wait for the exit */
  static atomic_flag reporting = ATOMIC_FLAG_INIT;
  if (atomic_flag_test_and_set(&reporting))
    for (;;) nanosleep(&(struct timespec){.tv_sec = 1}, NULL);
  /* no allocation from here on: the message is built in a static buffer, written at once */
  static char msg[2048];
  char human[32], amount[96], where[320], rank[48];
  if (size != 0 && n > SIZE_MAX / size)
    snprintf(amount, sizeof amount, "%zu x %zu bytes (more than 16 EiB: the size overflows)", n,
             size);
  else {
    human_bytes(human, sizeof human, (double)(n * size));
    snprintf(amount, sizeof amount, "%s (%zu bytes)", human, n * size);
  }
  if (what) snprintf(where, sizeof where, "for %s (%s:%d)", what, short_path(file), line);
  else snprintf(where, sizeof where, "at %s:%d", short_path(file), line);
  rank[0] = 0;
  if (oom_world > 1) snprintf(rank, sizeof rank, " on rank %d of %d", oom_rank, oom_world);
  int len = snprintf(msg, sizeof msg,
                     "loom: out of memory: cannot allocate %s %s%s.\n"
                     "loom: to fit, free memory on this machine or ask for less: lower "
                     "training.micro_batch_size (or training.seq_len), set "
                     "training.activation_checkpointing=true, spread the model or the sequence "
                     "over more ranks (parallel.tp, parallel.pp, parallel.cp) or shard it with "
                     "ZeRO (parallel.zero), or use a smaller model.\n",
                     amount, where, rank);
  if (len < 0 || len >= (int)sizeof msg) len = (int)strlen(msg);
  fflush(stdout);
  fflush(stderr);
  if (write(STDERR_FILENO, msg, (size_t)len) < 0) { /* nothing left to report it to */ }
  fflush(NULL); /* complete lines of open logs reach their files */
  for (int i = 0; i < LOOM_OOM_CLEANUP_MAX; i++)
    if (cleanup_dirs[i][0])
      remove_tree(cleanup_dirs[i], strlen(cleanup_dirs[i]), sizeof cleanup_dirs[i]);
  if (oom_handler) oom_handler(LOOM_EXIT_OOM);
  /* _Exit, not exit: other threads may still run, and exit's library destructors with them */
  _Exit(LOOM_EXIT_OOM);
}

void *loom_alloc_at(size_t bytes, const char *what, const char *file, int line) {
  if (bytes > SIZE_MAX - 63) loom_oom(1, bytes, what, file, line);
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded == 0) rounded = 64;
  void *p = aligned_alloc(64, rounded);
  if (!p) loom_oom(1, bytes, what, file, line);
  memset(p, 0, rounded);
  return p;
}

void *loom_malloc_at(size_t bytes, const char *what, const char *file, int line) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) loom_oom(1, bytes, what, file, line);
  return p;
}

void *loom_calloc_at(size_t n, size_t size, const char *what, const char *file, int line) {
  if (size != 0 && n > SIZE_MAX / size) loom_oom(n, size, what, file, line);
  void *p = n && size ? calloc(n, size) : calloc(1, 1);
  if (!p) loom_oom(n, size, what, file, line);
  return p;
}

void *loom_realloc_at(void *p, size_t n, size_t size, const char *what, const char *file,
                      int line) {
  if (size != 0 && n > SIZE_MAX / size) loom_oom(n, size, what, file, line);
  size_t bytes = n * size;
  void *q = realloc(p, bytes ? bytes : 1); /* realloc(p, 0) would free p and return NULL */
  if (!q) loom_oom(n, size, what, file, line);
  return q;
}

void loom_free(void *p) { free(p); }

char *loom_strdup_at(const char *s, const char *file, int line) {
  size_t n = strlen(s) + 1;
  char *d = loom_malloc_at(n, NULL, file, line);
  memcpy(d, s, n);
  return d;
}

char *loom_strndup_at(const char *s, size_t n, const char *file, int line) {
  size_t len = strnlen(s, n);
  char *d = loom_malloc_at(len + 1, NULL, file, line);
  memcpy(d, s, len);
  d[len] = 0;
  return d;
}

char *loom_sprintf_at(const char *file, int line, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0; /* an encoding error: an empty string */
  char *s = loom_malloc_at((size_t)n + 1, NULL, file, line);
  s[0] = 0;
  vsnprintf(s, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

uint64_t loom_hash64(const void *data, size_t len, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ull ^ seed;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

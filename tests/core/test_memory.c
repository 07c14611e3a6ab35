/* Checked allocation (src/core/memory.c): running out of memory is one message (what, bytes,
 * file:line, rank, what to do) and exit status LOOM_EXIT_OOM, never a signal; the hook
 * registered by MPI start-up runs after the message; temporary directories on the cleanup list
 * are removed; n * size overflow is caught before the C library sees it; zero sizes give
 * usable blocks. Each failure runs in a forked child whose stderr goes to a file. */
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "loom/core.h"

static char err_path[256];

/* Run fn in a child with stderr to err_path; its exit status (or 128 + signal), text in buf. */
static int in_child(void (*fn)(void), char *buf, size_t cap) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(err_path, "w", stderr)) _exit(99);
    fn();
    _exit(0); /* fn returned: no failure reported */
  }
  int status = 0;
  waitpid(pid, &status, 0);
  buf[0] = 0;
  FILE *f = fopen(err_path, "r");
  if (f) {
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
  }
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

static volatile size_t huge = SIZE_MAX / 2 + 1; /* volatile: no compile-time overflow warning */

static void calloc_overflow(void) { free(loom_calloc(huge, 4)); }
static void realloc_overflow(void) { free(loom_realloc(NULL, huge, 2)); }
static void malloc_too_big(void) { free(loom_malloc_for(huge, "a test buffer")); }

static void oom_hook(int status) {
  fprintf(stderr, "hook called with %d\n", status);
  fflush(stderr);
  _exit(7);
}
static void with_rank_and_hook(void) {
  loom_set_rank(2, 4);
  loom_set_oom_handler(oom_hook);
  free(loom_calloc(huge, 8));
}

static char tmp_dir[256], kept_dir[256];
static void with_cleanup(void) {
  loom_oom_cleanup_add(kept_dir);
  loom_oom_cleanup_remove(kept_dir); /* renamed into place: no longer a temporary */
  loom_oom_cleanup_add(tmp_dir);
  free(loom_realloc(NULL, huge, 4));
}

int main(void) {
  snprintf(err_path, sizeof err_path, "/tmp/loom-test-memory.%ld.err", (long)getpid());
  char out[8192];

  int rc = in_child(calloc_overflow, out, sizeof out);
  CHECK(rc == LOOM_EXIT_OOM, "calloc overflow: exit status %d, want %d", rc, LOOM_EXIT_OOM);
  CHECK(strstr(out, "loom: out of memory: cannot allocate"), "calloc overflow: %s", out);
  CHECK(strstr(out, "the size overflows"), "calloc overflow named: %s", out);
  CHECK(strstr(out, "tests/core/test_memory.c:"), "calloc overflow: call site: %s", out);
  CHECK(!strstr(out, "/work/") && !strstr(out, "//"), "relative call site: %s", out);
  CHECK(strstr(out, "training.micro_batch_size") && strstr(out, "activation_checkpointing") &&
            strstr(out, "parallel.zero") && strstr(out, "smaller model"),
        "advice: %s", out);
  CHECK(!strstr(out, "on rank"), "one process names no rank: %s", out);
  CHECK(!strstr(out, "internal error"), "not an internal error: %s", out);

  rc = in_child(realloc_overflow, out, sizeof out);
  CHECK(rc == LOOM_EXIT_OOM && strstr(out, "the size overflows"), "realloc overflow: %d %s",
        rc, out);

#if !defined(__SANITIZE_ADDRESS__) /* ASan's allocator reports sizes this large itself */
  rc = in_child(malloc_too_big, out, sizeof out);
  CHECK(rc == LOOM_EXIT_OOM, "malloc refused: exit status %d", rc);
  CHECK(strstr(out, "cannot allocate 8.00 EiB (9223372036854775808 bytes) for a test buffer "
                    "(tests/core/test_memory.c:"),
        "what, bytes and call site: %s", out);
#endif

  rc = in_child(with_rank_and_hook, out, sizeof out);
  CHECK(rc == 7, "the hook ends the process: exit status %d", rc);
  CHECK(strstr(out, "on rank 2 of 4"), "rank named: %s", out);
  const char *msg = strstr(out, "out of memory"), *hook = strstr(out, "hook called with 1");
  CHECK(msg && hook && msg < hook, "hook called with the exit status after the message: %s",
        out);

  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/loom-test-memory.%ld.tmp", (long)getpid());
  snprintf(kept_dir, sizeof kept_dir, "/tmp/loom-test-memory.%ld.kept", (long)getpid());
  char *sub = loom_sprintf("%s/a/b", tmp_dir), *file = loom_sprintf("%s/a/b/x.bin", tmp_dir);
  CHECK(loom_mkdir_p(sub) == 0 && loom_mkdir_p(kept_dir) == 0, "test directories");
  CHECK(loom_write_file_atomic(file, "x", 1) == 0, "test file");
  rc = in_child(with_cleanup, out, sizeof out);
  CHECK(rc == LOOM_EXIT_OOM, "cleanup child: exit status %d", rc);
  CHECK(!loom_path_exists(tmp_dir), "the temporary directory is removed on the way out");
  CHECK(loom_is_dir(kept_dir), "a directory taken off the list stays");
  loom_rm_rf(tmp_dir);
  loom_rm_rf(kept_dir);
  free(sub);
  free(file);

  /* zero sizes and the ordinary paths */
  void *a = loom_malloc(0), *b = loom_calloc(0, 8), *c = loom_realloc(NULL, 0, 8);
  CHECK(a && b && c, "zero sizes give blocks");
  c = loom_realloc(c, 16, sizeof(int));
  ((int *)c)[15] = 1;
  free(a);
  free(b);
  free(c);
  unsigned char *al = loom_alloc_for(100, "aligned");
  int zero = 1;
  for (int i = 0; i < 100; i++) zero &= al[i] == 0;
  CHECK(((uintptr_t)al & 63) == 0 && zero, "loom_alloc: 64-byte aligned and zeroed");
  loom_free(al);
  char *s = loom_strndup("abcdef", 3), *t = loom_sprintf("%s-%d", s, 42);
  CHECK(!strcmp(s, "abc") && !strcmp(t, "abc-42"), "strndup/sprintf: '%s' '%s'", s, t);
  free(s);
  free(t);
  unlink(err_path);
  return harness_finish("test_memory");
}

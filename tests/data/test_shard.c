/* Token shards: write/read round trips (uint16 and uint32, empty, streaming = one-shot),
 * the exact byte layout of the header, atomic writes (no file after a failed write), and
 * every corrupt case the reader must refuse with a message naming the file. */
#include <unistd.h>

#include "data_test_util.h"
#include "loom/shard.h"

#define DIR "data-shard.tmp"

static void test_round_trip(uint32_t vocab, uint32_t want_dtype, uint64_t n) {
  char *p = scratch_path(DIR, "rt.bin");
  int32_t *tok = malloc((n + 1) * sizeof *tok);
  for (uint64_t i = 0; i < n; i++) tok[i] = (int32_t)((i * 7919u) % vocab);
  CHECK(loom_shard_write(p, tok, n, vocab) == 0, "write: %s", loom_errmsg());
  loom_shard_header h;
  int32_t *back = NULL;
  CHECK(loom_shard_read(p, &h, &back) == 0, "read: %s", loom_errmsg());
  CHECK(h.version == 1 && h.dtype == want_dtype && h.count == n && h.vocab_size == vocab,
        "header v%u dtype %u count %llu vocab %u", h.version, h.dtype,
        (unsigned long long)h.count, h.vocab_size);
  CHECK(back && (n == 0 || !memcmp(back, tok, n * sizeof *tok)), "tokens round trip");
  char *raw;
  size_t len;
  loom_read_file(p, &raw, &len);
  CHECK(len == 64 + n * (want_dtype == 1 ? 2 : 4), "file size %zu", len);
  CHECK(!memcmp(raw, "LOOMTOK1", 8) && raw[8] == 1 && raw[12] == (char)want_dtype, "layout");
  int zero = 1;
  for (int i = 28; i < 64; i++) zero &= raw[i] == 0;
  CHECK(zero, "reserved bytes are zero");
  free(raw);
  free(back);
  free(tok);
  free(p);
}

static void test_streaming(void) {
  char *a = scratch_path(DIR, "a.bin"), *b = scratch_path(DIR, "b.bin");
  int32_t tok[1000];
  for (int i = 0; i < 1000; i++) tok[i] = i % 300;
  loom_shard_writer *w;
  CHECK(loom_shard_writer_open(&w, a, 300) == 0, "open");
  for (int i = 0; i < 1000; i += 333) loom_shard_writer_append(w, tok + i, i + 333 > 1000 ? 1000 - i : 333);
  CHECK(loom_shard_writer_count(w) == 1000, "count");
  CHECK(loom_shard_writer_close(w) == 0, "close");
  loom_shard_write(b, tok, 1000, 300);
  char *ra, *rb;
  size_t la, lb;
  loom_read_file(a, &ra, &la);
  loom_read_file(b, &rb, &lb);
  CHECK(la == lb && !memcmp(ra, rb, la), "streaming writer == one-shot writer");
  free(ra), free(rb), free(a), free(b);
}

static int dir_has_tmp(void) {
  char *cmd = loom_sprintf("ls %s | grep -q tmp", DIR);
  int found = system(cmd) == 0;
  free(cmd);
  return found;
}

static void test_atomic(void) {
  char *p = scratch_path(DIR, "bad.bin");
  int32_t tok[3] = {1, 2, 500};
  CHECK(loom_shard_write(p, tok, 3, 300) == -1 &&
            contains(loom_errmsg(), "token 500 at position 2 is outside the vocabulary [0, 300)"),
        "out-of-vocab token: %s", loom_errmsg());
  CHECK(!loom_path_exists(p) && !dir_has_tmp(), "no file left after a failed write");
  loom_shard_writer *w;
  loom_shard_writer_open(&w, p, 300);
  loom_shard_writer_append(w, tok, 2);
  loom_shard_writer_abort(w);
  CHECK(!loom_path_exists(p) && !dir_has_tmp(), "no file left after abort");
  CHECK(loom_shard_write(DIR "/no/such/dir.bin", tok, 2, 300) == -1 &&
            contains(loom_errmsg(), "no/such/dir.bin"), "unwritable path");
  free(p);
}

/* Write raw bytes as a shard file and expect open to fail mentioning `want` and the path. */
static void expect_corrupt(const char *name, const void *bytes, size_t len, const char *want) {
  char *p = scratch_path(DIR, name);
  if (bytes) loom_write_file_atomic(p, bytes, len);
  loom_shard s;
  loom_shard_header h;
  int rc = loom_shard_open(&s, p);
  CHECK(rc == -1 && contains(loom_errmsg(), want) && contains(loom_errmsg(), p),
        "%s: rc %d message '%s'", name, rc, loom_errmsg());
  CHECK(loom_shard_read_header(p, &h) == -1, "%s: read_header refuses too", name);
  free(p);
}

static void make_header(uint8_t *b, uint32_t version, uint32_t dtype, uint64_t count, uint32_t vocab) {
  memset(b, 0, 64);
  memcpy(b, "LOOMTOK1", 8);
  for (int i = 0; i < 4; i++) b[8 + i] = (uint8_t)(version >> (8 * i));
  for (int i = 0; i < 4; i++) b[12 + i] = (uint8_t)(dtype >> (8 * i));
  for (int i = 0; i < 8; i++) b[16 + i] = (uint8_t)(count >> (8 * i));
  for (int i = 0; i < 4; i++) b[24 + i] = (uint8_t)(vocab >> (8 * i));
}

static void test_corrupt(void) {
  uint8_t b[64 + 400] = {0};
  expect_corrupt("missing.bin", NULL, 0, "cannot open the token shard");
  expect_corrupt("short.bin", "LOOMTOK1", 8, "too short to be a token shard (8 bytes");
  make_header(b, 1, 1, 100, 512);
  memcpy(b, "NOTATOK1", 8);
  expect_corrupt("magic.bin", b, 64 + 200, "not a loom token shard");
  make_header(b, 3, 1, 100, 512); /* versions 1 and 2 are known */
  expect_corrupt("version.bin", b, 64 + 200, "shard version 3 is unknown");
  make_header(b, 1, 3, 100, 512);
  expect_corrupt("dtype.bin", b, 64 + 200, "unknown dtype 3");
  make_header(b, 1, 1, 100, 512);
  expect_corrupt("trunc.bin", b, 64 + 198, "truncated: header says 100 tokens, file holds 99");
  make_header(b, 1, 2, 100, 512);
  expect_corrupt("trunc32.bin", b, 64 + 200, "truncated: header says 100 tokens, file holds 50");
  make_header(b, 1, 1, 100, 512);
  expect_corrupt("trailing.bin", b, 64 + 203, "3 unexpected bytes after the 100 tokens");
  make_header(b, 1, 1, 100, 70000);
  expect_corrupt("vocab16.bin", b, 64 + 200, "vocab_size 70000 does not fit dtype 1");
  make_header(b, 1, 1, 0xFFFFFFFFFFFFFFull, 512);
  expect_corrupt("huge.bin", b, 64 + 200, "truncated");
  char *d = scratch_path(DIR, "adir.bin");
  loom_mkdir_p(d);
  expect_corrupt("adir.bin", NULL, 0, "not a regular file");
  free(d);
}

int main(void) {
  loom_rm_rf(DIR);
  test_round_trip(512, 1, 10000);
  test_round_trip(65536, 1, 1000);
  test_round_trip(65537, 2, 1000);
  test_round_trip(151646, 2, 5000);
  test_round_trip(300, 1, 0);
  test_streaming();
  test_atomic();
  test_corrupt();
  loom_rm_rf(DIR);
  return harness_finish("test_shard");
}

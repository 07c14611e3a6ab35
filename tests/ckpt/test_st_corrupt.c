/* safetensors reader validation: every malformed file (too short, bad header length, bad
 * JSON, missing/invalid entry fields, unknown dtype, out-of-range, overlapping, gapped or
 * size-mismatched offsets, trailing bytes, truncation) is rejected with a message naming the
 * file, the tensor and the problem; `loom ckpt inspect` exits 1 on such files. */
#include <stdint.h>

#include "ckpt/st_test_util.h"
#include "harness.h"
#include "loom/safetensors.h"

static const char *scratch;

/* Open path, expect failure whose message contains the path and every non-NULL needle. */
static void expect_reject(const char *path, const char *what, const char *n1, const char *n2) {
  loom_st_file *f = (loom_st_file *)1;
  loom_err_clear();
  int rc = loom_st_open(&f, path);
  const char *msg = loom_errmsg();
  CHECK(rc == -1 && f == NULL, "%s: accepted", what);
  CHECK(strstr(msg, path) != NULL, "%s: message lacks the path: %s", what, msg);
  CHECK(!n1 || strstr(msg, n1), "%s: message lacks '%s': %s", what, n1, msg);
  CHECK(!n2 || strstr(msg, n2), "%s: message lacks '%s': %s", what, n2, msg);
  if (rc == 0) loom_st_close(f);
}

/* A file with header hdr and data_len data bytes must be rejected (see expect_reject). */
static void reject_raw(const char *what, const char *hdr, size_t data_len, const char *n1,
                       const char *n2) {
  char *path = loom_sprintf("%s/bad.safetensors", scratch);
  st_write_raw(path, hdr, data_len);
  expect_reject(path, what, n1, n2);
  free(path);
}

#define W_F32_2 "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static void test_framing(void) {
  char *path = loom_sprintf("%s/short.safetensors", scratch);
  st_write_bytes(path, "\x10\0\0\0\0", 5);
  expect_reject(path, "5-byte file", "shorter than the 8-byte", "truncated");
  st_write_bytes(path, "", 0);
  expect_reject(path, "empty file", "shorter than the 8-byte", NULL);
  unsigned char big[28] = {0xe8, 0x03}; /* header length 1000, 20 bytes follow */
  st_write_bytes(path, big, sizeof big);
  expect_reject(path, "header length > file", "header length 1000", "truncated");
  unsigned char huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x80};
  st_write_bytes(path, huge, sizeof huge);
  expect_reject(path, "header length 2^63", "header length", NULL);
  free(path);
  char *missing = loom_sprintf("%s/absent.safetensors", scratch);
  expect_reject(missing, "missing file", "cannot open", NULL);
  free(missing);
  expect_reject(scratch, "directory", "not a regular file", NULL);
  unsigned char nul[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, ' ', ' ', ' ', ' ', ' '};
  st_write_bytes(path = loom_sprintf("%s/nul.safetensors", scratch), nul, sizeof nul);
  expect_reject(path, "NUL byte in header", "not valid JSON", NULL);
  free(path);
}

static void test_header_json(void) {
  reject_raw("not JSON", "{not json", 0, "not valid JSON", NULL);
  reject_raw("JSON array", "[1, 2]  ", 0, "does not start with '{'", NULL);
  reject_raw("empty header", "", 0, "does not start with '{'", NULL);
  reject_raw("truncated JSON", "{\"w\": {\"dtype\": \"F32\"", 0, "not valid JSON", NULL);
  reject_raw("invalid UTF-8", "{\"w\xff\": " W_F32_2 "}", 8, "not valid JSON", NULL);
  reject_raw("duplicate name", "{\"w\":" W_F32_2 ",\"w\":" W_F32_2 "}", 8, "duplicate", "w");
  reject_raw("entry not object", "{\"w\": 3}", 0, "tensor 'w'", "not a JSON object");
  reject_raw("metadata not object", "{\"__metadata__\": [1]}", 0, "__metadata__", NULL);
  reject_raw("metadata value not string", "{\"__metadata__\": {\"step\": 10}}", 0,
             "metadata 'step'", "not a string");
}

static void test_entries(void) {
  reject_raw("missing dtype", "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'w'",
             "no \"dtype\"");
  reject_raw("missing shape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "'w'",
             "no \"shape\"");
  reject_raw("missing offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "'w'",
             "no \"data_offsets\"");
  reject_raw("unknown dtype",
             "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
             "tensor 'w'", "unsupported dtype 'F8_E4M3'");
  reject_raw("dtype not string", "{\"w\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
             "'w'", "\"dtype\" is not a string");
  reject_raw("shape not array", "{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8,
             "'w'", "\"shape\" is not an array");
  reject_raw("negative dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
             "'w'", "shape[0]");
  reject_raw("fractional dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}",
             8, "'w'", "shape[0]");
  reject_raw("9 dims",
             "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
             "'w'", "9 dimensions");
  reject_raw("overflowing shape",
             "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
             8, "'w'", "overflows");
  reject_raw("offsets arity", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
             "'w'", "[begin, end]");
  reject_raw("negative offset", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}",
             8, "'w'", "[begin, end]");
  reject_raw("end before begin", "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}",
             8, "'w'", "end before");
  reject_raw("size mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
             "'w'", "need 12");
}

static void test_layout(void) {
  reject_raw("out of range", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
             "'w'", "past the end");
  reject_raw("overlap",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             12, "'b'", "overlap tensor 'a'");
  reject_raw("same offsets",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             8, "overlap", NULL);
  reject_raw("gap between",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
             20, "'b'", "gap of 4");
  reject_raw("gap at start", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             12, "'a'", "gap of 4");
  reject_raw("trailing bytes", "{\"a\":" W_F32_2 "}", 12, "4 trailing bytes", "'a'");
  reject_raw("data but no tensors", "{}", 3, "3 trailing bytes", NULL);
}

/* A good file written by loom, then truncated by 4 bytes, must be rejected. */
static char *write_truncated(void) {
  float x[6] = {1, 2, 3, 4, 5, 6};
  int64_t s[2] = {2, 3};
  loom_st_writer *w = loom_st_writer_create();
  loom_st_writer_add(w, "first", LOOM_DT_F32, 1, s, x);
  loom_st_writer_add(w, "last", LOOM_DT_F32, 2, s, x);
  char *path = loom_sprintf("%s/trunc.safetensors", scratch);
  CHECK(loom_st_writer_write(w, path) == 0, "write: %s", loom_errmsg());
  loom_st_writer_free(w);
  loom_st_file *f;
  CHECK(loom_st_open(&f, path) == 0, "good file opens: %s", loom_errmsg());
  loom_st_close(f);
  char *raw;
  size_t len;
  loom_read_file(path, &raw, &len);
  st_write_bytes(path, raw, len - 4);
  free(raw);
  return path;
}

static void test_truncated(void) {
  char *path = write_truncated();
  expect_reject(path, "truncated loom file", "'last'", "past the end");
  free(path);
}

static void test_cli(void) {
  char *out, *err, *args;
  char *bad = loom_sprintf("%s/cli_bad.safetensors", scratch);
  st_write_raw(bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12);
  args = loom_sprintf("ckpt inspect '%s'", bad);
  int rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 1, "inspect corrupt file exit %d", rc);
  CHECK(strstr(err, "cli_bad.safetensors") && strstr(err, "gap"), "stderr: %s", err);
  free(args), free(out), free(err);

  float x[4] = {3, 4, 0, 0};
  int64_t s[1] = {4};
  loom_st_writer *w = loom_st_writer_create();
  loom_st_writer_add(w, "embed.weight", LOOM_DT_F32, 1, s, x);
  loom_st_writer_set_metadata(w, "step", "7");
  char *dir = loom_sprintf("%s/ckpt_dir", scratch),
       *model = loom_sprintf("%s/model.safetensors", dir);
  loom_mkdir_p(dir);
  CHECK(loom_st_writer_write(w, model) == 0, "write: %s", loom_errmsg());
  loom_st_writer_free(w);
  args = loom_sprintf("ckpt inspect '%s'", model);
  rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 0 && strstr(out, "embed.weight") && strstr(out, "step: 7") && strstr(out, " 5 "),
        "inspect good file rc %d out: %s err: %s", rc, out, err);
  free(args), free(out), free(err);

  char *state = loom_sprintf("%s/trainer_state.json", dir);
  st_write_bytes(state, "{\"step\": 7, \"loss\": 1.5}", 24);
  args = loom_sprintf("ckpt inspect --json '%s'", dir);
  rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 0 && strstr(out, "\"trainer_state\"") && strstr(out, "\"l2\": 5.0") &&
            strstr(out, "\"param_count\": 4"),
        "inspect --json dir rc %d out: %s err: %s", rc, out, err);
  free(args), free(out), free(err);

  st_write_bytes(state, "{\"step\": ", 9);
  args = loom_sprintf("ckpt inspect '%s'", dir);
  rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 1 && strstr(err, "trainer_state.json"), "bad trainer_state rc %d err: %s", rc, err);
  free(args), free(out), free(err);

  const char *bad_args[] = {"ckpt",
                            "ckpt inspect",
                            "ckpt inspect --frobnicate x",
                            "ckpt inspect a b",
                            "ckpt nosuch",
                            "ckpt inspect /nonexistent/x"};
  for (size_t i = 0; i < sizeof bad_args / sizeof bad_args[0]; i++) {
    rc = st_run_loom(scratch, bad_args[i], &out, &err);
    CHECK(rc == 1 && strlen(err) > 0, "'loom %s' exit %d, stderr '%s'", bad_args[i], rc, err);
    free(out), free(err);
  }
  rc = st_run_loom(scratch, "ckpt inspect --help", &out, &err);
  CHECK(rc == 0 && strstr(out, "usage: loom ckpt inspect"), "inspect --help: %s", out);
  free(out), free(err);
  rc = st_run_loom(scratch, "ckpt --help", &out, &err);
  CHECK(rc == 0 && strstr(out, "inspect"), "ckpt --help: %s", out);
  free(out), free(err);
  char *empty = loom_sprintf("%s/empty_dir", scratch);
  loom_mkdir_p(empty);
  args = loom_sprintf("ckpt inspect '%s'", empty);
  rc = st_run_loom(scratch, args, &out, &err);
  CHECK(rc == 1 && strstr(err, "no *.safetensors") && strstr(err, "empty_dir"),
        "dir without files rc %d err: %s", rc, err);
  free(args), free(out), free(err), free(empty);
  free(bad), free(dir), free(model), free(state);
}

int main(void) {
  char *dir = st_scratch_dir("st_corrupt");
  scratch = dir;
  test_framing();
  test_header_json();
  test_entries();
  test_layout();
  test_truncated();
  if (getenv("LOOM_BIN"))
    test_cli();
  else
    printf("LOOM_BIN not set: skipping the CLI checks\n");
  if (!harness_failed) loom_rm_rf(dir);
  free(dir);
  return harness_finish("test_st_corrupt");
}

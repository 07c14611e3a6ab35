/* safetensors round trip: every dtype, scalars, empty tensors, metadata and many tensors are
 * written, reopened and compared byte for byte; the on-disk layout (padded header, contiguous
 * data) is checked; BF16/F16/F64 -> float conversion; writer argument errors; and the atomic
 * writer leaving nothing behind when the target directory is missing or the path is a dir. */
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>

#include "ckpt/st_test_util.h"
#include "harness.h"
#include "loom/safetensors.h"

typedef struct {
  const char *name;
  loom_dtype dt;
  int ndim;
  int64_t shape[3];
  unsigned char *bytes;
  size_t nbytes;
} spec;

static size_t numel_of(const spec *s) {
  size_t n = 1;
  for (int d = 0; d < s->ndim; d++) n *= (size_t)s->shape[d];
  return n;
}

/* Pseudo-random bytes for a tensor (BOOL gets 0/1, floats keep their bit patterns). */
static void fill(spec *s, uint64_t seed) {
  s->nbytes = numel_of(s) * loom_dtype_size(s->dt);
  s->bytes = malloc(s->nbytes + 1);
  loom_rng r;
  loom_rng_seed(&r, seed);
  for (size_t i = 0; i < s->nbytes; i++)
    s->bytes[i] = (unsigned char)(s->dt == LOOM_DT_BOOL ? loom_rng_u64(&r) & 1 : loom_rng_u64(&r));
}

static void check_same(const loom_st_file *f, const spec *s) {
  int i = loom_st_find(f, s->name);
  CHECK(i >= 0, "tensor %s missing", s->name);
  if (i < 0) return;
  CHECK(!strcmp(loom_st_name(f, i), s->name), "name of %s", s->name);
  CHECK(loom_st_dtype(f, i) == s->dt, "dtype of %s", s->name);
  CHECK(loom_st_ndim(f, i) == s->ndim, "ndim of %s", s->name);
  for (int d = 0; d < s->ndim && d < loom_st_ndim(f, i); d++)
    CHECK(loom_st_shape(f, i)[d] == s->shape[d], "shape[%d] of %s", d, s->name);
  CHECK(loom_st_numel(f, i) == (int64_t)numel_of(s), "numel of %s", s->name);
  CHECK(loom_st_nbytes(f, i) == s->nbytes, "nbytes of %s", s->name);
  CHECK(s->nbytes == 0 || !memcmp(loom_st_data(f, i), s->bytes, s->nbytes), "bytes of %s", s->name);
}

static void test_all_dtypes(const char *dir) {
#define S(n, t, nd, ...)                                     \
  {                                                          \
    .name = n, .dt = t, .ndim = nd, .shape = { __VA_ARGS__ } \
  }
  spec specs[] = {
      S("f32", LOOM_DT_F32, 2, 3, 5),      S("f64", LOOM_DT_F64, 1, 7),
      S("bf16", LOOM_DT_BF16, 3, 2, 3, 4), S("f16", LOOM_DT_F16, 1, 9),
      S("i32", LOOM_DT_I32, 2, 4, 1),      S("i64", LOOM_DT_I64, 1, 3),
      S("u8", LOOM_DT_U8, 1, 13),          S("i8", LOOM_DT_I8, 2, 1, 11),
      S("u16", LOOM_DT_U16, 1, 5),         S("bool", LOOM_DT_BOOL, 1, 6),
      S("scalar", LOOM_DT_F64, 0, 0),      S("empty", LOOM_DT_F32, 1, 0),
      S("empty2d", LOOM_DT_I64, 2, 3, 0),  S("after_empty", LOOM_DT_U8, 1, 3),
  };
#undef S
  int n = (int)(sizeof specs / sizeof specs[0]);
  loom_st_writer *w = loom_st_writer_create();
  for (int i = 0; i < n; i++) {
    fill(&specs[i], 100 + (uint64_t)i);
    CHECK(loom_st_writer_add(w, specs[i].name, specs[i].dt, specs[i].ndim, specs[i].shape,
                             specs[i].nbytes ? specs[i].bytes : NULL) == 0,
          "add %s: %s", specs[i].name, loom_errmsg());
  }
  CHECK(loom_st_writer_set_metadata(w, "format", "pt") == 0, "metadata");
  CHECK(loom_st_writer_set_metadata(w, "note", "first") == 0, "metadata");
  CHECK(loom_st_writer_set_metadata(w, "note", "h\xc3\xa9llo \"quoted\"\n") == 0, "replace");
  char *path = loom_sprintf("%s/all.safetensors", dir);
  CHECK(loom_st_writer_write(w, path) == 0, "write: %s", loom_errmsg());
  loom_st_writer_free(w);

  loom_st_file *f = NULL;
  CHECK(loom_st_open(&f, path) == 0, "open: %s", loom_errmsg());
  if (f) {
    CHECK(loom_st_count(f) == n, "count %d", loom_st_count(f));
    for (int i = 0; i < n; i++) check_same(f, &specs[i]);
    /* non-empty tensors come back in the order they were added */
    CHECK(!strcmp(loom_st_name(f, 0), "f32") && !strcmp(loom_st_name(f, n - 1), "after_empty"),
          "order: %s ... %s", loom_st_name(f, 0), loom_st_name(f, n - 1));
    CHECK(loom_st_find(f, "absent") == -1, "find absent");
    CHECK(loom_st_metadata_count(f) == 2, "metadata count %d", loom_st_metadata_count(f));
    CHECK(loom_st_metadata(f, "format") && !strcmp(loom_st_metadata(f, "format"), "pt"), "fmt");
    CHECK(loom_st_metadata(f, "note") &&
              !strcmp(loom_st_metadata(f, "note"), "h\xc3\xa9llo \"quoted\"\n"),
          "note");
    CHECK(loom_st_metadata(f, "absent") == NULL, "absent metadata");
    loom_st_close(f);
  }
  /* layout: header length a multiple of 8, then exactly the tensor bytes */
  char *raw;
  size_t len;
  CHECK(loom_read_file(path, &raw, &len) == 0, "read raw");
  uint64_t hl = 0;
  for (int b = 7; b >= 0; b--) hl = (hl << 8) | (unsigned char)raw[b];
  size_t data = 0;
  for (int i = 0; i < n; i++) data += specs[i].nbytes;
  CHECK(hl % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hl);
  CHECK(len == 8 + hl + data, "file size %zu != 8 + %llu + %zu", len, (unsigned long long)hl, data);
  CHECK(raw[8] == '{' && raw[8 + hl - 1] != 0, "header text");
  CHECK(!memcmp(raw + 8 + hl, specs[0].bytes, specs[0].nbytes), "first tensor right after hdr");
  free(raw);
  for (int i = 0; i < n; i++) free(specs[i].bytes);
  free(path);
}

static void test_many(const char *dir) {
  enum { N = 600 };
  static float vals[N][3];
  loom_st_writer *w = loom_st_writer_create();
  char name[64];
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < 3; j++) vals[i][j] = (float)(i * 3 + j) * 0.5f;
    snprintf(name, sizeof name, "layers.%d.w", i);
    int64_t shape[1] = {3};
    CHECK(loom_st_writer_add(w, name, LOOM_DT_F32, 1, shape, vals[i]) == 0, "add %d", i);
  }
  char *path = loom_sprintf("%s/many.safetensors", dir);
  CHECK(loom_st_writer_write(w, path) == 0, "write many: %s", loom_errmsg());
  loom_st_writer_free(w);
  loom_st_file *f = NULL;
  CHECK(loom_st_open(&f, path) == 0, "open many: %s", loom_errmsg());
  if (f) {
    CHECK(loom_st_count(f) == N, "count");
    int bad = 0;
    for (int i = 0; i < N; i++) {
      snprintf(name, sizeof name, "layers.%d.w", i);
      float got[3];
      bad += loom_st_find(f, name) != i;
      bad += loom_st_read_f32(f, name, got, 3) != 0 || memcmp(got, vals[i], sizeof got) != 0;
    }
    CHECK(bad == 0, "%d mismatches among many tensors", bad);
    loom_st_close(f);
  }
  free(path);
}

static void test_conversions(const char *dir) {
  const float src[6] = {1.0f, 1.00390625f, -3.14159265f, 1e-40f, INFINITY, 65504.0f};
  const uint16_t f16[8] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x7c00, 0x8000, 0x3555};
  const double f64[3] = {1.0 / 3.0, -1e30, 0.1};
  int64_t s6[1] = {6}, s8[1] = {8}, s3[1] = {3}, s1[1] = {1};
  const int32_t i32 = 7;
  loom_st_writer *w = loom_st_writer_create();
  CHECK(loom_st_writer_add_bf16_from_f32(w, "bf16", 1, s6, src) == 0, "bf16 add");
  CHECK(loom_st_writer_add(w, "f16", LOOM_DT_F16, 1, s8, f16) == 0, "f16 add");
  CHECK(loom_st_writer_add(w, "f64", LOOM_DT_F64, 1, s3, f64) == 0, "f64 add");
  CHECK(loom_st_writer_add(w, "i32", LOOM_DT_I32, 1, s1, &i32) == 0, "i32 add");
  char *path = loom_sprintf("%s/conv.safetensors", dir);
  CHECK(loom_st_writer_write(w, path) == 0, "write conv: %s", loom_errmsg());
  loom_st_writer_free(w);
  loom_st_file *f = NULL;
  CHECK(loom_st_open(&f, path) == 0, "open conv: %s", loom_errmsg());
  if (!f) return;
  float got[8];
  CHECK(loom_st_read_f32(f, "bf16", got, 6) == 0, "read bf16: %s", loom_errmsg());
  for (int i = 0; i < 6; i++)
    CHECK(memcmp(&got[i], &(float){loom_bf16_round(src[i])}, 4) == 0, "bf16[%d] %g", i, got[i]);
  CHECK(got[1] == 1.0f, "bf16 tie rounds to even: %g", got[1]);
  CHECK(loom_st_read_f32(f, "f16", got, 8) == 0, "read f16: %s", loom_errmsg());
  const float want16[8] = {1.0f,       -2.0f,    65504.0f, 0x1p-24f,
                           0x3ffp-24f, INFINITY, -0.0f,    0.333251953125f};
  for (int i = 0; i < 8; i++)
    CHECK(got[i] == want16[i], "f16[%d] got %g want %g", i, got[i], want16[i]);
  CHECK(signbit(got[6]), "f16 -0 keeps its sign");
  CHECK(isnan(loom_f16_to_f32(0x7e00)), "f16 NaN");
  CHECK(loom_st_read_f32(f, "f64", got, 3) == 0, "read f64");
  for (int i = 0; i < 3; i++) CHECK(got[i] == (float)f64[i], "f64[%d]", i);
  CHECK(loom_st_read_f32(f, "f64", got, 2) == -1 && strstr(loom_errmsg(), "3 elements") &&
            strstr(loom_errmsg(), "conv.safetensors"),
        "size mismatch message: %s", loom_errmsg());
  CHECK(loom_st_read_f32(f, "i32", got, 1) == -1 && strstr(loom_errmsg(), "integer dtype"),
        "integer dtype message: %s", loom_errmsg());
  CHECK(loom_st_read_f32(f, "nope", got, 1) == -1 && strstr(loom_errmsg(), "'nope'"),
        "missing tensor message: %s", loom_errmsg());
  loom_st_tensor_stats(f, loom_st_find(f, "f64"), &(loom_st_stats){0});
  loom_st_stats st;
  loom_st_tensor_stats(f, loom_st_find(f, "f16"), &st);
  CHECK(st.numel == 8 && st.nonfinite == 1 && st.max == INFINITY && st.min == -2.0, "f16 stats");
  loom_st_close(f);
  free(path);
}

static void test_writer_errors(void) {
  float x[2] = {1, 2};
  int64_t s2[1] = {2}, neg[1] = {-1}, many[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  loom_st_writer *w = loom_st_writer_create();
  CHECK(loom_st_writer_add(w, "a", LOOM_DT_F32, 1, s2, x) == 0, "first add");
  CHECK(loom_st_writer_add(w, "a", LOOM_DT_F32, 1, s2, x) == -1 &&
            strstr(loom_errmsg(), "'a' was added twice"),
        "duplicate: %s", loom_errmsg());
  CHECK(loom_st_writer_add(w, "", LOOM_DT_F32, 1, s2, x) == -1, "empty name");
  CHECK(loom_st_writer_add(w, "__metadata__", LOOM_DT_F32, 1, s2, x) == -1, "reserved name");
  CHECK(
      loom_st_writer_add(w, "n", LOOM_DT_F32, 1, neg, x) == -1 && strstr(loom_errmsg(), "negative"),
      "negative dim: %s", loom_errmsg());
  CHECK(loom_st_writer_add(w, "m", LOOM_DT_F32, 9, many, x) == -1, "9 dims");
  CHECK(loom_st_writer_add(w, "d", LOOM_DT_F32, 1, s2, NULL) == -1, "NULL data");
  CHECK(loom_st_writer_add(w, "t", LOOM_DT_COUNT, 1, s2, x) == -1, "bad dtype");
  CHECK(loom_st_writer_add(w, "bad\xff", LOOM_DT_F32, 1, s2, x) == 0, "odd name accepted here");
  CHECK(loom_st_writer_set_metadata(w, "k", "\xff") == -1, "invalid UTF-8 metadata");
  CHECK(
      loom_st_writer_write(w, "never_written.safetensors") == -1 && strstr(loom_errmsg(), "UTF-8"),
      "invalid UTF-8 name rejected at write: %s", loom_errmsg());
  CHECK(!loom_path_exists("never_written.safetensors"), "nothing written");
  loom_st_writer_free(w);
}

static void test_atomic_failures(const char *dir) {
  float x[2] = {1, 2};
  int64_t s2[1] = {2};
  loom_st_writer *w = loom_st_writer_create();
  loom_st_writer_add(w, "a", LOOM_DT_F32, 1, s2, x);
  char *missing = loom_sprintf("%s/no_such_dir/m.safetensors", dir);
  CHECK(loom_st_writer_write(w, missing) == -1 && strstr(loom_errmsg(), "m.safetensors"),
        "missing dir: %s", loom_errmsg());
  CHECK(!loom_path_exists(missing), "no file in missing dir");
  CHECK(st_count_entries(dir, "no_such_dir") == 0, "directory not created");
  /* target is an existing directory: the temp file is written, rename fails, temp removed */
  char *isdir = loom_sprintf("%s/taken.safetensors", dir);
  CHECK(mkdir(isdir, 0755) == 0, "mkdir");
  CHECK(loom_st_writer_write(w, isdir) == -1 && strstr(loom_errmsg(), "taken.safetensors"),
        "dir target: %s", loom_errmsg());
  CHECK(st_count_entries(dir, ".tmp.") == 0, "temp file left behind");
  CHECK(loom_is_dir(isdir), "directory untouched");
  loom_st_writer_free(w);
  free(missing);
  free(isdir);
}

int main(void) {
  char *dir = st_scratch_dir("st_roundtrip");
  test_all_dtypes(dir);
  test_many(dir);
  test_conversions(dir);
  test_writer_errors();
  test_atomic_failures(dir);
  CHECK(st_count_entries(dir, ".tmp.") == 0, "no temp files anywhere");
  if (!harness_failed) loom_rm_rf(dir);
  free(dir);
  return harness_finish("test_st_roundtrip");
}

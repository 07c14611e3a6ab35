/* Helper executable for tests/ckpt/st_check.py (not a test itself):
 *   st_helper write OUT              write the fixture file (values follow fixed formulas that
 *                                    st_check.py recomputes independently)
 *   st_helper copy IN OUT            read IN with loom's reader, rewrite it with loom's writer
 *   st_helper read-f32 IN NAME OUT   loom_st_read_f32 of tensor NAME, raw float32 into OUT
 * Exit 0 on success, 1 with the loom error message on stderr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/safetensors.h"

/* Source values for the BF16 rounding check: ties, subnormals, overflow, signed zero. */
static const float bf16_src[] = {1.0f,     1.00390625f, 1.01171875f, -1.00390625f,  3.14159265f,
                                 -2.5e-3f, 1e-40f,      -1e-45f,     3.3895314e38f, 3.4028235e38f,
                                 0.0f,     -0.0f,       INFINITY,    -INFINITY,     65504.0f,
                                 1.0e-8f,  123456.789f, -7.0e20f,    0.1f,          NAN};

static int write_fixture(const char *out) {
  static float f32[12], scalar = 42.5f;
  static double f64[5];
  static const int32_t i32[6] = {INT32_MIN, -1, 0, 1, INT32_MAX, 123456};
  static const int64_t i64[6] = {INT64_MIN, -1, 0, 1, INT64_MAX, (1ll << 53) + 1};
  static const uint16_t f16[11] = {0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x0001,
                                   0x03ff, 0x0400, 0x7c00, 0xfc00, 0x3555};
  static const int8_t i8[5] = {-128, -1, 0, 1, 127};
  static const uint16_t u16[5] = {0, 1, 65535, 32768, 12345};
  static const uint8_t boolean[5] = {1, 0, 0, 1, 1};
  static uint8_t u8[10];
  for (int k = 0; k < 12; k++) f32[k] = (float)(k - 5) * 0.375f;
  for (int k = 0; k < 5; k++) f64[k] = (double)(k + 1) / 3.0;
  for (int k = 0; k < 10; k++) u8[k] = (uint8_t)(k * 37 % 256);
  int64_t s34[2] = {3, 4}, s5[1] = {5}, s23[2] = {2, 3}, s6[1] = {6}, s11[1] = {11}, s10[1] = {10},
          s0[1] = {0}, s30[2] = {3, 0}, sbf[1] = {(int64_t)(sizeof bf16_src / sizeof bf16_src[0])};
  loom_st_writer *w = loom_st_writer_create();
  int rc = loom_st_writer_add(w, "f32", LOOM_DT_F32, 2, s34, f32) ||
           loom_st_writer_add(w, "f64", LOOM_DT_F64, 1, s5, f64) ||
           loom_st_writer_add(w, "bf16_src", LOOM_DT_F32, 1, sbf, bf16_src) ||
           loom_st_writer_add_bf16_from_f32(w, "bf16", 1, sbf, bf16_src) ||
           loom_st_writer_add(w, "f16", LOOM_DT_F16, 1, s11, f16) ||
           loom_st_writer_add(w, "i32", LOOM_DT_I32, 2, s23, i32) ||
           loom_st_writer_add(w, "i64", LOOM_DT_I64, 1, s6, i64) ||
           loom_st_writer_add(w, "u8", LOOM_DT_U8, 1, s10, u8) ||
           loom_st_writer_add(w, "i8", LOOM_DT_I8, 1, s5, i8) ||
           loom_st_writer_add(w, "u16", LOOM_DT_U16, 1, s5, u16) ||
           loom_st_writer_add(w, "bool", LOOM_DT_BOOL, 1, s5, boolean) ||
           loom_st_writer_add(w, "scalar", LOOM_DT_F32, 0, NULL, &scalar) ||
           loom_st_writer_add(w, "empty", LOOM_DT_F32, 1, s0, NULL) ||
           loom_st_writer_add(w, "empty2d", LOOM_DT_I64, 2, s30, NULL) ||
           loom_st_writer_set_metadata(w, "format", "pt") ||
           loom_st_writer_set_metadata(w, "loom.note", "h\xc3\xa9llo \xe2\x9c\x93") ||
           loom_st_writer_write(w, out);
  loom_st_writer_free(w);
  return rc ? LOOM_ERR : 0;
}

static int copy_file(const char *in, const char *out) {
  loom_st_file *f;
  if (loom_st_open(&f, in)) return LOOM_ERR;
  loom_st_writer *w = loom_st_writer_create();
  int rc = 0;
  for (int i = 0; i < loom_st_count(f) && rc == 0; i++)
    rc = loom_st_writer_add(w, loom_st_name(f, i), loom_st_dtype(f, i), loom_st_ndim(f, i),
                            loom_st_shape(f, i), loom_st_data(f, i));
  for (int i = 0; i < loom_st_metadata_count(f) && rc == 0; i++)
    rc = loom_st_writer_set_metadata(w, loom_st_metadata_key(f, i), loom_st_metadata_value(f, i));
  if (rc == 0) rc = loom_st_writer_write(w, out);
  loom_st_writer_free(w);
  loom_st_close(f);
  return rc;
}

static int read_f32(const char *in, const char *name, const char *out) {
  loom_st_file *f;
  if (loom_st_open(&f, in)) return LOOM_ERR;
  int i = loom_st_find(f, name), rc = LOOM_ERR;
  if (i < 0) {
    loom_err("'%s': no tensor '%s'", in, name);
  } else {
    size_t n = (size_t)loom_st_numel(f, i);
    float *dst = malloc(n * sizeof *dst + 1);
    rc = loom_st_read_f32(f, name, dst, n);
    if (rc == 0) rc = loom_write_file_atomic(out, dst, n * sizeof *dst);
    free(dst);
  }
  loom_st_close(f);
  return rc;
}

int main(int argc, char **argv) {
  int rc;
  if (argc == 3 && !strcmp(argv[1], "write"))
    rc = write_fixture(argv[2]);
  else if (argc == 4 && !strcmp(argv[1], "copy"))
    rc = copy_file(argv[2], argv[3]);
  else if (argc == 5 && !strcmp(argv[1], "read-f32"))
    rc = read_f32(argv[2], argv[3], argv[4]);
  else {
    fprintf(stderr, "usage: st_helper write OUT | copy IN OUT | read-f32 IN NAME OUT\n");
    return 2;
  }
  if (rc) fprintf(stderr, "st_helper: %s\n", loom_errmsg());
  return rc ? 1 : 0;
}

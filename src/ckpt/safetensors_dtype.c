/* safetensors element types: sizes, names, parsing, and element-to-double conversion
 * (including IEEE half and bfloat16) shared by the reader, the writer and the statistics. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "loom/core.h"
#include "loom/safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "loom's safetensors code assumes a little-endian host"
#endif

static const struct {
  const char *name;
  size_t size;
} dtypes[LOOM_DT_COUNT] = {
    [LOOM_DT_F32] = {"F32", 4},   [LOOM_DT_F64] = {"F64", 8}, [LOOM_DT_BF16] = {"BF16", 2},
    [LOOM_DT_F16] = {"F16", 2},   [LOOM_DT_I32] = {"I32", 4}, [LOOM_DT_I64] = {"I64", 8},
    [LOOM_DT_U8] = {"U8", 1},     [LOOM_DT_I8] = {"I8", 1},   [LOOM_DT_U16] = {"U16", 2},
    [LOOM_DT_BOOL] = {"BOOL", 1},
};

static int dtype_valid(loom_dtype dt) { return (unsigned)dt < (unsigned)LOOM_DT_COUNT; }

size_t loom_dtype_size(loom_dtype dt) { return dtype_valid(dt) ? dtypes[dt].size : 0; }

const char *loom_dtype_name(loom_dtype dt) { return dtype_valid(dt) ? dtypes[dt].name : "?"; }

int loom_dtype_from_name(const char *name, loom_dtype *out) {
  for (int i = 0; i < LOOM_DT_COUNT; i++)
    if (!strcmp(name, dtypes[i].name)) {
      *out = (loom_dtype)i;
      return 0;
    }
  return loom_err(
      "unsupported dtype '%s' (loom reads F32, F64, BF16, F16, I32, I64, U8, I8, "
      "U16, BOOL); convert the tensor to one of these before loading it",
      name);
}

float loom_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    float mag = (float)man * 0x1p-24f; /* zero or subnormal: exact in float */
    return sign ? -mag : mag;
  }
  if (exp == 31)
    u = sign | 0x7f800000u | (man << 13); /* inf or NaN (payload kept) */
  else
    u = sign | ((exp + 112u) << 23) | (man << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Load element i of width n bytes into dst (any source alignment). */
static void load(void *dst, const void *data, size_t i, size_t n) {
  memcpy(dst, (const unsigned char *)data + i * n, n);
}

double loom_dtype_get_f64(loom_dtype dt, const void *data, size_t i) {
  union {
    float f;
    double d;
    uint16_t u16;
    int32_t i32;
    int64_t i64;
    uint8_t u8;
    int8_t i8;
  } v;
  load(&v, data, i, loom_dtype_size(dt));
  switch (dt) {
    case LOOM_DT_F32:
      return v.f;
    case LOOM_DT_F64:
      return v.d;
    case LOOM_DT_BF16:
      return loom_bf16_to_f32(v.u16);
    case LOOM_DT_F16:
      return loom_f16_to_f32(v.u16);
    case LOOM_DT_I32:
      return v.i32;
    case LOOM_DT_I64:
      return (double)v.i64;
    case LOOM_DT_U8:
      return v.u8;
    case LOOM_DT_I8:
      return v.i8;
    case LOOM_DT_U16:
      return v.u16;
    case LOOM_DT_BOOL:
      return v.u8 ? 1.0 : 0.0;
    default:
      LOOM_ASSERT(!"invalid dtype");
  }
  return NAN;
}

/* Per-tensor statistics for inspection: element count, L2 norm (sum of squares in double,
 * accumulated per block to limit rounding growth), min/max over non-NaN values, and the
 * number of non-finite elements. */
#include <math.h>

#include "loom/safetensors.h"

#define BLOCK 4096

void loom_st_tensor_stats(const loom_st_file *f, int i, loom_st_stats *out) {
  loom_dtype dt = loom_st_dtype(f, i);
  const void *data = loom_st_data(f, i);
  size_t n = (size_t)loom_st_numel(f, i);
  double total = 0.0, lo = INFINITY, hi = -INFINITY;
  int64_t nonfinite = 0;
  for (size_t start = 0; start < n; start += BLOCK) {
    size_t end = n - start < BLOCK ? n : start + BLOCK;
    double block = 0.0;
    for (size_t j = start; j < end; j++) {
      double x = loom_dtype_get_f64(dt, data, j);
      block += x * x;
      if (!isfinite(x)) nonfinite++;
      if (isnan(x)) continue;
      if (x < lo) lo = x;
      if (x > hi) hi = x;
    }
    total += block;
  }
  out->numel = (int64_t)n;
  out->l2 = sqrt(total);
  out->min = lo <= hi ? lo : NAN;
  out->max = lo <= hi ? hi : NAN;
  out->nonfinite = nonfinite;
}

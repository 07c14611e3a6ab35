/* A flash backward work item's dK and dV accumulators (flash_tile.h, ftile_kv_acc): private rows
 * when they fit, the output rows themselves otherwise. Only where the sums live changes, not
 * the order they are formed in, so both give the same bits. */
#include <string.h>

#include "kernels/flash_tile.h"
#include "loom/core.h"
#include "loom/kernels.h"

/* a thread's private rows at most: 2 T D floats (T = 32768 at D = 128) */
#define KV_PRIVATE_MAX ((size_t)64 << 20)

static int in_place_forced; /* tests: loom_kernels_force_kv_in_place */

void loom_kernels_force_kv_in_place(int on) { in_place_forced = on; }

float *ftile_kv_acc_alloc(int T, int D) {
  size_t bytes = (size_t)2 * T * D * sizeof(float);
  return bytes <= KV_PRIVATE_MAX && !in_place_forced ? loom_alloc(bytes) : NULL;
}

void ftile_kv_acc_begin(ftile_kv_acc *acc, float *priv, float *dk, float *dv, size_t off,
                        long ldk, int T, int D) {
  const size_t row = (size_t)D * sizeof(float);
  if (priv) {
    acc->dk = dk ? priv : NULL;
    acc->dv = dv ? priv + (size_t)T * D : NULL;
    acc->ld = D;
    memset(priv, 0, 2 * (size_t)T * row);
    return;
  }
  acc->dk = dk ? dk + off : NULL;
  acc->dv = dv ? dv + off : NULL;
  acc->ld = ldk;
  for (int s = 0; s < T; s++) { /* the item's output rows start at zero */
    if (dk) memset(dk + off + (size_t)s * ldk, 0, row);
    if (dv) memset(dv + off + (size_t)s * ldk, 0, row);
  }
}

void ftile_kv_acc_end(const ftile_kv_acc *acc, float *dk, float *dv, size_t off, long ldk,
                      int T, int D) {
  if (acc->ld == ldk && (!dk || acc->dk == dk + off) && (!dv || acc->dv == dv + off)) return;
  const size_t row = (size_t)D * sizeof(float);
  for (int s = 0; s < T; s++) {
    if (dk) memcpy(dk + off + (size_t)s * ldk, acc->dk + (size_t)s * D, row);
    if (dv) memcpy(dv + off + (size_t)s * ldk, acc->dv + (size_t)s * D, row);
  }
}

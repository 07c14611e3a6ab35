/* The flash backward's work items (flash_tile.h, ftile_bwd_items) and their dK and dV
 * accumulators (ftile_kv_acc): private rows when they fit, the output rows themselves
 * otherwise. Only where the sums live changes, not the order they are formed in, so both give
 * the same bits. */
#include <string.h>

#include "kernels/flash_tile.h"
#include "loom/core.h"
#include "loom/kernels.h"

/* a thread's private rows at most: 2 T D floats (T = 32768 at D = 128) */
#define KV_PRIVATE_MAX ((size_t)64 << 20)

static int in_place_forced; /* tests: loom_kernels_force_kv_in_place */

void loom_kernels_force_kv_in_place(int on) { in_place_forced = on; }

/* a thread's private rows for T keys of D, or NULL when over the bound (loom_free it) */
static float *kv_acc_alloc(int T, int D) {
  size_t bytes = (size_t)2 * T * D * sizeof(float);
  return bytes <= KV_PRIVATE_MAX && !in_place_forced ? loom_alloc(bytes) : NULL;
}

/* Starts item (rows off + s ldk of dk, dv; s < T) at zero, in priv when not NULL. */
static void kv_acc_begin(ftile_kv_acc *acc, float *priv, float *dk, float *dv, size_t off,
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

/* Copies private sums (priv not NULL) to the output rows; in-place sums are there already. */
static void kv_acc_end(const ftile_kv_acc *acc, const float *priv, float *dk, float *dv,
                       size_t off, long ldk, int T, int D) {
  if (!priv) return;
  const size_t row = (size_t)D * sizeof(float);
  for (int s = 0; s < T; s++) {
    if (dk) memcpy(dk + off + (size_t)s * ldk, acc->dk + (size_t)s * D, row);
    if (dv) memcpy(dv + off + (size_t)s * ldk, acc->dv + (size_t)s * D, row);
  }
}

void ftile_bwd_items(int B, int T, int Hkv, int D, float *dk, float *dv, int par,
                     size_t scratch_bytes, ftile_bwd_item_fn fn, void *ctx) {
  const long ldk = (long)Hkv * D;
#pragma omp parallel if (par)
  {
    void *scratch = scratch_bytes ? loom_alloc(scratch_bytes) : NULL;
    float *priv = kv_acc_alloc(T, D);
    ftile_kv_acc acc;
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
      for (int kh = 0; kh < Hkv; kh++) {
        const size_t off = ((size_t)b * T * Hkv + kh) * D;
        kv_acc_begin(&acc, priv, dk, dv, off, ldk, T, D);
        fn(ctx, scratch, b, kh, off, &acc);
        kv_acc_end(&acc, priv, dk, dv, off, ldk, T, D);
      }
    loom_free(priv);
    loom_free(scratch);
  }
}

/* Flash attention backward. delta = rowsum(dout * out) first (parallel over rows, into the
 * caller's work buffer); then one work item per (sequence, kv head), in parallel: for each
 * query head of its group and each query tile, the visible key tiles are visited in order and
 * the probabilities recomputed from lse (nothing of size T x T stored):
 *   P = exp(scale q.k - lse), dP = dout.v, dS = P (dP - delta) scale,
 *   dV_j += P^T dO_i, dK_j += dS^T Q_i, dQ_i += dS K_j.
 * dk/dv rows of a kv head and dq rows of its query heads are written only by the item that
 * owns them, in a fixed order: results do not depend on the thread count. The item sums dK and
 * dV in private rows and copies them out at its end (ftile_kv_acc, flash_tile.h). Writes dq,
 * dk, dv.
 * Shapes: q, dq, out, dout (B,T,Hq,D); k, v, dk, dv (B,T,Hkv,D); lse, work (B,Hq,T). */
#include <math.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "kernels/flash_mask.h"
#include "kernels/flash_tile.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"

typedef struct {
  float *dq;
  const float *dout, *lse, *q, *k, *v, *delta;
  int T, Hq, Hkv, D;
  loom_attn_mask mask;
  int simd;
} bwd_args;

static void query_tile(const bwd_args *a, int b, int h, int kh, int i, const ftile_kv_acc *acc) {
  const int T = a->T, D = a->D, t0 = i * BQ, nq = T - t0 < BQ ? T - t0 : BQ;
  const float scale = (float)(1.0 / sqrt((double)D));
  const long ldq = (long)a->Hq * D, ldk = (long)a->Hkv * D;
  const size_t qoff = (((size_t)b * T + t0) * a->Hq + h) * D;
  float Qt[D * BQ], dOt[D * BQ], dQ[BQ * D], St[BK * BQ], dPt[BK * BQ];
  float lse[BQ], delta[BQ];
  ftile_vis vis;
  ftile_transpose_in(Qt, a->q + qoff, ldq, nq, D);
  ftile_transpose_in(dOt, a->dout + qoff, ldq, nq, D);
  for (int r = 0; r < BQ; r++) {
    size_t row = ((size_t)b * a->Hq + h) * T + t0 + r;
    lse[r] = r < nq ? a->lse[row] : 0.0f;
    delta[r] = r < nq ? a->delta[row] : 0.0f;
  }
  memset(dQ, 0, sizeof dQ);
  int j0 = fmask_lo(a->mask, b, t0, T) / BK, j1 = fmask_hi(a->mask, b, t0 + nq - 1, T) / BK;
  for (int j = j0; j <= j1; j++) {
    int s0 = j * BK, nk = T - s0 < BK ? T - s0 : BK;
    if (!fmask_tile(a->mask, b, T, t0, nq, s0, nk, &vis)) continue;
    const size_t koff = (((size_t)b * T + s0) * a->Hkv + kh) * D, aoff = (size_t)s0 * acc->ld;
    const float *kj = a->k + koff, *vj = a->v + koff;
    ftile_mm(a->simd, St, BQ, kj, ldk, 1, Qt, BQ, nk, BQ, D, 0);   /* St = K_j Q_i^T */
    ftile_mm(a->simd, dPt, BQ, vj, ldk, 1, dOt, BQ, nk, BQ, D, 0); /* dPt = V_j dO_i^T */
    ftile_bwd_p_ds(a->simd, St, dPt, nk, nq, &vis, scale, lse, delta);
    if (acc->dv) /* dV_j (nk,D) += P^T (nk,nq) dO_i (nq,D) */
      ftile_mm(a->simd, acc->dv + aoff, (int)acc->ld, St, BQ, 1, a->dout + qoff, ldq, nk, D, nq, 1);
    if (acc->dk) /* dK_j += dS^T Q_i */
      ftile_mm(a->simd, acc->dk + aoff, (int)acc->ld, dPt, BQ, 1, a->q + qoff, ldq, nk, D, nq, 1);
    /* dQ_i (nq,D) += dS (nq,nk) K_j (nk,D) */
    ftile_mm(a->simd, dQ, D, dPt, 1, BQ, kj, ldk, nq, D, nk, 1);
  }
  if (a->dq)
    for (int r = 0; r < nq; r++)
      memcpy(a->dq + qoff + (size_t)r * ldq, dQ + (size_t)r * D, (size_t)D * sizeof(float));
}

/* one work item: the query tiles of kv head kh's query heads in order */
static void item(void *ctx, void *scratch, int b, int kh, size_t off, const ftile_kv_acc *acc) {
  const bwd_args *a = ctx;
  const int group = a->Hq / a->Hkv, nqt = (a->T + BQ - 1) / BQ;
  (void)scratch, (void)off;
  for (int h = kh * group; h < (kh + 1) * group; h++)
    for (int i = 0; i < nqt; i++) query_tile(a, b, h, kh, i, acc);
}

void loom_flash_attention_backward_f32(float *dq, float *dk, float *dv, const float *dout,
                                       const float *out, const float *lse, const float *q,
                                       const float *k, const float *v, int B, int T, int Hq,
                                       int Hkv, int D, loom_attn_mask mask, float *work) {
  LOOM_ASSERT(Hkv > 0 && Hq % Hkv == 0 && D > 0 && D <= 256);
  if (B <= 0 || T <= 0 || Hq <= 0) return;
  LOOM_PROF_PUSH(LOOM_PART_ATTN_BWD);
  const int par = (size_t)B * Hq * T * T * D >= FAST_PAR_MIN;
  /* delta (B,Hq,T) = rowsum(dout * out) */
  ftile_delta(work, out, dout, B, T, Hq, D, 0, par);
  bwd_args a = {dq, dout, lse, q, k, v, work, T, Hq, Hkv, D, mask, ftile_simd(D)};
  ftile_bwd_items(B, T, Hkv, D, dk, dv, par, 0, item, &a);
  LOOM_PROF_POP(10.0 * D * Hq * flash_visible_pairs(mask, B, T), 0);
}

/* Flash attention forward: for each (sequence, query head, tile of BQ queries) — in parallel,
 * each output row written by one thread — the key tiles the mask leaves visible are visited
 * in order with an online softmax (running max m, sum l, output rescaled by exp(m_old -
 * m_new)); the output is divided by l at the end and lse = m + log l is saved for the
 * backward. Scores live in one (BK, BQ) tile: nothing of size T x T is stored. Shapes:
 * q, out (B,T,Hq,D); k, v (B,T,Hkv,D); lse (B,Hq,T). AVX-512 needs D % 16 == 0. */
#include <math.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "kernels/flash_mask.h"
#include "kernels/flash_tile.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"

static void query_tile(float *out, float *lse, const float *q, const float *k, const float *v,
                       int b, int h, int i, int T, int Hq, int Hkv, int D, loom_attn_mask mask,
                       int simd) {
  const int kh = h / (Hq / Hkv), t0 = i * BQ, nq = T - t0 < BQ ? T - t0 : BQ;
  const float scale = (float)(1.0 / sqrt((double)D));
  const long ldq = (long)Hq * D, ldk = (long)Hkv * D;
  float Qt[D * BQ], Ot[D * BQ], St[BK * BQ];
  float m[BQ], l[BQ], alpha[BQ];
  ftile_vis vis;
  for (int r = 0; r < BQ; r++) m[r] = -INFINITY, l[r] = 0.0f;
  memset(Ot, 0, sizeof Ot);
  ftile_transpose_in(Qt, q + (((size_t)b * T + t0) * Hq + h) * D, ldq, nq, D);
  int j0 = fmask_lo(mask, b, t0, T) / BK, j1 = fmask_hi(mask, b, t0 + nq - 1, T) / BK;
  for (int j = j0; j <= j1; j++) {
    int s0 = j * BK, nk = T - s0 < BK ? T - s0 : BK;
    if (!fmask_tile(mask, b, T, t0, nq, s0, nk, &vis)) continue;
    const float *kj = k + (((size_t)b * T + s0) * Hkv + kh) * D;
    const float *vj = v + (((size_t)b * T + s0) * Hkv + kh) * D;
    ftile_mm(simd, St, BQ, kj, ldk, 1, Qt, BQ, nk, BQ, D, 0);         /* St = K_j Q_i^T */
    ftile_softmax_step(simd, St, nk, nq, &vis, scale, m, l, alpha);   /* St = P^T */
    ftile_scale_cols(simd, Ot, D, alpha);
    ftile_mm(simd, Ot, BQ, vj, 1, ldk, St, BQ, D, BQ, nk, 1);         /* Ot += V_j^T P^T */
  }
  /* a query that saw no key (a ring block): 0, lse -inf */
  ftile_store_out(out + (((size_t)b * T + t0) * Hq + h) * D, ldq, Ot, l, nq, D);
  for (int r = 0; r < nq; r++)
    lse[((size_t)b * Hq + h) * T + t0 + r] = l[r] > 0 ? m[r] + logf(l[r]) : -INFINITY;
}

void loom_flash_attention_forward_f32(float *out, float *lse, const float *q, const float *k,
                                      const float *v, int B, int T, int Hq, int Hkv, int D,
                                      loom_attn_mask mask) {
  LOOM_ASSERT(Hkv > 0 && Hq % Hkv == 0 && D > 0 && D <= 256);
  if (B <= 0 || T <= 0 || Hq <= 0) return;
  LOOM_PROF_PUSH(LOOM_PART_ATTN_FWD);
  const int simd = ftile_simd(D), nqt = (T + BQ - 1) / BQ;
  const long items = (long)B * Hq * nqt;
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)B * Hq * T * T * D >= FAST_PAR_MIN)
  for (long it = 0; it < items; it++) {
    int i = (int)(it % nqt), h = (int)((it / nqt) % Hq), b = (int)(it / ((long)nqt * Hq));
    query_tile(out, lse, q, k, v, b, h, nqt - 1 - i, T, Hq, Hkv, D, mask, simd);
  }
  LOOM_PROF_POP(4.0 * D * Hq * flash_visible_pairs(mask, B, T), 0);
}

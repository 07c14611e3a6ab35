/* bf16 flash attention forward: the fp32 kernel's loop (flash_fwd.c: work items per (sequence,
 * query head, tile of BQ queries), key tiles the mask leaves visible, online softmax, nothing
 * T x T stored) with the two products on bf16 pairs (flash_tile_bf16.h): Q, K and V are rounded
 * to bf16 as their tiles are packed, P = exp(s - m) is rounded to bf16 before P V, and
 * everything else — accumulators, scores, softmax statistics m, l, lse, the output — is fp32.
 * Shapes: q, out (B,T,Hq,D); k, v (B,T,Hkv,D); lse (B,Hq,T). */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "kernels/flash_mask.h"
#include "kernels/flash_tile.h"
#include "kernels/flash_tile_bf16.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"

/* Kall (T, DP) pairs: K of (b, kh) row by row; Vall ((T+1)/2, D) pairs: V as key pairs —
 * packed by the caller (the rows of the key tiles this query tile visits) */
static void query_tile(float *out, float *lse, const float *q, const uint32_t *Kall,
                       const uint32_t *Vall, int b, int h, int i, int T, int Hq, int D,
                       loom_attn_mask mask, int path) {
  const int t0 = i * BQ, nq = T - t0 < BQ ? T - t0 : BQ;
  const int DP = (D + 1) / 2, simd = fb_ftile_simd(path);
  const float scale = (float)(1.0 / sqrt((double)D));
  const long ldq = (long)Hq * D;
  float Qt[D * BQ], Ot[D * BQ], St[BK * BQ];             /* (D,BQ) (D,BQ) (BK,BQ) fp32 */
  uint32_t Qp[DP * BQ], Pp[BK / 2 * BQ];                 /* pairs: (DP,BQ) (BK/2,BQ) */
  float m[BQ], l[BQ], alpha[BQ];
  ftile_vis vis;
  ftile_span sp;
  for (int r = 0; r < BQ; r++) m[r] = -INFINITY, l[r] = 0.0f;
  memset(Ot, 0, sizeof Ot);
  ftile_transpose_in(Qt, q + (((size_t)b * T + t0) * Hq + h) * D, ldq, nq, D);
  fb_pack_vnni(path, Qp, BQ, Qt, BQ, D, BQ, DP); /* Q_i^T as pairs of head-dim rows */
  if (t0 >= BQ) /* the query tile visited next (tiles run backwards), while this one computes */
    ftile_prefetch_rows(q + (((size_t)b * T + t0 - BQ) * Hq + h) * D, ldq, BQ, D);
  int j0 = fmask_lo(mask, b, t0, T) / BK, j1 = fmask_hi(mask, b, t0 + nq - 1, T) / BK;
  for (int j = j0; j <= j1; j++) {
    int s0 = j * BK, nk = T - s0 < BK ? T - s0 : BK, nkp = (nk + 1) / 2;
    if (!fmask_tile(mask, b, T, t0, nq, s0, nk, &vis)) continue;
    const uint32_t *Kb = Kall + (size_t)s0 * DP, *Vp = Vall + (size_t)(s0 / 2) * D;
    if (vis.full) {
      fb_mm(path, St, BQ, Kb, DP, 1, Qp, BQ, nk, BQ, DP, 0);        /* St = K_j Q_i^T */
    } else { /* a partly visible tile (the diagonal): the blocks with visible scores only */
      ftile_span_of(&vis, nk, nq, &sp);
      memset(St, 0, (size_t)nk * BQ * sizeof(float));
      for (int kb = 0; 16 * kb < nk; kb++)
        if (sp.q0[kb] < sp.q1[kb])
          fb_mm(path, St + 16 * kb * BQ + sp.q0[kb], BQ, Kb + (size_t)16 * kb * DP, DP, 1,
                Qp + sp.q0[kb], BQ, nk - 16 * kb < 16 ? nk - 16 * kb : 16, sp.q1[kb] - sp.q0[kb],
                DP, 0);
    }
    if (path == FB_BF16) { /* P^T as key pairs straight from the exp */
      fb_softmax_pack(St, nk, nq, &vis, scale, m, l, alpha, Pp);
    } else {
      ftile_softmax_step(simd, St, nk, nq, &vis, scale, m, l, alpha); /* St = P^T */
      fb_pack_vnni(path, Pp, BQ, St, BQ, nk, BQ, nkp);                /* P^T as key pairs */
    }
    ftile_scale_cols(simd, Ot, D, alpha);
    if (vis.full) {
      fb_mm(path, Ot, BQ, Vp, 1, D, Pp, BQ, D, BQ, nkp, 1);         /* Ot += V_j^T P^T */
    } else { /* each block of 16 queries over the key pairs it sees (P = 0 elsewhere) */
      for (int qb = 0; qb < BQ / 16; qb++)
        if (sp.k0[qb] < sp.k1[qb]) {
          int p0 = sp.k0[qb] / 2, p1 = (sp.k1[qb] + 1) / 2;
          fb_mm(path, Ot + 16 * qb, BQ, Vp + (size_t)p0 * D, 1, D, Pp + (size_t)p0 * BQ + 16 * qb,
                BQ, D, 16, p1 - p0, 1);
        }
    }
  }
  /* a query that saw no key (a ring block): 0, lse -inf */
  ftile_store_out(out + (((size_t)b * T + t0) * Hq + h) * D, ldq, Ot, l, nq, D);
  for (int r = 0; r < nq; r++)
    lse[((size_t)b * Hq + h) * T + t0 + r] = l[r] > 0 ? m[r] + logf(l[r]) : -INFINITY;
}

void loom_flash_attention_forward_bf16(float *out, float *lse, const float *q, const float *k,
                                       const float *v, int B, int T, int Hq, int Hkv, int D,
                                       loom_attn_mask mask) {
  LOOM_ASSERT(Hkv > 0 && Hq % Hkv == 0 && D > 0 && D <= 256);
  if (B <= 0 || T <= 0 || Hq <= 0) return;
  LOOM_PROF_PUSH(LOOM_PART_ATTN_FWD);
  const int path = fb_path(D), nqt = (T + BQ - 1) / BQ, DP = (D + 1) / 2, group = Hq / Hkv;
  const long ldk = (long)Hkv * D;
  const size_t nkb = (size_t)T * DP, nvp = (size_t)(T + 1) / 2 * D;
  /* work items: (sequence, kv head, chunk of query tiles), enough chunks for ~4 items per
   * thread; each item packs the K and V rows its tiles can see once (a tile would otherwise be
   * packed again for every query tile that sees it). Results do not depend on the split. */
  const int par = (size_t)B * Hq * T * T * D >= FAST_PAR_MIN;
  const long kvs = (long)B * Hkv, want = 4L * (par ? omp_get_max_threads() : 1);
  const int nch = (int)(kvs >= want ? 1 : (want + kvs - 1) / kvs < nqt ? (want + kvs - 1) / kvs : nqt);
#pragma omp parallel if (par)
  {
    uint32_t *Kall = loom_alloc((nkb + nvp) * sizeof(uint32_t)), *Vall = Kall + nkb;
#pragma omp for schedule(dynamic, 1)
    for (long it = 0; it < kvs * nch; it++) {
      const int c = (int)(it % nch), kh = (int)((it / nch) % Hkv), b = (int)(it / ((long)nch * Hkv));
      const int i0 = (int)((long)c * nqt / nch), i1 = (int)((long)(c + 1) * nqt / nch);
      if (i0 >= i1) continue;
      const int tlast = (i1 * BQ < T ? i1 * BQ : T) - 1;
      /* the key tiles these query tiles visit, whole (masked keys are multiplied by P = 0) */
      const int k0 = fmask_lo(mask, b, i0 * BQ, T) / BK * BK;
      const int k1 = (fmask_hi(mask, b, tlast, T) / BK + 1) * BK < T ? (fmask_hi(mask, b, tlast, T) / BK + 1) * BK : T;
      const size_t off = (((size_t)b * T + k0) * Hkv + kh) * D;
      fb_pack_rows(path, Kall + (size_t)k0 * DP, DP, k + off, ldk, k1 - k0, D, k1 - k0);
      fb_pack_vnni(path, Vall + (size_t)(k0 / 2) * D, D, v + off, ldk, k1 - k0, D,
                   (k1 - k0 + 1) / 2);
      for (int h = kh * group; h < (kh + 1) * group; h++)
        for (int i = i1 - 1; i >= i0; i--)
          query_tile(out, lse, q, Kall, Vall, b, h, i, T, Hq, D, mask, path);
    }
    loom_free(Kall);
  }
  LOOM_PROF_POP(4.0 * D * Hq * flash_visible_pairs(mask, B, T), 0);
}

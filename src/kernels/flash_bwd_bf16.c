/* bf16 flash attention backward: the fp32 kernel's schedule (flash_bwd.c: one work item per
 * (sequence, kv head), query tiles of its heads in order, visible key tiles recomputed from
 * lse; deterministic, independent of the thread count) with the five products on bf16 pairs
 * (flash_tile_bf16.h). Q, K, V and dO are rounded to bf16 as their tiles are packed; P and
 * dS are computed in fp32 (from fp32 scores and lse) and rounded to bf16 only as operands of
 * dV += P^T dO, dK += dS^T Q and dQ += dS K; accumulation, delta = rowsum(bf16(dO) * out) and
 * every output are fp32. Shapes: q, dq, out, dout (B,T,Hq,D); k, v, dk, dv (B,T,Hkv,D);
 * lse, work (B,Hq,T). */
#include <math.h>
#include <string.h>

#include "kernels/fast_internal.h"
#include "kernels/flash_mask.h"
#include "kernels/flash_tile.h"
#include "kernels/flash_tile_bf16.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"

typedef struct {
  float *dq;
  const float *dout, *lse, *q, *k, *v, *delta;
  int T, Hq, Hkv, D;
  loom_attn_mask mask;
  int path;
} bwd_args;

/* Kall, Vall (T, DP) pairs: K, V of (b, kh) row by row; Kvall ((T+1)/2, D): K as key pairs —
 * packed once per work item */
static void query_tile(const bwd_args *a, int b, int h, int kh, int i, const uint32_t *Kall,
                       const uint32_t *Vall, const uint32_t *Kvall,
                       const ftile_kv_acc *acc) {
  const int T = a->T, D = a->D, t0 = i * BQ, nq = T - t0 < BQ ? T - t0 : BQ;
  const int DP = (D + 1) / 2, nqp = (nq + 1) / 2, path = a->path, simd = fb_ftile_simd(path);
  const float scale = (float)(1.0 / sqrt((double)D));
  const long ldq = (long)a->Hq * D;
  const size_t qoff = (((size_t)b * T + t0) * a->Hq + h) * D;
  float Qt[D * BQ], dQ[BQ * D], St[BK * BQ], dPt[BK * BQ]; /* (D,BQ) (BQ,D) (BK,BQ) (BK,BQ) */
  uint32_t Qp[DP * BQ], dOp[DP * BQ];       /* Q_i^T, dO_i^T as head-dim pairs (DP, BQ) */
  uint32_t Qv[BQ / 2 * D], dOv[BQ / 2 * D]; /* Q_i, dO_i as query pairs (BQ/2, D) */
  uint32_t Pb[BK * BQ / 2], dSb[BK * BQ / 2], dSp[BK / 2 * BQ]; /* (BK,BQ/2) x2, (BK/2,BQ) */
  float lse[BQ], delta[BQ];
  ftile_vis vis;
  ftile_span sp;
  ftile_transpose_in(Qt, a->q + qoff, ldq, nq, D);
  fb_pack_vnni(path, Qp, BQ, Qt, BQ, D, BQ, DP);
  ftile_transpose_in(Qt, a->dout + qoff, ldq, nq, D); /* Qt reused for dO_i^T */
  fb_pack_vnni(path, dOp, BQ, Qt, BQ, D, BQ, DP);
  fb_pack_vnni(path, Qv, D, a->q + qoff, ldq, nq, D, nqp);
  fb_pack_vnni(path, dOv, D, a->dout + qoff, ldq, nq, D, nqp);
  if (t0 + BQ < T) { /* the next query tile's Q and dO, while this one computes */
    const int nn = T - t0 - BQ < BQ ? T - t0 - BQ : BQ;
    ftile_prefetch_rows(a->q + qoff + BQ * ldq, ldq, nn, D);
    ftile_prefetch_rows(a->dout + qoff + BQ * ldq, ldq, nn, D);
  }
  for (int r = 0; r < BQ; r++) {
    size_t row = ((size_t)b * a->Hq + h) * T + t0 + r;
    lse[r] = r < nq ? a->lse[row] : 0.0f;
    delta[r] = r < nq ? a->delta[row] : 0.0f;
  }
  memset(dQ, 0, sizeof dQ);
  int j0 = fmask_lo(a->mask, b, t0, T) / BK, j1 = fmask_hi(a->mask, b, t0 + nq - 1, T) / BK;
  for (int j = j0; j <= j1; j++) {
    int s0 = j * BK, nk = T - s0 < BK ? T - s0 : BK, nkp = (nk + 1) / 2;
    if (!fmask_tile(a->mask, b, T, t0, nq, s0, nk, &vis)) continue;
    const size_t koff = (size_t)s0 * acc->ld; /* key row s0 of the item's dK, dV sums */
    const uint32_t *Kb = Kall + (size_t)s0 * DP, *Vb = Vall + (size_t)s0 * DP;
    const uint32_t *Kv = Kvall + (size_t)(s0 / 2) * D;
    if (vis.full) {
      fb_mm(path, St, BQ, Kb, DP, 1, Qp, BQ, nk, BQ, DP, 0);   /* St = K_j Q_i^T */
      fb_mm(path, dPt, BQ, Vb, DP, 1, dOp, BQ, nk, BQ, DP, 0); /* dPt = V_j dO_i^T */
    } else { /* a partly visible tile (the diagonal): the blocks with visible scores only */
      ftile_span_of(&vis, nk, nq, &sp);
      memset(St, 0, (size_t)nk * BQ * sizeof(float));
      memset(dPt, 0, (size_t)nk * BQ * sizeof(float));
      for (int kb = 0; 16 * kb < nk; kb++)
        if (sp.q0[kb] < sp.q1[kb]) {
          int rows = nk - 16 * kb < 16 ? nk - 16 * kb : 16, c0 = sp.q0[kb], nc = sp.q1[kb] - c0;
          fb_mm(path, St + 16 * kb * BQ + c0, BQ, Kb + (size_t)16 * kb * DP, DP, 1, Qp + c0, BQ,
                rows, nc, DP, 0);
          fb_mm(path, dPt + 16 * kb * BQ + c0, BQ, Vb + (size_t)16 * kb * DP, DP, 1, dOp + c0,
                BQ, rows, nc, DP, 0);
        }
    }
    if (path == FB_BF16) { /* P, dS straight to their three bf16 layouts */
      fb_bwd_p_ds_pack(St, dPt, nk, nq, &vis, scale, lse, delta, Pb, dSb, dSp);
    } else {
      ftile_bwd_p_ds(simd, St, dPt, nk, nq, &vis, scale, lse, delta);
      fb_pack_rows(path, Pb, BQ / 2, St, BQ, nk, BQ, nk);   /* P^T rows, query pairs */
      fb_pack_rows(path, dSb, BQ / 2, dPt, BQ, nk, BQ, nk); /* dS^T rows, query pairs */
      fb_pack_vnni(path, dSp, BQ, dPt, BQ, nk, BQ, nkp);    /* dS as key pairs */
    }
    if (vis.full) {
      if (acc->dv) /* dV_j (nk,D) += P^T (nk,nq) dO_i (nq,D) */
        fb_mm(path, acc->dv + koff, (int)acc->ld, Pb, BQ / 2, 1, dOv, D, nk, D, nqp, 1);
      if (acc->dk) /* dK_j += dS^T Q_i */
        fb_mm(path, acc->dk + koff, (int)acc->ld, dSb, BQ / 2, 1, Qv, D, nk, D, nqp, 1);
      /* dQ_i (nq,D) += dS (nq,nk) K_j (nk,D) */
      fb_mm(path, dQ, D, dSp, 1, BQ, Kv, D, nq, D, nkp, 1);
      continue;
    }
    /* partly visible: each block of 16 keys over the query pairs it sees, each block of 16
     * queries over the key pairs it sees (P and dS are 0 elsewhere) */
    for (int kb = 0; 16 * kb < nk; kb++) {
      int rows = nk - 16 * kb < 16 ? nk - 16 * kb : 16;
      int p0 = sp.q0[kb] / 2, p1 = sp.q1[kb] / 2 < nqp ? sp.q1[kb] / 2 : nqp;
      size_t o = koff + (size_t)16 * kb * acc->ld;
      if (p0 >= p1) continue;
      if (acc->dv)
        fb_mm(path, acc->dv + o, (int)acc->ld, Pb + 16 * kb * (BQ / 2) + p0, BQ / 2, 1,
              dOv + (size_t)p0 * D, D, rows, D, p1 - p0, 1);
      if (acc->dk)
        fb_mm(path, acc->dk + o, (int)acc->ld, dSb + 16 * kb * (BQ / 2) + p0, BQ / 2, 1,
              Qv + (size_t)p0 * D, D, rows, D, p1 - p0, 1);
    }
    for (int qb = 0; 16 * qb < nq; qb++) {
      int rows = nq - 16 * qb < 16 ? nq - 16 * qb : 16;
      int p0 = sp.k0[qb] / 2, p1 = (sp.k1[qb] + 1) / 2;
      if (sp.k0[qb] < sp.k1[qb])
        fb_mm(path, dQ + 16 * qb * D, D, dSp + (size_t)p0 * BQ + 16 * qb, 1, BQ,
              Kv + (size_t)p0 * D, D, rows, D, p1 - p0, 1);
    }
  }
  if (a->dq)
    for (int r = 0; r < nq; r++)
      memcpy(a->dq + qoff + (size_t)r * ldq, dQ + (size_t)r * D, (size_t)D * sizeof(float));
}

/* One work item: K and V of (b, kh) packed into scratch once — Kall, Vall (T, DP) as
 * head-dim pairs row by row, Kvall ((T+1)/2, D) as key pairs — then the query tiles of kv head
 * kh's query heads in order. */
static void item(void *ctx, void *scratch, int b, int kh, size_t off, const ftile_kv_acc *acc) {
  const bwd_args *a = ctx;
  const int T = a->T, D = a->D, DP = (D + 1) / 2, group = a->Hq / a->Hkv;
  const int nqt = (T + BQ - 1) / BQ;
  const long ldk = (long)a->Hkv * D;
  uint32_t *Kall = scratch, *Vall = Kall + (size_t)T * DP, *Kvall = Vall + (size_t)T * DP;
  fb_pack_rows(a->path, Kall, DP, a->k + off, ldk, T, D, T);
  fb_pack_rows(a->path, Vall, DP, a->v + off, ldk, T, D, T);
  fb_pack_vnni(a->path, Kvall, D, a->k + off, ldk, T, D, (T + 1) / 2);
  for (int h = kh * group; h < (kh + 1) * group; h++)
    for (int i = 0; i < nqt; i++) query_tile(a, b, h, kh, i, Kall, Vall, Kvall, acc);
}

void loom_flash_attention_backward_bf16(float *dq, float *dk, float *dv, const float *dout,
                                        const float *out, const float *lse, const float *q,
                                        const float *k, const float *v, int B, int T, int Hq,
                                        int Hkv, int D, loom_attn_mask mask, float *work) {
  LOOM_ASSERT(Hkv > 0 && Hq % Hkv == 0 && D > 0 && D <= 256);
  if (B <= 0 || T <= 0 || Hq <= 0) return;
  LOOM_PROF_PUSH(LOOM_PART_ATTN_BWD);
  const int par = (size_t)B * Hq * T * T * D >= FAST_PAR_MIN;
  /* delta (B,Hq,T) = rowsum(bf16(dout) * out): the dO the products see */
  ftile_delta(work, out, dout, B, T, Hq, D, 1, par);
  bwd_args a = {dq, dout, lse, q, k, v, work, T, Hq, Hkv, D, mask, fb_path(D)};
  const int DP = (D + 1) / 2;
  const size_t nkb = (size_t)T * DP, nkv = (size_t)(T + 1) / 2 * D; /* Kall, Vall / Kvall */
  ftile_bwd_items(B, T, Hkv, D, dk, dv, par, (2 * nkb + nkv) * sizeof(uint32_t), item, &a);
  LOOM_PROF_POP(10.0 * D * Hq * flash_visible_pairs(mask, B, T), 0);
}

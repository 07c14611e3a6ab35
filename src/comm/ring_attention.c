/* Ring attention over the context-parallel ranks (include/loom/ring_attention.h): K/V blocks
 * passed around the ring with non-blocking send/receive posted before the current block's
 * flash attention, partial outputs merged by log-sum-exp; backward with the dK/dV
 * accumulators travelling with the blocks back to their owners. */
#include <math.h>
#include <string.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "comm/ring_internal.h"
#include "loom/ring_attention.h"

/* scratch carved from r->work */
typedef struct {
  float *kv[2][2];  /* [slot][k|v] (B,Tl,Hkv,D): blocks received from the ring */
  float *acc[2][2]; /* [slot][dk|dv] (B,Tl,Hkv,D): travelling gradient accumulators */
  float *o, *dq;    /* (c,Hq,D): a block's partial output / dq */
  float *dk, *dv;   /* (c,Hkv,D): a block's dk / dv */
  float *l, *lc, *delta; /* (Hq,c): partial lse, the chunk's final lse, backward scratch */
} ring_work;

size_t loom_ring_attention_work_floats(int B, int Tl, int Hq, int Hkv, int D) {
  size_t blk = (size_t)B * Tl * Hkv * D, c = (size_t)Tl / 2;
  return 8 * blk + 2 * c * Hq * D + 2 * c * Hkv * D + 3 * (size_t)Hq * c;
}

static ring_work carve(const loom_ring_attn *r) {
  size_t blk = (size_t)r->B * r->Tl * r->Hkv * r->D, c = (size_t)r->Tl / 2;
  float *p = r->work;
  ring_work w;
  for (int s = 0; s < 2; s++)
    for (int j = 0; j < 2; j++) w.kv[s][j] = p, p += blk;
  for (int s = 0; s < 2; s++)
    for (int j = 0; j < 2; j++) w.acc[s][j] = p, p += blk;
  w.o = p, p += c * r->Hq * r->D;
  w.dq = p, p += c * r->Hq * r->D;
  w.dk = p, p += c * r->Hkv * r->D;
  w.dv = p, p += c * r->Hkv * r->D;
  w.l = p, p += (size_t)r->Hq * c;
  w.lc = p, p += (size_t)r->Hq * c;
  w.delta = p;
  return w;
}

/* Offset of token t of chunk half h of sequence b in a (B,Tl,H,D) tensor. */
static size_t tok(const loom_ring_attn *r, int b, int h, int t, int H) {
  return (((size_t)b * r->Tl + (size_t)h * (r->Tl / 2) + t) * H) * r->D;
}

/* Merge a block's partial (o (c,Hq,D), l (Hq,c)) into the running out/lse of chunk half qh of
 * sequence b: lse' = log(e^lse + e^l), out' = e^(lse-lse') out + e^(l-lse') o. */
static void merge(const loom_ring_attn *r, float *out, float *lse, const ring_work *w, int b,
                  int qh) {
  int c = r->Tl / 2, Hq = r->Hq, D = r->D;
#pragma omp parallel for schedule(static) if ((size_t)c * Hq * D >= 65536)
  for (int t = 0; t < c; t++)
    for (int h = 0; h < Hq; h++) {
      float *L = lse + ((size_t)b * Hq + h) * r->Tl + (size_t)qh * c + t;
      double lp = w->l[(size_t)h * c + t];
      float *o = out + tok(r, b, qh, t, Hq) + (size_t)h * D;
      const float *op = w->o + ((size_t)t * Hq + h) * D;
      if (lp == -INFINITY) continue; /* the query sees no key of this block (its document) */
      if (*L == -INFINITY) { /* the first block this query sees */
        memcpy(o, op, (size_t)D * sizeof(float));
        *L = (float)lp;
        continue;
      }
      double l0 = *L, mx = l0 > lp ? l0 : lp, mn = l0 > lp ? lp : l0;
      double nl = mx + log1p(exp(mn - mx));
      float wa = (float)exp(l0 - nl), wb = (float)exp(lp - nl);
      for (int d = 0; d < D; d++) o[d] = wa * o[d] + wb * op[d];
      *L = (float)nl;
    }
}

/* The mask of query chunk qc against key chunk kc of sequence b (global chunk indices), with
 * the packed documents' segments at the chunks' global positions; *skip when no query of
 * the chunk shares a document with a key of the other (segments are non-decreasing, so the
 * first query's document decides for a key chunk before it). */
static loom_attn_mask block_mask(const loom_ring_attn *r, int b, int qc, int kc,
                                 loom_ring_block kind, bool *skip) {
  int c = r->Tl / 2, T = r->Tl * r->comm->size;
  loom_attn_mask m = {.causal = kind == LOOM_RING_CAUSAL};
  *skip = kind == LOOM_RING_SKIP;
  if (!r->seg_lo || *skip) return m;
  m.seg_lo = r->seg_lo + (size_t)b * T, m.seg_hi = r->seg_hi + (size_t)b * T;
  m.seg_stride = T, m.q_off = qc * c, m.k_off = kc * c;
  if (kc < qc) *skip = m.seg_lo[m.q_off] > m.k_off + c - 1;
  if (kc > qc) *skip = m.seg_hi[m.q_off + c - 1] < m.k_off;
  return m;
}

/* Attention of this rank's query chunks against the K/V block of ring rank src. */
static void forward_block(const loom_ring_attn *r, float *out, float *lse, const float *q,
                          const float *k, const float *v, int src, ring_work *w) {
  int cp = r->comm->size, me = r->comm->rank, c = r->Tl / 2;
  for (int b = 0; b < r->B; b++)
    for (int qh = 0; qh < 2; qh++)
      for (int kh = 0; kh < 2; kh++) {
        loom_ring_block kind = loom_ring_block_kind(loom_cp_chunk(me, qh, cp),
                                                    loom_cp_chunk(src, kh, cp), r->causal);
        bool skip;
        loom_attn_mask m = block_mask(r, b, loom_cp_chunk(me, qh, cp),
                                      loom_cp_chunk(src, kh, cp), kind, &skip);
        if (skip) continue;
        loom_flash_attention_forward_f32(w->o, w->l, q + tok(r, b, qh, 0, r->Hq),
                                         k + tok(r, b, kh, 0, r->Hkv),
                                         v + tok(r, b, kh, 0, r->Hkv), 1, c, r->Hq, r->Hkv,
                                         r->D, m);
        merge(r, out, lse, w, b, qh);
      }
}

typedef struct {
  const loom_ring_attn *r;
  float *out, *lse, *dq;
  const float *q, *dout;
  ring_work *w;
} ring_ctx;

static void fwd_cb(void *ctx, const float *k, const float *v, int src) {
  ring_ctx *c = ctx;
  forward_block(c->r, c->out, c->lse, c->q, k, v, src, c->w);
}

void loom_ring_attention_forward(const loom_ring_attn *r, float *out, float *lse,
                                 const float *q, const float *k, const float *v) {
  LOOM_ASSERT(r->Tl % 2 == 0 && r->Hq % r->Hkv == 0);
  size_t blk = (size_t)r->B * r->Tl * r->Hkv * r->D, n_out = (size_t)r->B * r->Tl * r->Hq * r->D;
  ring_work w = carve(r);
  memset(out, 0, n_out * sizeof(float));
  for (size_t i = 0; i < (size_t)r->B * r->Hq * r->Tl; i++) lse[i] = -INFINITY;
  ring_ctx c = {r, out, lse, NULL, q, NULL, &w};
  ring_loop_forward(r->comm, blk, k, v, w.kv, fwd_cb, &c);
}

/* Gradients from this rank's queries against the K/V block (k, v) of ring rank src: dq
 * accumulated into dq, the block's dk/dv into (gk, gv) (B,Tl,Hkv,D). */
static void backward_block(const loom_ring_attn *r, float *dq, float *gk, float *gv,
                           const float *dout, const float *out, const float *lse,
                           const float *q, const float *k, const float *v, int src,
                           ring_work *w) {
  int cp = r->comm->size, me = r->comm->rank, c = r->Tl / 2, Hq = r->Hq, Hkv = r->Hkv;
  size_t nq = (size_t)c * Hq * r->D, nk = (size_t)c * Hkv * r->D;
  for (int b = 0; b < r->B; b++)
    for (int qh = 0; qh < 2; qh++) {
      for (int h = 0; h < Hq; h++) /* this chunk's lse (Hq,c) */
        memcpy(w->lc + (size_t)h * c, lse + ((size_t)b * Hq + h) * r->Tl + (size_t)qh * c,
               (size_t)c * sizeof(float));
      for (int kh = 0; kh < 2; kh++) {
        loom_ring_block kind = loom_ring_block_kind(loom_cp_chunk(me, qh, cp),
                                                    loom_cp_chunk(src, kh, cp), r->causal);
        bool skip;
        loom_attn_mask m = block_mask(r, b, loom_cp_chunk(me, qh, cp),
                                      loom_cp_chunk(src, kh, cp), kind, &skip);
        if (skip) continue;
        size_t qo = tok(r, b, qh, 0, Hq), ko = tok(r, b, kh, 0, Hkv);
        loom_flash_attention_backward_f32(w->dq, w->dk, w->dv, dout + qo, out + qo, w->lc,
                                          q + qo, k + ko, v + ko, 1, c, Hq, Hkv, r->D, m,
                                          w->delta);
        ring_add_into(dq + qo, w->dq, nq);
        ring_add_into(gk + ko, w->dk, nk);
        ring_add_into(gv + ko, w->dv, nk);
      }
    }
}

static void bwd_cb(void *ctx, const float *k, const float *v, float *gk, float *gv, int src) {
  ring_ctx *c = ctx;
  backward_block(c->r, c->dq, gk, gv, c->dout, c->out, c->lse, c->q, k, v, src, c->w);
}

void loom_ring_attention_backward(const loom_ring_attn *r, float *dq, float *dk, float *dv,
                                  const float *dout, const float *out, const float *lse,
                                  const float *q, const float *k, const float *v) {
  LOOM_ASSERT(r->Tl % 2 == 0 && r->Hq % r->Hkv == 0);
  size_t blk = (size_t)r->B * r->Tl * r->Hkv * r->D, n_q = (size_t)r->B * r->Tl * r->Hq * r->D;
  ring_work w = carve(r);
  memset(dq, 0, n_q * sizeof(float));
  ring_ctx c = {r, (float *)out, (float *)lse, dq, q, dout, &w};
  ring_loop_backward(r->comm, blk, k, v, dk, dv, w.kv, w.acc, bwd_cb, &c);
}

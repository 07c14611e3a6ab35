/* Ring attention within segments (include/loom/ring_attention.h, loom_ring_seg_attn): the
 * vision encoder's bidirectional window / frame attention over context-parallel ranks, each
 * holding a contiguous slice of the patches. The ring loops are ring_loop.c's; a block is
 * computed query row by query row over the keys of the row's segment the block holds, with
 * double-precision softmax statistics, and merged into the running (out, lse). */
#include <math.h>
#include <string.h>

#include "comm/ring_internal.h"
#include "loom/core.h"
#include "loom/ring_attention.h"

typedef struct {
  float *kv[2][2], *acc[2][2]; /* (P,H,D) ring slots */
  float *s;                    /* (H, P) scores of one row per head */
  int *lo, *hi;                /* (P) the segment [lo, hi) of each local query (global) */
  float *delta;                /* (H, P) rowsum(dout * out) */
} seg_work;

size_t loom_ring_seg_attention_work_floats(int P, int H, int D) {
  return 8 * (size_t)P * H * D + 2 * (size_t)H * P + 2 * (size_t)P;
}

static seg_work carve(const loom_ring_seg_attn *r) {
  size_t blk = (size_t)r->P * r->H * r->D;
  float *p = r->work;
  seg_work w;
  for (int s = 0; s < 2; s++)
    for (int j = 0; j < 2; j++) w.kv[s][j] = p, p += blk;
  for (int s = 0; s < 2; s++)
    for (int j = 0; j < 2; j++) w.acc[s][j] = p, p += blk;
  w.s = p, p += (size_t)r->H * r->P;
  w.delta = p, p += (size_t)r->H * r->P;
  w.lo = (int *)p, p += r->P;
  w.hi = (int *)p;
  /* each local query's segment */
  int q0 = r->comm->rank * r->P, g = 0;
  for (int i = 0; i < r->P; i++) {
    while (g + 1 < r->nseg && r->seg[g + 1] <= q0 + i) g++;
    w.lo[i] = r->seg[g], w.hi[i] = r->seg[g + 1];
  }
  return w;
}

typedef struct {
  const loom_ring_seg_attn *r;
  seg_work *w;
  float *out, *lse, *dq;
  const float *q, *dout;
} seg_ctx;

/* the keys [a, b) (local indices of the block of rank src) query i sees */
static int key_range(const seg_ctx *c, int i, int src, int *a, int *b) {
  int k0 = src * c->r->P;
  *a = c->w->lo[i] > k0 ? c->w->lo[i] - k0 : 0;
  *b = c->w->hi[i] < k0 + c->r->P ? c->w->hi[i] - k0 : c->r->P;
  return *a < *b;
}

static float dot(const float *x, const float *y, int D) {
  float acc = 0;
  for (int d = 0; d < D; d++) acc += x[d] * y[d];
  return acc;
}

static void fwd_cb(void *ctx, const float *k, const float *v, int src) {
  seg_ctx *c = ctx;
  const loom_ring_seg_attn *r = c->r;
  int P = r->P, H = r->H, D = r->D;
  const float scale = (float)(1.0 / sqrt((double)D));
#pragma omp parallel for schedule(static) if ((size_t)P * P * H * D >= 1000000)
  for (int h = 0; h < H; h++) {
    float *s = c->w->s + (size_t)h * P, o[256];
    for (int i = 0; i < P; i++) {
      int a, b;
      if (!key_range(c, i, src, &a, &b)) continue;
      const float *qi = c->q + ((size_t)i * H + h) * D;
      float m = -INFINITY;
      for (int j = a; j < b; j++) {
        s[j] = scale * dot(qi, k + ((size_t)j * H + h) * D, D);
        m = s[j] > m ? s[j] : m;
      }
      double l = 0;
      memset(o, 0, (size_t)D * sizeof(float));
      for (int j = a; j < b; j++) {
        float p = expf(s[j] - m);
        l += p;
        const float *vj = v + ((size_t)j * H + h) * D;
        for (int d = 0; d < D; d++) o[d] += p * vj[d];
      }
      /* merge (o / l, m + log l) into the running (out, lse) of row i */
      double lp = m + log(l);
      float *L = c->lse + (size_t)h * P + i, *out = c->out + ((size_t)i * H + h) * D;
      if (*L == -INFINITY) {
        for (int d = 0; d < D; d++) out[d] = (float)(o[d] / l);
        *L = (float)lp;
        continue;
      }
      double l0 = *L, mx = l0 > lp ? l0 : lp, mn = l0 > lp ? lp : l0;
      double nl = mx + log1p(exp(mn - mx));
      float wa = (float)exp(l0 - nl), wb = (float)(exp(lp - nl) / l);
      for (int d = 0; d < D; d++) out[d] = wa * out[d] + wb * o[d];
      *L = (float)nl;
    }
  }
}

void loom_ring_seg_attention_forward(const loom_ring_seg_attn *r, float *out, float *lse,
                                     const float *q, const float *k, const float *v) {
  LOOM_ASSERT(r->D <= 256 && r->seg[0] == 0 && r->seg[r->nseg] == r->P * r->comm->size);
  size_t blk = (size_t)r->P * r->H * r->D;
  seg_work w = carve(r);
  memset(out, 0, blk * sizeof(float));
  for (size_t i = 0; i < (size_t)r->H * r->P; i++) lse[i] = -INFINITY;
  seg_ctx c = {r, &w, out, lse, NULL, q, NULL};
  ring_loop_forward(r->comm, blk, k, v, w.kv, fwd_cb, &c);
}

/* dq_i += dS k_j, gk_j += dS q_i, gv_j += P dout_i with P = exp(s - lse_i),
 * dS = P (dout_i . v_j - delta_i) scale; per head in parallel (each head owns its columns) */
static void bwd_cb(void *ctx, const float *k, const float *v, float *gk, float *gv, int src) {
  seg_ctx *c = ctx;
  const loom_ring_seg_attn *r = c->r;
  int P = r->P, H = r->H, D = r->D;
  const float scale = (float)(1.0 / sqrt((double)D));
#pragma omp parallel for schedule(static) if ((size_t)P * P * H * D >= 1000000)
  for (int h = 0; h < H; h++)
    for (int i = 0; i < P; i++) {
      int a, b;
      if (!key_range(c, i, src, &a, &b)) continue;
      size_t qo = ((size_t)i * H + h) * D;
      const float *qi = c->q + qo, *gi = c->dout + qo;
      float li = c->lse[(size_t)h * P + i], di = c->w->delta[(size_t)h * P + i];
      float *dqi = c->dq + qo;
      for (int j = a; j < b; j++) {
        size_t ko = ((size_t)j * H + h) * D;
        float p = expf(scale * dot(qi, k + ko, D) - li);
        float ds = p * (dot(gi, v + ko, D) - di) * scale;
        for (int d = 0; d < D; d++) {
          dqi[d] += ds * k[ko + d];
          gk[ko + d] += ds * qi[d];
          gv[ko + d] += p * gi[d];
        }
      }
    }
}

void loom_ring_seg_attention_backward(const loom_ring_seg_attn *r, float *dq, float *dk,
                                      float *dv, const float *dout, const float *out,
                                      const float *lse, const float *q, const float *k,
                                      const float *v) {
  LOOM_ASSERT(r->D <= 256 && r->seg[0] == 0 && r->seg[r->nseg] == r->P * r->comm->size);
  size_t blk = (size_t)r->P * r->H * r->D;
  seg_work w = carve(r);
  for (int h = 0; h < r->H; h++)
    for (int i = 0; i < r->P; i++) {
      size_t o = ((size_t)i * r->H + h) * r->D;
      w.delta[(size_t)h * r->P + i] = dot(dout + o, out + o, r->D);
    }
  memset(dq, 0, blk * sizeof(float));
  seg_ctx c = {r, &w, (float *)out, (float *)lse, dq, q, dout};
  ring_loop_backward(r->comm, blk, k, v, dk, dv, w.kv, w.acc, bwd_cb, &c);
}

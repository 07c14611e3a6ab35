/* Reference attention under any loom_attn_mask (full, causal, sliding windows, segments), in double, for
 * checking flash attention: each query row's explicit softmax over the keys its mask leaves
 * visible; the backward recomputes probabilities from lse and accumulates (+=) like every
 * reference kernel. Single-threaded and unoptimised on purpose. Shapes: q, out, dq, dout
 * (B,T,Hq,D); k, v, dk, dv (B,T,Hkv,D); lse (B,Hq,T). */
#include <math.h>

#include "kernels/flash_mask.h"
#include "loom/core.h"
#include "loom/kernels.h"

#define QI(b, t, h) ((((size_t)(b) * T + (t)) * Hq + (h)) * D)
#define KI(b, s, h) ((((size_t)(b) * T + (s)) * Hkv + (h)) * D)

static double dot(const double *a, const double *b, int D) {
  double s = 0;
  for (int d = 0; d < D; d++) s += a[d] * b[d];
  return s;
}

void loom_attention_masked_forward_f64(double *out, double *lse, const double *q,
                                       const double *k, const double *v, int B, int T, int Hq,
                                       int Hkv, int D, loom_attn_mask mask) {
  const int group = Hq / Hkv;
  const double scale = 1.0 / sqrt((double)D);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hq; h++)
      for (int t = 0; t < T; t++) {
        int lo = fmask_lo(mask, b, t, T), hi = fmask_hi(mask, b, t, T), kh = h / group;
        double mx = -INFINITY;
        for (int s = lo; s <= hi; s++) {
          double sc = scale * dot(q + QI(b, t, h), k + KI(b, s, kh), D);
          mx = sc > mx ? sc : mx;
        }
        double sum = 0;
        double *o = out + QI(b, t, h);
        for (int d = 0; d < D; d++) o[d] = 0;
        for (int s = lo; s <= hi; s++) {
          double p = exp(scale * dot(q + QI(b, t, h), k + KI(b, s, kh), D) - mx);
          sum += p;
          for (int d = 0; d < D; d++) o[d] += p * v[KI(b, s, kh) + d];
        }
        for (int d = 0; d < D; d++) o[d] = sum > 0 ? o[d] / sum : 0; /* no key seen: 0 */
        lse[((size_t)b * Hq + h) * T + t] = sum > 0 ? mx + log(sum) : -INFINITY;
      }
}

void loom_attention_masked_backward_f64(double *dq, double *dk, double *dv, const double *dout,
                                        const double *out, const double *lse, const double *q,
                                        const double *k, const double *v, int B, int T, int Hq,
                                        int Hkv, int D, loom_attn_mask mask) {
  const int group = Hq / Hkv;
  const double scale = 1.0 / sqrt((double)D);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hq; h++)
      for (int t = 0; t < T; t++) {
        int lo = fmask_lo(mask, b, t, T), hi = fmask_hi(mask, b, t, T), kh = h / group;
        const double *qt = q + QI(b, t, h), *gt = dout + QI(b, t, h);
        double delta = dot(gt, out + QI(b, t, h), D), l = lse[((size_t)b * Hq + h) * T + t];
        for (int s = lo; s <= hi; s++) {
          const double *ks = k + KI(b, s, kh), *vs = v + KI(b, s, kh);
          double p = exp(scale * dot(qt, ks, D) - l);
          double ds = p * (dot(gt, vs, D) - delta);
          for (int d = 0; d < D; d++) {
            if (dq) dq[QI(b, t, h) + d] += scale * ds * ks[d];
            if (dk) dk[KI(b, s, kh) + d] += scale * ds * qt[d];
            if (dv) dv[KI(b, s, kh) + d] += p * gt[d];
          }
        }
      }
}

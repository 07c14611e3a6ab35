/* Ring attention (src/comm/ring_attention.c) on the cp = world ranks of mpirun against the
 * double-precision reference attention of the whole sequence on every rank: each rank
 * compares its two chunks (r and 2cp-1-r of 2cp) of out, lse, dq, dk, dv, and the bytes it
 * sent with the closed form.
 *
 * Tolerance 1e-5 relative norm, the flash kernel's own against the same reference
 * (tests/kernels/test_fast_kernels.c): fp32 dot products of D terms and softmax sums of at
 * most T terms (~sqrt(T) u ~ 1e-6); the log-sum-exp merge of cp partial results adds a few
 * roundings per element. A wrong mask, chunk or merge is off by O(1).
 *
 * Bytes each rank sends (comm.c's send count): forward (cp-1) K/V blocks of B*Tl*Hkv*D
 * floats each = 2 (cp-1) B Tl Hkv D 4 bytes; backward the K/V blocks again plus the dK/dV
 * accumulators, cp-1 hops each: twice the forward. Exact (integers).
 *
 * usage (under mpirun -np CP): dist_ring_attention_check */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "loom/comm.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/kernels_vision.h"
#include "loom/mesh.h"
#include "loom/ring_attention.h"

static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

/* the same pseudo-random values on every rank */
static void fill(double *x, size_t n, unsigned long long seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = ((double)(seed >> 11) / 9007199254740992.0) * 2 - 1;
  }
}

/* rank's rows of a (B,T,H,D) tensor -> (B,Tl,H,D): chunk r, then chunk 2cp-1-r */
static void take(float *dst, const double *src, int B, int T, int H, int D, int cp, int r) {
  int c = T / (2 * cp), Tl = T / cp;
  for (int b = 0; b < B; b++)
    for (int half = 0; half < 2; half++)
      for (int t = 0; t < c; t++) {
        int g = loom_cp_chunk(r, half, cp) * c + t;
        for (size_t i = 0; i < (size_t)H * D; i++)
          dst[((size_t)b * Tl + half * c + t) * H * D + i] =
              (float)src[((size_t)b * T + g) * H * D + i];
      }
}

/* ||got - want|| / ||want|| over this rank's rows (want in the (B,T,H,D) layout) */
static double rel_err(const float *got, const double *want, int B, int T, int H, int D, int cp,
                      int r) {
  size_t n = (size_t)B * (T / cp) * H * D;
  float *w = falloc(n);
  take(w, want, B, T, H, D, cp, r);
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double e = (double)got[i] - w[i];
    num += e * e;
    den += (double)w[i] * w[i];
  }
  free(w);
  return sqrt(num / (den > 0 ? den : 1));
}

static void check(const loom_comm *ring, int B, int T, int Hq, int Hkv, int D, bool causal) {
  int cp = ring->size, r = ring->rank, Tl = T / cp;
  size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * Hq * T;
  double *q = dalloc(nq), *k = dalloc(nk), *v = dalloc(nk), *g = dalloc(nq);
  fill(q, nq, 1), fill(k, nk, 2), fill(v, nk, 3), fill(g, nq, 4);
  double *out = dalloc(nq), *lse = dalloc(nl), *dq = dalloc(nq), *dk = dalloc(nk), *dv = dalloc(nk);
  loom_attn_mask mask = {.causal = causal};
  loom_attention_masked_forward_f64(out, lse, q, k, v, B, T, Hq, Hkv, D, mask);
  loom_attention_masked_backward_f64(dq, dk, dv, g, out, lse, q, k, v, B, T, Hq, Hkv, D, mask);
  size_t mq = nq / cp, mk = nk / cp, ml = nl / cp;
  float *ql = falloc(mq), *kl = falloc(mk), *vl = falloc(mk), *gl = falloc(mq);
  take(ql, q, B, T, Hq, D, cp, r), take(kl, k, B, T, Hkv, D, cp, r);
  take(vl, v, B, T, Hkv, D, cp, r), take(gl, g, B, T, Hq, D, cp, r);
  float *ol = falloc(mq), *ll = falloc(ml), *dql = falloc(mq), *dkl = falloc(mk), *dvl = falloc(mk);
  loom_ring_attn ra = {ring, B, Tl, Hq, Hkv, D, causal, NULL, NULL, NULL};
  ra.work = falloc(loom_ring_attention_work_floats(B, Tl, Hq, Hkv, D));
  loom_comm_stats_reset();
  loom_ring_attention_forward(&ra, ol, ll, ql, kl, vl);
  double fwd = loom_comm_counters.bytes[LOOM_COLL_SENDRECV];
  loom_ring_attention_backward(&ra, dql, dkl, dvl, gl, ol, ll, ql, kl, vl);
  double bwd = loom_comm_counters.bytes[LOOM_COLL_SENDRECV] - fwd;
  char what[96];
  snprintf(what, sizeof what, "cp=%d rank %d %s B=%d T=%d H=%d/%d D=%d", cp, r,
           causal ? "causal" : "full", B, T, Hq, Hkv, D);
  /* lse (B,Hq,T) as (B,T,Hq,1) rows for take(): transpose the reference */
  double *lse_t = dalloc(nl);
  float *ll_t = falloc(ml);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hq; h++) {
      for (int t = 0; t < T; t++) lse_t[((size_t)b * T + t) * Hq + h] = lse[((size_t)b * Hq + h) * T + t];
      for (int t = 0; t < Tl; t++) ll_t[((size_t)b * Tl + t) * Hq + h] = ll[((size_t)b * Hq + h) * Tl + t];
    }
  double e[5] = {rel_err(ol, out, B, T, Hq, D, cp, r), rel_err(ll_t, lse_t, B, T, Hq, 1, cp, r),
                 rel_err(dql, dq, B, T, Hq, D, cp, r), rel_err(dkl, dk, B, T, Hkv, D, cp, r),
                 rel_err(dvl, dv, B, T, Hkv, D, cp, r)};
  const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; i++)
    CHECK(e[i] <= 1e-5, "%s %s: relative error %.3g > 1e-5", what, names[i], e[i]);
  double want_fwd = 2.0 * (cp - 1) * B * Tl * Hkv * D * sizeof(float);
  CHECK(fwd == want_fwd, "%s: forward sent %.0f bytes, closed form %.0f", what, fwd, want_fwd);
  CHECK(bwd == 2 * want_fwd, "%s: backward sent %.0f bytes, closed form %.0f", what, bwd,
        2 * want_fwd);
  if (r == 0)
    printf("%s: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e; sent fwd %.0f bwd %.0f bytes\n", what,
           e[0], e[1], e[2], e[3], e[4], fwd, bwd);
  free(q), free(k), free(v), free(g), free(out), free(lse), free(dq), free(dk), free(dv);
  free(ql), free(kl), free(vl), free(gl), free(ol), free(ll), free(dql), free(dkl), free(dvl);
  free(ra.work), free(lse_t), free(ll_t);
}

/* Segment ring (the vision encoder's): rank r holds tokens [r*P, (r+1)*P); segments of
 * varied lengths cross rank boundaries; against loom_seg_attention_*_f64 of the whole
 * sequence. Backward accumulates in the reference (zeroed here). Same tolerance and bytes. */
static void check_seg(const loom_comm *ring, int P, int H, int D, const int *seg, int nseg) {
  int cp = ring->size, r = ring->rank, S = P * cp;
  size_t n = (size_t)S * H * D, m = (size_t)P * H * D;
  double *q = dalloc(n), *k = dalloc(n), *v = dalloc(n), *g = dalloc(n), *out = dalloc(n);
  double *lse = dalloc((size_t)H * S), *dq = dalloc(n), *dk = dalloc(n), *dv = dalloc(n);
  fill(q, n, 11), fill(k, n, 12), fill(v, n, 13), fill(g, n, 14);
  loom_seg_attention_forward_f64(out, lse, q, k, v, S, H, D, seg, nseg);
  loom_seg_attention_backward_f64(dq, dk, dv, g, out, lse, q, k, v, S, H, D, seg, nseg);
  float *ql = falloc(m), *kl = falloc(m), *vl = falloc(m), *gl = falloc(m);
  for (size_t i = 0; i < m; i++) {
    size_t o = (size_t)r * m + i;
    ql[i] = (float)q[o], kl[i] = (float)k[o], vl[i] = (float)v[o], gl[i] = (float)g[o];
  }
  float *ol = falloc(m), *ll = falloc((size_t)H * P), *dql = falloc(m), *dkl = falloc(m), *dvl = falloc(m);
  loom_ring_seg_attn ra = {ring, P, H, D, seg, nseg, NULL};
  ra.work = falloc(loom_ring_seg_attention_work_floats(P, H, D));
  loom_comm_stats_reset();
  loom_ring_seg_attention_forward(&ra, ol, ll, ql, kl, vl);
  double fwd = loom_comm_counters.bytes[LOOM_COLL_SENDRECV];
  loom_ring_seg_attention_backward(&ra, dql, dkl, dvl, gl, ol, ll, ql, kl, vl);
  double bwd = loom_comm_counters.bytes[LOOM_COLL_SENDRECV] - fwd;
  const float *got[5] = {ol, dql, dkl, dvl, ll};
  const double *want[5] = {out, dq, dk, dv, lse};
  const char *names[5] = {"out", "dq", "dk", "dv", "lse"};
  double e[5];
  for (int t = 0; t < 5; t++) {
    double num = 0, den = 0;
    for (size_t i = 0; i < m && (t < 4 || i < (size_t)H * P); i++) {
      /* lse (H, S): this rank's columns [r*P, (r+1)*P) of each head */
      double w = t < 4 ? want[t][(size_t)r * m + i] : want[t][(i / P) * S + (size_t)r * P + i % P];
      num += (got[t][i] - w) * (got[t][i] - w);
      den += w * w;
    }
    e[t] = sqrt(num / (den > 0 ? den : 1));
    CHECK(e[t] <= 1e-5, "seg ring cp=%d rank %d %s: relative error %.3g > 1e-5", cp, r, names[t], e[t]);
  }
  double want_fwd = 2.0 * (cp - 1) * m * sizeof(float);
  CHECK(fwd == want_fwd && bwd == 2 * want_fwd, "seg ring cp=%d: sent fwd %.0f bwd %.0f bytes, "
        "closed form %.0f and %.0f", cp, fwd, bwd, want_fwd, 2 * want_fwd);
  if (r == 0)
    printf("seg ring cp=%d P=%d H=%d D=%d, %d segments: out %.2e dq %.2e dk %.2e dv %.2e lse "
           "%.2e; sent fwd %.0f bwd %.0f bytes\n", cp, P, H, D, nseg, e[0], e[1], e[2], e[3],
           e[4], fwd, bwd);
  free(q), free(k), free(v), free(g), free(out), free(lse), free(dq), free(dk), free(dv);
  free(ql), free(kl), free(vl), free(gl), free(ol), free(ll), free(dql), free(dkl), free(dvl);
  free(ra.work);
}

int main(int argc, char **argv) {
  if (loom_dist_init(&argc, &argv)) return 1;
  int world = loom_dist_world();
  loom_mesh m;
  if (loom_mesh_create_on(&m, 1, 1, world, 1, 1, 60, 0)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 1;
  }
  /* chunks of 24 and 40 tokens: not multiples of the 64-token tile; GQA 4/2 and 4/1 */
  check(&m.cp_comm, 2, 2 * world * 24, 4, 2, 16, true);
  check(&m.cp_comm, 1, 2 * world * 40, 4, 1, 32, true);
  check(&m.cp_comm, 2, 2 * world * 24, 2, 2, 16, false);
  { /* segments of 7, 1, 30, 13, ... tokens (cycled), the last one cut at the end */
    int P = 20, S = P * world, seg[64], n = 0, lens[4] = {7, 1, 30, 13};
    seg[0] = 0;
    while (seg[n] < S) {
      int next = seg[n] + lens[n % 4];
      seg[++n] = next < S ? next : S;
    }
    check_seg(&m.cp_comm, P, 2, 16, seg, n);
    int whole[2] = {0, S}; /* one segment: plain full attention */
    check_seg(&m.cp_comm, P, 3, 32, whole, 1);
  }
  /* every rank's verdict: the job fails when any rank failed */
  double f[1] = {harness_failed};
  loom_comm_allreduce_f64(&m.world_comm, f, 1, LOOM_OP_SUM);
  int rc = 0;
  if (m.rank == 0) {
    printf("ring_attention_check (cp=%d): %d passed on rank 0, %.0f failed on all ranks\n",
           world, harness_passed, f[0]);
    rc = f[0] > 0;
  } else {
    rc = harness_failed > 0;
  }
  loom_mesh_free(&m);
  loom_dist_finalize();
  return rc;
}

/* Flash attention over packed documents (segments) against running each document alone:
 *  - loom_attn_doc_segments: segments and positions of hand-written token rows;
 *  - causal segments: flash forward/backward (fp32, AVX-512 and portable tiles) of a packed
 *    batch vs the plain causal double reference (loom_attention_*_f64, which knows no
 *    segments) run on each document by itself, rows copied back into place: out, lse, dq,
 *    dk, dv within 1e-5 relative norm — the tolerance of test_fast_kernels' flash checks:
 *    the same fp32 sums of <= T products against double (~sqrt(T) u = 1e-6);
 *  - the same packed attention block by block as ring attention computes it (chunks of the
 *    sequence at their offsets, partial outputs merged by log-sum-exp): 1e-5 likewise, and a
 *    query that sees no key of a block gets out 0 and lse -inf there;
 *  - bidirectional segments (causal = 0, the vision encoder's varlen attention) vs
 *    loom_seg_attention_*_f64 of kernels_vision.h: 1e-5 likewise;
 *  - fully masked tiles are skipped: documents of 64 tokens in T = 4096 visit 64 tiles per
 *    head instead of 2080, so the packed forward must take < 1/4 of the causal one's time
 *    (expected ~1/30; the margin absorbs a shared machine);
 *  - loom_rope_pos_*: bitwise equal to loom_rope_* at positions t + offset, and a packed row
 *    equal bitwise to the same row rotated in its document alone. */
#include <omp.h>

#include "ktest.h"
#include "loom/kernels_vision.h"

#define TOL 1e-5

static double *dpair(float **f, size_t n, double scale) {
  double *d = dalloc(n);
  fill_normal(d, n, scale);
  *f = falloc(n);
  to_f32(*f, d, n);
  return d;
}

/* documents of row b: lengths (0-terminated), last token of each = EOD */
#define EOD 7
static void make_tokens(int32_t *tok, int B, int T, const int lens[][8]) {
  for (int b = 0; b < B; b++) {
    int t = 0;
    for (int i = 0; lens[b][i] && t < T; i++)
      for (int u = 0; u < lens[b][i] && t < T; u++, t++)
        tok[(size_t)b * T + t] = u == lens[b][i] - 1 ? EOD : 100 + (t % 13);
    LOOM_ASSERT(t == T);
  }
}

static void test_segments_helper(void) {
  /* row 0: [a EOD][b c EOD][d]  row 1: [EOD][EOD][e f g h] (an EOD at the very start) */
  const int32_t tok[2 * 7] = {1, EOD, 2, 3, EOD, 4, 5, EOD, EOD, 1, 2, 3, 4, 5};
  int lo[14], hi[14], pos[14];
  loom_attn_doc_segments(lo, hi, pos, tok, 2, 7, EOD);
  const int elo[14] = {0, 0, 2, 2, 2, 5, 5, 0, 1, 2, 2, 2, 2, 2};
  const int ehi[14] = {1, 1, 4, 4, 4, 6, 6, 0, 1, 6, 6, 6, 6, 6};
  const int epos[14] = {0, 1, 0, 1, 2, 0, 1, 0, 0, 0, 1, 2, 3, 4};
  CHECK(!memcmp(lo, elo, sizeof lo) && !memcmp(hi, ehi, sizeof hi) && !memcmp(pos, epos, sizeof pos),
        "document segments of hand-written rows");
}

/* rows [s, s+n) of sequence b of x (B,T,H,D) <-> a (1,n,H,D) block */
static void rows_out(double *dst, const double *x, int b, int s, int n, int T, int HD) {
  memcpy(dst, x + ((size_t)b * T + s) * HD, sizeof(double) * (size_t)n * HD);
}
static void rows_in(double *x, const double *src, int b, int s, int n, int T, int HD) {
  memcpy(x + ((size_t)b * T + s) * HD, src, sizeof(double) * (size_t)n * HD);
}

/* The packed attention computed as ring attention does it (src/comm/ring_attention.c), in one
 * process: sequences cut into chunks of c rows, each (query chunk, key chunk <= it) block a
 * flash call at its offsets with the whole sequences' segments, partial outputs merged by
 * log-sum-exp in double; the backward block by block with the merged out and lse. A block
 * where a query sees no key must give that row out = 0 and lse = -inf (counted in *empty). */
static void flash_by_blocks(float *of, float *lf, float *dqf, float *dkf, float *dvf,
                            const float *qf, const float *kf, const float *vf, const float *gf,
                            int B, int T, int Hq, int Hkv, int D, const int *lo, const int *hi,
                            int c, long *empty, long *bad_empty) {
  size_t cq = (size_t)c * Hq * D, ck = (size_t)c * Hkv * D;
  float *o = falloc(cq), *l = falloc((size_t)Hq * c), *dq = falloc(cq), *dk = falloc(ck);
  float *dv = falloc(ck), *lc = falloc((size_t)Hq * c), *work = falloc((size_t)Hq * c);
  double *O = dalloc((size_t)B * T * Hq * D), *L = dalloc((size_t)B * Hq * T);
  memset(O, 0, sizeof(double) * B * T * Hq * D);
  for (size_t i = 0; i < (size_t)B * Hq * T; i++) L[i] = -INFINITY;
  memset(dqf, 0, sizeof(float) * B * T * Hq * D), memset(dkf, 0, sizeof(float) * B * T * Hkv * D);
  memset(dvf, 0, sizeof(float) * B * T * Hkv * D);
  for (int pass = 0; pass < 2; pass++) {
    for (int b = 0; b < B; b++)
      for (int qc = 0; qc < T / c; qc++)
        for (int kc = 0; kc <= qc; kc++) {
          loom_attn_mask m = {.causal = kc == qc, .seg_lo = lo + (size_t)b * T,
                              .seg_hi = hi + (size_t)b * T, .seg_stride = T, .q_off = qc * c,
                              .k_off = kc * c};
          size_t qo = ((size_t)b * T + (size_t)qc * c) * Hq * D;
          size_t ko = ((size_t)b * T + (size_t)kc * c) * Hkv * D;
          if (pass == 0) {
            loom_flash_attention_forward_f32(o, l, qf + qo, kf + ko, vf + ko, 1, c, Hq, Hkv, D, m);
            for (int t = 0; t < c; t++)
              for (int h = 0; h < Hq; h++) {
                double lp = l[(size_t)h * c + t], *Lt = L + ((size_t)b * Hq + h) * T + qc * c + t;
                const float *op = o + ((size_t)t * Hq + h) * D;
                double *Ot = O + qo + ((size_t)t * Hq + h) * D;
                if (lp == -INFINITY) {
                  ++*empty;
                  for (int d = 0; d < D; d++) *bad_empty += op[d] != 0;
                  continue;
                }
                double nl = *Lt == -INFINITY ? lp : fmax(*Lt, lp) + log1p(exp(-fabs(*Lt - lp)));
                double wa = *Lt == -INFINITY ? 0 : exp(*Lt - nl), wb = exp(lp - nl);
                for (int d = 0; d < D; d++) Ot[d] = wa * Ot[d] + wb * op[d];
                *Lt = nl;
              }
          } else {
            for (int h = 0; h < Hq; h++)
              memcpy(lc + (size_t)h * c, lf + ((size_t)b * Hq + h) * T + qc * c,
                     sizeof(float) * c);
            loom_flash_attention_backward_f32(dq, dk, dv, gf + qo, of + qo, lc, qf + qo, kf + ko,
                                              vf + ko, 1, c, Hq, Hkv, D, m, work);
            for (size_t i = 0; i < cq; i++) dqf[qo + i] += dq[i];
            for (size_t i = 0; i < ck; i++) dkf[ko + i] += dk[i], dvf[ko + i] += dv[i];
          }
        }
    if (pass == 0) {
      for (size_t i = 0; i < (size_t)B * T * Hq * D; i++) of[i] = (float)O[i];
      for (size_t i = 0; i < (size_t)B * Hq * T; i++) lf[i] = (float)L[i];
    }
  }
  loom_free(o), loom_free(l), loom_free(dq), loom_free(dk), loom_free(dv), loom_free(lc);
  loom_free(work), loom_free(O), loom_free(L);
}

/* chunk > 0: computed block by block (flash_by_blocks) with chunks of that many rows */
static void test_packed_causal(int B, int T, int Hq, int Hkv, int D, const int lens[][8],
                               int chunk) {
  size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * Hq * T;
  int32_t *tok = malloc(sizeof(int32_t) * B * T);
  int *lo = malloc(sizeof(int) * B * T), *hi = malloc(sizeof(int) * B * T);
  make_tokens(tok, B, T, lens);
  loom_attn_doc_segments(lo, hi, NULL, tok, B, T, EOD);
  loom_attn_mask mask = {.causal = 1, .seg_lo = lo, .seg_hi = hi};
  float *qf, *kf, *vf, *gf;
  double *q = dpair(&qf, nq, 1), *k = dpair(&kf, nk, 1), *v = dpair(&vf, nk, 1);
  double *dout = dpair(&gf, nq, 1);
  double *out = dalloc(nq), *lse = dalloc(nl), *dq = dalloc(nq), *dk = dalloc(nk), *dv = dalloc(nk);
  /* the reference: every document alone through the plain causal kernel */
  double *bq = dalloc(nq), *bk = dalloc(nk), *bv = dalloc(nk), *bg = dalloc(nq), *bo = dalloc(nq);
  double *bl = dalloc(nl), *bdq = dalloc(nq), *bdk = dalloc(nk), *bdv = dalloc(nk);
  int docs = 0;
  for (int b = 0; b < B; b++)
    for (int s = 0, i = 0; lens[b][i]; s += lens[b][i], i++, docs++) {
      int n = lens[b][i];
      rows_out(bq, q, b, s, n, T, Hq * D), rows_out(bk, k, b, s, n, T, Hkv * D);
      rows_out(bv, v, b, s, n, T, Hkv * D), rows_out(bg, dout, b, s, n, T, Hq * D);
      memset(bdq, 0, sizeof(double) * nq), memset(bdk, 0, sizeof(double) * nk);
      memset(bdv, 0, sizeof(double) * nk);
      loom_attention_forward_f64(bo, bl, bq, bk, bv, 1, n, Hq, Hkv, D);
      loom_attention_backward_f64(bdq, bdk, bdv, bg, bo, bl, bq, bk, bv, 1, n, Hq, Hkv, D);
      rows_in(out, bo, b, s, n, T, Hq * D), rows_in(dq, bdq, b, s, n, T, Hq * D);
      rows_in(dk, bdk, b, s, n, T, Hkv * D), rows_in(dv, bdv, b, s, n, T, Hkv * D);
      for (int h = 0; h < Hq; h++) /* lse (1,Hq,n) -> (B,Hq,T) */
        memcpy(lse + ((size_t)b * Hq + h) * T + s, bl + (size_t)h * n, sizeof(double) * n);
    }
  float *of = falloc(nq), *lf = falloc(nl), *dqf = falloc(nq), *dkf = falloc(nk), *dvf = falloc(nk);
  float *work = falloc(nl);
  long empty = 0, bad_empty = 0;
  if (chunk > 0) {
    flash_by_blocks(of, lf, dqf, dkf, dvf, qf, kf, vf, gf, B, T, Hq, Hkv, D, lo, hi, chunk,
                    &empty, &bad_empty);
    CHECK(empty > 0 && bad_empty == 0, "blocks: %ld rows saw no key, %ld nonzero outputs there",
          empty, bad_empty);
  } else {
    loom_flash_attention_forward_f32(of, lf, qf, kf, vf, B, T, Hq, Hkv, D, mask);
    loom_flash_attention_backward_f32(dqf, dkf, dvf, gf, of, lf, qf, kf, vf, B, T, Hq, Hkv, D,
                                      mask, work);
  }
  char what[96];
  snprintf(what, sizeof what, "packed %d docs B=%d T=%d H=%d/%d D=%d%s", docs, B, T, Hq, Hkv, D,
           chunk > 0 ? " in blocks" : "");
  CHECK_REL(rel_err_fd(of, out, nq), TOL, "%s out", what);
  CHECK_REL(rel_err_fd(lf, lse, nl), TOL, "%s lse", what);
  CHECK_REL(rel_err_fd(dqf, dq, nq), TOL, "%s dq", what);
  CHECK_REL(rel_err_fd(dkf, dk, nk), TOL, "%s dk", what);
  CHECK_REL(rel_err_fd(dvf, dv, nk), TOL, "%s dv", what);
  double *all[] = {q, k, v, dout, out, lse, dq, dk, dv, bq, bk, bv, bg, bo, bl, bdq, bdk, bdv};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) loom_free(all[i]);
  float *fall[] = {qf, kf, vf, gf, of, lf, dqf, dkf, dvf, work};
  for (size_t i = 0; i < sizeof fall / sizeof *fall; i++) loom_free(fall[i]);
  free(tok), free(lo), free(hi);
}

/* causal = 0 segments vs the vision encoder's varlen reference (one sequence, Hq == Hkv) */
static void test_packed_bidirectional(int T, int H, int D, const int *bounds, int n_seg) {
  size_t n = (size_t)T * H * D, nl = (size_t)H * T;
  int *lo = malloc(sizeof(int) * T), *hi = malloc(sizeof(int) * T);
  for (int s = 0; s < n_seg; s++)
    for (int t = bounds[s]; t < bounds[s + 1]; t++) lo[t] = bounds[s], hi[t] = bounds[s + 1] - 1;
  loom_attn_mask mask = {.causal = 0, .seg_lo = lo, .seg_hi = hi};
  float *qf, *kf, *vf, *gf;
  double *q = dpair(&qf, n, 1), *k = dpair(&kf, n, 1), *v = dpair(&vf, n, 1);
  double *dout = dpair(&gf, n, 1);
  double *out = dalloc(n), *lse = dalloc(nl), *dq = dalloc(n), *dk = dalloc(n), *dv = dalloc(n);
  memset(dq, 0, sizeof(double) * n), memset(dk, 0, sizeof(double) * n);
  memset(dv, 0, sizeof(double) * n);
  loom_seg_attention_forward_f64(out, lse, q, k, v, T, H, D, bounds, n_seg);
  loom_seg_attention_backward_f64(dq, dk, dv, dout, out, lse, q, k, v, T, H, D, bounds, n_seg);
  float *of = falloc(n), *lf = falloc(nl), *dqf = falloc(n), *dkf = falloc(n), *dvf = falloc(n);
  float *work = falloc(nl);
  loom_flash_attention_forward_f32(of, lf, qf, kf, vf, 1, T, H, H, D, mask);
  loom_flash_attention_backward_f32(dqf, dkf, dvf, gf, of, lf, qf, kf, vf, 1, T, H, H, D, mask,
                                    work);
  char what[96];
  snprintf(what, sizeof what, "bidirectional %d segments T=%d H=%d D=%d", n_seg, T, H, D);
  CHECK_REL(rel_err_fd(of, out, n), TOL, "%s out", what);
  CHECK_REL(rel_err_fd(lf, lse, nl), TOL, "%s lse", what); /* both (H,T) for B = 1 */
  CHECK_REL(rel_err_fd(dqf, dq, n), TOL, "%s dq", what);
  CHECK_REL(rel_err_fd(dkf, dk, n), TOL, "%s dk", what);
  CHECK_REL(rel_err_fd(dvf, dv, n), TOL, "%s dv", what);
  double *all[] = {q, k, v, dout, out, lse, dq, dk, dv};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) loom_free(all[i]);
  float *fall[] = {qf, kf, vf, gf, of, lf, dqf, dkf, dvf, work};
  for (size_t i = 0; i < sizeof fall / sizeof *fall; i++) loom_free(fall[i]);
  free(lo), free(hi);
}

static void run_all(void) {
  /* documents across tile edges (64), a 1-token document, an EOD-only document, a whole row */
  const int a[2][8] = {{70, 1, 64, 65}, {200}};
  test_packed_causal(2, 200, 4, 2, 16, a, 0);
  test_packed_causal(2, 200, 2, 2, 64, a, 0);
  const int b[3][8] = {{3, 130, 67}, {1, 1, 1, 197}, {64, 64, 72}};
  test_packed_causal(3, 200, 3, 1, 32, b, 0);
  test_packed_causal(3, 200, 2, 1, 12, b, 0); /* D not a multiple of 16: portable tiles */
  /* ring attention's blocks (cp = 2 and 4 of T = 200: chunks of 50 and 25 rows) */
  test_packed_causal(2, 200, 4, 2, 16, a, 50);
  test_packed_causal(3, 200, 3, 1, 32, b, 25);
  const int s1[] = {0, 16, 80, 81, 150}, s2[] = {0, 64, 128, 192};
  test_packed_bidirectional(150, 2, 16, s1, 4);
  test_packed_bidirectional(192, 3, 40, s2, 3);
}

static double time_forward(int T, int H, int D, loom_attn_mask mask) {
  size_t n = (size_t)T * H * D;
  float *x = falloc(3 * n), *o = falloc(n), *l = falloc((size_t)H * T);
  for (size_t i = 0; i < 3 * n; i++) x[i] = (float)loom_rng_normal(&ktest_rng);
  double best = 1e30;
  for (int r = 0; r < 3; r++) {
    double t0 = loom_now();
    loom_flash_attention_forward_f32(o, l, x, x + n, x + 2 * n, 1, T, H, H, D, mask);
    double dt = loom_now() - t0;
    best = dt < best ? dt : best;
  }
  loom_free(x), loom_free(o), loom_free(l);
  return best;
}

static void test_tile_skipping(void) {
  const int T = 4096, H = 2, D = 64;
  int32_t *tok = malloc(sizeof(int32_t) * T);
  int *lo = malloc(sizeof(int) * T), *hi = malloc(sizeof(int) * T);
  for (int t = 0; t < T; t++) tok[t] = t % 64 == 63 ? EOD : 1;
  loom_attn_doc_segments(lo, hi, NULL, tok, 1, T, EOD);
  omp_set_num_threads(1);
  double causal = time_forward(T, H, D, (loom_attn_mask){.causal = 1});
  double packed =
      time_forward(T, H, D, (loom_attn_mask){.causal = 1, .seg_lo = lo, .seg_hi = hi});
  omp_set_num_threads(2);
  printf("  forward T=%d: causal %.4f s, 64 documents of 64 tokens %.4f s (ratio %.1f)\n", T,
         causal, packed, causal / packed);
  CHECK(packed < causal / 4, "fully masked tiles not skipped: packed %.4f s vs causal %.4f s",
        packed, causal);
  free(tok), free(lo), free(hi);
}

static void test_rope_pos(void) {
  const int B = 2, T = 37, H = 3, D = 16, off = 5;
  size_t n = (size_t)B * T * H * D;
  float *x = falloc(n), *a = falloc(n), *b = falloc(n);
  int *pos = malloc(sizeof(int) * B * T);
  for (size_t i = 0; i < n; i++) x[i] = (float)loom_rng_normal(&ktest_rng);
  for (int r = 0; r < B * T; r++) pos[r] = r % T + off;
  for (int dir = 0; dir < 2; dir++) {
    memcpy(a, x, n * sizeof(float)), memcpy(b, x, n * sizeof(float));
    if (dir) {
      loom_rope_backward_f32(a, B, T, H, D, 10000.0, off);
      loom_rope_pos_backward_f32(b, B * T, H, D, 10000.0, pos);
    } else {
      loom_rope_forward_f32(a, B, T, H, D, 10000.0, off);
      loom_rope_pos_forward_f32(b, B * T, H, D, 10000.0, pos);
    }
    CHECK(!memcmp(a, b, n * sizeof(float)), "rope with positions t + %d (%s) not bitwise equal",
          off, dir ? "backward" : "forward");
  }
  /* packed: rows 10..36 of sequence 0 are a document starting at 0 */
  for (int t = 0; t < T; t++) pos[t] = t < 10 ? t : t - 10;
  memcpy(a, x, n * sizeof(float));
  loom_rope_pos_forward_f32(a, T, H, D, 500000.0, pos);
  memcpy(b, x + (size_t)10 * H * D, (size_t)(T - 10) * H * D * sizeof(float));
  loom_rope_forward_f32(b, 1, T - 10, H, D, 500000.0, 0);
  CHECK(!memcmp(a + (size_t)10 * H * D, b, (size_t)(T - 10) * H * D * sizeof(float)),
        "a packed document's rotary positions differ from the document alone");
  loom_free(x), loom_free(a), loom_free(b);
  free(pos);
}

int main(void) {
  loom_rng_seed(&ktest_rng, 15);
  test_segments_helper();
  printf("packed flash attention, %s path\n", loom_kernels_simd());
  run_all();
  if (!strcmp(loom_kernels_simd(), "avx512")) { /* the AVX2 tiles too */
    loom_kernels_force_avx2(1);
    printf("packed flash attention, %s path\n", loom_kernels_simd());
    run_all();
    loom_kernels_force_avx2(0);
  }
  if (strcmp(loom_kernels_simd(), "generic")) { /* avx512 or avx2: the portable path too */
    loom_kernels_force_generic(1);
    printf("packed flash attention, %s path\n", loom_kernels_simd());
    run_all();
    loom_kernels_force_generic(0);
  }
  test_rope_pos();
  test_tile_skipping();
  ktest_report_worst();
  return harness_finish("test_flash_segments");
}

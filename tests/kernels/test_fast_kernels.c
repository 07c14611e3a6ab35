/* The fast kernels the decoder runs (AVX-512 and portable paths, oneDNN and OpenBLAS GEMMs)
 * against the reference kernels:
 *  - GEMM fp32 (every transpose, bias, beta 0/1, both backends) vs a double GEMM: 1e-5 rel.
 *    norm (sums of K <= 200 float products: ~sqrt(K) u = 1e-6);
 *  - ragged GEMM (loom_gemm_f32_ragged: M and K changing call to call) vs the double GEMM,
 *    1e-5, with one oneDNN primitive per kind of call, not per shape;
 *  - GEMM bf16 vs the double GEMM of the bf16-rounded inputs: 1e-5 (products of bf16 values
 *    are exact in fp32, so only the fp32 accumulation differs — what the PyTorch bf16 check
 *    emulates);
 *  - bf16 GEMM on weights (loom_gemm_bf16_w): plain, packed and measured layouts bitwise equal
 *    to loom_gemm_bf16; a packed weight changed in place is stale until
 *    loom_gemm_weights_changed, then right again;
 *  - bf16 conversion: bit-exact vs loom_f32_to_bf16 (ties, NaN, inf, subnormals, in place);
 *  - residual + norm, norm backward, bias + GELU, GELU/SwiGLU backward, cross-entropy
 *    statistics and gradient: vs the f64 reference, 1e-5 rel. norm (as test_kernels_f32);
 *  - one-pass AdamW: bitwise equal to loom_adamw_f32 tensor by tensor, clip and bf16 copy;
 *  - flash attention forward/backward: causal vs loom_attention_*_f64, full/windowed/causal
 *    windows vs loom_attention_masked_*_f64 (itself checked by finite differences here):
 *    1e-5 (GQA, T not a multiple of the 64-row tile, D = 16, 32, 64, 80);
 *  - results of every fast kernel but the GEMM identical for 1 and 3 threads. */
#include <omp.h>

#include "ktest.h"

#define TOL 1e-5

static double *dpair(float **f, size_t n, double scale) {
  double *d = dalloc(n);
  fill_normal(d, n, scale);
  *f = falloc(n);
  to_f32(*f, d, n);
  return d;
}

/* ---- GEMM ---------------------------------------------------------------------------------- */

static void gemm_ref(int ta, int tb, int M, int N, int K, const double *A, const double *B,
                     const double *bias, double beta, double *C) {
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double s = 0;
      for (int k = 0; k < K; k++)
        s += (ta ? A[(size_t)k * M + m] : A[(size_t)m * K + k]) *
             (tb ? B[(size_t)n * K + k] : B[(size_t)k * N + n]);
      C[(size_t)m * N + n] = s + (bias ? bias[n] : 0) + beta * C[(size_t)m * N + n];
    }
}

static void test_gemm(void) {
  /* the second shape's reduction is cut into blocks on oneDNN (three of 8192 with a tail) */
  const int shapes[2][3] = {{70, 48, 200}, {9, 7, 2 * 8192 + 3700}};
  for (int sh = 0; sh < 2; sh++)
  for (int be = 0; be < 2; be++) {
    const int M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2];
    loom_gemm_set_backend(be ? LOOM_GEMM_OPENBLAS : LOOM_GEMM_ONEDNN);
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int mode = 0; mode < 3; mode++) { /* 0: plain, 1: bias, 2: beta = 1 */
          float *Af, *Bf, *Cf, *bf;
          double *A = dpair(&Af, (size_t)M * K, 1), *B = dpair(&Bf, (size_t)K * N, 1);
          double *C = dpair(&Cf, (size_t)M * N, 1), *bias = dpair(&bf, N, 1);
          gemm_ref(ta, tb, M, N, K, A, B, mode == 1 ? bias : NULL, mode == 2 ? 1 : 0, C);
          loom_gemm_f32(ta, tb, M, N, K, Af, ta ? M : K, Bf, tb ? K : N, mode == 1 ? bf : NULL,
                        mode == 2 ? 1.0f : 0.0f, Cf, N);
          CHECK_REL(rel_err_fd(Cf, C, (size_t)M * N), TOL, "gemm f32 %s K=%d ta=%d tb=%d mode=%d",
                    loom_gemm_backend_name(loom_gemm_get_backend()), K, ta, tb, mode);
          if (be == 0 && loom_gemm_bf16_native()) { /* bf16 operands, exact products */
            uint16_t *Ah = loom_alloc((size_t)M * K * 2), *Bh = loom_alloc((size_t)K * N * 2);
            loom_f32_to_bf16_n(Ah, Af, (size_t)M * K);
            loom_f32_to_bf16_n(Bh, Bf, (size_t)K * N);
            for (size_t i = 0; i < (size_t)M * K; i++) A[i] = loom_bf16_to_f32(Ah[i]);
            for (size_t i = 0; i < (size_t)K * N; i++) B[i] = loom_bf16_to_f32(Bh[i]);
            fill_normal(C, (size_t)M * N, 1);
            to_f32(Cf, C, (size_t)M * N);
            gemm_ref(ta, tb, M, N, K, A, B, mode == 1 ? bias : NULL, mode == 2 ? 1 : 0, C);
            loom_gemm_bf16(ta, tb, M, N, K, Ah, ta ? M : K, Bh, tb ? K : N,
                           mode == 1 ? bf : NULL, mode == 2 ? 1.0f : 0.0f, Cf, N);
            CHECK_REL(rel_err_fd(Cf, C, (size_t)M * N), TOL, "gemm bf16 K=%d ta=%d tb=%d mode=%d", K,
                      ta, tb, mode);
            loom_free(Ah), loom_free(Bh);
          }
          loom_free(A), loom_free(B), loom_free(C), loom_free(bias);
          loom_free(Af), loom_free(Bf), loom_free(Cf), loom_free(bf);
        }
  }
  loom_gemm_set_backend(LOOM_GEMM_ONEDNN);
  printf("  oneDNN ISA %s, bf16 native %d, %d cached primitives\n", loom_gemm_isa(),
         loom_gemm_bf16_native(), loom_gemm_cache_entries());
}

/* ---- ragged GEMM (the routed experts' products) --------------------------------------------- */

/* loom_gemm_f32_ragged over row counts that change call to call (M and K: 1 to 161, as the
 * experts' rows and the weight gradients' sums over them, then 3000 rows and a sum over 2500):
 * every call within TOL of the double GEMM (sums of K <= 2500 products: ~sqrt(K) u = 3e-6),
 * and oneDNN keeps one primitive per (transposes, beta) with N and the leading dimensions
 * fixed, not one per shape: 8 (4 transposes x 2 betas) for all of them. */
static void test_gemm_ragged(void) {
  const int rows[5] = {1, 37, 128, 161, 64}, N = 48, LD = 200;
  loom_gemm_set_backend(LOOM_GEMM_ONEDNN);
  int before = loom_gemm_cache_entries();
  for (int i = 0; i < 5; i++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int beta = 0; beta < 2; beta++) {
          int M = rows[i], K = rows[(i + 2) % 5]; /* both vary */
          /* fixed leading dimensions (LD >= every M and K), as in the experts' buffers */
          size_t na = (size_t)(ta ? K : M) * LD, nb = (size_t)(tb ? N : K) * (tb ? LD : N);
          float *Af, *Bf, *Cf;
          double *A = dpair(&Af, na, 1), *B = dpair(&Bf, nb, 1), *C = dpair(&Cf, (size_t)M * N, 1);
          double *Ad = dalloc((size_t)M * K), *Bd = dalloc((size_t)K * N);
          for (int m = 0; m < M; m++) /* the (M,K) / (K,N) operands the strides describe */
            for (int k = 0; k < K; k++)
              Ad[ta ? (size_t)k * M + m : (size_t)m * K + k] = ta ? A[(size_t)k * LD + m] : A[(size_t)m * LD + k];
          for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++)
              Bd[tb ? (size_t)n * K + k : (size_t)k * N + n] = tb ? B[(size_t)n * LD + k] : B[(size_t)k * N + n];
          gemm_ref(ta, tb, M, N, K, Ad, Bd, NULL, beta, C);
          loom_gemm_f32_ragged(ta, tb, M, N, K, Af, LD, Bf, tb ? LD : N, (float)beta, Cf, N);
          CHECK_REL(rel_err_fd(Cf, C, (size_t)M * N), TOL, "ragged gemm M=%d K=%d ta=%d tb=%d beta=%d",
                    M, K, ta, tb, beta);
          loom_free(A), loom_free(B), loom_free(C), loom_free(Ad), loom_free(Bd);
          loom_free(Af), loom_free(Bf), loom_free(Cf);
        }
  /* large row counts through the primitives made for the small ones (the scratchpad oneDNN
   * sized at their creation must serve them): M = 3000 rows (ta = 0), a sum over K = 2500 rows
   * (ta = 1, the weight gradients' form) */
  for (int ta = 0; ta < 2; ta++) {
    int M = ta ? 150 : 3000, K = ta ? 2500 : 150;
    float *Af, *Bf, *Cf;
    double *A = dpair(&Af, (size_t)(ta ? K : M) * LD, 1), *B = dpair(&Bf, (size_t)K * N, 1);
    double *C = dpair(&Cf, (size_t)M * N, 1), *Ad = dalloc((size_t)M * K);
    for (int m = 0; m < M; m++)
      for (int k = 0; k < K; k++)
        Ad[ta ? (size_t)k * M + m : (size_t)m * K + k] = ta ? A[(size_t)k * LD + m] : A[(size_t)m * LD + k];
    gemm_ref(ta, 0, M, N, K, Ad, B, NULL, 1, C);
    loom_gemm_f32_ragged(ta, 0, M, N, K, Af, LD, Bf, N, 1.0f, Cf, N);
    CHECK_REL(rel_err_fd(Cf, C, (size_t)M * N), TOL, "ragged gemm M=%d K=%d ta=%d (large)", M, K, ta);
    loom_free(A), loom_free(B), loom_free(C), loom_free(Ad), loom_free(Af), loom_free(Bf), loom_free(Cf);
  }
  int made = loom_gemm_cache_entries() - before;
  CHECK(made == 8, "ragged gemm: %d primitives for 42 calls of 7 row counts (want 8: one per "
        "kind of call)", made);
  printf("  ragged GEMM: %d primitives for 42 calls of 7 row counts\n", made);
}

/* ---- bf16 GEMM on weights ------------------------------------------------------------------ */

static void test_gemm_weights(void) {
  if (!loom_gemm_bf16_native()) {
    printf("  (no native bf16 GEMM: weights layouts not checked)\n");
    return;
  }
  /* shapes where oneDNN 2.6 picks a blocked layout for B (the stale check below fails if
   * the packed path did not run) */
  const int shapes[6][3] = {{333, 100, 77}, {64, 256, 512}, {130, 96, 200}, {66, 96, 96}, {66, 32, 96}, {66, 96, 32}};
  for (int sh = 0; sh < 6; sh++)
    for (int tb = 0; tb < 2; tb++)
      for (int mode = 0; mode < 3; mode++) { /* 0: plain, 1: bias, 2: beta = 1 */
        const int M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2];
        size_t nc = (size_t)M * N;
        float *Af, *Wf, *bf, *C0 = falloc(nc), *C1 = falloc(nc);
        double *A = dpair(&Af, (size_t)M * K, 1), *W = dpair(&Wf, (size_t)K * N, 1);
        double *bias = dpair(&bf, N, 1);
        uint16_t *Ah = loom_alloc((size_t)M * K * 2), *Wh = loom_alloc((size_t)K * N * 2);
        loom_f32_to_bf16_n(Ah, Af, (size_t)M * K);
        loom_f32_to_bf16_n(Wh, Wf, (size_t)K * N);
        const float *b = mode == 1 ? bf : NULL;
        float beta = mode == 2 ? 1.0f : 0.0f;
        int ldw = tb ? K : N;
        for (size_t i = 0; i < nc; i++) C0[i] = (float)i * 1e-3f;
        loom_gemm_bf16(0, tb, M, N, K, Ah, K, Wh, ldw, b, beta, C0, N);
        for (int force = 0; force < 3; force++) { /* plain, packed, measured (8 calls) */
          loom_gemm_pack_force(force == 2 ? -1 : force);
          for (int call = 0; call < (force == 2 ? 8 : 1); call++) {
            for (size_t i = 0; i < nc; i++) C1[i] = (float)i * 1e-3f;
            loom_gemm_bf16_w(0, tb, M, N, K, Ah, K, Wh, ldw, b, beta, C1, N);
            CHECK(!memcmp(C0, C1, nc * sizeof(float)), "gemm bf16 weights (%d,%d,%d) tb=%d "
                  "mode=%d %s call %d: not bitwise the plain GEMM", M, N, K, tb, mode,
                  force == 0 ? "plain" : force == 1 ? "packed" : "measured", call);
          }
        }
        /* a packed weight changed in place: stale until loom_gemm_weights_changed */
        loom_gemm_pack_force(1);
        for (size_t i = 0; i < (size_t)K * N; i++) Wh[i] ^= 0x0100; /* new values */
        for (size_t i = 0; i < nc; i++) C0[i] = C1[i] = (float)i * 1e-3f;
        loom_gemm_bf16(0, tb, M, N, K, Ah, K, Wh, ldw, b, beta, C0, N);
        loom_gemm_bf16_w(0, tb, M, N, K, Ah, K, Wh, ldw, b, beta, C1, N);
        CHECK(memcmp(C0, C1, nc * sizeof(float)), "gemm bf16 weights (%d,%d,%d) tb=%d: the "
              "packed copy was not used (a changed weight gave the new result unannounced)",
              M, N, K, tb);
        loom_gemm_weights_changed(Wh, (size_t)K * N * 2);
        for (size_t i = 0; i < nc; i++) C1[i] = (float)i * 1e-3f;
        loom_gemm_bf16_w(0, tb, M, N, K, Ah, K, Wh, ldw, b, beta, C1, N);
        CHECK(!memcmp(C0, C1, nc * sizeof(float)), "gemm bf16 weights (%d,%d,%d) tb=%d: stale "
              "after loom_gemm_weights_changed", M, N, K, tb);
        loom_gemm_weights_release(Wh, (size_t)K * N * 2);
        loom_gemm_pack_force(-1);
        loom_free(Ah), loom_free(Wh), loom_free(A), loom_free(W), loom_free(bias);
        loom_free(Af), loom_free(Wf), loom_free(bf), loom_free(C0), loom_free(C1);
      }
}

/* one weight read as W (a forward) and as W^T (an input gradient), both packed: two copies */
static void test_gemm_weights_both_ways(void) {
  if (!loom_gemm_bf16_native()) return;
  enum { M = 66, C = 96 };
  float *Af, *Wf, *C0 = falloc(M * C), *C1 = falloc(M * C);
  double *A = dpair(&Af, M * C, 1), *W = dpair(&Wf, C * C, 1);
  uint16_t *Ah = loom_alloc(M * C * 2), *Wh = loom_alloc(C * C * 2);
  loom_f32_to_bf16_n(Ah, Af, M * C);
  loom_f32_to_bf16_n(Wh, Wf, C * C);
  loom_gemm_pack_force(1);
  for (int rep = 0; rep < 2; rep++)
    for (int tb = 0; tb < 2; tb++) {
      loom_gemm_bf16(0, tb, M, C, C, Ah, C, Wh, C, NULL, 0.0f, C0, C);
      loom_gemm_bf16_w(0, tb, M, C, C, Ah, C, Wh, C, NULL, 0.0f, C1, C);
      CHECK(!memcmp(C0, C1, M * C * sizeof(float)), "gemm bf16 weights: W read with tb=%d "
            "after tb=%d gave another product (packed copies confused)", tb, !tb);
    }
  loom_gemm_weights_release(Wh, C * C * 2);
  loom_gemm_pack_force(-1);
  loom_free(Ah), loom_free(Wh), loom_free(A), loom_free(W);
  loom_free(Af), loom_free(Wf), loom_free(C0), loom_free(C1);
}

/* ---- bf16 conversion ----------------------------------------------------------------------- */

static void test_bf16(void) {
  enum { N = 1000 };
  float *x = falloc(N), *y = falloc(N);
  uint16_t *h = loom_alloc(N * 2);
  uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00001u, 0xffa00000u, 0x00000001u,
                        0x807fffffu, 0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x7f7fffffu};
  for (int i = 0; i < N; i++) x[i] = (float)loom_rng_normal(&ktest_rng) * 1e3f;
  memcpy(x, special, sizeof special);
  loom_f32_to_bf16_n(h, x, N);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += h[i] != loom_f32_to_bf16(x[i]);
  CHECK(bad == 0, "bf16 conversion differs from loom_f32_to_bf16 in %d values", bad);
  memcpy(y, x, N * sizeof(float));
  loom_f32_to_bf16_n((uint16_t *)y, y, N); /* in place */
  bad = 0;
  for (int i = 0; i < N; i++) bad += ((uint16_t *)y)[i] != h[i];
  CHECK(bad == 0, "in-place bf16 conversion differs in %d values", bad);
  loom_free(x), loom_free(y), loom_free(h);
}

/* ---- norms, activations, cross-entropy ----------------------------------------------------- */

static void test_norm(int N, int C, int ln) {
  size_t n = (size_t)N * C;
  float *xf, *rf, *bsf, *wf, *bf, *dyf;
  double *x = dpair(&xf, n, 1), *res = dpair(&rf, n, 1), *bias = dpair(&bsf, C, 1);
  double *w = dpair(&wf, C, 1), *b = dpair(&bf, C, 1), *dy = dpair(&dyf, n, 1);
  double *r = dalloc(n), *y = dalloc(n), *mean = dalloc(N), *rstd = dalloc(N);
  for (size_t i = 0; i < n; i++) r[i] = x[i] + res[i] + bias[i % C];
  if (ln) loom_layernorm_forward_f64(y, mean, rstd, r, w, b, N, C, 1e-5);
  else loom_rmsnorm_forward_f64(y, rstd, r, w, N, C, 1e-5);
  float *rr = falloc(n), *yy = falloc(n), *mm = falloc(N), *ss = falloc(N);
  loom_add_norm_forward_f32(rr, yy, ln ? mm : NULL, ss, xf, rf, bsf, wf, ln ? bf : NULL, N, C, 1e-5f);
  CHECK_REL(rel_err_fd(rr, r, n), TOL, "%s residual N=%d C=%d", ln ? "layernorm" : "rmsnorm", N, C);
  CHECK_REL(rel_err_fd(yy, y, n), TOL, "%s forward N=%d C=%d", ln ? "layernorm" : "rmsnorm", N, C);
  /* backward accumulates into nonzero gradients */
  float *dxf, *dwf, *dbf;
  double *dx = dpair(&dxf, n, 1), *dw = dpair(&dwf, C, 1), *db = dpair(&dbf, C, 1);
  if (ln) loom_layernorm_backward_f64(dx, dw, db, dy, r, w, mean, rstd, N, C);
  else loom_rmsnorm_backward_f64(dx, dw, dy, r, w, rstd, N, C);
  loom_norm_backward_fast_f32(dxf, dwf, dbf, dyf, rr, wf, ln ? mm : NULL, ss, N, C);
  CHECK_REL(rel_err_fd(dxf, dx, n), TOL, "%s dx", ln ? "layernorm" : "rmsnorm");
  CHECK_REL(rel_err_fd(dwf, dw, C), TOL, "%s dw", ln ? "layernorm" : "rmsnorm");
  if (ln) CHECK_REL(rel_err_fd(dbf, db, C), TOL, "layernorm db");
  double *ddb = dalloc(C);
  float *fdb = falloc(C);
  for (int c = 0; c < C; c++) ddb[c] = db[c], fdb[c] = (float)db[c];
  loom_linear_backward_f64(NULL, NULL, ddb, dy, NULL, NULL, N, 0, C);
  loom_bias_grad_f32(fdb, dyf, N, C);
  CHECK_REL(rel_err_fd(fdb, ddb, C), TOL, "bias gradient N=%d C=%d", N, C);
  double *ry = dalloc(n);
  float *fy = falloc(n);
  for (size_t i = 0; i < n; i++) ry[i] = x[i] + res[i] + bias[i % C];
  loom_residual_add_f32(fy, xf, rf, bsf, N, C);
  CHECK_REL(rel_err_fd(fy, ry, n), TOL, "residual add N=%d C=%d", N, C);
  loom_free(x), loom_free(res), loom_free(bias), loom_free(w), loom_free(b), loom_free(dy);
  loom_free(r), loom_free(y), loom_free(mean), loom_free(rstd), loom_free(dx), loom_free(dw);
  loom_free(db), loom_free(ddb), loom_free(fdb), loom_free(ry), loom_free(fy);
  loom_free(xf), loom_free(rf), loom_free(bsf), loom_free(wf), loom_free(bf), loom_free(dyf);
  loom_free(rr), loom_free(yy), loom_free(mm), loom_free(ss), loom_free(dxf), loom_free(dwf);
  loom_free(dbf);
}

static void test_act(int N, int C) {
  size_t n = (size_t)N * C;
  float *uf, *bf, *gf, *dyf;
  double *u = dpair(&uf, n, 2), *bias = dpair(&bf, C, 0.5), *g = dpair(&gf, n, 3);
  double *dy = dpair(&dyf, n, 1);
  double *ub = dalloc(n), *act = dalloc(n), *du = dalloc(n), *dup = dalloc(n);
  for (size_t i = 0; i < n; i++) ub[i] = u[i] + bias[i % C];
  loom_gelu_forward_f64(act, ub, n);
  loom_gelu_backward_f64(du, dy, ub, n);
  float *af = falloc(n), *duf = falloc(n), *dupf = falloc(n);
  loom_bias_gelu_forward_f32(uf, af, bf, N, C);
  CHECK_REL(rel_err_fd(uf, ub, n), TOL, "bias add before GELU");
  CHECK_REL(rel_err_fd(af, act, n), TOL, "bias + GELU forward n=%zu", n);
  loom_gelu_backward_fast_f32(duf, dyf, uf, n);
  CHECK_REL(rel_err_fd(duf, du, n), TOL, "GELU backward n=%zu", n);
  loom_swiglu_forward_f64(act, g, ub, n);
  loom_swiglu_forward_fast_f32(af, gf, uf, n);
  CHECK_REL(rel_err_fd(af, act, n), TOL, "SwiGLU forward n=%zu", n);
  memset(du, 0, n * sizeof(double));
  memset(dup, 0, n * sizeof(double));
  loom_swiglu_backward_f64(du, dup, dy, g, ub, n);
  loom_swiglu_backward_fast_f32(duf, dupf, dyf, gf, uf, n);
  CHECK_REL(rel_err_fd(duf, du, n), TOL, "SwiGLU dgate");
  CHECK_REL(rel_err_fd(dupf, dup, n), TOL, "SwiGLU dup");
  loom_free(u), loom_free(bias), loom_free(g), loom_free(dy), loom_free(ub), loom_free(act);
  loom_free(du), loom_free(dup), loom_free(uf), loom_free(bf), loom_free(gf), loom_free(dyf);
  loom_free(af), loom_free(duf), loom_free(dupf);
}

static void test_xent(int R, int V, int Vp) {
  float *lf;
  double *l = dpair(&lf, (size_t)R * Vp, 3);
  int32_t *t = malloc(R * sizeof(int32_t));
  for (int r = 0; r < R; r++) t[r] = r % 7 == 3 ? LOOM_IGNORE_INDEX : (r * 131) % V;
  double *loss = dalloc(R), *g = dalloc((size_t)R * Vp);
  loom_xent_forward_f64(loss, l, t, R, V, Vp);
  float *mx = falloc(R), *se = falloc(R), *lossf = falloc(R), *gf = falloc((size_t)R * Vp);
  loom_xent_stats_f32(mx, se, lossf, lf, t, R, Vp, V);
  CHECK_REL(rel_err_fd(lossf, loss, R), TOL, "xent loss R=%d V=%d Vp=%d", R, V, Vp);
  loom_xent_grad_f32(lf, lf, mx, se, t, R, Vp, V, 0.25f); /* in place */
  memset(g, 0, (size_t)R * Vp * sizeof(double));
  loom_xent_backward_f64(g, l, t, R, V, Vp, 0.25);
  CHECK_REL(rel_err_fd(lf, g, (size_t)R * Vp), TOL, "xent gradient (in place)");
  loom_free(l), loom_free(lf), free(t), loom_free(loss), loom_free(g), loom_free(mx);
  loom_free(se), loom_free(lossf), loom_free(gf);
}

/* loom_xent_grad_bf16 == loom_f32_to_bf16(loom_xent_grad_f32), bitwise: into its own rows
 * (stride Vp + 3), and in place (each row's bf16 values in the first half of its storage) */
static void test_xent_bf16(int R, int V, int Vp) {
  size_t n = (size_t)R * Vp;
  float *l = falloc(n), *g = falloc(n), *mx = falloc(R), *se = falloc(R), *inplace = falloc(n);
  for (size_t i = 0; i < n; i++) l[i] = 3.0f * (float)loom_rng_normal(&ktest_rng);
  int32_t *t = malloc(R * sizeof(int32_t));
  for (int r = 0; r < R; r++) t[r] = r % 5 == 2 ? LOOM_IGNORE_INDEX : (r * 37) % V;
  loom_xent_stats_f32(mx, se, NULL, l, NULL, R, Vp, V);
  loom_xent_grad_f32(g, l, mx, se, t, R, Vp, V, 0.125f);
  size_t ld = (size_t)Vp + 3;
  uint16_t *g16 = loom_alloc((size_t)R * ld * sizeof(uint16_t));
  loom_xent_grad_bf16(g16, ld, l, mx, se, t, R, Vp, V, 0.125f);
  memcpy(inplace, l, n * sizeof(float));
  loom_xent_grad_bf16((uint16_t *)inplace, 2 * (size_t)Vp, inplace, mx, se, t, R, Vp, V, 0.125f);
  int bad = 0, bad_in = 0;
  for (int r = 0; r < R; r++)
    for (int j = 0; j < Vp; j++) {
      uint16_t want = loom_f32_to_bf16(g[(size_t)r * Vp + j]);
      bad += g16[(size_t)r * ld + j] != want;
      bad_in += ((uint16_t *)inplace)[(size_t)r * 2 * Vp + j] != want;
    }
  CHECK(bad == 0 && bad_in == 0, "xent bf16 gradient R=%d V=%d Vp=%d: %d values differ (%d in place)",
        R, V, Vp, bad, bad_in);
  loom_free(l), loom_free(g), loom_free(mx), loom_free(se), loom_free(inplace), loom_free(g16);
  free(t);
}

/* ---- AdamW --------------------------------------------------------------------------------- */

static void test_adamw(void) {
  enum { NT = 5 };
  size_t sizes[NT] = {3, 1000, 20000, 17, 40000}, total = 0, off[NT];
  for (int i = 0; i < NT; i++) off[i] = total, total += sizes[i] + 5; /* gaps: frozen */
  float *p = falloc(total), *g = falloc(total), *m = falloc(total), *v = falloc(total);
  for (size_t i = 0; i < total; i++) {
    p[i] = (float)loom_rng_normal(&ktest_rng), g[i] = (float)loom_rng_normal(&ktest_rng);
    m[i] = 0.1f * (float)loom_rng_normal(&ktest_rng), v[i] = (float)loom_rng_uniform(&ktest_rng);
  }
  float *p2 = falloc(total), *m2 = falloc(total), *v2 = falloc(total), *g2 = falloc(total);
  float *lp = falloc(total);
  memcpy(p2, p, total * 4), memcpy(m2, m, total * 4), memcpy(v2, v, total * 4);
  memcpy(g2, g, total * 4);
  loom_adamw_segment seg[NT];
  float clip = 0.37f;
  for (int i = 0; i < NT; i++) {
    seg[i] = (loom_adamw_segment){off[i], off[i] + sizes[i], i % 2 ? 0.1 : 0.0};
    for (size_t k = off[i]; k < off[i] + sizes[i]; k++) g2[k] *= clip;
    loom_adamw_f32(p2 + off[i], g2 + off[i], m2 + off[i], v2 + off[i], sizes[i], 3e-4, 0.9,
                   0.95, 1e-8, seg[i].weight_decay, 7);
  }
  loom_adamw_flat_f32(p, g, m, v, lp, 0, seg, NT, clip, 3e-4, 0.9, 0.95, 1e-8, 7);
  CHECK(!memcmp(p, p2, total * 4) && !memcmp(m, m2, total * 4) && !memcmp(v, v2, total * 4),
        "flat AdamW is not bitwise equal to the per-tensor loop");
  int bad = 0;
  for (int i = 0; i < NT; i++)
    for (size_t k = off[i]; k < off[i] + sizes[i]; k++) bad += lp[k] != loom_bf16_round(p[k]);
  CHECK(bad == 0, "bf16 copy of the weights wrong in %d values", bad);
  loom_free(p), loom_free(g), loom_free(m), loom_free(v), loom_free(p2), loom_free(m2);
  loom_free(v2), loom_free(g2), loom_free(lp);
}

/* ---- flash attention ----------------------------------------------------------------------- */

static void test_flash(int B, int T, int Hq, int Hkv, int D, loom_attn_mask mask) {
  size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * Hq * T;
  float *qf, *kf, *vf, *gf;
  double *q = dpair(&qf, nq, 1), *k = dpair(&kf, nk, 1), *v = dpair(&vf, nk, 1);
  double *dout = dpair(&gf, nq, 1);
  double *out = dalloc(nq), *lse = dalloc(nl), *dq = dalloc(nq), *dk = dalloc(nk), *dv = dalloc(nk);
  int plain_causal = mask.causal && mask.window == 0;
  if (plain_causal) {
    loom_attention_forward_f64(out, lse, q, k, v, B, T, Hq, Hkv, D);
    loom_attention_backward_f64(dq, dk, dv, dout, out, lse, q, k, v, B, T, Hq, Hkv, D);
  } else {
    loom_attention_masked_forward_f64(out, lse, q, k, v, B, T, Hq, Hkv, D, mask);
    loom_attention_masked_backward_f64(dq, dk, dv, dout, out, lse, q, k, v, B, T, Hq, Hkv, D, mask);
  }
  float *of = falloc(nq), *lf = falloc(nl), *dqf = falloc(nq), *dkf = falloc(nk), *dvf = falloc(nk);
  float *work = falloc(nl);
  loom_flash_attention_forward_f32(of, lf, qf, kf, vf, B, T, Hq, Hkv, D, mask);
  loom_flash_attention_backward_f32(dqf, dkf, dvf, gf, of, lf, qf, kf, vf, B, T, Hq, Hkv, D,
                                    mask, work);
  char what[96];
  snprintf(what, sizeof what, "flash %s w=%d B=%d T=%d H=%d/%d D=%d", mask.causal ? "causal" : "full",
           mask.window, B, T, Hq, Hkv, D);
  CHECK_REL(rel_err_fd(of, out, nq), TOL, "%s out", what);
  CHECK_REL(rel_err_fd(lf, lse, nl), TOL, "%s lse", what);
  if (mask.window == 1) {
    /* each query sees only itself: every probability is 1, dS = P (dP - delta) = 0, so dq and
     * dk are 0 exactly and a path's rounding of dP - delta (FMA sums against delta's plain
     * ones) shows as an error relative to nothing. Measured instead against the norm of the
     * attention gradients' scale, dv's (the same rounding on a value of that size is ~1e-7) */
    double dvn = 0, eq = 0, ek = 0;
    for (size_t i = 0; i < nk; i++) dvn += dv[i] * dv[i];
    for (size_t i = 0; i < nq; i++) eq += ((double)dqf[i] - dq[i]) * ((double)dqf[i] - dq[i]);
    for (size_t i = 0; i < nk; i++) ek += ((double)dkf[i] - dk[i]) * ((double)dkf[i] - dk[i]);
    CHECK(dvn > 1e-6, "%s: dv is not a scale (%g)", what, sqrt(dvn));
    CHECK_REL(sqrt(eq / dvn), TOL, "%s dq (error over |dv|)", what);
    CHECK_REL(sqrt(ek / dvn), TOL, "%s dk (error over |dv|)", what);
  } else {
    CHECK_REL(rel_err_fd(dqf, dq, nq), TOL, "%s dq", what);
    CHECK_REL(rel_err_fd(dkf, dk, nk), TOL, "%s dk", what);
  }
  CHECK_REL(rel_err_fd(dvf, dv, nk), TOL, "%s dv", what);
  loom_free(q), loom_free(k), loom_free(v), loom_free(dout), loom_free(out), loom_free(lse);
  loom_free(dq), loom_free(dk), loom_free(dv), loom_free(qf), loom_free(kf), loom_free(vf);
  loom_free(gf), loom_free(of), loom_free(lf), loom_free(dqf), loom_free(dkf), loom_free(dvf);
  loom_free(work);
}

/* the masked reference backward vs central differences of sum(dout * out) */
static void test_masked_ref_fd(loom_attn_mask mask) {
  const int B = 1, T = 9, Hq = 2, Hkv = 1, D = 4;
  size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D;
  double *x[3] = {dalloc(nq), dalloc(nk), dalloc(nk)}, *dout = dalloc(nq), *out = dalloc(nq);
  double *lse = dalloc((size_t)B * Hq * T), *g[3] = {dalloc(nq), dalloc(nk), dalloc(nk)};
  size_t n[3] = {nq, nk, nk};
  for (int i = 0; i < 3; i++) fill_normal(x[i], n[i], 1);
  fill_normal(dout, nq, 1);
  loom_attention_masked_forward_f64(out, lse, x[0], x[1], x[2], B, T, Hq, Hkv, D, mask);
  loom_attention_masked_backward_f64(g[0], g[1], g[2], dout, out, lse, x[0], x[1], x[2], B, T,
                                     Hq, Hkv, D, mask);
  const char *names[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; i++) {
    double *fd = dalloc(n[i]);
    for (size_t j = 0; j < n[i]; j++) {
      double keep = x[i][j], f[2];
      for (int s = 0; s < 2; s++) {
        x[i][j] = keep + (s ? -1e-6 : 1e-6);
        loom_attention_masked_forward_f64(out, lse, x[0], x[1], x[2], B, T, Hq, Hkv, D, mask);
        f[s] = 0;
        for (size_t e = 0; e < nq; e++) f[s] += dout[e] * out[e];
      }
      x[i][j] = keep;
      fd[j] = (f[0] - f[1]) / 2e-6;
    }
    CHECK_REL(rel_err_dd(g[i], fd, n[i]), 1e-6, "masked reference %s (causal=%d w=%d) vs finite differences",
              names[i], mask.causal, mask.window);
    loom_free(fd);
  }
  for (int i = 0; i < 3; i++) loom_free(x[i]), loom_free(g[i]);
  loom_free(dout), loom_free(out), loom_free(lse);
}

/* loom_bias_grad_bf16_out against its two separate passes, bitwise: db, and bf16(dy) with
 * ties, NaN, infinities and subnormals among the values (row and column tails included) */
static void test_bias_grad_bf16_out(int N, int C) {
  size_t n = (size_t)N * C;
  float *dy = falloc(n), *db1 = falloc(C), *db2 = falloc(C);
  uint16_t *a = loom_alloc(n * sizeof(uint16_t)), *b = loom_alloc(n * sizeof(uint16_t));
  for (size_t i = 0; i < n; i++) dy[i] = (float)loom_rng_normal(&ktest_rng);
  const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xff800000u, 0x00000001u,
                              0x807fffffu, 0x7f7fffffu, 0x80000000u};
  for (size_t k = 0; k < 8 && k * 97 < n; k++) memcpy(dy + k * 97, special + k, 4);
  for (int c = 0; c < C; c++) db1[c] = db2[c] = (float)c * 0.25f;
  loom_bias_grad_f32(db1, dy, N, C);
  loom_f32_to_bf16_n(a, dy, n);
  loom_bias_grad_bf16_out(db2, b, dy, N, C);
  CHECK(!memcmp(db1, db2, (size_t)C * sizeof(float)), "bias grad + bf16 out: db N=%d C=%d", N, C);
  CHECK(!memcmp(a, b, n * sizeof(uint16_t)), "bias grad + bf16 out: bf16(dy) N=%d C=%d", N, C);
  loom_free(dy), loom_free(db1), loom_free(db2), loom_free(a), loom_free(b);
}

/* the activations written as bf16 only, against the fp32 kernels followed by the conversion:
 * bitwise (u, with its bias added in place, too) */
static void test_act_bf16_out(int N, int C) {
  size_t n = (size_t)N * C;
  float *u1 = falloc(n), *u2 = falloc(n), *g = falloc(n), *bias = falloc(C), *act = falloc(n);
  uint16_t *a = loom_alloc(n * sizeof(uint16_t)), *b = loom_alloc(n * sizeof(uint16_t));
  for (size_t i = 0; i < n; i++)
    u1[i] = u2[i] = (float)(3 * loom_rng_normal(&ktest_rng)), g[i] = (float)(3 * loom_rng_normal(&ktest_rng));
  for (int c = 0; c < C; c++) bias[c] = (float)loom_rng_normal(&ktest_rng);
  loom_bias_gelu_forward_f32(u1, act, bias, N, C);
  loom_f32_to_bf16_n(a, act, n);
  loom_bias_gelu_forward_bf16_out(u2, b, bias, N, C);
  CHECK(!memcmp(u1, u2, n * sizeof(float)), "bias+gelu bf16 out: u N=%d C=%d", N, C);
  CHECK(!memcmp(a, b, n * sizeof(uint16_t)), "bias+gelu bf16 out: act N=%d C=%d", N, C);
  loom_swiglu_forward_fast_f32(act, g, u1, n);
  loom_f32_to_bf16_n(a, act, n);
  loom_swiglu_forward_bf16_out(b, g, u1, n);
  CHECK(!memcmp(a, b, n * sizeof(uint16_t)), "swiglu bf16 out N=%d C=%d", N, C);
  float *dg = falloc(n);
  uint16_t *a2 = loom_alloc(n * sizeof(uint16_t)), *b2 = loom_alloc(n * sizeof(uint16_t));
  loom_swiglu_backward_fast_f32(dg, act, u2, g, u1, n); /* dy = u2 */
  loom_f32_to_bf16_n(a, dg, n);
  loom_f32_to_bf16_n(a2, act, n);
  loom_swiglu_backward_bf16_out(b, b2, u2, g, u1, n);
  CHECK(!memcmp(a, b, n * sizeof(uint16_t)), "swiglu backward bf16 out: dgate N=%d C=%d", N, C);
  CHECK(!memcmp(a2, b2, n * sizeof(uint16_t)), "swiglu backward bf16 out: dup N=%d C=%d", N, C);
  loom_free(dg), loom_free(a2), loom_free(b2);
  loom_free(u1), loom_free(u2), loom_free(g), loom_free(bias), loom_free(act), loom_free(a);
  loom_free(b);
}

/* loom_bf16_transpose against the definition, with edges of 32 rows and 16 columns, and with
 * dst aligned (the streamed stores) and not */
static void test_bf16_transpose(int rows, int cols, int offset) {
  size_t n = (size_t)rows * cols;
  uint16_t *a = loom_alloc(n * sizeof(uint16_t)), *buf = loom_alloc((n + 32) * sizeof(uint16_t));
  uint16_t *b = buf + offset;
  for (size_t i = 0; i < n; i++) a[i] = (uint16_t)(i * 2654435761u >> 7);
  loom_bf16_transpose(b, a, rows, cols);
  size_t bad = 0;
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) bad += b[(size_t)j * rows + i] != a[(size_t)i * cols + j];
  CHECK(bad == 0, "bf16 transpose %dx%d (dst offset %d): %zu values wrong", rows, cols, offset, bad);
  loom_free(a), loom_free(buf);
}

static void run_all(void) {
  test_bf16();
  test_norm(130, 200, 1);
  test_norm(130, 200, 0);
  test_norm(3, 768, 1);
  test_norm(7, 45, 1); /* C % 8 != 0: the AVX2 rows' masked last vector */
  test_norm(7, 45, 0);
  test_act(65, 300);
  test_act(1, 5); /* fewer values than a vector: the AVX2 SwiGLU's scalar tail alone */
  test_bias_grad_bf16_out(130, 200);
  test_bias_grad_bf16_out(1000, 768); /* more rows than the 64 fixed ranges */
  test_bias_grad_bf16_out(3, 17);
  test_act_bf16_out(65, 300);
  test_bf16_transpose(256, 768, 0);
  test_bf16_transpose(256, 768, 1);
  test_bf16_transpose(77, 45, 0); /* edges both ways */
  test_bf16_transpose(5, 3, 0);
  test_act_bf16_out(3, 1031); /* more than one portable block (1024, 512), a tail */
  test_xent(37, 1000, 1024);
  test_xent(9, 1003, 1010); /* real columns past the last whole vector: the AVX2 rows' tail */
  test_xent_bf16(37, 1000, 1024);
  test_xent_bf16(5, 33, 35); /* short rows, odd widths */
  test_adamw();
  loom_attn_mask causal = {.causal = 1}, full = {.causal = 0};
  loom_attn_mask cw = {.causal = 1, .window = 50}, bw = {.causal = 0, .window = 33};
  loom_attn_mask w1 = {.causal = 1, .window = 1};
  test_flash(2, 150, 4, 2, 16, causal);
  test_flash(1, 200, 2, 2, 64, causal);
  test_flash(2, 70, 3, 1, 32, full);
  test_flash(1, 190, 2, 1, 64, cw);
  test_flash(1, 130, 2, 2, 80, bw);
  test_flash(1, 40, 2, 1, 24, w1); /* D not a multiple of 16: AVX2 (or portable) tiles */
  test_flash(2, 130, 4, 2, 48, causal); /* tiny-qwen3's head dim: AVX2 tiles, portable on AVX-512 */
  test_flash(1, 70, 2, 1, 20, causal);  /* not a multiple of 8: portable tiles everywhere */
}

/* every fast kernel except the GEMMs, bitwise, 1 vs 3 threads */
static void test_threads(void) {
  const int B = 2, T = 140, H = 2, D = 32, N = 300, C = 256;
  size_t nq = (size_t)B * T * H * D, n = (size_t)N * C;
  float *in = falloc(4 * n), *o1 = falloc(8 * n), *o2 = falloc(8 * n);
  for (size_t i = 0; i < 4 * n; i++) in[i] = (float)loom_rng_normal(&ktest_rng);
  for (int rep = 0; rep < 2; rep++) {
    float *o = rep ? o2 : o1;
    memset(o, 0, 8 * n * sizeof(float));
    omp_set_num_threads(rep ? 3 : 1);
    loom_attn_mask mask = {.causal = 1};
    loom_flash_attention_forward_f32(o, o + nq, in, in + nq, in + 2 * nq, B, T, H, H, D, mask);
    loom_flash_attention_backward_f32(o + 2 * nq, o + 3 * nq, o + 4 * nq, in + 3 * nq, o,
                                      o + nq, in, in + nq, in + 2 * nq, B, T, H, H, D, mask,
                                      o + 5 * nq);
    float *p = o + 6 * nq;
    loom_add_norm_forward_f32(p, p + n, p + 2 * n, p + 2 * n + N, in, in + n, NULL, in + 2 * n,
                              in + 3 * n, N, C, 1e-5f);
    loom_norm_backward_fast_f32(p + 3 * n, p + 4 * n, p + 4 * n + C, in + n, p, in + 2 * n,
                                p + 2 * n, p + 2 * n + N, N, C);
    loom_bias_grad_f32(p + 4 * n + 2 * C, in, N, C);
  }
  omp_set_num_threads(2);
  CHECK(!memcmp(o1, o2, 8 * n * sizeof(float)), "fast kernels differ between 1 and 3 threads");
  loom_free(in), loom_free(o1), loom_free(o2);
}

int main(void) {
  loom_rng_seed(&ktest_rng, 99);
  printf("GEMM backends\n");
  test_gemm();
  test_gemm_ragged();
  test_gemm_weights();
  test_gemm_weights_both_ways();
  printf("fast kernels, %s path\n", loom_kernels_simd());
  run_all();
  if (!strcmp(loom_kernels_simd(), "avx512")) { /* the AVX2 paths too (an AVX-512 CPU has AVX2) */
    loom_kernels_force_avx2(1);
    printf("fast kernels, %s path\n", loom_kernels_simd());
    CHECK(!strcmp(loom_kernels_simd(), "avx2"), "loom_kernels_force_avx2(1) gave %s",
          loom_kernels_simd());
    run_all();
    loom_kernels_force_avx2(0);
  }
  if (strcmp(loom_kernels_simd(), "generic")) { /* avx512 or avx2: the portable path too */
    loom_kernels_force_generic(1);
    printf("fast kernels, %s path\n", loom_kernels_simd());
    run_all();
    loom_kernels_force_generic(0);
  }
  test_masked_ref_fd((loom_attn_mask){.causal = 1});
  test_masked_ref_fd((loom_attn_mask){.causal = 0});
  test_masked_ref_fd((loom_attn_mask){.causal = 1, .window = 3});
  test_masked_ref_fd((loom_attn_mask){.causal = 0, .window = 4});
  test_threads();
  ktest_report_worst();
  return harness_finish("test_fast_kernels");
}

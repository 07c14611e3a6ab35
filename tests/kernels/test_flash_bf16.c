/* bf16 flash attention (loom_flash_attention_{forward,backward}_bf16) on every code path this
 * CPU has (vdpbf16ps, its AVX-512F emulation, AVX2, portable C), for causal, GQA, odd T (partial
 * tiles), full, causal-window and the vision encoder's bidirectional-window masks:
 *  - against the masked double reference (itself checked by finite differences in
 *    test_fast_kernels) evaluated on the bf16-rounded inputs, i.e. exact attention of what the
 *    kernel is given;
 *  - against the fp32 flash kernel on the unrounded inputs (what bf16 training changes);
 *  - inputs holding bf16 values give bitwise the same results as the unrounded ones (the
 *    rounding happens on load), and the results differ from fp32 (the rounding is applied);
 *  - the emulated path equals vdpbf16ps bitwise, the AVX2 and portable ones within fp32
 *    round-off (their exp differs; the AVX2 pair GEMM and packs are the portable ones bit for
 *    bit: test_pair_tiles); on AMX CPUs the vdpbf16ps path with its products on tiles (other
 *    paths run with AMX off) within the same round-off of vdpbf16ps alone, and the AMX pair
 *    GEMM against vdpbf16ps's on odd shapes (test_amx_tiles);
 *  - 1 and 3 threads bitwise;
 *  - dK, dV summed in private rows or in the output rows, bitwise the same (bf16 and fp32). */
#include <omp.h>
#include <string.h>

#include "kernels/flash_tile_bf16.h"
#include "ktest.h"
#include "loom/kernels.h"

/* Against exact attention of the rounded inputs the only bf16 roundings left are those of P
 * (forward: the operand of P V) and of P and dS (backward: operands of P^T dO, dS^T Q, dS K):
 * each term of every sum carries one rounding of at most 2^-9 relative, accumulated in fp32
 * (2^-24 per addition, negligible). The sums' relative errors stay below 2^-9 when the terms
 * share a sign (out, dv) and average out as a random walk when they do not (dq, dk: dS rows
 * sum to zero); allowed: 2^-8, twice the per-element bound. */
#define TOL_VS_REF 0x1p-8
/* lse = m + log l uses fp32 scores of exact bf16 products (no rounding of P): fp32 round-off
 * of sums of up to T terms, like the fp32 kernel's tolerance in test_fast_kernels. */
#define TOL_LSE 1e-5
/* Against the fp32 kernel on unrounded inputs, add the rounding of q, k, v, dout (2^-9 each):
 * a score s = q.k / sqrt(D) moves by up to 2 x 2^-9 |s| (|s| <= ~4 here: unit-variance q, k),
 * so P moves by up to ~2^-6 relative on the largest scores, and every output is a sum of such
 * terms times rounded v / dout: allowed 2^-5 (3.1e-2) relative norm. */
#define TOL_VS_F32 0x1p-5
/* The fp32 and bf16 kernels must differ by more than fp32 round-off (1e-5 relative) — the
 * check that bf16 rounding is really applied. */
#define MIN_DIFF_F32 1e-4
/* Portable path vs AVX-512: the same products in the same order; only exp differs (expf vs
 * the vectorised polynomial, a few ulp), which can flip a bf16 rounding of P (2^-9 of that
 * element): 1e-3 relative norm. */
#define TOL_PATHS 1e-3

/* With one visible key per query (window 1) dS = P (dP - delta) is exactly zero, and what is
 * computed is the difference of two fp32 sums of the same D products in different orders:
 * at most 2 D 2^-24 sum_d |v_d dO_d| (~41 for D = 64 unit normals), times scale 1/8 and |k|
 * ~1: rms of dq, dk below 1e-4. */
#define TOL_ZERO 1e-4

static double rms(const float *a, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * a[i];
  return sqrt(s / (double)(n ? n : 1));
}

typedef struct {
  float *out, *lse, *dq, *dk, *dv;
} outputs;

static void run_bf16(outputs *o, const float *q, const float *k, const float *v, const float *g,
                     int B, int T, int Hq, int Hkv, int D, loom_attn_mask m, float *work) {
  loom_flash_attention_forward_bf16(o->out, o->lse, q, k, v, B, T, Hq, Hkv, D, m);
  loom_flash_attention_backward_bf16(o->dq, o->dk, o->dv, g, o->out, o->lse, q, k, v, B, T, Hq,
                                     Hkv, D, m, work);
}

static outputs alloc_out(size_t nq, size_t nk, size_t nl) {
  return (outputs){falloc(nq), falloc(nl), falloc(nq), falloc(nk), falloc(nk)};
}
static void free_out(outputs *o) {
  loom_free(o->out), loom_free(o->lse), loom_free(o->dq), loom_free(o->dk), loom_free(o->dv);
}
static int same(const outputs *a, const outputs *b, size_t nq, size_t nk, size_t nl) {
  return !memcmp(a->out, b->out, nq * 4) && !memcmp(a->lse, b->lse, nl * 4) &&
         !memcmp(a->dq, b->dq, nq * 4) && !memcmp(a->dk, b->dk, nk * 4) &&
         !memcmp(a->dv, b->dv, nk * 4);
}
static double rel_ff(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - b[i];
    num += d * d, den += (double)b[i] * b[i];
  }
  return sqrt(num) / (sqrt(den) > 1e-8 ? sqrt(den) : 1e-8);
}

/* force one code path: 2 vdpbf16ps, 1 AVX-512F emulation, 3 AVX2, 0 portable */
/* paths 0-3 with AMX tiles off; 4: the vdpbf16ps path with its products on AMX tiles */
static void force_path(int p) {
  loom_kernels_force_generic(p == 0);
  loom_kernels_force_no_bf16(p == 1);
  loom_kernels_force_no_amx(p != 4 && p != -1);
  if (p == 3) loom_kernels_force_avx2(1);
}
static const char *const path_name[5] = {"generic", "avx512", "avx512_bf16", "avx2", "amx"};
/* whether path p runs head dim D on this CPU once forced */
static int path_runs(int p, int D) {
  const char *cpu = loom_kernels_attn_bf16_path();
  if (p == 1 || p == 2 || p == 4) return D % 16 == 0 && !strcmp(cpu, path_name[p]);
  if (p == 3) return D % 8 == 0 && !strcmp(cpu, "avx2");
  return 1;
}

static void test_case(int B, int T, int Hq, int Hkv, int D, loom_attn_mask mask, double qscale) {
  size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * Hq * T;
  size_t n[4] = {nq, nk, nk, nq};
  double *x[4], *xr[4];
  float *xf[4], *xrf[4];
  for (int i = 0; i < 4; i++) {
    x[i] = dalloc(n[i]), xr[i] = dalloc(n[i]), xf[i] = falloc(n[i]), xrf[i] = falloc(n[i]);
    fill_normal(x[i], n[i], i == 0 ? qscale : 1.0);
    to_f32(xf[i], x[i], n[i]);
    for (size_t e = 0; e < n[i]; e++) xr[i][e] = xrf[i][e] = loom_bf16_round(xf[i][e]);
  }
  /* exact attention of the rounded inputs */
  double *out = dalloc(nq), *lse = dalloc(nl), *dq = dalloc(nq), *dk = dalloc(nk), *dv = dalloc(nk);
  loom_attention_masked_forward_f64(out, lse, xr[0], xr[1], xr[2], B, T, Hq, Hkv, D, mask);
  memset(dq, 0, nq * 8), memset(dk, 0, nk * 8), memset(dv, 0, nk * 8);
  loom_attention_masked_backward_f64(dq, dk, dv, xr[3], out, lse, xr[0], xr[1], xr[2], B, T, Hq,
                                     Hkv, D, mask);
  float *work = falloc(nl);
  outputs f32 = alloc_out(nq, nk, nl);
  loom_flash_attention_forward_f32(f32.out, f32.lse, xf[0], xf[1], xf[2], B, T, Hq, Hkv, D, mask);
  loom_flash_attention_backward_f32(f32.dq, f32.dk, f32.dv, xf[3], f32.out, f32.lse, xf[0], xf[1],
                                    xf[2], B, T, Hq, Hkv, D, mask, work);
  { /* the fp32 kernel's dK, dV summed in the output rows instead of private ones: the same */
    outputs ip = alloc_out(nq, nk, nl);
    memcpy(ip.out, f32.out, nq * 4), memcpy(ip.lse, f32.lse, nl * 4);
    loom_kernels_force_kv_in_place(1);
    loom_flash_attention_backward_f32(ip.dq, ip.dk, ip.dv, xf[3], ip.out, ip.lse, xf[0], xf[1],
                                      xf[2], B, T, Hq, Hkv, D, mask, work);
    loom_kernels_force_kv_in_place(0);
    CHECK(same(&ip, &f32, nq, nk, nl), "fp32 flash: in-place dK/dV sums differ from private ones");
    free_out(&ip);
  }
  char what[96];
  snprintf(what, sizeof what, "%s w=%d B=%d T=%d H=%d/%d D=%d", mask.causal ? "causal" : "full",
           mask.window, B, T, Hq, Hkv, D);
  outputs first = {0};
  int first_path = -1;
  static const int order[5] = {2, 1, 3, 0, 4};
  for (int oi = 0; oi < 5; oi++) {
    const int p = order[oi];
    force_path(p);
    if (!path_runs(p, D)) { /* AVX-512 tiles need D % 16 == 0, AVX2 tiles D % 8 == 0 */
      printf("  (%s path not available for D=%d on this CPU)\n", path_name[p], D);
      continue;
    }
    outputs o = alloc_out(nq, nk, nl), r = alloc_out(nq, nk, nl);
    run_bf16(&o, xf[0], xf[1], xf[2], xf[3], B, T, Hq, Hkv, D, mask, work);
    printf(" %s, %s path\n", what, path_name[p]);
    CHECK_REL(rel_err_fd(o.out, out, nq), TOL_VS_REF, "out vs exact (rounded inputs)");
    CHECK_REL(rel_err_fd(o.lse, lse, nl), TOL_LSE, "lse vs exact (rounded inputs)");
    if (mask.window == 1) { /* one key per query: P = 1, dS = dq = dk = 0 exactly */
      CHECK_REL(rms(o.dq, nq), TOL_ZERO, "dq rms (exactly 0)");
      CHECK_REL(rms(o.dk, nk), TOL_ZERO, "dk rms (exactly 0)");
    } else {
      CHECK_REL(rel_err_fd(o.dq, dq, nq), TOL_VS_REF, "dq vs exact (rounded inputs)");
      CHECK_REL(rel_err_fd(o.dk, dk, nk), TOL_VS_REF, "dk vs exact (rounded inputs)");
    }
    CHECK_REL(rel_err_fd(o.dv, dv, nk), TOL_VS_REF, "dv vs exact (rounded inputs)");
    double d32[5] = {rel_ff(o.out, f32.out, nq), rel_ff(o.lse, f32.lse, nl),
                     rel_ff(o.dq, f32.dq, nq), rel_ff(o.dk, f32.dk, nk), rel_ff(o.dv, f32.dv, nk)};
    const char *nm[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int e = 0; e < 5; e++) {
      if (mask.window == 1 && (e == 2 || e == 3)) continue; /* both ~0: checked above */
      /* lse moves with the scores only: by at most 2 x 2^-9 |s|max ~ 2^-6 absolute, on lse
       * values of magnitude ~2-5 (log of up to T terms): 2^-8 relative */
      CHECK_REL(d32[e], e == 1 ? 0x1p-8 : TOL_VS_F32, "%s vs fp32 kernel", nm[e]);
      if (e != 1) /* lse: no rounding of P involved, only the inputs' */
        CHECK(d32[e] > MIN_DIFF_F32, "%s: %s equals the fp32 kernel's (%.2e): no bf16 rounding?",
              what, nm[e], d32[e]);
    }
    /* bf16-valued inputs: bitwise the same (rounding on load) */
    run_bf16(&r, xrf[0], xrf[1], xrf[2], xrf[3], B, T, Hq, Hkv, D, mask, work);
    CHECK(same(&o, &r, nq, nk, nl), "%s %s: rounded inputs give different results", what,
          path_name[p]);
    /* dK, dV summed in the output rows instead of private ones: bitwise the same */
    loom_kernels_force_kv_in_place(1);
    run_bf16(&r, xf[0], xf[1], xf[2], xf[3], B, T, Hq, Hkv, D, mask, work);
    loom_kernels_force_kv_in_place(0);
    CHECK(same(&o, &r, nq, nk, nl), "%s %s: in-place dK/dV sums differ from private ones", what,
          path_name[p]);
    if (first_path < 0) {
      first = o, first_path = p;
    } else {
      if (first_path == 2 && p == 1)
        CHECK(same(&o, &first, nq, nk, nl), "%s: emulated path differs from vdpbf16ps", what);
      else {
        double worst = 0, e;
        if ((e = rel_ff(o.out, first.out, nq)) > worst) worst = e;
        /* window 1: dq and dk are ~0 on every path (checked above); their relative
         * difference is noise over noise where the products' order differs (AMX) */
        int zero = mask.window == 1 && p == 4;
        if (!zero && (e = rel_ff(o.dq, first.dq, nq)) > worst) worst = e;
        if (!zero && (e = rel_ff(o.dk, first.dk, nk)) > worst) worst = e;
        if ((e = rel_ff(o.dv, first.dv, nk)) > worst) worst = e;
        CHECK_REL(worst, TOL_PATHS, "%s path vs %s path", path_name[p], path_name[first_path]);
      }
      free_out(&o);
    }
    free_out(&r);
  }
  force_path(-1);
  loom_kernels_force_no_bf16(0);
  if (first_path >= 0) free_out(&first);
  free_out(&f32);
  for (int i = 0; i < 4; i++) loom_free(x[i]), loom_free(xr[i]), loom_free(xf[i]), loom_free(xrf[i]);
  loom_free(out), loom_free(lse), loom_free(dq), loom_free(dk), loom_free(dv), loom_free(work);
}

/* 1 vs 3 threads, bitwise (the default path) */
static void test_threads(void) {
  const int B = 2, T = 140, Hq = 4, Hkv = 2, D = 64;
  size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * Hq * T;
  float *in[4] = {falloc(nq), falloc(nk), falloc(nk), falloc(nq)}, *work = falloc(nl);
  for (int i = 0; i < 4; i++)
    for (size_t e = 0; e < (i == 1 || i == 2 ? nk : nq); e++)
      in[i][e] = (float)loom_rng_normal(&ktest_rng);
  outputs o[2] = {alloc_out(nq, nk, nl), alloc_out(nq, nk, nl)};
  for (int rep = 0; rep < 2; rep++) {
    omp_set_num_threads(rep ? 3 : 1);
    run_bf16(&o[rep], in[0], in[1], in[2], in[3], B, T, Hq, Hkv, D, (loom_attn_mask){.causal = 1}, work);
  }
  omp_set_num_threads(2);
  CHECK(same(&o[0], &o[1], nq, nk, nl), "bf16 flash attention differs between 1 and 3 threads");
  free_out(&o[0]), free_out(&o[1]);
  for (int i = 0; i < 4; i++) loom_free(in[i]);
  loom_free(work);
}

/* The AVX2 pair GEMM and packs against the portable ones, bit for bit: packs of odd row counts
 * (a zero-padded pair), rows padded past nrows, NaN, infinities and subnormals among the values;
 * products with strided A operands (as the tiles use them), accumulating and not */
static void test_pair_tiles(void) {
  if (fb_path(48) != FB_AVX2) {
    printf("  (AVX2 pair tiles not on this CPU's path for D=48)\n");
    return;
  }
  enum { R = 37, C = 48, NP = (R + 1) / 2, PAD = 40 };
  float src[R * C];
  for (int i = 0; i < R * C; i++) src[i] = (float)loom_rng_normal(&ktest_rng);
  src[5] = NAN, src[77] = INFINITY, src[90] = -INFINITY, src[101] = 1e-40f, src[200] = -3e-39f;
  src[300] = 1.00390625f; /* a tie: rounds to even */
  uint32_t g[NP * C], x[NP * C], gr[PAD * (C / 2)], xr[PAD * (C / 2)];
  memset(g, 0xab, sizeof g), memset(x, 0xab, sizeof x);
  force_path(0);
  fb_pack_vnni(FB_GENERIC, g, C, src, C, R, C, NP);
  fb_pack_rows(FB_GENERIC, gr, C / 2, src, C, R, C, PAD);
  force_path(3);
  fb_pack_vnni(FB_AVX2, x, C, src, C, R, C, NP);
  fb_pack_rows(FB_AVX2, xr, C / 2, src, C, R, C, PAD);
  CHECK(!memcmp(g, x, sizeof g), "AVX2 VNNI pack differs from the portable one");
  CHECK(!memcmp(gr, xr, sizeof gr), "AVX2 row pack differs from the portable one");
  /* finite operands for the products */
  for (int i = 0; i < R * C; i++) src[i] = (float)loom_rng_normal(&ktest_rng);
  fb_pack_vnni(FB_GENERIC, g, C, src, C, R, C, NP);
  fb_pack_rows(FB_GENERIC, gr, C / 2, src, C, R, C, PAD);
  for (int acc = 0; acc < 2; acc++) {
    float cg[R * C], cx[R * C];
    for (int i = 0; i < R * C; i++) cg[i] = cx[i] = (float)loom_rng_normal(&ktest_rng);
    /* C (13, 48) (+)= A (13 rows of 24 pairs, row-major) . B (24 pairs, 48) */
    fb_mm(FB_GENERIC, cg, C, gr, C / 2, 1, g, C, 13, C, 18, acc);
    fb_mm(FB_AVX2, cx, C, gr, C / 2, 1, g, C, 13, C, 18, acc);
    CHECK(!memcmp(cg, cx, sizeof cg), "AVX2 pair GEMM differs from the portable one (acc=%d)", acc);
    /* A read down columns (ai = 1, ap = row stride): C (19, 24) over 9 pairs */
    fb_mm(FB_GENERIC, cg, C, g, 1, C, g, C, 19, 24, 9, acc);
    fb_mm(FB_AVX2, cx, C, g, 1, C, g, C, 19, 24, 9, acc);
    CHECK(!memcmp(cg, cx, sizeof cg), "AVX2 pair GEMM (strided A) differs (acc=%d)", acc);
  }
  force_path(-1);
  printf("  AVX2 pair GEMM and packs: bitwise the portable ones\n");
}

/* The AMX pair GEMM against vdpbf16ps's on shapes with remainders (rows past a 16-row block,
 * pairs past a 16-pair step), A along rows (ap = 1) and down columns (ai = 1), accumulating and
 * not: the same exact products summed in another order, so within fp32 round-off of the sum of
 * |products| (40 pairs: 80 roundings of 2^-24 at most; allowed 1e-5 relative norm) */
static void test_amx_tiles(void) {
  loom_kernels_force_no_amx(0);
  if (fb_path(64) != FB_BF16 || !loom_kernels_amx()) {
    printf("  (AMX pair GEMM: no AMX tiles on this CPU, not run)\n");
    return;
  }
  enum { NP = 40, C = 64, M = 37 };
  uint32_t a[M * NP], b[NP * C], at[NP * M];
  for (int i = 0; i < M * NP; i++) {
    float lo = (float)loom_rng_normal(&ktest_rng), hi = (float)loom_rng_normal(&ktest_rng);
    a[i] = (uint32_t)loom_f32_to_bf16(lo) | (uint32_t)loom_f32_to_bf16(hi) << 16;
  }
  for (int i = 0; i < NP * C; i++) {
    float lo = (float)loom_rng_normal(&ktest_rng), hi = (float)loom_rng_normal(&ktest_rng);
    b[i] = (uint32_t)loom_f32_to_bf16(lo) | (uint32_t)loom_f32_to_bf16(hi) << 16;
  }
  for (int i = 0; i < M; i++)
    for (int p = 0; p < NP; p++) at[p * M + i] = a[i * NP + p]; /* the same A, column-wise */
  for (int acc = 0; acc < 2; acc++)
    for (int cols = 0; cols < 2; cols++) {
      float ct[M * C], cv[M * C];
      for (int i = 0; i < M * C; i++) ct[i] = cv[i] = (float)loom_rng_normal(&ktest_rng);
      const uint32_t *A = cols ? at : a;
      long ai = cols ? 1 : NP, ap = cols ? M : 1;
      fb_mm(FB_BF16, ct, C, A, ai, ap, b, C, M, C, NP, acc); /* tiles where they fit */
      loom_kernels_force_no_amx(1);
      fb_mm(FB_BF16, cv, C, A, ai, ap, b, C, M, C, NP, acc); /* vdpbf16ps only */
      loom_kernels_force_no_amx(0);
      CHECK_REL(rel_ff(ct, cv, M * C), 1e-5, "AMX pair GEMM vs vdpbf16ps (%s A, acc=%d)",
                cols ? "column-wise" : "row-wise", acc);
      CHECK(memcmp(ct, cv, sizeof ct), "AMX pair GEMM bitwise vdpbf16ps's: tiles not used?");
    }
}

int main(void) {
  loom_rng_seed(&ktest_rng, 1515);
  printf("bf16 flash attention, default path on this CPU: %s\n", loom_kernels_attn_bf16_path());
  loom_attn_mask causal = {.causal = 1}, full = {.causal = 0}, cw = {.causal = 1, .window = 50},
                 bw = {.causal = 0, .window = 33}, w1 = {.causal = 1, .window = 1};
  test_case(1, 200, 2, 2, 64, causal, 1.0);
  test_case(2, 150, 4, 2, 16, causal, 1.0); /* GQA, T odd-sized last tile */
  test_case(1, 131, 6, 2, 64, causal, 2.0); /* GQA 3:1, odd T, peakier softmax */
  test_case(2, 70, 3, 1, 32, full, 1.0);
  test_case(1, 190, 2, 1, 64, cw, 1.0);
  test_case(1, 130, 2, 2, 80, bw, 1.0);  /* vision: bidirectional window, head dim 80 */
  test_case(1, 97, 2, 1, 64, bw, 1.0);   /* odd T under a window */
  test_case(1, 40, 2, 1, 64, w1, 1.0);   /* one key per query */
  test_case(1, 40, 2, 1, 24, cw, 1.0);   /* D % 16 != 0: AVX2 and portable tiles */
  test_case(2, 130, 4, 2, 48, causal, 1.0); /* tiny-qwen3's head dim */
  test_case(1, 33, 2, 2, 7, causal, 1.0); /* odd D: padded pairs */
  test_threads();
  test_pair_tiles();
  test_amx_tiles();
  ktest_report_worst();
  return harness_finish("test_flash_bf16");
}

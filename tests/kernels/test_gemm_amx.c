/* loom's AMX bf16 GEMM (gemm_amx_bf16) against a double-precision reference of the same bf16
 * inputs, on every shape class the packing and blocking have: sizes below, at and across a
 * tile (16), a block (32), a K block (512) and a unit (256 rows or columns; 128 x 512 where B
 * is packed whole), odd sizes, every transpose, leading dimensions wider than the matrix,
 * beta 0 / 1 / 0.5, bias; operands in exactly-sized buffers (so `make test-asan` sees any
 * read past them). Also: 1, 2 and 3
 * threads bitwise equal, loom_gemm_bf16 takes this kernel where AMX is, the packed-weight
 * form (gemm_amx_bf16_w) gives the same bits and follows changes marked by
 * gemm_amx_weights_changed, and oneDNN's bf16 matmul agrees within the same bound. Exit 77 (CTest: skipped) with a plain message on CPUs
 * without AMX. */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "kernels/gemm_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"

static loom_rng rng;

static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1); /* round to nearest even (finite inputs) */
  return (uint16_t)(u >> 16);
}
static double val(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

typedef struct {
  int ta, tb, M, N, K, lda, ldb, ldc;
  uint16_t *A, *B;
  float *bias, *C0; /* C0: C before the call (beta != 0) */
  float beta;
} problem;

static uint16_t *random_bf16(size_t n) {
  uint16_t *x = loom_malloc((n ? n : 1) * 2);
  for (size_t i = 0; i < n; i++) x[i] = bf16_of((float)loom_rng_normal(&rng));
  return x;
}

static problem make(int ta, int tb, int M, int N, int K, float beta, int bias) {
  problem p = {ta, tb, M, N, K, 0, 0, 0, NULL, NULL, NULL, NULL, beta};
  int arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
  p.lda = acols + 3, p.ldb = bcols + 5, p.ldc = N + 7; /* wider than the matrices */
  /* exactly the bytes the last row needs: nothing after it to read by mistake */
  p.A = random_bf16((size_t)(arows - 1) * p.lda + acols);
  p.B = random_bf16((size_t)(brows - 1) * p.ldb + bcols);
  size_t nc = (size_t)(M - 1) * p.ldc + N;
  p.C0 = loom_malloc(nc * 4);
  for (size_t i = 0; i < nc; i++) p.C0[i] = (float)loom_rng_normal(&rng);
  if (bias) {
    p.bias = loom_malloc((size_t)N * 4);
    for (int n = 0; n < N; n++) p.bias[n] = (float)loom_rng_normal(&rng);
  }
  return p;
}

static void drop(problem *p) { free(p->A), free(p->B), free(p->C0), free(p->bias); }

static float *run(const problem *p, void (*gemm)(int, int, int, int, int, const uint16_t *, int,
                                                  const uint16_t *, int, const float *, float,
                                                  float *, int)) {
  size_t nc = (size_t)(p->M - 1) * p->ldc + p->N;
  float *C = loom_malloc(nc * 4);
  memcpy(C, p->C0, nc * 4);
  gemm(p->ta, p->tb, p->M, p->N, p->K, p->A, p->lda, p->B, p->ldb, p->bias, p->beta, C, p->ldc);
  return C;
}

static void onednn_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                        const uint16_t *B, int ldb, const float *bias, float beta, float *C,
                        int ldc) {
  gemm_onednn(1, ta, tb, M, N, K, A, lda, B, ldb, bias, beta, C, ldc);
}

/* The kernel sums exact products (a bf16 x bf16 product fits fp32) in fp32: at most K + 1
 * roundings of 2^-24 relative to a partial sum, each partial sum bounded by S = sum_k |a b| +
 * |bias| + |beta C|; allowed (K + 2) 2^-24 S per element (the fp32 sum's classic bound; the
 * hardware's pair-wise order only changes which partial sums are rounded). `slack` doubles it
 * for two fp32 results compared with each other. Returns the largest error / allowed. */
static double check(const problem *p, const float *C, double slack, const char *what) {
  double worst = 0;
  int bad = 0;
  for (int m = 0; m < p->M; m++)
    for (int n = 0; n < p->N; n++) {
      double ref = 0, mag = 0;
      for (int k = 0; k < p->K; k++) {
        double a = val(p->ta ? p->A[(size_t)k * p->lda + m] : p->A[(size_t)m * p->lda + k]);
        double b = val(p->tb ? p->B[(size_t)n * p->ldb + k] : p->B[(size_t)k * p->ldb + n]);
        ref += a * b, mag += fabs(a * b);
      }
      double c0 = p->C0[(size_t)m * p->ldc + n];
      if (p->bias) ref += p->bias[n], mag += fabs(p->bias[n]);
      if (p->beta != 0.0f) ref += (double)p->beta * c0, mag += fabs((double)p->beta * c0);
      double tol = slack * (p->K + 2) * 0x1p-24 * mag + 1e-30;
      double err = fabs(C[(size_t)m * p->ldc + n] - ref) / tol;
      if (err > worst) worst = err;
      if (err > 1 && bad++ < 3)
        fprintf(stderr, "  %s: C[%d][%d] = %.9g, reference %.9g (allowed %.3g)\n", what, m, n,
                C[(size_t)m * p->ldc + n], ref, tol);
    }
  /* the padding columns of C (ldc > N) are never written */
  for (int m = 0; m < p->M - 1; m++)
    for (int n = p->N; n < p->ldc; n++)
      if (C[(size_t)m * p->ldc + n] != p->C0[(size_t)m * p->ldc + n]) bad++;
  CHECK(!bad, "%s: %d elements outside the bound or written past N (worst %.2f of allowed)",
        what, bad, worst);
  return worst;
}

static int same_bits(const problem *p, const float *x, const float *y) {
  for (int m = 0; m < p->M; m++)
    if (memcmp(x + (size_t)m * p->ldc, y + (size_t)m * p->ldc, (size_t)p->N * 4)) return 0;
  return 1;
}

/* A cached weight follows its source only through gemm_amx_weights_changed: a changed W
 * marked stale gives the new product; released, the next call packs afresh. */
static void check_weight_cache(void) {
  problem p = make(0, 1, 40, 70, 90, 0.0f, 0);
  float *before = run(&p, gemm_amx_bf16_w);
  for (int i = 0; i < 70 * p.ldb; i += 7) p.B[i] ^= 0x0040; /* change W in place */
  float *plain = run(&p, gemm_amx_bf16);
  CHECK(!same_bits(&p, before, plain), "changing W did not change the product");
  gemm_amx_weights_changed(p.B, 10, 0); /* a range that holds the weight's first element */
  float *after = run(&p, gemm_amx_bf16_w);
  CHECK(same_bits(&p, after, plain), "a weight marked changed was not packed again");
  for (int i = 0; i < 70 * p.ldb; i += 7) p.B[i] ^= 0x0040;
  gemm_amx_weights_changed(p.B, (size_t)70 * p.ldb * 2, 1); /* released */
  float *again = run(&p, gemm_amx_bf16_w);
  CHECK(same_bits(&p, again, before), "a released weight was not packed afresh");
  free(before), free(plain), free(after), free(again);
  gemm_amx_weights_changed(p.B, (size_t)70 * p.ldb * 2, 1);
  drop(&p);
}

int main(void) {
  if (!loom_kernels_amx()) {
    printf("test_gemm_amx: SKIPPED: this CPU has no AMX tiles (amx_bf16 in /proc/cpuinfo), or "
           "Linux refused them, or LOOM_AMX=0: the AMX kernel was not run\n");
    return 77;
  }
  loom_rng_seed(&rng, 20261129);
  const int shapes[][3] = {
      {1, 1, 1},     {16, 16, 32},  {17, 33, 31},  {32, 32, 32},   {33, 65, 97},
      {2, 300, 64},  {300, 2, 64},  {100, 70, 513}, {257, 300, 40}, {64, 48, 1100},
      {130, 530, 600}, /* B packed whole: 512-column, 128-row units cut short; 2 K blocks */
  };
  const float betas[] = {0.0f, 1.0f, 0.5f};
  double worst = 0;
  int cases = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int t = 0; t < 4; t++)
      for (int b = 0; b < 4; b++) { /* beta 0, 1, 0.5, and bias (beta 0) */
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        problem p = make(t >> 1, t & 1, M, N, K, b < 3 ? betas[b] : 0.0f, b == 3);
        char what[96];
        snprintf(what, sizeof what, "%dx%dx%d ta%d tb%d beta %.1f%s", M, N, K, p.ta, p.tb,
                 p.beta, p.bias ? " bias" : "");
        omp_set_num_threads(1);
        float *c1 = run(&p, gemm_amx_bf16);
        double w = check(&p, c1, 1, what);
        if (w > worst) worst = w;
        omp_set_num_threads(2);
        float *c2 = run(&p, gemm_amx_bf16);
        omp_set_num_threads(3);
        float *c3 = run(&p, gemm_amx_bf16);
        CHECK(same_bits(&p, c1, c2) && same_bits(&p, c1, c3), "%s: 1, 2, 3 threads differ", what);
        float *cl = run(&p, loom_gemm_bf16); /* the public entry takes this kernel */
        CHECK(same_bits(&p, c1, cl), "%s: loom_gemm_bf16 is not the AMX kernel", what);
        float *cw = run(&p, gemm_amx_bf16_w); /* B packed whole and cached: the same bits */
        CHECK(same_bits(&p, c1, cw), "%s: packed weights differ", what);
        free(cw);
        /* B is freed below: its packed copy goes first (the cache's contract; a later
         * allocation at the same address would otherwise find it) */
        int brows = p.tb ? N : K, bcols = p.tb ? K : N;
        gemm_amx_weights_changed(p.B, ((size_t)(brows - 1) * p.ldb + bcols) * 2, 1);
        if (gemm_onednn_bf16_ok()) {
          float *cd = run(&p, onednn_bf16);
          check(&p, cd, 1, "oneDNN (the peer, same bound)");
          free(cd);
        }
        free(c1), free(c2), free(c3), free(cl);
        drop(&p);
        cases++;
      }
  check_weight_cache();
  printf("test_gemm_amx: %d cases, worst error %.3f of its bound\n", cases, worst);
  /* a bound that is never approached would not notice a lost term: the worst case must use
   * a visible part of it (one dropped product of unit normals would be ~1 / (K 2^-24 S) >> 1) */
  CHECK(worst > 1e-3, "worst error %.3g of the bound: the reference is suspiciously exact", worst);
  return harness_finish("test_gemm_amx");
}

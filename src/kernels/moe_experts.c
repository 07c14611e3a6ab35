/* The routed experts' SwiGLUs over the permuted rows, fast path. Two schedules, chosen by the
 * GEMM backend, because only one of them can run its products side by side:
 *  - OpenBLAS: in parallel over experts (largest first, dynamic), each expert's products on
 *    one thread (cblas_sgemm with OpenBLAS held to one thread for the pass). Per-expert row
 *    counts are small (N k / E: ~64-160 rows for a Qwen3-30B slice), where products split over
 *    threads scale badly: on this 2-core machine, loaded, 2x the sequential schedule.
 *  - oneDNN (loom_gemm_f32, what the decoder's linears use): expert after expert, threads
 *    inside each product (its primitives share one scratchpad: products cannot overlap).
 * Either way every expert's products are the same calls whatever the thread count, so the
 * OpenBLAS schedule gives the same bits on any number of threads.
 * bf16 mode is the dense MLP's training.dtype=bf16 without native bf16 GEMMs: operands hold
 * bf16 values (xp and the weights given so, act and the gradients rounded here), products
 * accumulate in fp32. Expert j owns count[j] consecutive rows; its gate and up (Ie,C) and down
 * (C,Ie) are ws values after expert j-1's. */
#include <cblas.h>
#undef I /* complex.h, through OpenBLAS cblas.h */
#include <stddef.h>
#include <string.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/kernels_moe.h"
#include "loom/prof.h"

typedef struct {
  float *yp, *dxp, *dwg, *dwu, *dwd, *work;
  const float *xp, *dyp, *wg, *wu, *wd;
  const loom_moe_expert_acts *a;
  size_t ws;
  const int *count;
  int n_exp, C, Ie;
  bool bf16;
  int serial; /* products on this thread (cblas_sgemm), else through loom_gemm_f32 */
} experts_pass;

/* C (M,N) = op(A) op(B) + beta C, the product of the pass's schedule */
static void gemm(const experts_pass *x, int ta, int tb, int M, int N, int K, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  if (!x->serial) { /* rows differ per expert and step: one primitive for every row count */
    loom_gemm_f32_ragged(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
              N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

/* The elementwise steps. On the parallel schedule they run on the calling thread without the
 * profiler's hooks (its part stack belongs to the main thread): the reference loops, whose
 * OpenMP regions are nested here and so run on this thread. */
static void swiglu_fwd(const experts_pass *x, float *y, const float *g, const float *u,
                       size_t n) {
  if (x->serial) loom_swiglu_forward_f32(y, g, u, n);
  else loom_swiglu_forward_fast_f32(y, g, u, n);
}

static void swiglu_bwd(const experts_pass *x, float *dg, float *du, const float *dy,
                       const float *g, const float *u, size_t n) {
  if (!x->serial) {
    loom_swiglu_backward_fast_f32(dg, du, dy, g, u, n);
    return;
  }
  memset(dg, 0, n * sizeof(float)), memset(du, 0, n * sizeof(float));
  loom_swiglu_backward_f32(dg, du, dy, g, u, n);
}

static void round_bf16(const experts_pass *x, float *dst, const float *src, size_t n) {
  if (!x->serial) {
    loom_round_bf16_f32(dst, src, n);
    return;
  }
  for (size_t i = 0; i < n; i++) dst[i] = loom_bf16_round(src[i]);
}

/* expert j over its n rows from row r0: forward */
static void expert_fwd(const experts_pass *x, int j, size_t r0) {
  int n = x->count[j], C = x->C, Ie = x->Ie;
  size_t nI = (size_t)n * Ie;
  const float *xr = x->xp + r0 * C;                                       // (n,C)
  float *hg = x->a->hg + r0 * Ie, *hu = x->a->hu + r0 * Ie, *act = x->a->act + r0 * Ie; // (n,Ie)
  gemm(x, 0, 1, n, Ie, C, xr, C, x->wg + j * x->ws, C, 0.0f, hg, Ie);
  gemm(x, 0, 1, n, Ie, C, xr, C, x->wu + j * x->ws, C, 0.0f, hu, Ie);
  swiglu_fwd(x, act, hg, hu, nI);
  if (x->bf16) round_bf16(x, act, act, nI);
  gemm(x, 0, 1, n, C, Ie, act, Ie, x->wd + j * x->ws, Ie, 0.0f, x->yp + r0 * C, C);
}

/* expert j over its n rows from row r0: backward, with work from row r0 */
static void expert_bwd(const experts_pass *x, int j, size_t r0) {
  int n = x->count[j], C = x->C, Ie = x->Ie;
  size_t nI = (size_t)n * Ie;
  float *w = x->work + r0 * (3 * (size_t)Ie + (x->bf16 ? (size_t)C : 0));
  float *dact = w, *dg = w + nI, *du = w + 2 * nI;                  // (n,Ie) each
  const float *dy = x->dyp + r0 * C, *xr = x->xp + r0 * C;         // (n,C)
  if (x->bf16) {
    float *dyr = w + 3 * nI; // (n,C)
    round_bf16(x, dyr, dy, (size_t)n * C);
    dy = dyr;
  }
  const float *hg = x->a->hg + r0 * Ie, *hu = x->a->hu + r0 * Ie, *act = x->a->act + r0 * Ie;
  size_t o = (size_t)j * x->ws;
  /* y = act wd^T: dact = dy wd, dwd += dy^T act */
  gemm(x, 0, 0, n, Ie, C, dy, C, x->wd + o, Ie, 0.0f, dact, Ie);
  gemm(x, 1, 0, C, Ie, n, dy, C, act, Ie, 1.0f, x->dwd + o, Ie);
  swiglu_bwd(x, dg, du, dact, hg, hu, nI);
  if (x->bf16) {
    round_bf16(x, dg, dg, nI);
    round_bf16(x, du, du, nI);
  }
  /* hg = x wg^T, hu = x wu^T: the weight gradients first (dxp may be xp) */
  gemm(x, 1, 0, Ie, C, n, dg, Ie, xr, C, 1.0f, x->dwg + o, C);
  gemm(x, 1, 0, Ie, C, n, du, Ie, xr, C, 1.0f, x->dwu + o, C);
  gemm(x, 0, 0, n, C, Ie, dg, Ie, x->wg + o, C, 0.0f, x->dxp + r0 * C, C);
  gemm(x, 0, 0, n, C, Ie, du, Ie, x->wu + o, C, 1.0f, x->dxp + r0 * C, C);
}

/* every expert with rows through fn: in parallel over experts with one-thread products
 * (OpenBLAS), or one after the other with threaded products (oneDNN) */
static void run(experts_pass *x, void (*fn)(const experts_pass *, int, size_t)) {
  enum { MAXE = 1024 }; /* LOOM_MOE_MAX_EXPERTS */
  LOOM_ASSERT(x->n_exp <= MAXE);
  size_t off[MAXE];
  int order[MAXE], n = 0;
  size_t r0 = 0;
  for (int j = 0; j < x->n_exp; r0 += (size_t)x->count[j], j++) {
    off[j] = r0;
    if (x->count[j] > 0) order[n++] = j;
  }
  x->serial = loom_gemm_get_backend() == LOOM_GEMM_OPENBLAS;
  if (!x->serial) {
    for (int i = 0; i < n; i++) fn(x, order[i], off[order[i]]);
    return;
  }
  for (int i = 1; i < n; i++) /* largest first: the dynamic schedule then balances */
    for (int m = i; m > 0 && x->count[order[m]] > x->count[order[m - 1]]; m--) {
      int t = order[m];
      order[m] = order[m - 1], order[m - 1] = t;
    }
  int blas_threads = openblas_get_num_threads();
  if (blas_threads != 1) openblas_set_num_threads(1);
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
  for (int i = 0; i < n; i++) fn(x, order[i], off[order[i]]);
  if (blas_threads != 1) openblas_set_num_threads(blas_threads);
}

/* rows of the pass: the experts' counts summed (the profiler's work) */
static double rows_of(const int *count, int n_exp) {
  double rows = 0;
  for (int j = 0; j < n_exp; j++) rows += count[j];
  return rows;
}

void loom_moe_experts_forward_fast_f32(float *yp, const loom_moe_expert_acts *a,
                                       const float *xp, const float *wg, const float *wu,
                                       const float *wd, size_t ws, const int *count, int n_exp,
                                       int C, int Ie, bool bf16) {
  // yp (rows,C), a->hg, a->hu, a->act (rows,Ie), xp (rows,C)
  experts_pass x = {.yp = yp, .xp = xp, .wg = wg, .wu = wu, .wd = wd, .a = a, .ws = ws,
                    .count = count, .n_exp = n_exp, .C = C, .Ie = Ie, .bf16 = bf16};
  LOOM_PROF_PUSH(LOOM_PART_EXPERTS_FWD);
  run(&x, expert_fwd);
  LOOM_PROF_POP(6.0 * rows_of(count, n_exp) * C * Ie, 0); /* gate, up, down: 2 rows C Ie each */
}

size_t loom_moe_experts_work_floats(int rows, int C, int Ie, bool bf16) {
  return (size_t)rows * (3 * (size_t)Ie + (bf16 ? (size_t)C : 0));
}

void loom_moe_experts_backward_fast_f32(float *dxp, float *dwg, float *dwu, float *dwd,
                                        const float *dyp, const loom_moe_expert_acts *a,
                                        const float *xp, const float *wg, const float *wu,
                                        const float *wd, size_t ws, const int *count, int n_exp,
                                        int C, int Ie, bool bf16, float *work) {
  // dxp (rows,C) written; dwg, dwu, dwd += ; dyp, xp (rows,C); a->hg, hu, act (rows,Ie)
  experts_pass x = {.dxp = dxp, .dwg = dwg, .dwu = dwu, .dwd = dwd, .work = work, .xp = xp,
                    .dyp = dyp, .wg = wg, .wu = wu, .wd = wd, .a = a, .ws = ws,
                    .count = count, .n_exp = n_exp, .C = C, .Ie = Ie, .bf16 = bf16};
  LOOM_PROF_PUSH(LOOM_PART_EXPERTS_BWD);
  run(&x, expert_bwd);
  LOOM_PROF_POP(12.0 * rows_of(count, n_exp) * C * Ie, 0); /* a data and a weight gradient each */
}

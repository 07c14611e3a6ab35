/* GEMM throughput of this machine through the call every linear layer of the trainer makes
 * (loom_gemm_f32 on the configured backend, oneDNN or OpenBLAS): each role (forward
 * y = x W^T, input gradient dx = dy W, weight gradient dW = dy^T x) on a grid of shapes
 * (m rows x n outputs x k inputs), giving the profile's fp32 peak (the best measured) and its
 * efficiency grid; and the bf16 path the trainer takes: loom_gemm_bf16_w (weights in the
 * layout the backend prefers where that is faster) where the backend runs bf16 natively, else
 * inputs rounded to bf16 values and the fp32 GEMM (fp32's speed). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/sim_bench.h"

static const double axis_m[] = {32, 128, 512, 2048}, axis_n[] = {32, 128, 512, 1024},
                    axis_k[] = {32, 128, 512, 1024};
enum { NM = 4, NN = 4, NK = 4 };

typedef struct {
  int role, m, n, k;
  float *a, *b, *c;
  float *pool; /* (POOL_FLOATS): cold B and C operands, taken in turn */
  size_t at;
} job;

/* A training step meets its GEMMs' second operand (the weight, or the activation the forward
 * saved) and the output it writes a layer's work after last touching them: not in the core's
 * caches. Each timed call takes its B and C from the next place in a pool larger than the
 * last-level cache, while A (the input just produced: x, dy) stays where the previous call
 * left it. Hot, tiny-qwen3-moe's attention projections ran 1-7% and its experts' 128-row products
 * up to 17% faster than so on this Zen 3, GPT-2-sized products the same (bench/kernel_models.sh,
 * docs/SIMULATOR.md "GEMMs and attention as a step meets them"). */
enum { POOL_FLOATS = 16 << 20 }; /* 64 MiB */

static float *take(job *j, size_t n) {
  size_t step = (n + 1023) & ~(size_t)1023;
  if (j->at + step > POOL_FLOATS) j->at = 0;
  float *p = j->pool + j->at;
  j->at += step;
  return p;
}

/* Each role at its product's (m, n, k), C (m,n) = A (m,k) B (k,n), the dimensions the
 * simulator asks for (src/sim/cost_*.c), in the layout of the linear layer's call
 * (src/model/decoder_ops.c): fwd y (m,n) = x (m,k) W^T, W (n,k); dgrad dx (m,n) = dy (m,k) W,
 * W (k,n); wgrad dW (m,n) += dy^T x, dy (k,m), x (k,n). */
static void run(void *p) {
  job *j = p;
  int m = j->m, n = j->n, k = j->k;
  float *b = j->pool ? take(j, (size_t)k * n) : j->b, *c = j->pool ? take(j, (size_t)m * n) : j->c;
  if (j->role == LOOM_GEMM_FWD) loom_gemm_f32(0, 1, m, n, k, j->a, k, b, k, NULL, 0.0f, c, n);
  else if (j->role == LOOM_GEMM_DGRAD)
    loom_gemm_f32(0, 0, m, n, k, j->a, k, b, n, NULL, 0.0f, c, n);
  else
    loom_gemm_f32(1, 0, m, n, k, j->a, m, b, n, NULL, 1.0f, c, n);
}

static void run_bf16(void *p) {
  job *j = p;
  const uint16_t *x = (const uint16_t *)j->a, *w = (const uint16_t *)j->b;
  loom_gemm_bf16_w(0, 1, j->m, j->n, j->k, x, j->k, w, j->k, NULL, 0.0f, j->c, j->n);
}

static void fill(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
}

typedef struct {
  float *A, *B, *C, *pool;
  double min_s;
} grid;

/* point p of the grid: role p / (NM NN NK), then m, n, k (k fastest); *i its index in the
 * role's table */
static job point_job(int p, int *i) {
  int r = p / (NM * NN * NK);
  *i = p % (NM * NN * NK);
  job j = {.role = r, .m = (int)axis_m[*i / (NN * NK)], .n = (int)axis_n[*i / NK % NN],
           .k = (int)axis_k[*i % NK]};
  return j;
}

static double time_point(void *ctx, int p) {
  grid *g = ctx;
  int i;
  job j = point_job(p, &i);
  j.a = g->A, j.b = g->B, j.c = g->C, j.pool = g->pool;
  return loom_bench_time(run, &j, g->min_s);
}

typedef struct {
  job f32, bf16; /* the same shape: fp32 operands, and bf16 ones (native) or rounded fp32 */
  bool native;
  double min_s;
} pair;

static double time_pair(void *ctx, int i) {
  pair *p = ctx;
  if (i == 0) return loom_bench_time(run, &p->f32, p->min_s);
  return loom_bench_time(p->native ? run_bf16 : run, &p->bf16, p->min_s);
}

int loom_bench_gemm(loom_hw_profile *hw, const loom_bench_ctx *b) {
  size_t big = 2048 * 2048;
  float *A = loom_alloc(big * sizeof(float)), *B = loom_alloc(big * sizeof(float)),
        *C = loom_alloc(big * sizeof(float));
  float *pool = loom_alloc((size_t)POOL_FLOATS * sizeof(float));
  fill(A, big), fill(B, big), fill(C, big), fill(pool, POOL_FLOATS);
  double rate[LOOM_GEMM_ROLES][NM * NN * NK], best = 0;
  double min_s = 0.004 * b->scale;
  /* the grid in passes (loom_bench_passes): with one, a point's rate spread up to 22x over six
   * `loom bench --nproc 2` on the AMX Xeon, runs of neighbouring points slowed together */
  enum { POINTS = LOOM_GEMM_ROLES * NM * NN * NK };
  double t[POINTS];
  grid g = {A, B, C, pool, min_s};
  int passes = loom_bench_passes(b, time_point, &g, POINTS, 5, t);
  for (int p = 0; p < POINTS; p++) {
    int i;
    job j = point_job(p, &i);
    rate[j.role][i] = 2.0 * j.m * j.n * j.k / t[p];
    if (rate[j.role][i] > best) best = rate[j.role][i];
  }
  /* the bf16 path at the shape of the best fp32 rate's neighbourhood: native bf16 operands,
   * or rounded inputs and the fp32 GEMM; the two in passes as the grid (each alone could be
   * slowed, and the ratio is bf16's peak) */
  bool native = loom_gemm_bf16_native();
  enum { BM = 2048, BN = 1024, BK = 1024 };
  float *A16 = loom_alloc((size_t)BM * BK * sizeof(float)),
        *B16 = loom_alloc((size_t)BN * BK * sizeof(float));
  if (native) {
    loom_f32_to_bf16_n((uint16_t *)A16, A, (size_t)BM * BK);
    loom_f32_to_bf16_n((uint16_t *)B16, B, (size_t)BN * BK);
  } else {
    loom_round_bf16_f32(A16, A, (size_t)BM * BK);
    loom_round_bf16_f32(B16, B, (size_t)BN * BK);
  }
  pair pr = {{LOOM_GEMM_FWD, BM, BN, BK, A, B, C, NULL, 0},
             {LOOM_GEMM_FWD, BM, BN, BK, A16, B16, C, NULL, 0},
             native,
             min_s};
  double tp[2];
  loom_bench_passes(b, time_pair, &pr, 2, 5, tp);
  double t_f32 = tp[0], t_bf16 = tp[1];
  if (native) loom_gemm_weights_release(B16, (size_t)BN * BK * sizeof(uint16_t));
  loom_free(A16), loom_free(B16);
  loom_free(A), loom_free(B), loom_free(C), loom_free(pool);
  hw->peak_flops[LOOM_DT_FP32] = best;
  snprintf(hw->gemm_backend, sizeof hw->gemm_backend, "%s",
           loom_gemm_backend_name(loom_gemm_get_backend()));
  /* the grid's shape factors apply to both; bf16 scales by the ratio at this shape */
  hw->peak_flops[LOOM_DT_BF16] = best * t_f32 / t_bf16;
  hw->peak_flops[LOOM_DT_FP16] = 0;    /* no fp16 path */
  hw->vector_flops[LOOM_DT_FP32] = hw->vector_flops[LOOM_DT_BF16] = best / 4;
  hw->vector_flops[LOOM_DT_FP16] = 0;
  hw->grid_n[0] = NM, hw->grid_n[1] = NN, hw->grid_n[2] = NK;
  hw->grid_layer_order = 0;
  for (int i = 0; i < NM; i++) hw->grid_axis[0][i] = axis_m[i];
  for (int i = 0; i < NN; i++) hw->grid_axis[1][i] = axis_n[i];
  for (int i = 0; i < NK; i++) hw->grid_axis[2][i] = axis_k[i];
  for (int r = 0; r < LOOM_GEMM_ROLES; r++)
    for (int i = 0; i < NM * NN * NK; i++) hw->grid_eff[r][i] = rate[r][i] / best;
  /* the curve by smallest dimension: the mean efficiency of the forward shapes per min dim */
  hw->n_gemm_eff = 0;
  for (int d = 0; d < NK; d++) {
    double sum = 0;
    int cnt = 0;
    for (int i = 0; i < NM * NN * NK; i++) {
      int im = i / (NN * NK), in = i / NK % NN, ik = i % NK;
      double mn = axis_m[im] < axis_n[in] ? axis_m[im] : axis_n[in];
      mn = mn < axis_k[ik] ? mn : axis_k[ik];
      if (mn == axis_k[d]) sum += rate[LOOM_GEMM_FWD][i] / best, cnt++;
    }
    hw->gemm_eff_dim[hw->n_gemm_eff] = axis_k[d];
    hw->gemm_eff[hw->n_gemm_eff++] = cnt ? sum / cnt : 1;
  }
  if (b->log) {
    fprintf(b->log, "gemm (%s backend): peak %.1f GFLOP/s fp32 (one thread per rank; the grid's "
            "best of %d passes); bf16 %s %.1f GFLOP/s vs fp32 %.1f at 2048x1024x1024\n",
            loom_gemm_backend_name(loom_gemm_get_backend()), best / 1e9, passes,
            native ? "native" : "(rounded inputs, fp32 GEMM)", 2.0 * 2048 * 1024 * 1024 / t_bf16 / 1e9,
            2.0 * 2048 * 1024 * 1024 / t_f32 / 1e9);
    static const char *const roles[] = {"fwd", "dgrad", "wgrad"};
    for (int r = 0; r < LOOM_GEMM_ROLES; r++) {
      fprintf(b->log, "  %-5s GFLOP/s  m\\n,k:", roles[r]);
      for (int jn = 0; jn < NN; jn++)
        for (int k = 0; k < NK; k++) fprintf(b->log, " %4.0f,%-4.0f", axis_n[jn], axis_k[k]);
      fprintf(b->log, "\n");
      for (int i = 0; i < NM; i++) {
        fprintf(b->log, "        %5.0f            ", axis_m[i]);
        for (int q = 0; q < NN * NK; q++) fprintf(b->log, " %9.1f", rate[r][i * NN * NK + q] / 1e9);
        fprintf(b->log, "\n");
      }
    }
  }
  return 0;
}

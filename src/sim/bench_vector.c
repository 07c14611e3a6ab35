/* Memory bandwidth, the rate of each vector kernel the trainer runs (elements per second of
 * the fused kernels the decoder calls, at activation sizes, on activation-like values), and
 * the causal flash attention (units of one (query, key) pair times head_dim per second). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <omp.h>
#include <string.h>
#include <sys/mman.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/sim_bench.h"

enum { ROWS = 1024, COLS = 512, N = ROWS * COLS };

typedef struct {
  int kind;
  float *x, *y, *z, *w, *u, *v;
  size_t n;
} vjob;

static const int32_t *targets_of(size_t rows) {
  static int32_t t[ROWS];
  for (size_t r = 0; r < rows && r < ROWS; r++) t[r] = (int32_t)((r * 7) % COLS);
  return t;
}

static void run(void *p) {
  vjob *j = p;
  size_t n = j->n;
  switch (j->kind) {
  case LOOM_VOP_LAYERNORM_FWD:
    loom_add_norm_forward_f32(NULL, j->y, j->u, j->v, j->x, NULL, NULL, j->w, j->w + COLS, ROWS, COLS, 1e-5f);
    break;
  case LOOM_VOP_RMSNORM_FWD:
    loom_add_norm_forward_f32(NULL, j->y, NULL, j->v, j->x, NULL, NULL, j->w, NULL, ROWS, COLS, 1e-6f);
    break;
  case LOOM_VOP_LAYERNORM_BWD:
    loom_norm_backward_fast_f32(j->z, j->w + 2 * COLS, j->w + 3 * COLS, j->y, j->x, j->w, j->u, j->v, ROWS, COLS);
    break;
  case LOOM_VOP_RMSNORM_BWD:
    loom_norm_backward_fast_f32(j->z, j->w + 2 * COLS, NULL, j->y, j->x, j->w, NULL, j->v, ROWS, COLS);
    break;
  case LOOM_VOP_GELU_FWD: loom_bias_gelu_forward_f32(j->x, j->y, NULL, ROWS, COLS); break;
  case LOOM_VOP_GELU_BWD: loom_gelu_backward_fast_f32(j->z, j->y, j->x, n); break;
  case LOOM_VOP_SWIGLU_FWD: loom_swiglu_forward_fast_f32(j->z, j->x, j->y, n); break;
  case LOOM_VOP_SWIGLU_BWD: loom_swiglu_backward_fast_f32(j->u, j->z, j->y, j->x, j->w, n); break;
  case LOOM_VOP_ROPE: loom_rope_forward_f32(j->y, 4, ROWS / 4, COLS / 64, 64, 10000.0, 0); break;
  case LOOM_VOP_XENT_FWD:
    loom_xent_stats_f32(j->u, j->u + ROWS, j->u + 2 * ROWS, j->x, targets_of(ROWS), ROWS, COLS, COLS);
    break;
  case LOOM_VOP_XENT_BWD:
    loom_xent_grad_f32(j->y, j->x, j->v, j->v + ROWS, targets_of(ROWS), ROWS, COLS, COLS, 1e-3f);
    break;
  case LOOM_VOP_ADAMW: { /* the one-pass AdamW the trainer's optimizer step runs */
    loom_adamw_segment seg = {0, n, 0.1};
    loom_adamw_flat_f32(j->x, j->y, j->z, j->u, NULL, 0, &seg, 1, 1.0f, 1e-4, 0.9, 0.95, 1e-8, 10);
    break;
  }
  case LOOM_VOP_ADD: loom_residual_add_f32(j->y, j->x, j->z, NULL, ROWS, COLS); break;
  case LOOM_VOP_COPY: memcpy(j->y, j->x, n * sizeof(float)); break;
  case LOOM_VOP_ROUND: /* what the bf16 path does to every matmul input */
    if (loom_gemm_bf16_native()) loom_f32_to_bf16_n((uint16_t *)j->y, j->x, n);
    else loom_round_bf16_f32(j->y, j->x, n);
    break;
  case LOOM_VOP_SUMSQ: j->v[0] += (float)loom_sumsq_f32(j->x, n); break;
  default: break;
  }
}

static void fill(float *x, size_t n, float scale) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; i++) {
    float u = 0;
    for (int k = 0; k < 3; k++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      u += (float)(s >> 40) / (float)(1u << 24) - 0.5f;
    }
    x[i] = scale * 2.0f * u;
  }
}

typedef struct {
  vjob *j;
  const int *kinds;
  double min_s;
} vpass;

static double time_kind(void *p, int i) {
  vpass *v = p;
  v->j->kind = v->kinds[i];
  return loom_bench_time(run, v->j, v->min_s);
}

int loom_bench_vector(loom_hw_profile *hw, const loom_bench_ctx *b) {
  float *buf = loom_alloc(6 * (size_t)N * sizeof(float));
  vjob j = {0, buf, buf + N, buf + 2 * (size_t)N, buf + 3 * (size_t)N, buf + 4 * (size_t)N,
            buf + 5 * (size_t)N, N};
  fill(buf, 6 * (size_t)N, 1.5f);
  for (size_t i = 0; i < N; i++) j.u[i] = fabsf(j.u[i]) + 0.1f; /* AdamW's v >= 0; stats */
  for (size_t i = 0; i < N; i++) j.v[i] = fabsf(j.v[i]) + 0.5f;
  for (size_t r = 0; r < ROWS; r++) j.v[ROWS + r] = (float)COLS; /* softmax sums */
  static const int kinds[] = {LOOM_VOP_LAYERNORM_FWD, LOOM_VOP_LAYERNORM_BWD, LOOM_VOP_RMSNORM_FWD,
                              LOOM_VOP_RMSNORM_BWD, LOOM_VOP_GELU_FWD, LOOM_VOP_GELU_BWD,
                              LOOM_VOP_SWIGLU_FWD, LOOM_VOP_SWIGLU_BWD, LOOM_VOP_ROPE,
                              LOOM_VOP_XENT_FWD, LOOM_VOP_XENT_BWD, LOOM_VOP_ADAMW, LOOM_VOP_ADD,
                              LOOM_VOP_COPY, LOOM_VOP_ROUND, LOOM_VOP_SUMSQ};
  /* every kernel in passes (loom_bench_passes): with one, six `loom bench --nproc 2` in a
   * row on the AMX Xeon spread a kernel's rate up to 6.85x (rmsnorm_bwd 287-1968, sumsq
   * 645-2942 million/s) */
  enum { NK = sizeof kinds / sizeof kinds[0] };
  double best[NK];
  vpass ctx = {&j, kinds, 0.02 * b->scale};
  int passes = loom_bench_passes(b, time_kind, &ctx, NK, 5, best);
  if (b->log) fprintf(b->log, "vector kernels (million elements/s, best of %d passes):", passes);
  for (size_t i = 0; i < NK; i++) {
    hw->vop_rate[kinds[i]] = N / best[i];
    if (b->log)
      fprintf(b->log, "%s %s %.0f", i % 6 ? "," : "\n ", loom_vop_name((loom_vop)kinds[i]),
              N / best[i] / 1e6);
  }
  if (b->log) fprintf(b->log, "\n");
  loom_free(buf);
  return 0;
}

typedef struct {
  float *a, *b, *c;
  size_t n;
} mjob;

/* hand the whole pages of a layer-sized range back (as ZeRO-3 does with a layer it is done
 * with: 3 MiB, not aligned) and touch them again, over the buffer */
enum { RANGE = 786432 };
static void refault(void *p) {
  mjob *m = p;
  uintptr_t page = 4096;
  for (size_t at = 1000; at + RANGE <= m->n; at += RANGE + 1000) {
    float *b = m->a + at;
    uintptr_t lo = ((uintptr_t)b + page - 1) & ~(page - 1), hi = (uintptr_t)(b + RANGE) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    memset(b, 0, RANGE * sizeof(float));
  }
}

/* copy and triad run on the caller's OpenMP threads, as the trainer's memory-bound kernels do:
 * `loom bench` (one thread per rank) measures one core, `loom bench model` the step's threads
 * (a single-threaded bound made the 2-thread AdamW look faster than memory) */
static void copy(void *p) {
  mjob *m = p;
#pragma omp parallel
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    size_t lo = m->n * (size_t)t / (size_t)nt, hi = m->n * (size_t)(t + 1) / (size_t)nt;
    memcpy(m->b + lo, m->a + lo, (hi - lo) * sizeof(float));
  }
}

static void triad(void *p) {
  mjob *m = p;
  long n = (long)m->n;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i++) m->c[i] = m->a[i] + 0.5f * m->b[i];
}

typedef struct {
  mjob *m;
  double min_s;
} mpass;

static double time_memory(void *p, int i) {
  mpass *mp = p;
  void (*const fn[3])(void *) = {copy, triad, refault};
  return loom_bench_time(fn[i], mp->m, mp->min_s);
}

int loom_bench_memory(loom_hw_profile *hw, const loom_bench_ctx *b) {
  size_t n = (size_t)16 << 20; /* 64 MiB per array: beyond the caches */
  mjob m = {loom_alloc(n * 4), loom_alloc(n * 4), loom_alloc(n * 4), n};
  fill(m.a, n, 1), fill(m.b, n, 1), fill(m.c, n, 1);
  double t[3]; /* copy, triad, refault: in passes (loom_bench_passes), as the vector kernels */
  mpass mp = {&m, 0.05 * b->scale};
  loom_bench_passes(b, time_memory, &mp, 3, 5, t);
  double tc = t[0], tt = t[1], tf = t[2];
  double touched = (double)(n / (RANGE + 1000)) * RANGE;
  hw->vop_rate[LOOM_VOP_FAULT] = touched / tf;
  double bw_copy = 2.0 * n * 4 / tc, bw_triad = 3.0 * n * 4 / tt;
  hw->mem_bw = bw_copy > bw_triad ? bw_copy : bw_triad;
  hw->mem_eff = 1;
  if (b->log)
    fprintf(b->log, "memory: copy %.2f GB/s, triad %.2f GB/s, released pages touched again %.2f GB/s "
            "(%d thread%s)\n", bw_copy / 1e9, bw_triad / 1e9, 4.0 * touched / tf / 1e9, omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s");
  loom_free(m.a), loom_free(m.b), loom_free(m.c);
  return 0;
}

typedef struct {
  int B, T, H, D;
  float *q, *k, *v, *o, *lse, *dq, *dk, *dv, *dout, *work;
  bool backward, bf16;
} ajob;

static void attn(void *p) {
  ajob *a = p;
  loom_attn_mask causal = {.causal = 1};
  if (a->bf16 && !a->backward)
    loom_flash_attention_forward_bf16(a->o, a->lse, a->q, a->k, a->v, a->B, a->T, a->H, a->H,
                                      a->D, causal);
  else if (a->bf16)
    loom_flash_attention_backward_bf16(a->dq, a->dk, a->dv, a->dout, a->o, a->lse, a->q, a->k,
                                       a->v, a->B, a->T, a->H, a->H, a->D, causal, a->work);
  else if (!a->backward)
    loom_flash_attention_forward_f32(a->o, a->lse, a->q, a->k, a->v, a->B, a->T, a->H, a->H,
                                     a->D, causal);
  else
    loom_flash_attention_backward_f32(a->dq, a->dk, a->dv, a->dout, a->o, a->lse, a->q, a->k,
                                      a->v, a->B, a->T, a->H, a->H, a->D, causal, a->work);
}

/* The kernel's time is a rate over the (query, key) pairs of its tile grid (a causal diagonal
 * tile computed whole) plus one over the query rows each call processes (loading and
 * transposing q, normalising and storing the output), both in units of head_dim, and a time
 * per query row whatever head_dim (the online softmax's running max and sum and their rescales
 * per key tile): t = D (pairs x + rows y) + rows w, fitted by relative least squares to six
 * shapes, 128 and 1024 keys per row at head_dim 32, 64 and 128, timed in turns. One rate over
 * the causal pairs at T=256 priced 128-token heads 17-30% short and 2048-token ones 40-50%
 * long on a Zen 3; without w, at 64 dims, the AMX Xeon's forward at head_dim 32 came out 34%
 * short and 128 34% long (24 shapes, T 128..2048, head_dim 16..128: worst 27% with w, rms 9%,
 * and 72%, rms 27%, without; docs/SIMULATOR.md "GEMMs and attention as a step meets them"). */
enum { ATT_SHAPES = 6, ATT_H = 4 };
static const int att_shape[ATT_SHAPES][3] = {/* B, T, D */
                                             {4, 128, 64}, {1, 1024, 64}, {4, 128, 32},
                                             {1, 1024, 32}, {4, 128, 128}, {1, 1024, 128}};

int loom_bench_attention(loom_hw_profile *hw, const loom_bench_ctx *b) {
  const int H = ATT_H;
  size_t n = 0, rows = 0;
  for (int s = 0; s < ATT_SHAPES; s++) {
    size_t ns = (size_t)att_shape[s][0] * att_shape[s][1] * H * att_shape[s][2];
    size_t rs = (size_t)att_shape[s][0] * att_shape[s][1] * H;
    n = ns > n ? ns : n;
    rows = rs > rows ? rs : rows;
  }
  float *buf = loom_alloc((8 * n + 2 * rows) * sizeof(float));
  ajob a = {0, 0, H, 0, buf, buf + n, buf + 2 * n, buf + 3 * n, buf + 8 * n, buf + 4 * n,
            buf + 5 * n, buf + 6 * n, buf + 7 * n, buf + 8 * n + rows, false, false};
  fill(buf, 8 * n, 0.3f);
  hw->attn_tile[0] = hw->attn_tile[1] = loom_flash_attention_tile();
  double t[2][ATT_SHAPES], X[ATT_SHAPES][3];
  for (int s = 0; s < ATT_SHAPES; s++) {
    double B = att_shape[s][0], T = att_shape[s][1], D = att_shape[s][2];
    X[s][0] = D * B * H * loom_hw_causal_tile_pairs(hw, T); /* pair-dims */
    X[s][1] = D * B * H * T;                                   /* row-dims */
    X[s][2] = B * H * T;                                       /* rows */
    t[0][s] = t[1][s] = 1e300;
  }
  /* in turns, the best of 5 (the machine's speed drifts), each the slowest rank's in lockstep */
  for (int trial = 0; trial < 5; trial++)
    for (int dir = 0; dir < 2; dir++)
      for (int s = 0; s < ATT_SHAPES; s++) {
        a.B = att_shape[s][0], a.T = att_shape[s][1], a.D = att_shape[s][2], a.backward = dir;
        double ts = loom_bench_slowest(b, loom_bench_time(attn, &a, 0.02 * b->scale));
        if (ts < t[dir][s]) t[dir][s] = ts;
      }
  hw->attention = LOOM_ATTN_LOOM;
  for (int dir = 0; dir < 2; dir++) {
    /* all three terms; where timing noise leaves one not positive, the better of the two
     * pairs with the pair-dims (pair- and row-dims; pair-dims and rows); then the pair-dims
     * alone */
    static const int all[3] = {0, 1, 2}, pair_row_dims[2] = {0, 1}, pair_dims_rows[2] = {0, 2},
                     pair_dims[1] = {0};
    double c[3], c2[3];
    if (loom_bench_fit_rel(X, t[dir], ATT_SHAPES, all, 3, c) < 0) {
      double e1 = loom_bench_fit_rel(X, t[dir], ATT_SHAPES, pair_row_dims, 2, c);
      double e2 = loom_bench_fit_rel(X, t[dir], ATT_SHAPES, pair_dims_rows, 2, c2);
      if (e2 >= 0 && (e1 < 0 || e2 < e1)) memcpy(c, c2, sizeof c);
      else if (e1 < 0 && loom_bench_fit_rel(X, t[dir], ATT_SHAPES, pair_dims, 1, c) < 0)
        c[0] = t[dir][1] / X[1][0], c[1] = c[2] = 0; /* the larger 64-dim shape alone */
    }
    *(dir ? &hw->attn_rate_bwd : &hw->attn_rate_fwd) = 1 / c[0];
    *(dir ? &hw->attn_row_rate_bwd : &hw->attn_row_rate_fwd) = c[1] > 0 ? 1 / c[1] : 0;
    *(dir ? &hw->attn_row_s_bwd : &hw->attn_row_s_fwd) = c[2];
  }
  if (b->log) {
    fprintf(b->log, "flash attention (%d heads, causal, tiles of %g), forward / backward ms:", H,
            hw->attn_tile[0]);
    for (int s = 0; s < ATT_SHAPES; s++)
      fprintf(b->log, "%s B=%d T=%d D=%d %.2f / %.2f", s ? "," : "", att_shape[s][0],
              att_shape[s][1], att_shape[s][2], t[0][s] * 1e3, t[1][s] * 1e3);
    fprintf(b->log, "; per tile pair x dim %.2f / %.2f G/s, per query row x dim %.2f / %.2f G/s, "
            "per query row %.1f / %.1f ns\n", hw->attn_rate_fwd / 1e9, hw->attn_rate_bwd / 1e9,
            hw->attn_row_rate_fwd / 1e9, hw->attn_row_rate_bwd / 1e9, hw->attn_row_s_fwd * 1e9,
            hw->attn_row_s_bwd * 1e9);
  }
  a.B = 1, a.T = 1024, a.D = 64; /* the bf16 kernels at the second shape */
  /* the bf16 kernels (training.dtype=bf16): logged; the profile keeps the fp32 rates */
  a.bf16 = true, a.backward = false;
  double tf16 = loom_bench_time(attn, &a, 0.05 * b->scale);
  a.backward = true;
  double tb16 = loom_bench_time(attn, &a, 0.05 * b->scale);
  if (b->log)
    fprintf(b->log, "bf16 flash attention (%s, B=1 T=1024): forward %.2f ms, backward %.2f ms\n",
            loom_kernels_attn_bf16_path(), tf16 * 1e3, tb16 * 1e3);
  loom_free(buf);
  return 0;
}

/* Decoder building blocks shared by the block, embedding and head code: linear layers (the
 * one place every matmul goes through: the run-time GEMM backend, native bf16 operands with
 * the weights converted once per parameter update, or bf16-rounded fp32), norms of either
 * family fused with the residual add, bias helpers, the tensor-parallel row gathers/reductions
 * (Megatron, with or without sequence parallelism), and the Ulysses all-to-all between
 * token-split and head-split layouts. */
#include <cblas.h>
#undef I /* complex.h, through OpenBLAS cblas.h */
#include <stdio.h>
#include <stdlib.h>

#include "loom/kernels.h"
#include "loom/prof.h"
#include "model/decoder_internal.h"

size_t loom_param_offset(const loom_decoder *d, const char *name) {
  const loom_param *p = loom_param_find(&d->layout, name);
  return p ? p->offset : NONE;
}

static size_t off_of(const loom_decoder *d, int l, const char *suffix) {
  char name[64];
  snprintf(name, sizeof name, "layers.%d.%s", l, suffix);
  return loom_param_offset(d, name);
}

block_offsets loom_block_offsets(const loom_decoder *d, int l) {
  if (d->s && d->s->offs) return d->s->offs[l]; /* found at creation */
  block_offsets o;
  const struct {
    size_t *at;
    const char *name;
  } tensors[] = {{&o.n1w, "attn_norm.weight"},  {&o.n1b, "attn_norm.bias"},
                 {&o.qw, "attn.q.weight"},       {&o.qb, "attn.q.bias"},
                 {&o.kw, "attn.k.weight"},       {&o.kb, "attn.k.bias"},
                 {&o.vw, "attn.v.weight"},       {&o.vb, "attn.v.bias"},
                 {&o.ow, "attn.o.weight"},       {&o.ob, "attn.o.bias"},
                 {&o.n2w, "mlp_norm.weight"},    {&o.n2b, "mlp_norm.bias"},
                 {&o.gw, "mlp.gate.weight"},     {&o.uw, "mlp.up.weight"},
                 {&o.ub, "mlp.up.bias"},         {&o.dw, "mlp.down.weight"},
                 {&o.db, "mlp.down.bias"},       {&o.qn, "attn.q_norm.weight"},
                 {&o.kn, "attn.k_norm.weight"},  {&o.rw, "moe.router.weight"}};
  for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++)
    *tensors[i].at = off_of(d, l, tensors[i].name);
  o.rb = o.eg = o.eu = o.ed = o.ews = o.sg = o.su = o.sd = o.sgate = NONE;
  if (o.rw == NONE) return o;
  o.rb = off_of(d, l, "moe.router.bias");
  /* the first expert this rank holds (expert parallelism: its E/ep experts, layout.c) */
  int e0 = d->shard.ep > 1 ? d->shard.ep_rank * (d->spec.moe.experts / d->shard.ep) : 0;
  if (d->shard.experts_over_tp && d->shard.tp > 1)
    e0 = d->shard.tp_rank * (d->spec.moe.experts / d->shard.tp);
  char name[40];
#define EXPERT(e, part) (snprintf(name, sizeof name, "moe.experts.%d." part ".weight", e), name)
  o.eg = off_of(d, l, EXPERT(e0, "gate"));
  o.eu = off_of(d, l, EXPERT(e0, "up"));
  o.ed = off_of(d, l, EXPERT(e0, "down"));
  /* the experts' matrices of one kind follow each other, ews floats apart (layout.c) */
  size_t e1 = off_of(d, l, EXPERT(e0 + 1, "gate"));
#undef EXPERT
  o.ews = e1 != NONE ? e1 - o.eg : o.eu - o.eg;
  o.sg = off_of(d, l, "moe.shared.gate.weight");
  o.su = off_of(d, l, "moe.shared.up.weight");
  o.sd = off_of(d, l, "moe.shared.down.weight");
  o.sgate = off_of(d, l, "moe.shared_gate.weight");
  return o;
}

/* ---- linear layers: the one place every matmul goes through ------------------------------
 * fp32: loom_gemm_f32 on the fp32 weights. bf16 with a native bf16 GEMM (oneDNN) and
 * resident parameters: activations and output gradients converted to bf16 (in round_x /
 * round_dy's storage), weights from the bf16 copy refreshed once per parameter update,
 * fp32 accumulation. Otherwise (OpenBLAS, or ZeRO-3 which pages weights in and out) bf16
 * mode rounds inputs to bf16 values held in fp32 and multiplies them with loom_gemm_f32:
 * the same products (exact in fp32) and fp32 accumulation. A forward of one row (a decode
 * step of the cached forward) on fp32 weights is a BLAS matrix-vector product. */

const uint16_t *dec_weights16(loom_decoder *d) {
  struct loom_decoder_scratch *s = d->s;
  if (!s->w16 || d->param_hook) return NULL;
  if (s->w16_epoch != s->epoch) { /* parameters changed since the last conversion */
    /* from params: bf16 of a value is bf16 of its bf16-rounded copy, params_lp (which an
     * optimizer step leaves unrounded, loom_decoder_params_stepped) */
    loom_f32_to_bf16_n(s->w16, d->params, d->layout.total);
    loom_gemm_weights_changed(s->w16, d->layout.total * sizeof(uint16_t));
    s->w16_epoch = s->epoch;
  }
  return s->w16;
}

/* bf16 copy of x (n) in dst, unless dst already holds it (LIN_SAME_X: the previous call's x) */
static const uint16_t *input16_into(loom_decoder *d, uint16_t *dst, const float *x, size_t n,
                                    int flags) {
  struct loom_decoder_scratch *s = d->s;
  if (flags & LIN_X16_KEPT) {
    s->x16_src = x, s->x16_n = n, s->x16_buf = dst;
    return dst;
  }
  if (!(flags & LIN_SAME_X) || s->x16_src != x || s->x16_n != n || s->x16_buf != dst) {
    loom_f32_to_bf16_n(dst, x, n);
    s->x16_src = x;
    s->x16_n = n;
    s->x16_buf = dst;
  }
  return dst;
}

const uint16_t *dec_input16(loom_decoder *d, const float *x, size_t n, int flags) {
  return input16_into(d, (uint16_t *)d->s->round_x, x, n, flags);
}

/* bf16-rounded fp32 copy of x in round_x (the non-native bf16 path), reused like dec_input16 */
static const float *rounded_input(loom_decoder *d, const float *x, size_t n, int flags) {
  struct loom_decoder_scratch *s = d->s;
  const uint16_t *mark = (const uint16_t *)s->round_x;
  if (!(flags & LIN_SAME_X) || s->x16_src != x || s->x16_n != n || s->x16_buf != mark) {
    loom_round_bf16_f32(s->round_x, x, n);
    s->x16_src = x;
    s->x16_n = n;
    s->x16_buf = mark;
  }
  return s->round_x;
}

/* the profiler's part of a linear layer's GEMM, from its weight's name (profiling only) */
static loom_part lin_part(const loom_decoder *d, size_t w_off, int phase) {
  for (int i = 0; i < d->layout.count; i++)
    if (d->layout.params[i].offset == w_off) {
      int role = loom_prof_gemm_role(d->layout.params[i].name);
      return role < 0 ? LOOM_PART_OTHER : loom_prof_gemm_part(role, phase);
    }
  return LOOM_PART_OTHER;
}

/* y (M,N) = x (M,K) @ W^T (+ b): 2 M N K FLOPs; native bf16: x converted into keep16, or
 * into round_x when keep16 is NULL */
void dec_linear_fwd_keep(loom_decoder *d, float *y, const float *x, uint16_t *keep16,
                         size_t w_off, size_t b_off, int M, int K, int N, int flags) {
  const float *b = b_off == NONE ? NULL : d->params + b_off;
  LOOM_PROF_PUSH(lin_part(d, w_off, LOOM_PHASE_FWD));
  const uint16_t *w16 = dec_weights16(d);
  if (w16) {
    const uint16_t *x16 = input16_into(d, keep16 ? keep16 : (uint16_t *)d->s->round_x, x,
                                       (size_t)M * K, flags);
    loom_gemm_bf16_w(0, 1, M, N, K, x16, K, w16 + w_off, K, b, 0.0f, y, N);
  } else {
    if (d->bf16) x = rounded_input(d, x, (size_t)M * K, flags);
    const float *w = loom_decoder_params_lp(d) + w_off;
    if (M == 1) { /* a decode step of one sequence */
      /* BLAS sgemv streams W without packing it: 2-5x faster than a one-row GEMM of oneDNN
       * on GPT-2's matrices (docs/PERFORMANCE.md) */
      if (b) memcpy(y, b, (size_t)N * sizeof(float));
      cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, w, K, x, 1, b ? 1.0f : 0.0f, y, 1);
    } else {
      loom_gemm_f32(0, 1, M, N, K, x, K, w, K, b, 0.0f, y, N);
    }
  }
  LOOM_PROF_POP(2.0 * M * N * K, 0);
}

void dec_linear_fwd_ex(loom_decoder *d, float *y, const float *x, size_t w_off, size_t b_off,
                       int M, int K, int N, int flags) {
  dec_linear_fwd_keep(d, y, x, NULL, w_off, b_off, M, K, N, flags);
}

void dec_linear_fwd(loom_decoder *d, float *y, const float *x, size_t w_off, size_t b_off,
                    int M, int K, int N) {
  dec_linear_fwd_ex(d, y, x, w_off, b_off, M, K, N, 0);
}

/* dx (M,K) (+)= dy (M,N) @ W; dW += dy^T x; db += colsum(dy) — with bf16(dy), bf16(x),
 * bf16(W) in bf16 mode (x16: bf16(x) kept by the forward, or NULL to convert x again); dx
 * may be NULL. 2 M N K FLOPs for each of the two GEMMs. */
void dec_linear_bwd_kept(loom_decoder *d, float *dx, size_t w_off, size_t b_off,
                         const float *dy, const float *x, const uint16_t *x16, int M, int K,
                         int N, int flags) {
  float *dw = d->grads + w_off;
  float beta = flags & LIN_DX_OVERWRITE ? 0.0f : 1.0f;
  const uint16_t *w16 = dec_weights16(d);
  if (w16) {
    uint16_t *dy16 = (uint16_t *)d->s->round_dy;
    if (b_off != NONE) /* bias gradient from the unrounded fp32 dy, bf16(dy) in the same pass */
      loom_bias_grad_bf16_out(d->grads + b_off, dy16, dy, M, N);
    else
      loom_f32_to_bf16_n(dy16, dy, (size_t)M * N);
    if (!x16) x16 = dec_input16(d, x, (size_t)M * K, flags);
    dec_linear_bwd16(d, dx, w_off, dy16, x16, M, K, N, flags);
    return;
  }
  if (b_off != NONE) /* bias gradient from the unrounded fp32 dy */
    loom_bias_grad_f32(d->grads + b_off, dy, M, N);
  if (d->bf16) {
    loom_round_bf16_f32(d->s->round_dy, dy, (size_t)M * N);
    dy = d->s->round_dy;
    x = rounded_input(d, x, (size_t)M * K, flags);
  }
  const float *w = loom_decoder_params_lp(d) + w_off;
  if (dx) {
    LOOM_PROF_PUSH(lin_part(d, w_off, LOOM_PHASE_DGRAD));
    loom_gemm_f32(0, 0, M, K, N, dy, N, w, K, NULL, beta, dx, K);
    LOOM_PROF_POP(2.0 * M * N * K, 0);
  }
  LOOM_PROF_PUSH(lin_part(d, w_off, LOOM_PHASE_WGRAD));
  loom_gemm_f32(1, 0, N, K, M, dy, N, x, K, NULL, 1.0f, dw, K);
  LOOM_PROF_POP(2.0 * M * N * K, 0);
}

void dec_linear_bwd16(loom_decoder *d, float *dx, size_t w_off, const uint16_t *dy16,
                      const uint16_t *x16, int M, int K, int N, int flags) {
  const uint16_t *w16 = dec_weights16(d);
  float *dw = d->grads + w_off;
  if (dx) {
    LOOM_PROF_PUSH(lin_part(d, w_off, LOOM_PHASE_DGRAD));
    loom_gemm_bf16_w(0, 0, M, K, N, dy16, N, w16 + w_off, K, NULL,
                     flags & LIN_DX_OVERWRITE ? 0.0f : 1.0f, dx, K);
    LOOM_PROF_POP(2.0 * M * N * K, 0);
  }
  /* dW += dy^T x from a transposed copy of dy (N, M): oneDNN runs the product 4-14% faster
   * with A stored as it is read than with A transposed (2 threads, Zen 4: 768 x 3072 over
   * 8192 rows 376 -> 412 GFLOP/s, 4864 x 896 over 2048 373 -> 418). The two layouts round
   * differently, so the choice is fixed rather than timed per shape: a timed choice would
   * make a run's bits depend on its timings. The copy lives in round_dy's second half, which
   * bf16 values leave free (round_dy holds M x max-out floats), or its first when dy16 is
   * elsewhere. */
  uint16_t *dyT = (uint16_t *)d->s->round_dy;
  if (dyT == dy16) dyT += (size_t)M * N;
  loom_bf16_transpose(dyT, dy16, M, N);
  LOOM_PROF_PUSH(lin_part(d, w_off, LOOM_PHASE_WGRAD));
  loom_gemm_bf16(0, 0, N, K, M, dyT, M, x16, K, NULL, 1.0f, dw, K);
  LOOM_PROF_POP(2.0 * M * N * K, 0);
}

void dec_linear_bwd_ex(loom_decoder *d, float *dx, size_t w_off, size_t b_off, const float *dy,
                       const float *x, int M, int K, int N, int flags) {
  dec_linear_bwd_kept(d, dx, w_off, b_off, dy, x, NULL, M, K, N, flags);
}

void dec_linear_bwd(loom_decoder *d, float *dx, size_t w_off, size_t b_off, const float *dy,
                    const float *x, int M, int K, int N) {
  dec_linear_bwd_ex(d, dx, w_off, b_off, dy, x, M, K, N, 0);
}

/* ---- norms (fused with the residual add where the block has one) -------------------------- */

void dec_norm_fwd(loom_decoder *d, float *y, float *mean, float *rstd, const float *x,
                  size_t w_off, size_t b_off, int rows) {
  dec_residual_norm_fwd(d, NULL, y, mean, rstd, x, NULL, NONE, w_off, b_off, rows);
}

void dec_residual_norm_fwd(loom_decoder *d, float *r, float *y, float *mean, float *rstd,
                           const float *x, const float *res, size_t bias_off, size_t w_off,
                           size_t b_off, int rows) {
  bool ln = d->spec.arch == LOOM_ARCH_GPT2;
  loom_add_norm_forward_f32(r, y, ln ? mean : NULL, rstd, x, res,
                            bias_off == NONE ? NULL : d->params + bias_off, d->params + w_off,
                            ln && b_off != NONE ? d->params + b_off : NULL, rows,
                            d->spec.hidden, (float)d->spec.norm_eps);
}

void dec_norm_bwd(loom_decoder *d, float *dx, const float *dy, const float *x,
                  const float *mean, const float *rstd, size_t w_off, size_t b_off, int rows) {
  bool ln = d->spec.arch == LOOM_ARCH_GPT2;
  loom_norm_backward_fast_f32(dx, d->grads + w_off, ln && b_off != NONE ? d->grads + b_off : NULL,
                              dy, x, d->params + w_off, ln ? mean : NULL, rstd, rows,
                              d->spec.hidden);
}

void dec_add_bias_rows(float *y, const float *b, int rows, int C) {
#pragma omp parallel for schedule(static) if ((size_t)rows * C >= 65536)
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) y[(size_t)r * C + c] += b[c];
}

void dec_bias_grad_rows(float *db, const float *dy, int rows, int C) {
  loom_bias_grad_f32(db, dy, rows, C);
}

const float *dec_gather_rows(loom_decoder *d, const float *x, float *full) {
  if (!d->shard.seq_parallel) return x;
  size_t n = (size_t)d->Nr * d->spec.hidden;
  loom_comm_allgather_f32(d->tp_comm, x, full, n);
  return full;
}

void dec_reduce_rows(loom_decoder *d, float *partial, float *out) {
  size_t n = (size_t)d->Nr * d->spec.hidden;
  if (d->shard.seq_parallel) {
    loom_comm_reduce_scatter_f32(d->tp_comm, partial, out, n);
    return;
  }
  if (d->shard.tp > 1) loom_comm_allreduce_f32(d->tp_comm, partial, n, LOOM_OP_SUM);
  if (out != partial) memcpy(out, partial, n * sizeof(float));
}

/* x (B, Tl, H, D) -> y (B, T, H/sp, D); T: the tokens of a sequence on this cp rank (T/cp
 * with context parallelism: Ulysses runs inside each cp rank's two chunks) */
void dec_ulysses_to_heads(loom_decoder *d, const float *x, float *y, int H, int D) {
  int sp = d->shard.sp, B = d->B, T = d->T / d->shard.cp, Tl = T / sp, Hs = H / sp;
  size_t blk = (size_t)B * Tl * Hs * D;
  float *send = d->s->a2a, *recv = d->s->a2a + blk * sp;
  for (int j = 0; j < sp; j++)
    for (int b = 0; b < B; b++)
      for (int t = 0; t < Tl; t++)
        memcpy(send + j * blk + ((size_t)(b * Tl + t) * Hs) * D,
               x + ((size_t)(b * Tl + t) * H + (size_t)j * Hs) * D, (size_t)Hs * D * sizeof(float));
  loom_comm_alltoall_f32(d->sp_comm, send, recv, blk);
  for (int i = 0; i < sp; i++)
    for (int b = 0; b < B; b++)
      for (int t = 0; t < Tl; t++)
        memcpy(y + ((size_t)(b * T + i * Tl + t) * Hs) * D,
               recv + i * blk + ((size_t)(b * Tl + t) * Hs) * D, (size_t)Hs * D * sizeof(float));
}

/* x (B, T, H/sp, D) -> y (B, Tl, H, D) (T as above) */
void dec_ulysses_to_tokens(loom_decoder *d, const float *x, float *y, int H, int D) {
  int sp = d->shard.sp, B = d->B, T = d->T / d->shard.cp, Tl = T / sp, Hs = H / sp;
  size_t blk = (size_t)B * Tl * Hs * D;
  float *send = d->s->a2a, *recv = d->s->a2a + blk * sp;
  for (int i = 0; i < sp; i++)
    for (int b = 0; b < B; b++)
      for (int t = 0; t < Tl; t++)
        memcpy(send + i * blk + ((size_t)(b * Tl + t) * Hs) * D,
               x + ((size_t)(b * T + i * Tl + t) * Hs) * D, (size_t)Hs * D * sizeof(float));
  loom_comm_alltoall_f32(d->sp_comm, send, recv, blk);
  for (int j = 0; j < sp; j++)
    for (int b = 0; b < B; b++)
      for (int t = 0; t < Tl; t++)
        memcpy(y + ((size_t)(b * Tl + t) * H + (size_t)j * Hs) * D,
               recv + j * blk + ((size_t)(b * Tl + t) * Hs) * D, (size_t)Hs * D * sizeof(float));
}

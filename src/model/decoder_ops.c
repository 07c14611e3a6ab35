/* Decoder building blocks shared by the block, embedding and head code: linear layers with
 * optional bf16 rounding of their inputs, norms of either family, bias helpers, the tensor-
 * parallel row gathers/reductions (Megatron, with or without sequence parallelism), and the
 * Ulysses all-to-all between token-split and head-split layouts. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/kernels.h"
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
  block_offsets o = {
      off_of(d, l, "attn_norm.weight"), off_of(d, l, "attn_norm.bias"),
      off_of(d, l, "attn.q.weight"),    off_of(d, l, "attn.q.bias"),
      off_of(d, l, "attn.k.weight"),    off_of(d, l, "attn.k.bias"),
      off_of(d, l, "attn.v.weight"),    off_of(d, l, "attn.v.bias"),
      off_of(d, l, "attn.o.weight"),    off_of(d, l, "attn.o.bias"),
      off_of(d, l, "mlp_norm.weight"),  off_of(d, l, "mlp_norm.bias"),
      off_of(d, l, "mlp.gate.weight"),  off_of(d, l, "mlp.up.weight"),
      off_of(d, l, "mlp.up.bias"),      off_of(d, l, "mlp.down.weight"),
      off_of(d, l, "mlp.down.bias")};
  return o;
}

void dec_linear_fwd(loom_decoder *d, float *y, const float *x, size_t w_off, size_t b_off,
                    int M, int K, int N) {
  const float *w = d->params_lp + w_off;
  const float *b = b_off == NONE ? NULL : d->params + b_off;
  if (d->bf16) {
    loom_round_bf16_f32(d->s->round_x, x, (size_t)M * K);
    x = d->s->round_x;
  }
  loom_linear_forward_f32(y, x, w, b, M, K, N);
}

/* dx += dy @ W; dW += dy^T x; db += colsum(dy) — with bf16(dy), bf16(x), bf16(W) in bf16 mode */
void dec_linear_bwd(loom_decoder *d, float *dx, size_t w_off, size_t b_off, const float *dy,
                    const float *x, int M, int K, int N) {
  const float *w = d->params_lp + w_off;
  float *dw = d->grads + w_off;
  if (b_off != NONE) /* bias gradient from the unrounded fp32 dy */
    loom_linear_backward_f32(NULL, NULL, d->grads + b_off, dy, x, w, M, K, N);
  if (d->bf16) {
    loom_round_bf16_f32(d->s->round_dy, dy, (size_t)M * N);
    loom_round_bf16_f32(d->s->round_x, x, (size_t)M * K);
    dy = d->s->round_dy;
    x = d->s->round_x;
  }
  loom_linear_backward_f32(dx, dw, NULL, dy, x, w, M, K, N);
}

void dec_norm_fwd(loom_decoder *d, float *y, float *mean, float *rstd, const float *x,
                  size_t w_off, size_t b_off, int rows) {
  int C = d->spec.hidden;
  float eps = (float)d->spec.norm_eps;
  if (d->spec.arch == LOOM_ARCH_GPT2)
    loom_layernorm_forward_f32(y, mean, rstd, x, d->params + w_off, d->params + b_off, rows, C,
                               eps);
  else
    loom_rmsnorm_forward_f32(y, rstd, x, d->params + w_off, rows, C, eps);
}

void dec_norm_bwd(loom_decoder *d, float *dx, const float *dy, const float *x,
                  const float *mean, const float *rstd, size_t w_off, size_t b_off, int rows) {
  int C = d->spec.hidden;
  if (d->spec.arch == LOOM_ARCH_GPT2)
    loom_layernorm_backward_f32(dx, d->grads + w_off, d->grads + b_off, dy, x,
                                d->params + w_off, mean, rstd, rows, C);
  else
    loom_rmsnorm_backward_f32(dx, d->grads + w_off, dy, x, d->params + w_off, rstd, rows, C);
}

void dec_add_bias_rows(float *y, const float *b, int rows, int C) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) y[(size_t)r * C + c] += b[c];
}

void dec_bias_grad_rows(float *db, const float *dy, int rows, int C) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) db[c] += dy[(size_t)r * C + c];
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

/* x (B, Tl, H, D) -> y (B, T, H/sp, D) */
void dec_ulysses_to_heads(loom_decoder *d, const float *x, float *y, int H, int D) {
  int sp = d->shard.sp, B = d->B, T = d->T, Tl = T / sp, Hs = H / sp;
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

/* x (B, T, H/sp, D) -> y (B, Tl, H, D) */
void dec_ulysses_to_tokens(loom_decoder *d, const float *x, float *y, int H, int D) {
  int sp = d->shard.sp, B = d->B, T = d->T, Tl = T / sp, Hs = H / sp;
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

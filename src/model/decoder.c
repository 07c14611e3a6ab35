/* Decoder forward and backward for the GPT-2 and Llama/Qwen2 families on the reference
 * kernels (kernels.h), with activation checkpointing and bf16 mixed-precision matmuls.
 * Shapes: N = B*T rows, C hidden, QD = Hq*D, KD = Hkv*D, I intermediate, Vp padded vocab. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/decoder.h"
#include "loom/kernels.h"

#include "model/decoder_internal.h"

/* Offsets of one block's tensors in the flat buffers (NONE when absent). */
typedef struct {
  size_t n1w, n1b, qw, qb, kw, kb, vw, vb, ow, ob, n2w, n2b, gw, uw, ub, dw, db;
} block_offsets;

#define NONE ((size_t)-1)

static size_t off_of(const loom_decoder *d, int l, const char *suffix) {
  char name[64];
  snprintf(name, sizeof name, "layers.%d.%s", l, suffix);
  const loom_param *p = loom_param_find(&d->layout, name);
  return p ? p->offset : NONE;
}

static block_offsets block_offs(const loom_decoder *d, int l) {
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

/* ---- linear layers with optional bf16 rounding of inputs ---------------------------------- */

static void linear_fwd(loom_decoder *d, float *y, const float *x, size_t w_off, size_t b_off,
                       int M, int K, int N) {
  const float *w = d->params_lp + w_off;
  const float *b = b_off == NONE ? NULL : d->params + b_off;
  if (d->bf16) {
    loom_round_bf16_f32(d->round_x, x, (size_t)M * K);
    x = d->round_x;
  }
  loom_linear_forward_f32(y, x, w, b, M, K, N);
}

/* dx += dy @ W; dW += dy^T x; db += colsum(dy) — with bf16(dy), bf16(x), bf16(W) in bf16 mode */
static void linear_bwd(loom_decoder *d, float *dx, size_t w_off, size_t b_off, const float *dy,
                       const float *x, int M, int K, int N) {
  const float *w = d->params_lp + w_off;
  float *dw = d->grads + w_off;
  if (b_off != NONE) /* bias gradient from the unrounded fp32 dy */
    loom_linear_backward_f32(NULL, NULL, d->grads + b_off, dy, x, w, M, K, N);
  if (d->bf16) {
    loom_round_bf16_f32(d->round_dy, dy, (size_t)M * N);
    loom_round_bf16_f32(d->round_x, x, (size_t)M * K);
    dy = d->round_dy;
    x = d->round_x;
  }
  loom_linear_backward_f32(dx, dw, NULL, dy, x, w, M, K, N);
}

/* ---- norms --------------------------------------------------------------------------------- */

static void norm_fwd(loom_decoder *d, float *y, float *mean, float *rstd, const float *x,
                     size_t w_off, size_t b_off, int N) {
  int C = d->spec.hidden;
  float eps = (float)d->spec.norm_eps;
  if (d->spec.arch == LOOM_ARCH_GPT2)
    loom_layernorm_forward_f32(y, mean, rstd, x, d->params + w_off, d->params + b_off, N, C, eps);
  else
    loom_rmsnorm_forward_f32(y, rstd, x, d->params + w_off, N, C, eps);
}

static void norm_bwd(loom_decoder *d, float *dx, const float *dy, const float *x,
                     const float *mean, const float *rstd, size_t w_off, size_t b_off, int N) {
  int C = d->spec.hidden;
  if (d->spec.arch == LOOM_ARCH_GPT2)
    loom_layernorm_backward_f32(dx, d->grads + w_off, d->grads + b_off, dy, x,
                                d->params + w_off, mean, rstd, N, C);
  else
    loom_rmsnorm_backward_f32(dx, d->grads + w_off, dy, x, d->params + w_off, rstd, N, C);
}

/* ---- one block ----------------------------------------------------------------------------- */

static loom_layer_acts *acts_of(loom_decoder *d, int l) {
  return d->recompute ? &d->layer[0] : &d->layer[l];
}

/* resid[l] (N,C) -> resid[l+1] (N,C), saving the block's activations in acts_of(l). */
static void block_forward(loom_decoder *d, int l) {
  const loom_model_spec *s = &d->spec;
  int B = d->B, T = d->T, N = B * T, C = s->hidden, D = s->head_dim;
  int QD = s->heads * D, KD = s->kv_heads * D, I = s->intermediate;
  size_t NC = (size_t)N * C;
  const float *x = d->resid + (size_t)l * NC;
  float *out = d->resid + (size_t)(l + 1) * NC;
  loom_layer_acts *a = acts_of(d, l);
  block_offsets o = block_offs(d, l);

  norm_fwd(d, a->ln1, a->ln1_mean, a->ln1_rstd, x, o.n1w, o.n1b, N);
  linear_fwd(d, a->q, a->ln1, o.qw, o.qb, N, C, QD);
  linear_fwd(d, a->k, a->ln1, o.kw, o.kb, N, C, KD);
  linear_fwd(d, a->v, a->ln1, o.vw, o.vb, N, C, KD);
  if (s->arch == LOOM_ARCH_LLAMA) {
    loom_rope_forward_f32(a->q, B, T, s->heads, D, s->rope_theta, 0);
    loom_rope_forward_f32(a->k, B, T, s->kv_heads, D, s->rope_theta, 0);
  }
  loom_attention_forward_f32(a->att, a->lse, a->q, a->k, a->v, B, T, s->heads, s->kv_heads, D);
  linear_fwd(d, d->tmp, a->att, o.ow, o.ob, N, QD, C);
  for (size_t i = 0; i < NC; i++) a->mid[i] = x[i] + d->tmp[i];

  norm_fwd(d, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, o.n2w, o.n2b, N);
  size_t NI = (size_t)N * I;
  if (s->arch == LOOM_ARCH_GPT2) {
    linear_fwd(d, a->up, a->ln2, o.uw, o.ub, N, C, I);
    loom_gelu_forward_f32(a->act, a->up, NI);
  } else {
    linear_fwd(d, a->gate, a->ln2, o.gw, NONE, N, C, I);
    linear_fwd(d, a->up, a->ln2, o.uw, NONE, N, C, I);
    loom_swiglu_forward_f32(a->act, a->gate, a->up, NI);
  }
  linear_fwd(d, d->tmp, a->act, o.dw, o.db, N, I, C);
  for (size_t i = 0; i < NC; i++) out[i] = a->mid[i] + d->tmp[i];
}

/* d->dres holds dL/d resid[l+1] on entry and dL/d resid[l] on return. */
static void block_backward(loom_decoder *d, int l) {
  const loom_model_spec *s = &d->spec;
  int B = d->B, T = d->T, N = B * T, C = s->hidden, D = s->head_dim;
  int QD = s->heads * D, KD = s->kv_heads * D, I = s->intermediate;
  size_t NC = (size_t)N * C, NI = (size_t)N * I;
  const float *x = d->resid + (size_t)l * NC;
  if (d->recompute) block_forward(d, l);
  loom_layer_acts *a = acts_of(d, l);
  block_offsets o = block_offs(d, l);

  /* MLP: out = mid + down(act) */
  memset(d->d_act, 0, NI * sizeof(float));
  linear_bwd(d, d->d_act, o.dw, o.db, d->dres, a->act, N, I, C);
  memset(d->d_norm, 0, NC * sizeof(float));
  if (s->arch == LOOM_ARCH_GPT2) {
    memset(d->d_a, 0, NI * sizeof(float));
    loom_gelu_backward_f32(d->d_a, d->d_act, a->up, NI);
    linear_bwd(d, d->d_norm, o.uw, o.ub, d->d_a, a->ln2, N, C, I);
  } else {
    memset(d->d_a, 0, NI * sizeof(float));
    memset(d->d_b, 0, NI * sizeof(float));
    loom_swiglu_backward_f32(d->d_a, d->d_b, d->d_act, a->gate, a->up, NI);
    linear_bwd(d, d->d_norm, o.gw, NONE, d->d_a, a->ln2, N, C, I);
    linear_bwd(d, d->d_norm, o.uw, NONE, d->d_b, a->ln2, N, C, I);
  }
  norm_bwd(d, d->dres, d->d_norm, a->mid, a->ln2_mean, a->ln2_rstd, o.n2w, o.n2b, N);

  /* attention: mid = x + o(att) */
  memset(d->d_att, 0, (size_t)N * QD * sizeof(float));
  linear_bwd(d, d->d_att, o.ow, o.ob, d->dres, a->att, N, QD, C);
  memset(d->d_q, 0, (size_t)N * QD * sizeof(float));
  memset(d->d_k, 0, (size_t)N * KD * sizeof(float));
  memset(d->d_v, 0, (size_t)N * KD * sizeof(float));
  loom_attention_backward_f32(d->d_q, d->d_k, d->d_v, d->d_att, a->att, a->lse, a->q, a->k, a->v,
                              B, T, s->heads, s->kv_heads, D);
  if (s->arch == LOOM_ARCH_LLAMA) {
    loom_rope_backward_f32(d->d_q, B, T, s->heads, D, s->rope_theta, 0);
    loom_rope_backward_f32(d->d_k, B, T, s->kv_heads, D, s->rope_theta, 0);
  }
  memset(d->d_norm, 0, NC * sizeof(float));
  linear_bwd(d, d->d_norm, o.qw, o.qb, d->d_q, a->ln1, N, C, QD);
  linear_bwd(d, d->d_norm, o.kw, o.kb, d->d_k, a->ln1, N, C, KD);
  linear_bwd(d, d->d_norm, o.vw, o.vb, d->d_v, a->ln1, N, C, KD);
  norm_bwd(d, d->dres, d->d_norm, x, a->ln1_mean, a->ln1_rstd, o.n1w, o.n1b, N);
}

/* ---- whole model --------------------------------------------------------------------------- */

static size_t lm_head_off(const loom_decoder *d) {
  const char *name = d->spec.tied_embeddings ? "embed.weight" : "lm_head.weight";
  return loom_param_find(&d->layout, name)->offset;
}

void loom_decoder_forward(loom_decoder *d, const int32_t *tokens, const int32_t *targets,
                          double *loss_sum, int *count) {
  const loom_model_spec *s = &d->spec;
  int B = d->B, T = d->T, N = B * T, C = s->hidden;
  const loom_param *pe = loom_param_find(&d->layout, "pos_embed.weight");
  d->tokens = tokens;
  d->targets = targets;
  loom_embedding_forward_f32(d->resid, tokens,
                             d->params + loom_param_find(&d->layout, "embed.weight")->offset,
                             pe ? d->params + pe->offset : NULL, B, T, C);
  for (int l = 0; l < s->layers; l++) block_forward(d, l);
  const float *xf = d->resid + (size_t)s->layers * N * C;
  const loom_param *fw = loom_param_find(&d->layout, "final_norm.weight");
  const loom_param *fb = loom_param_find(&d->layout, "final_norm.bias");
  norm_fwd(d, d->lnf, d->lnf_mean, d->lnf_rstd, xf, fw->offset, fb ? fb->offset : NONE, N);
  linear_fwd(d, d->logits, d->lnf, lm_head_off(d), NONE, N, C, s->padded_vocab);
  if (!targets) return;
  int n = loom_xent_forward_f32(d->losses, d->logits, targets, N, s->vocab_size, s->padded_vocab);
  double sum = 0;
  for (int i = 0; i < N; i++) sum += d->losses[i];
  if (loss_sum) *loss_sum = sum;
  if (count) *count = n;
}

void loom_decoder_backward(loom_decoder *d, float loss_scale) {
  const loom_model_spec *s = &d->spec;
  int B = d->B, T = d->T, N = B * T, C = s->hidden, Vp = s->padded_vocab;
  size_t NC = (size_t)N * C;
  LOOM_ASSERT(d->targets);
  memset(d->dlogits, 0, (size_t)N * Vp * sizeof(float));
  loom_xent_backward_f32(d->dlogits, d->logits, d->targets, N, s->vocab_size, Vp, loss_scale);
  memset(d->d_norm, 0, NC * sizeof(float));
  linear_bwd(d, d->d_norm, lm_head_off(d), NONE, d->dlogits, d->lnf, N, C, Vp);
  const loom_param *fw = loom_param_find(&d->layout, "final_norm.weight");
  const loom_param *fb = loom_param_find(&d->layout, "final_norm.bias");
  memset(d->dres, 0, NC * sizeof(float));
  norm_bwd(d, d->dres, d->d_norm, d->resid + (size_t)s->layers * NC, d->lnf_mean, d->lnf_rstd,
           fw->offset, fb ? fb->offset : NONE, N);
  for (int l = s->layers - 1; l >= 0; l--) block_backward(d, l);
  const loom_param *pe = loom_param_find(&d->layout, "pos_embed.weight");
  loom_embedding_backward_f32(d->grads + loom_param_find(&d->layout, "embed.weight")->offset,
                              pe ? d->grads + pe->offset : NULL, d->dres, d->tokens, B, T, C);
}

void loom_decoder_zero_grads(loom_decoder *d) {
  memset(d->grads, 0, d->layout.total * sizeof(float));
}

void loom_decoder_params_updated(loom_decoder *d) {
  if (d->bf16) loom_round_bf16_f32(d->params_lp, d->params, d->layout.total);
}

double loom_decoder_flops_per_token(const loom_model_spec *s, int T) {
  double C = s->hidden, QD = (double)s->heads * s->head_dim, KD = (double)s->kv_heads * s->head_dim;
  double I = s->intermediate;
  double per_layer = C * QD * 2 + C * KD * 2 + I * C * (s->arch == LOOM_ARCH_GPT2 ? 2 : 3);
  double matmul_params = s->layers * per_layer + (double)s->padded_vocab * C;
  return 6.0 * matmul_params + 6.0 * s->layers * (double)T * QD;
}

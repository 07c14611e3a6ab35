/* One transformer block, forward and backward, on this rank's shard (Megatron tensor
 * parallelism: column-parallel q/k/v and MLP-in, row-parallel attention-out and MLP-out;
 * optional Megatron sequence parallelism, Ulysses all-to-all around attention or ring
 * attention over the context-parallel ranks), on the fast
 * kernels: flash attention (causal, nothing T x T), residual + norm and bias + activation fused,
 * backward GEMMs that write their outputs instead of zeroing first.
 * The forward's steps around attention (dec_block_qkv: norm and q/k/v projections;
 * dec_block_rope: rotary positions; dec_block_mlp: output projection, residual, norm, MLP) are
 * the one definition of the layer: the cached forward of generation (decoder_cached.c) runs
 * them too, with attention over its KV cache in between.
 * Shapes: Nr residual rows, N rows into the linears, C hidden, D head dim, lh/lkv local heads,
 * li local intermediate. */
#include <stdlib.h>

#include "loom/kernels.h"
#include "loom/kernels_vision.h"
#include "loom/ring_attention.h"
#include "model/decoder_internal.h"

static loom_layer_acts *acts_for(loom_decoder *d, loom_acts *a, int idx) {
  return d->recompute ? &d->s->rec : &a->layer[idx];
}

static bool ulysses(const loom_decoder *d) { return d->shard.sp > 1; }

/* causal; with packed documents, within each token's document only */
static loom_attn_mask attn_mask(const loom_decoder *d, const loom_acts *a) {
  loom_attn_mask m = {.causal = 1};
  if (d->doc_eod >= 0) m.seg_lo = a->seg_lo, m.seg_hi = a->seg_hi;
  return m;
}

static bool context_parallel(const loom_decoder *d) { return d->shard.cp > 1; }

/* The ring of this rank's attention: B sequences of T/cp local tokens, the heads in the
 * attention layout (local heads, divided by sp after the Ulysses all-to-all); with packed
 * documents, their segments by global position. */
static loom_ring_attn ring_of(loom_decoder *d, const loom_acts *a) {
  int sp = d->shard.sp;
  bool packed = d->doc_eod >= 0;
  loom_ring_attn r = {d->cp_comm, d->B, d->T / d->shard.cp, d->lh / sp, d->lkv / sp,
                      d->spec.head_dim, true, d->s->ring_work, packed ? a->seg_lo : NULL,
                      packed ? a->seg_hi : NULL};
  return r;
}

/* Rotary (forward, or its inverse rotation of a gradient) on x (N rows, H heads) at the
 * global positions of the rows' tokens: consecutive from pos0 (the Ulysses offset), or with
 * context parallelism run by run of consecutive positions (a chunk, or the part of one a
 * Ulysses rank holds: chunk i of 2cp starts at i*T/(2cp)). */
static void rope_rows(loom_decoder *d, float *x, int H, bool backward) {
  const loom_model_spec *s = &d->spec;
  int D = s->head_dim;
  if (context_parallel(d)) {
    int rows = d->N / d->B; /* rows of each sequence on this rank */
    for (int b = 0; b < d->B; b++)
      for (int r0 = 0, n; r0 < rows; r0 += n) {
        int base = b * rows + r0, pos = dec_row_token_index(d, base) - b * d->T;
        for (n = 1; r0 + n < rows && dec_row_token_index(d, base + n) == b * d->T + pos + n;) n++;
        float *xr = x + (size_t)base * H * D; /* (n, H, D) at positions pos.. */
        if (backward) loom_rope_backward_f32(xr, 1, n, H, D, s->rope_theta, pos);
        else loom_rope_forward_f32(xr, 1, n, H, D, s->rope_theta, pos);
      }
    return;
  }
  int Tseq = ulysses(d) ? d->T / d->shard.sp : d->T;
  if (backward) loom_rope_backward_f32(x, d->B, Tseq, H, D, s->rope_theta, d->pos0);
  else loom_rope_forward_f32(x, d->B, Tseq, H, D, s->rope_theta, d->pos0);
}

/* bf16 runs multiply attention's q k^T and P v (and the backward's products) on bf16 operands
 * with fp32 accumulation and softmax statistics, like their linear layers */
static void attn_fwd(const loom_decoder *d, float *out, float *lse, const float *q,
                     const float *k, const float *v, int B, int T, int Hq, int Hkv, int D,
                     loom_attn_mask mask) {
  if (d->bf16) loom_flash_attention_forward_bf16(out, lse, q, k, v, B, T, Hq, Hkv, D, mask);
  else loom_flash_attention_forward_f32(out, lse, q, k, v, B, T, Hq, Hkv, D, mask);
}
static void attn_bwd(const loom_decoder *d, float *dq, float *dk, float *dv, const float *dout,
                     const float *out, const float *lse, const float *q, const float *k,
                     const float *v, int B, int T, int Hq, int Hkv, int D, loom_attn_mask mask,
                     float *work) {
  if (d->bf16)
    loom_flash_attention_backward_bf16(dq, dk, dv, dout, out, lse, q, k, v, B, T, Hq, Hkv, D,
                                       mask, work);
  else
    loom_flash_attention_backward_f32(dq, dk, dv, dout, out, lse, q, k, v, B, T, Hq, Hkv, D,
                                      mask, work);
}

void dec_block_qkv(loom_decoder *d, loom_layer_acts *L, const block_offsets *o, const float *x,
                   int N, int Nr) {
  int C = d->spec.hidden, D = d->spec.head_dim, QD = d->lh * D, KD = d->lkv * D;
  dec_norm_fwd(d, L->ln1, L->ln1_mean, L->ln1_rstd, x, o->n1w, o->n1b, Nr);
  const float *h = dec_gather_rows(d, L->ln1, L->ln1_full);
  /* qk_norm: the projections kept before the norms (the backward's input), or normed in place
   * when not kept (generation) */
  float *q = L->q_pre ? L->q_pre : L->q, *k = L->k_pre ? L->k_pre : L->k;
  dec_linear_fwd_keep(d, q, h, L->ln1_16, o->qw, o->qb, N, C, QD, 0);
  dec_linear_fwd_keep(d, k, h, L->ln1_16, o->kw, o->kb, N, C, KD, LIN_SAME_X);
  dec_linear_fwd_keep(d, L->v, h, L->ln1_16, o->vw, o->vb, N, C, KD, LIN_SAME_X);
  if (o->qn == NONE) return;
  /* Qwen3: RMSNorm of every head's q and k (N*heads rows of D) before the rotary positions */
  float eps = (float)d->spec.norm_eps;
  loom_add_norm_forward_f32(NULL, L->q, NULL, L->q_rstd, q, NULL, NULL, d->params + o->qn, NULL,
                            N * d->lh, D, eps);
  loom_add_norm_forward_f32(NULL, L->k, NULL, L->k_rstd, k, NULL, NULL, d->params + o->kn, NULL,
                            N * d->lkv, D, eps);
}

/* qk_norm backward: dq, dk (gradients of the normed q, k) -> the projections' gradients in
 * S->d_qn, S->d_kn (returned through *dq, *dk); the norms' weight gradients, partial per
 * tensor-parallel rank (its heads), summed over tp here, or by the gradient synchroniser with
 * sequence parallelism (which sums every tp-replicated tensor's) */
static void qk_norm_backward(loom_decoder *d, const loom_layer_acts *L, const block_offsets *o,
                             const float **dq, const float **dk) {
  struct loom_decoder_scratch *S = d->s;
  int N = d->N, D = d->spec.head_dim;
  memset(S->d_qn, 0, (size_t)N * d->lh * D * sizeof(float));
  memset(S->d_kn, 0, (size_t)N * d->lkv * D * sizeof(float));
  memset(S->qk_dw, 0, 2 * (size_t)D * sizeof(float));
  loom_norm_backward_fast_f32(S->d_qn, S->qk_dw, NULL, *dq, L->q_pre, d->params + o->qn, NULL,
                              L->q_rstd, N * d->lh, D);
  loom_norm_backward_fast_f32(S->d_kn, S->qk_dw + D, NULL, *dk, L->k_pre, d->params + o->kn,
                              NULL, L->k_rstd, N * d->lkv, D);
  if (d->shard.tp > 1 && !d->shard.seq_parallel)
    loom_comm_allreduce_f32(d->tp_comm, S->qk_dw, 2 * (size_t)D, LOOM_OP_SUM);
  for (int i = 0; i < D; i++) {
    d->grads[o->qn + i] += S->qk_dw[i];
    d->grads[o->kn + i] += S->qk_dw[D + i];
  }
  *dq = S->d_qn;
  *dk = S->d_kn;
}

void dec_block_rope(loom_decoder *d, float *q, float *k, int N, const dec_positions *p,
                    bool backward) {
  const loom_model_spec *s = &d->spec;
  int D = s->head_dim;
  if (s->arch != LOOM_ARCH_LLAMA) return;
  if (p->cos && backward) {
    loom_rope_table_backward_f32(q, p->cos, p->sin, N, d->lh, D);
    loom_rope_table_backward_f32(k, p->cos, p->sin, N, d->lkv, D);
  } else if (p->cos) {
    loom_rope_table_forward_f32(q, p->cos, p->sin, N, d->lh, D);
    loom_rope_table_forward_f32(k, p->cos, p->sin, N, d->lkv, D);
  } else if (p->pos && backward) {
    loom_rope_pos_backward_f32(q, N, d->lh, D, s->rope_theta, p->pos);
    loom_rope_pos_backward_f32(k, N, d->lkv, D, s->rope_theta, p->pos);
  } else if (p->pos) {
    loom_rope_pos_forward_f32(q, N, d->lh, D, s->rope_theta, p->pos);
    loom_rope_pos_forward_f32(k, N, d->lkv, D, s->rope_theta, p->pos);
  } else {
    rope_rows(d, q, d->lh, backward);
    rope_rows(d, k, d->lkv, backward);
  }
}

void dec_block_mlp(loom_decoder *d, loom_layer_acts *L, const block_offsets *o, const float *x,
                   float *out, int N, int Nr) {
  const loom_model_spec *s = &d->spec;
  int C = s->hidden, QD = d->lh * s->head_dim, I = d->li;
  float *full = d->s->full;
  /* partial sums over tp (straight into mid without tensor parallelism) */
  float *proj = d->shard.tp > 1 ? full : L->mid;
  dec_linear_fwd_keep(d, proj, L->att, L->att16, o->ow, NONE, N, QD, C, 0);
  if (d->shard.tp > 1) dec_reduce_rows(d, proj, L->mid); /* (Nr,C) */

  /* MLP: mid = x + attention + bias and its norm, one pass */
  dec_residual_norm_fwd(d, L->mid, L->ln2, L->ln2_mean, L->ln2_rstd, x, L->mid, o->ob, o->n2w,
                        o->n2b, Nr);
  if (L->moe && o->rw != NONE) { /* a Mixture-of-Experts layer (tp: partial sums, N == Nr) */
    proj = d->shard.tp > 1 ? full : out;
    dec_moe_forward(d, L->moe, o, L->ln2, L->ln2_16, proj, N);
    if (d->shard.tp > 1) dec_reduce_rows(d, proj, out);
    loom_residual_add_f32(out, out, L->mid, NULL, Nr, C);
    return;
  }
  const float *h = dec_gather_rows(d, L->ln2, L->ln2_full);
  size_t NI = (size_t)N * I;
  /* with native bf16 GEMMs the activation is written as bf16 only: the down projection and
   * its weight gradient read nothing else of it (the backward differentiates from up, gate) */
  bool act16 = L->act16 && dec_weights16(d);
  const float *ub = o->ub == NONE ? NULL : d->params + o->ub;
  if (s->arch == LOOM_ARCH_GPT2) {
    dec_linear_fwd_keep(d, L->up, h, L->ln2_16, o->uw, NONE, N, C, I, 0);
    if (act16) loom_bias_gelu_forward_bf16_out(L->up, L->act16, ub, N, I);
    else loom_bias_gelu_forward_f32(L->up, L->act, ub, N, I);
  } else {
    dec_linear_fwd_keep(d, L->gate, h, L->ln2_16, o->gw, NONE, N, C, I, 0);
    dec_linear_fwd_keep(d, L->up, h, L->ln2_16, o->uw, NONE, N, C, I, LIN_SAME_X);
    if (act16) loom_swiglu_forward_bf16_out(L->act16, L->gate, L->up, NI);
    else loom_swiglu_forward_fast_f32(L->act, L->gate, L->up, NI);
  }
  proj = d->shard.tp > 1 ? full : out;
  dec_linear_fwd_keep(d, proj, L->act, L->act16, o->dw, NONE, N, I, C, act16 ? LIN_X16_KEPT : 0);
  if (d->shard.tp > 1) dec_reduce_rows(d, proj, out);
  loom_residual_add_f32(out, out, L->mid, o->db == NONE ? NULL : d->params + o->db, Nr, C);
}

/* The training layout's rotary positions: the multimodal table, the rows' positions within
 * their documents (packed documents), or consecutive positions */
static dec_positions train_positions(const loom_decoder *d, const loom_acts *a) {
  dec_positions p = {NULL, NULL, NULL};
  if (a->mrope_pos) p.cos = a->mcos, p.sin = a->msin;
  else if (d->doc_eod >= 0) p.pos = a->row_pos;
  return p;
}

/* resid[idx] (Nr,C) -> resid[idx+1] (Nr,C) */
void dec_block_forward(loom_decoder *d, loom_acts *a, int layer, int idx) {
  const loom_model_spec *s = &d->spec;
  int B = d->B, T = d->T, N = d->N, Nr = d->Nr, C = s->hidden, D = s->head_dim;
  size_t NrC = (size_t)Nr * C;
  const float *x = a->resid + (size_t)idx * NrC;
  float *out = a->resid + (size_t)(idx + 1) * NrC;
  loom_layer_acts *L = acts_for(d, a, idx);
  block_offsets o = loom_block_offsets(d, layer);
  dec_params(d, layer, LOOM_PARAMS_ACQUIRE_FWD);

  /* attention */
  dec_block_qkv(d, L, &o, x, N, Nr);
  dec_positions pos = train_positions(d, a);
  dec_block_rope(d, L->q, L->k, N, &pos, false);
  if (context_parallel(d)) { /* Ulysses first (all the cp rank's tokens, H/sp heads) */
    loom_ring_attn ring = ring_of(d, a);
    if (ulysses(d)) {
      dec_ulysses_to_heads(d, L->q, L->qh, d->lh, D);
      dec_ulysses_to_heads(d, L->k, L->kh, d->lkv, D);
      dec_ulysses_to_heads(d, L->v, L->vh, d->lkv, D);
    }
    loom_ring_attention_forward(&ring, L->atth, L->lse, L->qh, L->kh, L->vh);
    if (ulysses(d)) dec_ulysses_to_tokens(d, L->atth, L->att, d->lh, D);
  } else if (ulysses(d)) {
    int sp = d->shard.sp;
    dec_ulysses_to_heads(d, L->q, L->qh, d->lh, D);
    dec_ulysses_to_heads(d, L->k, L->kh, d->lkv, D);
    dec_ulysses_to_heads(d, L->v, L->vh, d->lkv, D);
    attn_fwd(d, L->atth, L->lse, L->qh, L->kh, L->vh, B, T, d->lh / sp, d->lkv / sp, D, attn_mask(d, a));
    dec_ulysses_to_tokens(d, L->atth, L->att, d->lh, D);
  } else {
    attn_fwd(d, L->att, L->lse, L->q, L->k, L->v, B, T, d->lh, d->lkv, D, attn_mask(d, a));
  }
  dec_block_mlp(d, L, &o, x, out, N, Nr);
  if (L->moe && o.rw != NONE && !d->s->recomputing) dec_moe_record(d, a, layer, L->moe);
  dec_params(d, layer, LOOM_PARAMS_RELEASE);
}

/* The gradient of a norm output that fed column-parallel linears: partial sums over tp of
 * s->d_norm (N,C), reduced into s->d_norm_r (Nr,C). */
static const float *reduced_norm_grad(loom_decoder *d) {
  if (d->shard.tp == 1) return d->s->d_norm;
  dec_reduce_rows(d, d->s->d_norm, d->s->d_norm_r);
  return d->s->d_norm_r;
}

/* The dense MLP's backward from the activation's gradient S->d_act (N,li) to its input's,
 * S->d_norm (N,C): GELU and the up projection, or SwiGLU and gate/up. */
static void dense_mlp_backward(loom_decoder *d, const loom_layer_acts *L, const block_offsets *o,
                               const float *ln2_full) {
  struct loom_decoder_scratch *S = d->s;
  int N = d->N, C = d->spec.hidden, I = d->li;
  size_t NI = (size_t)N * I;
  if (d->spec.arch == LOOM_ARCH_GPT2) {
    loom_gelu_backward_fast_f32(S->d_a, S->d_act, L->up, NI);
    dec_linear_bwd_kept(d, S->d_norm, o->uw, o->ub, S->d_a, ln2_full, L->ln2_16, N, C, I,
                        LIN_DX_OVERWRITE);
  } else if (L->ln2_16 && dec_weights16(d)) {
    /* gate and up have no bias: their output gradients are written as bf16 only (in d_a's
     * and d_b's storage), read by nothing but the bf16 GEMMs */
    uint16_t *da16 = (uint16_t *)S->d_a, *db16 = (uint16_t *)S->d_b;
    loom_swiglu_backward_bf16_out(da16, db16, S->d_act, L->gate, L->up, NI);
    dec_linear_bwd16(d, S->d_norm, o->gw, da16, L->ln2_16, N, C, I, LIN_DX_OVERWRITE);
    dec_linear_bwd16(d, S->d_norm, o->uw, db16, L->ln2_16, N, C, I, 0);
  } else {
    loom_swiglu_backward_fast_f32(S->d_a, S->d_b, S->d_act, L->gate, L->up, NI);
    dec_linear_bwd_kept(d, S->d_norm, o->gw, NONE, S->d_a, ln2_full, L->ln2_16, N, C, I,
                        LIN_DX_OVERWRITE);
    dec_linear_bwd_kept(d, S->d_norm, o->uw, NONE, S->d_b, ln2_full, L->ln2_16, N, C, I,
                        LIN_SAME_X);
  }
}

/* s->dres holds dL/d resid[idx+1] (Nr,C) on entry and dL/d resid[idx] on return. */
void dec_block_backward(loom_decoder *d, loom_acts *a, int layer, int idx) {
  const loom_model_spec *s = &d->spec;
  struct loom_decoder_scratch *S = d->s;
  int B = d->B, T = d->T, N = d->N, Nr = d->Nr, C = s->hidden, D = s->head_dim;
  int QD = d->lh * D, KD = d->lkv * D, I = d->li;
  const float *x = a->resid + (size_t)idx * Nr * C;
  dec_params(d, layer, LOOM_PARAMS_ACQUIRE_BWD);
  if (d->recompute) { /* the forward again (its router statistics are recorded already) */
    S->recomputing = true;
    dec_block_forward(d, a, layer, idx);
    S->recomputing = false;
  }
  loom_layer_acts *L = acts_for(d, a, idx);
  block_offsets o = loom_block_offsets(d, layer);
  const float *ln2_full = d->shard.seq_parallel ? L->ln2_full : L->ln2;
  const float *ln1_full = d->shard.seq_parallel ? L->ln1_full : L->ln1;

  /* MLP: out = mid + reduce(act @ Wd^T) + bd */
  if (o.db != NONE) dec_bias_grad_rows(d->grads + o.db, S->dres, Nr, C);
  const float *dy = dec_gather_rows(d, S->dres, S->full);
  if (L->moe && o.rw != NONE) { /* out = mid + MoE(ln2), with the router's aux and z terms */
    double z_grad;
    const double *aux_grad = dec_moe_loss_grads(d, a, &z_grad);
    dec_moe_backward(d, L->moe, &o, L->ln2, L->ln2_16, dy, S->d_norm, N, aux_grad, z_grad);
  } else {
    dec_linear_bwd_kept(d, S->d_act, o.dw, NONE, dy, L->act, L->act16, N, I, C,
                        LIN_DX_OVERWRITE);
    dense_mlp_backward(d, L, &o, ln2_full);
  }
  dec_norm_bwd(d, S->dres, reduced_norm_grad(d), L->mid, L->ln2_mean, L->ln2_rstd, o.n2w, o.n2b,
               Nr);

  /* attention: mid = x + reduce(att @ Wo^T) + bo */
  if (o.ob != NONE) dec_bias_grad_rows(d->grads + o.ob, S->dres, Nr, C);
  dy = dec_gather_rows(d, S->dres, S->full);
  dec_linear_bwd_kept(d, S->d_att, o.ow, NONE, dy, L->att, L->att16, N, QD, C, LIN_DX_OVERWRITE);
  /* flash attention writes d_q, d_k, d_v (no zeroing) */
  if (context_parallel(d)) {
    loom_ring_attn ring = ring_of(d, a);
    if (ulysses(d)) {
      dec_ulysses_to_heads(d, S->d_att, S->d_atth, d->lh, D);
      loom_ring_attention_backward(&ring, S->d_qh, S->d_kh, S->d_vh, S->d_atth, L->atth, L->lse,
                                   L->qh, L->kh, L->vh);
      dec_ulysses_to_tokens(d, S->d_qh, S->d_q, d->lh, D);
      dec_ulysses_to_tokens(d, S->d_kh, S->d_k, d->lkv, D);
      dec_ulysses_to_tokens(d, S->d_vh, S->d_v, d->lkv, D);
    } else {
      loom_ring_attention_backward(&ring, S->d_q, S->d_k, S->d_v, S->d_att, L->att, L->lse,
                                   L->q, L->k, L->v);
    }
  } else if (ulysses(d)) {
    int sp = d->shard.sp;
    dec_ulysses_to_heads(d, S->d_att, S->d_atth, d->lh, D);
    attn_bwd(d, S->d_qh, S->d_kh, S->d_vh, S->d_atth, L->atth, L->lse, L->qh, L->kh, L->vh, B,
             T, d->lh / sp, d->lkv / sp, D, attn_mask(d, a), S->attn_work);
    dec_ulysses_to_tokens(d, S->d_qh, S->d_q, d->lh, D);
    dec_ulysses_to_tokens(d, S->d_kh, S->d_k, d->lkv, D);
    dec_ulysses_to_tokens(d, S->d_vh, S->d_v, d->lkv, D);
  } else {
    attn_bwd(d, S->d_q, S->d_k, S->d_v, S->d_att, L->att, L->lse, L->q, L->k, L->v, B, T, d->lh,
             d->lkv, D, attn_mask(d, a), S->attn_work);
  }
  dec_positions pos = train_positions(d, a);
  dec_block_rope(d, S->d_q, S->d_k, N, &pos, true);
  const float *dq = S->d_q, *dk = S->d_k;
  if (o.qn != NONE) qk_norm_backward(d, L, &o, &dq, &dk);
  dec_linear_bwd_kept(d, S->d_norm, o.qw, o.qb, dq, ln1_full, L->ln1_16, N, C, QD,
                      LIN_DX_OVERWRITE);
  dec_linear_bwd_kept(d, S->d_norm, o.kw, o.kb, dk, ln1_full, L->ln1_16, N, C, KD,
                      LIN_SAME_X);
  dec_linear_bwd_kept(d, S->d_norm, o.vw, o.vb, S->d_v, ln1_full, L->ln1_16, N, C, KD,
                      LIN_SAME_X);
  dec_norm_bwd(d, S->dres, reduced_norm_grad(d), x, L->ln1_mean, L->ln1_rstd, o.n1w, o.n1b, Nr);
  dec_params(d, layer, LOOM_PARAMS_GRADS_DONE);
  dec_params(d, layer, LOOM_PARAMS_RELEASE);
  if (d->on_layer_grads) d->on_layer_grads(d->on_layer_grads_ctx, layer);
}

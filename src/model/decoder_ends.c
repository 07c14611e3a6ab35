/* The two ends of the decoder: the (vocabulary-parallel) token embedding with learned
 * positions, and the head — final norm, (vocabulary-parallel) LM head and cross-entropy whose
 * softmax statistics are reduced across the tensor-parallel ranks so that the full logits
 * never exist on one rank. Vocabulary padding columns and ignored targets are excluded. With
 * tp == 1 and one activation slot the head is the fused classifier + cross-entropy in row
 * chunks (head_fused_*): no (B*T, V) probabilities. */
#include <math.h>
#include <stdlib.h>

#include "loom/kernels.h"
#include "loom/prof.h"
#include "model/decoder_internal.h"

int dec_row_token_index(const loom_decoder *d, int r) {
  if (d->shard.cp > 1) { /* Ulysses (sp > 1) splits the cp rank's Tc tokens further */
    int cp = d->shard.cp, Tc = d->T / cp, Ts = Tc / d->shard.sp, c = Tc / 2;
    int j = d->shard.sp_rank * Ts + r % Ts; /* index among the cp rank's Tc tokens */
    int chunk = j < c ? d->shard.cp_rank : 2 * cp - 1 - d->shard.cp_rank;
    return (r / Ts) * d->T + chunk * c + j % c;
  }
  if (d->shard.sp > 1) {
    int Tl = d->T / d->shard.sp;
    return (r / Tl) * d->T + d->pos0 + r % Tl;
  }
  return r;
}

int dec_resid_row_token_index(const loom_decoder *d, int r) {
  if (d->shard.seq_parallel) return d->shard.tp_rank * d->Nr + r;
  return dec_row_token_index(d, r);
}

static size_t head_weight(const loom_decoder *d) {
  return loom_param_offset(d, d->spec.tied_embeddings ? "embed.weight" : "lm_head.weight");
}

dec_embedding dec_embedding_of(const loom_decoder *d) {
  size_t pe = loom_param_offset(d, "pos_embed.weight");
  dec_embedding e = {d->params + loom_param_offset(d, "embed.weight"),
                     pe == NONE ? NULL : d->params + pe, d->spec.hidden};
  return e;
}

/* row (C) += pos_embed[pos] (learned positions), or replaced by inject when not NULL */
static void embed_position(const dec_embedding *e, float *row, int pos, const float *inject) {
  if (inject) {
    memcpy(row, inject, e->C * sizeof(float));
    return;
  }
  if (!e->wpe) return;
  const float *p = e->wpe + (size_t)pos * e->C;
  for (int c = 0; c < e->C; c++) row[c] += p[c];
}

void dec_embed_row(const dec_embedding *e, float *out, int token, int pos, const float *inject) {
  if (!inject) /* (else the vision token replaces it) */
    memcpy(out, e->wte + (size_t)token * e->C, e->C * sizeof(float));
  embed_position(e, out, pos, inject);
}

/* out (Nr,C) = embed[token] (+ pos_embed[t]), or the vision token injected in its place;
 * traffic 4 Nr C (2 + 1 with positions) bytes: table rows read, out written (+ position rows
 * read) */
void dec_embed_forward(loom_decoder *d, loom_acts *a, float *out) {
  int C = d->spec.hidden, N = d->N, Nr = d->Nr;
  LOOM_PROF_PUSH(LOOM_PART_EMBED);
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_ACQUIRE_FWD);
  dec_embedding e = dec_embedding_of(d);
  const float *wte = e.wte;
  bool pe = e.wpe != NULL;
  if (d->shard.tp > 1) {
    float *full = d->s->full; /* (N,C) partial: rows of tokens this rank's vocabulary holds */
    for (int r = 0; r < N; r++) {
      int v = a->tokens[dec_row_token_index(d, r)] - d->v0;
      if (v >= 0 && v < d->vloc) memcpy(full + (size_t)r * C, wte + (size_t)v * C, C * sizeof(float));
      else memset(full + (size_t)r * C, 0, C * sizeof(float));
    }
    dec_reduce_rows(d, full, out);
  }
  for (int r = 0; r < Nr; r++) {
    int tok = dec_resid_row_token_index(d, r), slot = a->inject_slot ? a->inject_slot[tok] : -1;
    const float *inject = slot >= 0 ? a->inject_feats + (size_t)slot * C : NULL;
    int pos = pe ? dec_token_position(d, a, tok) : 0;
    if (d->shard.tp > 1) embed_position(&e, out + (size_t)r * C, pos, inject);
    else dec_embed_row(&e, out + (size_t)r * C, a->tokens[tok], pos, inject);
  }
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_RELEASE);
  LOOM_PROF_POP(0, 4.0 * Nr * C * (2 + pe));
}

/* traffic 4 Nr C (3 + 2 with positions) bytes: dres read, gradient rows read and written */
void dec_embed_backward(loom_decoder *d, loom_acts *a, const float *dres) {
  int C = d->spec.hidden, N = d->N, Nr = d->Nr;
  LOOM_PROF_PUSH(LOOM_PART_EMBED);
  /* only gradients are written here: the parameters are not needed */
  float *dwte = d->grads + loom_param_offset(d, "embed.weight");
  const int *slot_of = a->inject_slot;
  if (slot_of) /* injected rows: their gradient goes to the vision tokens, not the table */
    for (int r = 0; r < Nr; r++) {
      int slot = slot_of[dec_resid_row_token_index(d, r)];
      if (slot >= 0) memcpy(a->inject_grads + (size_t)slot * C, dres + (size_t)r * C, C * sizeof(float));
    }
  size_t pe = loom_param_offset(d, "pos_embed.weight");
  if (pe != NONE)
    for (int r = 0; r < Nr; r++) {
      float *g = d->grads + pe +
                 (size_t)dec_token_position(d, a, dec_resid_row_token_index(d, r)) * C;
      for (int c = 0; c < C; c++) g[c] += dres[(size_t)r * C + c];
    }
  if (d->shard.tp > 1) {
    const float *dy = dec_gather_rows(d, dres, d->s->full);
    for (int r = 0; r < N; r++) {
      int tok = dec_row_token_index(d, r), v = a->tokens[tok] - d->v0;
      if (v < 0 || v >= d->vloc || (slot_of && slot_of[tok] >= 0)) continue;
      for (int c = 0; c < C; c++) dwte[(size_t)v * C + c] += dy[(size_t)r * C + c];
    }
  } else {
    for (int r = 0; r < Nr; r++) {
      int tok = dec_resid_row_token_index(d, r);
      if (slot_of && slot_of[tok] >= 0) continue;
      float *g = dwte + (size_t)a->tokens[tok] * C;
      for (int c = 0; c < C; c++) g[c] += dres[(size_t)r * C + c];
    }
  }
  LOOM_PROF_POP(0, 4.0 * Nr * C * (3 + 2 * (pe != NONE)));
}

/* Columns j of this rank's vocabulary slice that are real tokens: [0, real). */
static int real_columns(const loom_decoder *d) {
  int real = d->spec.vocab_size - d->v0;
  return real < 0 ? 0 : real > d->vloc ? d->vloc : real;
}

/* Target of each head row in this rank's vocabulary slice: its column, -1 when another
 * rank's slice holds it, LOOM_IGNORE_INDEX for ignored rows (or no targets). */
static void row_targets(loom_decoder *d, loom_acts *a) {
  int real = real_columns(d);
  for (int r = 0; r < d->N; r++) {
    int t = a->targets ? a->targets[dec_row_token_index(d, r)] : LOOM_IGNORE_INDEX;
    if (t != LOOM_IGNORE_INDEX) {
      LOOM_ASSERT(t >= 0 && t < d->spec.vocab_size);
      t -= d->v0;
      if (t < 0 || t >= real) t = -1;
    }
    d->s->row_targets[r] = t;
  }
}

static void loss_total(loom_decoder *d, loom_acts *a, double *loss_sum, int *count) {
  double total = 0;
  int n = 0;
  for (int r = 0; r < d->N; r++) {
    int t = a->targets[dec_row_token_index(d, r)];
    if (t == LOOM_IGNORE_INDEX) continue;
    total += a->losses[r];
    n++;
  }
  if (loss_sum) *loss_sum = total;
  if (count) *count = n;
}

/* Vocabulary-parallel cross-entropy over the kept logits (N, vloc): per row the max and sum of
 * exp over this rank's real columns, rescaled to the max over all tp ranks and summed there,
 * and the target logit (held by one rank). */
static void xent_forward(loom_decoder *d, loom_acts *a, double *loss_sum, int *count) {
  int N = d->N, V = d->vloc, real = real_columns(d);
  float *stats = d->s->d_norm; /* scratch (3N): sum of exp, target logit, local max */
  const int32_t *tg = d->s->row_targets;
  loom_xent_stats_f32(a->row_max, a->row_sumexp, NULL, a->logits, NULL, N, V, real);
  if (d->shard.tp > 1) {
    memcpy(stats + 2 * (size_t)N, a->row_max, (size_t)N * sizeof(float));
    loom_comm_allreduce_f32(d->tp_comm, a->row_max, N, LOOM_OP_MAX);
  }
  for (int r = 0; r < N; r++) {
    float local_max = d->shard.tp > 1 ? stats[2 * (size_t)N + r] : a->row_max[r];
    float sum = a->row_sumexp[r];
    stats[r] = sum > 0 ? sum * expf(local_max - a->row_max[r]) : 0.0f;
    stats[N + r] = tg[r] >= 0 ? a->logits[(size_t)r * V + tg[r]] : 0.0f;
  }
  if (d->shard.tp > 1) loom_comm_allreduce_f32(d->tp_comm, stats, 2 * (size_t)N, LOOM_OP_SUM);
  for (int r = 0; r < N; r++) {
    a->row_sumexp[r] = stats[r];
    int t = a->targets[dec_row_token_index(d, r)];
    a->losses[r] = t == LOOM_IGNORE_INDEX
                       ? 0.0f
                       : (float)(log((double)stats[r]) + a->row_max[r] - stats[N + r]);
  }
  loss_total(d, a, loss_sum, count);
}

/* Fused classifier + cross-entropy (tp == 1): rows in chunks of head_rows, the (N, V)
 * probabilities never exist. Per chunk: logits (kept in a->logits when small, else in
 * head_chunk), their statistics and losses; the gradient g = scale (softmax - onehot) in
 * place, then dx = g W and dW += g^T h.
 * fp32: the forward does all of it with scale 1 into head_dx / head_dw and the backward only
 * scales them (the loss scale is not known in the forward; scaling after the GEMMs differs by
 * fp32 rounding only). bf16: rounding must see the scaled gradient (bf16(scale g), as the
 * PyTorch emulation and the unfused path do). The forward guesses the scale a one-micro-batch
 * step uses, 1/(targets counted here), and precomputes with it; the backward uses that when
 * its scale is exactly the guess, else recomputes each chunk's logits and forms g with the
 * real scale (and the decoder stops guessing). The bf16 GEMMs take g converted in place in
 * its own rows. */
typedef struct {
  const uint16_t *w16, *h16; /* native bf16 operands, or NULL */
  const float *w, *h;        /* fp32 (or bf16-rounded fp32) operands */
} head_ops;

static head_ops head_operands(loom_decoder *d, const float *h) {
  struct loom_decoder_scratch *S = d->s;
  int N = d->N, C = d->spec.hidden;
  size_t wo = head_weight(d);
  head_ops o = {dec_weights16(d), NULL, NULL, h};
  if (!o.w16) o.w = loom_decoder_params_lp(d) + wo;
  if (o.w16) {
    o.w16 += wo;
    o.h16 = dec_input16(d, h, (size_t)N * C, 0);
  } else if (d->bf16) {
    loom_round_bf16_f32(S->round_x, h, (size_t)N * C);
    S->x16_src = NULL;
    o.h = S->round_x;
  }
  return o;
}

/* L (R, V) = h[r0:r0+R] W^T */
static void head_logits(loom_decoder *d, const head_ops *o, int r0, int R, float *L) {
  int V = d->vloc, C = d->spec.hidden;
  LOOM_PROF_PUSH(LOOM_PART_HEAD_FWD);
  if (o->w16) loom_gemm_bf16_w(0, 1, R, V, C, o->h16 + (size_t)r0 * C, C, o->w16, C, NULL, 0.0f, L, V);
  else loom_gemm_f32(0, 1, R, V, C, o->h + (size_t)r0 * C, C, o->w, C, NULL, 0.0f, L, V);
  LOOM_PROF_POP(2.0 * R * V * C, 0);
}

/* G (R, V) = scale (softmax(L) - onehot) of rows r0.. (G may be L); dx (R, C) = G W;
 * dw (V, C) = G^T h[r0:] + beta dw */
static void head_chunk_grad(loom_decoder *d, loom_acts *a, const head_ops *o, int r0, int R,
                            const float *L, float *G, float scale, float *dx, float *dw,
                            float beta) {
  int V = d->vloc, C = d->spec.hidden;
  if (o->w16) { /* the gradient straight to bf16, row r's values in row r's own storage */
    uint16_t *G16 = (uint16_t *)G;
    loom_xent_grad_bf16(G16, 2 * (size_t)V, L, a->row_max + r0, a->row_sumexp + r0,
                        d->s->row_targets + r0, R, V, real_columns(d), scale);
    LOOM_PROF_PUSH(LOOM_PART_HEAD_DGRAD);
    loom_gemm_bf16_w(0, 0, R, C, V, G16, 2 * V, o->w16, C, NULL, 0.0f, dx, C);
    LOOM_PROF_POP(2.0 * R * V * C, 0);
    LOOM_PROF_PUSH(LOOM_PART_HEAD_WGRAD);
    loom_gemm_bf16(1, 0, V, C, R, G16, 2 * V, o->h16 + (size_t)r0 * C, C, NULL, beta, dw, C);
    LOOM_PROF_POP(2.0 * R * V * C, 0);
  } else {
    loom_xent_grad_f32(G, L, a->row_max + r0, a->row_sumexp + r0, d->s->row_targets + r0, R, V,
                       real_columns(d), scale);
    if (d->bf16) loom_round_bf16_f32(G, G, (size_t)R * V);
    LOOM_PROF_PUSH(LOOM_PART_HEAD_DGRAD);
    loom_gemm_f32(0, 0, R, C, V, G, V, o->w, C, NULL, 0.0f, dx, C);
    LOOM_PROF_POP(2.0 * R * V * C, 0);
    LOOM_PROF_PUSH(LOOM_PART_HEAD_WGRAD);
    loom_gemm_f32(1, 0, V, C, R, G, V, o->h + (size_t)r0 * C, C, NULL, beta, dw, C);
    LOOM_PROF_POP(2.0 * R * V * C, 0);
  }
}

static void head_fused_forward(loom_decoder *d, loom_acts *a, const float *h, double *loss_sum,
                               int *count) {
  struct loom_decoder_scratch *S = d->s;
  int N = d->N, V = d->vloc, C = d->spec.hidden;
  head_ops o = head_operands(d, h);
  float scale = 1.0f;
  if (d->bf16) { /* the scale of a one-micro-batch step, as loom_train_step forms it */
    int counted = 0;
    for (int r = 0; r < N; r++) counted += S->row_targets[r] != LOOM_IGNORE_INDEX;
    scale = counted ? 1.0f / (float)counted : 0.0f;
  }
  bool precompute = a->targets && (!d->bf16 || S->head_guess);
  S->head_pre = precompute;
  S->head_scale = scale;
  for (int r0 = 0; r0 < N; r0 += S->head_rows) {
    int R = N - r0 < S->head_rows ? N - r0 : S->head_rows;
    float *L = a->logits ? a->logits + (size_t)r0 * V : S->head_chunk;
    head_logits(d, &o, r0, R, L);
    loom_xent_stats_f32(a->row_max + r0, a->row_sumexp + r0, a->losses + r0, L,
                        S->row_targets + r0, R, V, real_columns(d));
    if (precompute)
      head_chunk_grad(d, a, &o, r0, R, L, S->head_chunk, scale, S->head_dx + (size_t)r0 * C,
                      S->head_dw, r0 ? 1.0f : 0.0f);
  }
  if (a->targets) loss_total(d, a, loss_sum, count);
}

/* d_norm (N, C) = gradient of the head's input; the weight gradient added to grads */
static void head_fused_backward(loom_decoder *d, loom_acts *a, const float *h, float scale) {
  struct loom_decoder_scratch *S = d->s;
  int N = d->N, V = d->vloc, C = d->spec.hidden;
  float *gw = d->grads + head_weight(d);
  bool exact = S->head_pre && d->bf16 && scale == S->head_scale; /* guessed right */
  if (S->head_pre && (!d->bf16 || exact)) { /* precomputed in the forward */
    float f = d->bf16 ? 1.0f : scale; /* fp32: computed with scale 1 */
    loom_scale_f32(S->d_norm, S->head_dx, f, (size_t)N * C);
    const float *hw = S->head_dw;
    size_t n = (size_t)V * C;
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (size_t i = 0; i < n; i++) gw[i] += f * hw[i];
    return;
  }
  if (S->head_pre) S->head_guess = false; /* the steps here use another scale: stop guessing */
  head_ops o = head_operands(d, h);
  for (int r0 = 0; r0 < N; r0 += S->head_rows) {
    int R = N - r0 < S->head_rows ? N - r0 : S->head_rows;
    const float *L = a->logits ? a->logits + (size_t)r0 * V : S->head_chunk;
    if (!a->logits) head_logits(d, &o, r0, R, S->head_chunk);
    head_chunk_grad(d, a, &o, r0, R, L, S->head_chunk, scale, S->d_norm + (size_t)r0 * C, gw,
                    1.0f);
  }
}

void dec_final_norm(loom_decoder *d, float *y, float *mean, float *rstd, const float *x,
                    int rows) {
  dec_norm_fwd(d, y, mean, rstd, x, loom_param_offset(d, "final_norm.weight"),
               loom_param_offset(d, "final_norm.bias"), rows);
}

void dec_head_logits(loom_decoder *d, float *logits, const float *h, int rows, int V) {
  dec_linear_fwd(d, logits, h, head_weight(d), NONE, rows, d->spec.hidden, V);
}

void dec_head_forward(loom_decoder *d, loom_acts *a, const float *x, double *loss_sum,
                      int *count) {
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_ACQUIRE_FWD);
  dec_final_norm(d, a->lnf, a->lnf_mean, a->lnf_rstd, x, d->Nr);
  const float *h = dec_gather_rows(d, a->lnf, a->lnf_full);
  row_targets(d, a);
  if (d->s->head_fused) {
    head_fused_forward(d, a, h, loss_sum, count);
  } else {
    dec_head_logits(d, a->logits, h, d->N, d->vloc);
    if (a->targets) xent_forward(d, a, loss_sum, count);
  }
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_RELEASE);
}

/* dres (Nr,C) = gradient of the head's input for scale * sum(losses) */
void dec_head_backward(loom_decoder *d, loom_acts *a, const float *x, float *dres, float scale) {
  struct loom_decoder_scratch *S = d->s;
  int N = d->N, V = d->vloc, C = d->spec.hidden, real = real_columns(d);
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_ACQUIRE_BWD);
  const float *h = d->shard.seq_parallel ? a->lnf_full : a->lnf;
  row_targets(d, a);
  if (S->head_fused) {
    head_fused_backward(d, a, h, scale);
  } else {
    loom_xent_grad_f32(S->dlogits, a->logits, a->row_max, a->row_sumexp, S->row_targets, N, V,
                       real, scale);
    dec_linear_bwd_ex(d, S->d_norm, head_weight(d), NONE, S->dlogits, h, N, C, V,
                      LIN_DX_OVERWRITE);
  }
  const float *dn = S->d_norm;
  if (d->shard.tp > 1) {
    dec_reduce_rows(d, S->d_norm, S->d_norm_r);
    dn = S->d_norm_r;
  }
  size_t fw = loom_param_offset(d, "final_norm.weight"), fb = loom_param_offset(d, "final_norm.bias");
  memset(dres, 0, (size_t)d->Nr * C * sizeof(float));
  dec_norm_bwd(d, dres, dn, x, a->lnf_mean, a->lnf_rstd, fw, fb, d->Nr);
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_RELEASE);
}

/* The two ends of the decoder: the (vocabulary-parallel) token embedding with learned
 * positions, and the head — final norm, (vocabulary-parallel) LM head and cross-entropy whose
 * softmax statistics are reduced across the tensor-parallel ranks so that the full logits
 * never exist on one rank. Vocabulary padding columns and ignored targets are excluded. */
#include <math.h>
#include <stdlib.h>

#include "loom/kernels.h"
#include "model/decoder_internal.h"

int dec_row_token_index(const loom_decoder *d, int r) {
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

/* out (Nr,C) = embed[token] (+ pos_embed[t]) */
void dec_embed_forward(loom_decoder *d, loom_acts *a, float *out) {
  int C = d->spec.hidden, N = d->N, Nr = d->Nr, T = d->T;
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_ACQUIRE_FWD);
  const float *wte = d->params + loom_param_offset(d, "embed.weight");
  size_t pe = loom_param_offset(d, "pos_embed.weight");
  if (d->shard.tp > 1) {
    float *full = d->s->full; /* (N,C) partial: rows of tokens this rank's vocabulary holds */
    for (int r = 0; r < N; r++) {
      int v = a->tokens[dec_row_token_index(d, r)] - d->v0;
      if (v >= 0 && v < d->vloc) memcpy(full + (size_t)r * C, wte + (size_t)v * C, C * sizeof(float));
      else memset(full + (size_t)r * C, 0, C * sizeof(float));
    }
    dec_reduce_rows(d, full, out);
  } else {
    for (int r = 0; r < Nr; r++)
      memcpy(out + (size_t)r * C, wte + (size_t)a->tokens[dec_resid_row_token_index(d, r)] * C,
             C * sizeof(float));
  }
  if (pe != NONE)
    for (int r = 0; r < Nr; r++) {
      const float *p = d->params + pe + (size_t)(dec_resid_row_token_index(d, r) % T) * C;
      for (int c = 0; c < C; c++) out[(size_t)r * C + c] += p[c];
    }
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_RELEASE);
}

void dec_embed_backward(loom_decoder *d, loom_acts *a, const float *dres) {
  int C = d->spec.hidden, N = d->N, Nr = d->Nr, T = d->T;
  /* only gradients are written here: the parameters are not needed */
  float *dwte = d->grads + loom_param_offset(d, "embed.weight");
  size_t pe = loom_param_offset(d, "pos_embed.weight");
  if (pe != NONE)
    for (int r = 0; r < Nr; r++) {
      float *g = d->grads + pe + (size_t)(dec_resid_row_token_index(d, r) % T) * C;
      for (int c = 0; c < C; c++) g[c] += dres[(size_t)r * C + c];
    }
  if (d->shard.tp > 1) {
    const float *dy = dec_gather_rows(d, dres, d->s->full);
    for (int r = 0; r < N; r++) {
      int v = a->tokens[dec_row_token_index(d, r)] - d->v0;
      if (v < 0 || v >= d->vloc) continue;
      for (int c = 0; c < C; c++) dwte[(size_t)v * C + c] += dy[(size_t)r * C + c];
    }
  } else {
    for (int r = 0; r < Nr; r++) {
      float *g = dwte + (size_t)a->tokens[dec_resid_row_token_index(d, r)] * C;
      for (int c = 0; c < C; c++) g[c] += dres[(size_t)r * C + c];
    }
  }
}

/* Columns j of this rank's vocabulary slice that are real tokens: [0, real). */
static int real_columns(const loom_decoder *d) {
  int real = d->spec.vocab_size - d->v0;
  return real < 0 ? 0 : real > d->vloc ? d->vloc : real;
}

/* Vocabulary-parallel cross-entropy: per row, max and sum of exp over all real columns
 * (reduced over tp) and the target logit (held by one rank). */
static void xent_forward(loom_decoder *d, loom_acts *a, double *loss_sum, int *count) {
  int N = d->N, V = d->vloc, real = real_columns(d);
  float *stats = d->s->d_norm; /* scratch (2N) */
  for (int r = 0; r < N; r++) {
    const float *l = a->logits + (size_t)r * V;
    float m = -INFINITY;
    for (int j = 0; j < real; j++) m = l[j] > m ? l[j] : m;
    a->row_max[r] = m;
  }
  if (d->shard.tp > 1) loom_comm_allreduce_f32(d->tp_comm, a->row_max, N, LOOM_OP_MAX);
  for (int r = 0; r < N; r++) {
    const float *l = a->logits + (size_t)r * V;
    double sum = 0;
    for (int j = 0; j < real; j++) sum += exp((double)l[j] - a->row_max[r]);
    int t = a->targets[dec_row_token_index(d, r)] - d->v0;
    stats[r] = (float)sum;
    stats[N + r] = (t >= 0 && t < real) ? l[t] : 0.0f;
  }
  if (d->shard.tp > 1) loom_comm_allreduce_f32(d->tp_comm, stats, 2 * (size_t)N, LOOM_OP_SUM);
  double total = 0;
  int n = 0;
  for (int r = 0; r < N; r++) {
    a->row_sumexp[r] = stats[r];
    int t = a->targets[dec_row_token_index(d, r)];
    if (t == LOOM_IGNORE_INDEX) {
      a->losses[r] = 0;
      continue;
    }
    LOOM_ASSERT(t >= 0 && t < d->spec.vocab_size);
    a->losses[r] = (float)(log((double)stats[r]) + a->row_max[r] - stats[N + r]);
    total += a->losses[r];
    n++;
  }
  if (loss_sum) *loss_sum = total;
  if (count) *count = n;
}

void dec_head_forward(loom_decoder *d, loom_acts *a, const float *x, double *loss_sum,
                      int *count) {
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_ACQUIRE_FWD);
  size_t fw = loom_param_offset(d, "final_norm.weight"), fb = loom_param_offset(d, "final_norm.bias");
  dec_norm_fwd(d, a->lnf, a->lnf_mean, a->lnf_rstd, x, fw, fb, d->Nr);
  const float *h = dec_gather_rows(d, a->lnf, a->lnf_full);
  dec_linear_fwd(d, a->logits, h, head_weight(d), NONE, d->N, d->spec.hidden, d->vloc);
  if (a->targets) xent_forward(d, a, loss_sum, count);
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_RELEASE);
}

/* dres (Nr,C) = gradient of the head's input for scale * sum(losses) */
void dec_head_backward(loom_decoder *d, loom_acts *a, const float *x, float *dres, float scale) {
  int N = d->N, V = d->vloc, C = d->spec.hidden, real = real_columns(d);
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_ACQUIRE_BWD);
  float *dl = d->s->dlogits;
  for (int r = 0; r < N; r++) {
    float *g = dl + (size_t)r * V;
    int t = a->targets[dec_row_token_index(d, r)];
    if (t == LOOM_IGNORE_INDEX) {
      memset(g, 0, (size_t)V * sizeof(float));
      continue;
    }
    const float *l = a->logits + (size_t)r * V;
    float m = a->row_max[r], inv = 1.0f / a->row_sumexp[r];
    for (int j = 0; j < real; j++) g[j] = scale * (expf(l[j] - m) * inv);
    for (int j = real; j < V; j++) g[j] = 0;
    t -= d->v0;
    if (t >= 0 && t < real) g[t] -= scale;
  }
  const float *h = d->shard.seq_parallel ? a->lnf_full : a->lnf;
  memset(d->s->d_norm, 0, (size_t)N * C * sizeof(float));
  dec_linear_bwd(d, d->s->d_norm, head_weight(d), NONE, dl, h, N, C, V);
  const float *dn = d->s->d_norm;
  if (d->shard.tp > 1) {
    dec_reduce_rows(d, d->s->d_norm, d->s->d_norm_r);
    dn = d->s->d_norm_r;
  }
  size_t fw = loom_param_offset(d, "final_norm.weight"), fb = loom_param_offset(d, "final_norm.bias");
  memset(dres, 0, (size_t)d->Nr * C * sizeof(float));
  dec_norm_bwd(d, dres, dn, x, a->lnf_mean, a->lnf_rstd, fw, fb, d->Nr);
  dec_params(d, LOOM_UNIT_ENDS, LOOM_PARAMS_RELEASE);
}

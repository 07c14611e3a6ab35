/* Decoder forward and backward of one pipeline chunk (embedding for the first chunk, its
 * blocks, the head and loss for the last), and the single-process wrappers. */
#include <math.h>
#include <stdlib.h>

#include "loom/kernels.h"
#include "model/decoder_internal.h"

static int chunk_layers(const loom_decoder *d, int c) {
  return d->shard.chunk_last[c] - d->shard.chunk_first[c];
}

float *loom_acts_input(loom_acts *a) { return a->resid; }

float *loom_acts_output(loom_decoder *d, loom_acts *a) {
  return a->resid + (size_t)chunk_layers(d, a->chunk) * d->Nr * d->spec.hidden;
}

void dec_mrope_row(const loom_model_spec *s, double *cs, double *sn, const int32_t *pos,
                   size_t stride) {
  const int *sec = s->vision.mrope_section;
  int half = s->head_dim / 2;
  for (int i = 0; i < half; i++) {
    int k = i < sec[0] ? 0 : i < sec[0] + sec[1] ? 1 : 2;
    double angle = (double)pos[(size_t)k * stride] * pow(s->rope_theta, -2.0 * i / s->head_dim);
    cs[i] = cos(angle);
    sn[i] = sin(angle);
  }
}

/* Rotary table (N, D/2) of the multimodal positions of this rank's attention rows. */
static void mrope_table(loom_decoder *d, loom_acts *a) {
  int half = d->spec.head_dim / 2;
  size_t BT = (size_t)d->B * d->T;
  for (int r = 0; r < d->N; r++)
    dec_mrope_row(&d->spec, a->mcos + (size_t)r * half, a->msin + (size_t)r * half,
                  a->mrope_pos + dec_row_token_index(d, r), BT);
}

void loom_decoder_forward_chunk(loom_decoder *d, loom_acts *a, const int32_t *tokens,
                                const int32_t *targets, double *loss_sum, int *count) {
  int c = a->chunk, first = d->shard.chunk_first[c], nl = chunk_layers(d, c);
  a->tokens = tokens;
  a->targets = targets;
  if (a->mrope_pos) {
    LOOM_ASSERT(a->mcos);
    mrope_table(d, a);
  }
  if (d->doc_eod >= 0) { /* packed documents: segments and positions from the tokens */
    LOOM_ASSERT(a->seg_lo && !a->mrope_pos);
    loom_attn_doc_segments(a->seg_lo, a->seg_hi, a->doc_pos, tokens, d->B, d->T, d->doc_eod);
    for (int r = 0; r < d->N; r++) a->row_pos[r] = a->doc_pos[dec_row_token_index(d, r)];
  }
  if (d->shard.chunk_embed[c]) {
    dec_embed_forward(d, a, a->resid);
    dec_moe_mb_reset(d, a); /* a new micro-batch's router statistics */
  }
  for (int i = 0; i < nl; i++) {
    dec_block_forward(d, a, first + i, i);
    if (d->on_block_done) d->on_block_done(d->on_block_done_ctx);
  }
  if (d->shard.chunk_head[c]) {
    dec_head_forward(d, a, loom_acts_output(d, a), loss_sum, count);
    d->last = a;
    d->logits = a->logits;
    if (a->moe) dec_moe_mb_done(d, a);
  }
}

void loom_decoder_backward_chunk(loom_decoder *d, loom_acts *a, const float *dout,
                                 float *dinput, float loss_scale) {
  int c = a->chunk, first = d->shard.chunk_first[c], nl = chunk_layers(d, c);
  size_t rows = (size_t)d->Nr * d->spec.hidden;
  if (d->shard.chunk_head[c]) {
    LOOM_ASSERT(a->targets);
    dec_head_backward(d, a, loom_acts_output(d, a), d->s->dres, loss_scale);
  } else {
    memcpy(d->s->dres, dout, rows * sizeof(float));
  }
  for (int i = nl - 1; i >= 0; i--) {
    dec_block_backward(d, a, first + i, i);
    if (d->on_block_done) d->on_block_done(d->on_block_done_ctx);
  }
  if (d->shard.chunk_embed[c]) dec_embed_backward(d, a, d->s->dres);
  else memcpy(dinput, d->s->dres, rows * sizeof(float));
}

void loom_decoder_forward(loom_decoder *d, const int32_t *tokens, const int32_t *targets,
                          double *loss_sum, int *count) {
  loom_decoder_forward_chunk(d, loom_decoder_slot_get(d, 0, 0), tokens, targets, loss_sum, count);
}

void loom_decoder_backward(loom_decoder *d, float loss_scale) {
  loom_decoder_backward_chunk(d, d->last, NULL, NULL, loss_scale);
}

double loom_decoder_flops_per_token(const loom_model_spec *s, int T) {
  double C = s->hidden, QD = (double)s->heads * s->head_dim, KD = (double)s->kv_heads * s->head_dim;
  double I = s->intermediate;
  double per_layer = C * QD * 2 + C * KD * 2 + I * C * (s->arch == LOOM_ARCH_GPT2 ? 2 : 3);
  double matmul_params = s->layers * per_layer + (double)s->padded_vocab * C;
  return 6.0 * matmul_params + 6.0 * s->layers * (double)T * QD;
}

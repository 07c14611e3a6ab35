/* The decoder's cached forward (generation): the new tokens of a ragged batch through the same
 * layer code as the training forward (decoder_block.c: norm, q/k/v projections, rotary
 * positions, output projection, residual, MLP; decoder_ends.c: embedding, final norm, head;
 * every matmul through decoder_ops.c's linear layers, fp32 or bf16 as the decoder is), with
 * attention over a KV cache in place of the training forward's flash attention: the keys and
 * values of the new tokens are appended to their rows' cache slots and every new token
 * attends to the slots of its own row up to its own (kernels_kv.h). The new tokens of all
 * rows go through each linear together (one GEMM of M rows per weight); only the logits
 * asked for are computed (each row's last token, or every new token).
 * Shapes: M new tokens, C hidden, D head dim, Hq/Hkv heads, I intermediate, V real vocab,
 * L layers, B cache rows, S cache slots per row. */
#include <stdlib.h>

#include "loom/kernels.h"
#include "loom/kernels_kv.h"
#include "model/decoder_internal.h"

struct loom_kv_work {
  block_offsets *o; /* (L) each layer's tensors in the parameter buffer */
  float *attn;      /* attention scratch (loom_attention_kv_work_floats) */
  /* sized for cap new tokens, bf16 or not; planned again when a call needs more */
  int cap;
  bool bf16;
  void *arena;
  loom_layer_acts L;          /* one layer's activations of the new tokens, reused by every
                               layer: ln1/ln2 (M,C), q/att (M,Hq*D), k/v (M,Hkv*D), mid (M,C),
                               gate/up/act (M,I); bf16 copies of the GEMM inputs in bf16 */
  float *x;                   /* (M,C) residual stream, updated in place layer by layer */
  float *hsel, *h;            /* (M,C) rows whose logits are wanted, their final norm */
  float *mean, *rstd;         /* (M) final norm statistics */
  double *mcos, *msin;        /* (M, D/2) multimodal rotary table */
  int *slot, *crow, *pos, *n; /* (M) cache slot, cache row, rotary position, slots attended */
  float *round_x;             /* (M, max(C, Hq*D, I)) the linears' bf16 rounding scratch */
  loom_moe_plan cand;         /* MoE models: the plans' sorting scratch for cap tokens */
};

static bool whole_model(const loom_decoder *d) {
  const loom_shard *s = &d->shard;
  return s->tp == 1 && s->sp == 1 && s->cp == 1 && s->n_chunks == 1 && s->chunk_embed[0] &&
         s->chunk_head[0] && !d->param_hook;
}

int loom_kv_cache_create(loom_kv_cache *c, const loom_decoder *d, int batch, int max_seq) {
  memset(c, 0, sizeof *c);
  const loom_model_spec *s = &d->spec;
  if (!whole_model(d))
    return loom_err("the cached forward needs the whole model in one process (no tensor, "
                    "sequence, context or pipeline split, resident parameters)");
  if (batch < 1 || max_seq < 1)
    return loom_err("KV cache: batch (%d) and max_seq (%d) must be positive", batch, max_seq);
  if (max_seq > s->max_seq)
    return loom_err("generation needs %d positions but the model has max_seq %d", max_seq,
                    s->max_seq);
  c->layers = s->layers;
  c->batch = batch;
  c->kv_heads = s->kv_heads;
  c->max_seq = max_seq;
  c->head_dim = s->head_dim;
  size_t n = (size_t)c->layers * batch * c->kv_heads * max_seq * c->head_dim;
  c->k = loom_alloc(n * sizeof(float)); /* (L, B, Hkv, S, D) */
  c->v = loom_alloc(n * sizeof(float)); /* (L, B, Hkv, S, D) */
  c->len = loom_alloc((size_t)batch * sizeof *c->len);
  loom_kv_work *w = loom_alloc(sizeof *w);
  w->o = loom_alloc((size_t)s->layers * sizeof *w->o);
  for (int l = 0; l < s->layers; l++) w->o[l] = loom_block_offsets(d, l);
  w->attn = loom_alloc(loom_attention_kv_work_floats(max_seq, s->head_dim) * sizeof(float));
  c->work = w;
  return 0;
}

void loom_kv_cache_free(loom_kv_cache *c) {
  if (c->work) {
    loom_free(c->work->o);
    loom_free(c->work->attn);
    loom_free(c->work->arena);
    loom_moe_plan_free(&c->work->cand);
    loom_free(c->work);
  }
  loom_free(c->k);
  loom_free(c->v);
  loom_free(c->len);
  memset(c, 0, sizeof *c);
}

static size_t block(const loom_kv_cache *c, int layer, int row, int head) {
  return ((((size_t)layer * c->batch + row) * c->kv_heads + head) * c->max_seq) * c->head_dim;
}

float *loom_kv_cache_k(const loom_kv_cache *c, int layer, int row, int head) {
  return c->k + block(c, layer, row, head);
}

float *loom_kv_cache_v(const loom_kv_cache *c, int layer, int row, int head) {
  return c->v + block(c, layer, row, head);
}

/* ---- the scratch of M new tokens ---------------------------------------------------------- */

typedef dec_carver carver;
#define carve dec_carve_bytes
#define CARVE_F(c, n) ((float *)carve(c, (size_t)(n) * sizeof(float)))
#define CARVE_H(c, n) ((uint16_t *)carve(c, (size_t)(n) * sizeof(uint16_t)))

static void plan(const loom_decoder *d, loom_kv_work *w, carver *c, size_t M) {
  const loom_model_spec *s = &d->spec;
  size_t C = s->hidden, QD = (size_t)s->heads * s->head_dim;
  size_t KD = (size_t)s->kv_heads * s->head_dim, I = s->intermediate;
  size_t half = s->head_dim / 2 ? s->head_dim / 2 : 1, wide = C > QD ? C : QD;
  wide = wide > I ? wide : I;
  if (s->moe.experts > 0) /* the shared expert's down projection reads (M, Is) */
    wide = wide > (size_t)s->moe.shared_intermediate ? wide : (size_t)s->moe.shared_intermediate;
  loom_layer_acts *L = &w->L;
  memset(L, 0, sizeof *L);
  L->ln1 = CARVE_F(c, M * C);
  L->ln1_mean = CARVE_F(c, M);
  L->ln1_rstd = CARVE_F(c, M);
  L->q = CARVE_F(c, M * QD);
  L->k = CARVE_F(c, M * KD);
  L->v = CARVE_F(c, M * KD);
  L->att = CARVE_F(c, M * QD);
  L->mid = CARVE_F(c, M * C);
  L->ln2 = CARVE_F(c, M * C);
  L->ln2_mean = CARVE_F(c, M);
  L->ln2_rstd = CARVE_F(c, M);
  L->gate = s->arch == LOOM_ARCH_LLAMA ? CARVE_F(c, M * I) : NULL;
  L->up = CARVE_F(c, M * I);
  L->act = CARVE_F(c, M * I);
  if (s->qk_norm) { /* the norms run in place on q and k: only their 1/rms is kept */
    L->q_rstd = CARVE_F(c, M * s->heads);
    L->k_rstd = CARVE_F(c, M * s->kv_heads);
  }
  if (loom_model_moe_layers(s) > 0) { /* one MoE layer's activations, reused by every layer */
    L->moe = dec_moe_plan_acts(d, c, M, &w->cand);
    if (L->moe) L->moe->dropless = true; /* generation drops no token (as HF's inference) */
  }
  if (d->bf16) { /* the native bf16 GEMMs' inputs, converted once, as in training */
    L->ln1_16 = CARVE_H(c, M * C);
    L->att16 = CARVE_H(c, M * QD);
    L->ln2_16 = CARVE_H(c, M * C);
    L->act16 = CARVE_H(c, M * I);
  }
  w->x = CARVE_F(c, M * C);
  w->hsel = CARVE_F(c, M * C);
  w->h = CARVE_F(c, M * C);
  w->mean = CARVE_F(c, M);
  w->rstd = CARVE_F(c, M);
  w->mcos = (double *)carve(c, M * half * sizeof(double));
  w->msin = (double *)carve(c, M * half * sizeof(double));
  w->slot = (int *)carve(c, M * sizeof(int));
  w->crow = (int *)carve(c, M * sizeof(int));
  w->pos = (int *)carve(c, M * sizeof(int));
  w->n = (int *)carve(c, M * sizeof(int));
  w->round_x = d->bf16 ? CARVE_F(c, M * wide) : NULL;
}

/* scratch for M new tokens (planned again only when a call has more, or the precision changed) */
static void reserve(const loom_decoder *d, loom_kv_work *w, int M) {
  if (M <= w->cap && w->bf16 == d->bf16) return;
  loom_free(w->arena);
  const loom_moe_spec *ms = &d->spec.moe;
  loom_moe_plan_free(&w->cand);
  if (loom_model_moe_layers(&d->spec) > 0) loom_moe_plan_init(&w->cand, M, ms->top_k, ms->experts);
  carver c = {NULL, 0};
  plan(d, w, &c, (size_t)M);
  w->arena = loom_alloc(c.used);
  c.base = w->arena;
  c.used = 0;
  plan(d, w, &c, (size_t)M);
  w->cap = M;
  w->bf16 = d->bf16;
}

/* ---- the forward ---------------------------------------------------------------------------- */

/* the new keys/values k, v (M, Hkv, D) of layer l into their cache slots; bf16: rounded, the
 * operands of bf16 attention */
static void cache_store(const loom_decoder *d, loom_kv_cache *c, const loom_kv_work *w, int l,
                        int M) {
  int Hkv = c->kv_heads, D = c->head_dim;
  for (int m = 0; m < M; m++)
    for (int h = 0; h < Hkv; h++) {
      size_t src = ((size_t)m * Hkv + h) * D, dst = (size_t)w->slot[m] * D;
      float *kd = loom_kv_cache_k(c, l, w->crow[m], h) + dst;
      float *vd = loom_kv_cache_v(c, l, w->crow[m], h) + dst;
      memcpy(kd, w->L.k + src, D * sizeof(float));
      memcpy(vd, w->L.v + src, D * sizeof(float));
      if (d->bf16) loom_round_bf16_f32(kd, kd, (size_t)D), loom_round_bf16_f32(vd, vd, (size_t)D);
    }
}

/* the batch as the cache can take it: rows, counts, token ids; M new tokens in all */
static int check_batch(const loom_decoder *d, const loom_kv_cache *c, const loom_kv_batch *b,
                       int *M) {
  *M = 0;
  for (int i = 0; i < b->n_rows; i++) {
    int r = b->row[i];
    if (r < 0 || r >= c->batch || b->count[i] < 1)
      return loom_err("cached forward: bad row %d or token count %d", r, b->count[i]);
    if (c->len[r] + b->count[i] > c->max_seq)
      return loom_err("sequence of row %d would reach %d tokens but at most %d fit (max_seq)", r,
                      c->len[r] + b->count[i], c->max_seq);
    *M += b->count[i];
  }
  for (int m = 0; m < *M; m++)
    if (b->tokens[m] < 0 || b->tokens[m] >= d->spec.vocab_size)
      return loom_err("token id %d at new position %d is outside the vocabulary [0, %d)",
                      b->tokens[m], m, d->spec.vocab_size);
  return 0;
}

int loom_decoder_forward_cached(loom_decoder *d, loom_kv_cache *c, const loom_kv_batch *b,
                                float *logits) {
  const loom_model_spec *s = &d->spec;
  int C = s->hidden, D = s->head_dim, V = s->vocab_size, half = D / 2, M;
  LOOM_ASSERT(whole_model(d) && c->layers == s->layers && c->head_dim == D);
  if (check_batch(d, c, b, &M)) return LOOM_ERR;
  loom_kv_work *w = c->work;
  reserve(d, w, M);
  for (int i = 0, m = 0; i < b->n_rows; i++)
    for (int j = 0; j < b->count[i]; j++, m++) {
      int r = b->row[i];
      w->crow[m] = r;
      w->slot[m] = c->len[r] + j;
      w->n[m] = w->slot[m] + 1; /* causal: up to its own slot */
      w->pos[m] = w->slot[m] + (b->rope_delta ? b->rope_delta[r] : 0);
    }
  /* embedding (M, C): GPT-2's learned position is the slot */
  dec_embedding e = dec_embedding_of(d);
  for (int m = 0; m < M; m++) {
    const float *inject =
        b->inject && b->inject[m] >= 0 ? b->embeds + (size_t)b->inject[m] * C : NULL;
    dec_embed_row(&e, w->x + (size_t)m * C, b->tokens[m], w->slot[m], inject);
  }
  dec_positions pos = {NULL, NULL, w->pos};
  if (b->mrope) {
    for (int m = 0; m < M; m++)
      dec_mrope_row(s, w->mcos + (size_t)m * half, w->msin + (size_t)m * half, b->mrope + m,
                    (size_t)M);
    pos = (dec_positions){w->mcos, w->msin, NULL};
  }
  /* the linears round their bf16 inputs in round_x: the cache's, sized for M, for this call */
  float *train_round_x = d->s->round_x;
  d->s->round_x = w->round_x;
  d->s->x16_src = NULL;
  size_t layer_kv = (size_t)c->batch * c->kv_heads * c->max_seq * D; /* (B, Hkv, S, D) */
  for (int l = 0; l < s->layers; l++) {
    loom_layer_acts *L = &w->L;
    dec_block_qkv(d, L, &w->o[l], w->x, M, M);
    dec_block_rope(d, L->q, L->k, M, &pos, false);
    cache_store(d, c, w, l, M);
    const float *K = c->k + l * layer_kv, *Vc = c->v + l * layer_kv;
    if (d->bf16)
      loom_attention_kv_forward_bf16(L->att, L->q, K, Vc, M, s->heads, s->kv_heads, c->max_seq, D,
                                     w->crow, w->n, w->attn);
    else
      loom_attention_kv_forward_f32(L->att, L->q, K, Vc, M, s->heads, s->kv_heads, c->max_seq, D,
                                    w->crow, w->n, w->attn);
    dec_block_mlp(d, L, &w->o[l], w->x, w->x, M, M);
  }
  for (int i = 0; i < b->n_rows; i++) c->len[b->row[i]] += b->count[i];
  /* head: final norm and logits of the rows wanted */
  const float *rows = w->x;
  int R = M;
  if (!b->all_logits) {
    R = 0;
    for (int i = 0, m = 0; i < b->n_rows; i++) {
      m += b->count[i];
      memcpy(w->hsel + (size_t)R++ * C, w->x + (size_t)(m - 1) * C, C * sizeof(float));
    }
    rows = w->hsel;
  }
  dec_final_norm(d, w->h, w->mean, w->rstd, rows, R);
  dec_head_logits(d, logits, w->h, R, V);
  d->s->round_x = train_round_x;
  d->s->x16_src = NULL;
  return 0;
}

/* Decoder memory plan and parameter initialisation: one allocation for parameters and
 * gradients, one arena for the activation slots and the backward scratch, sized from
 * (spec, shard, B, T, slots). Parameters are drawn per global tensor row from their own
 * random stream, so every parallel layout starts from the same weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/kernels.h"
#include "loom/ring_attention.h"
#include "loom/prof.h"
#include "model/decoder_internal.h"

typedef dec_carver carver;
#define carve dec_carve

static size_t maxz(size_t a, size_t b) { return a > b ? a : b; }

/* Fused classifier + cross-entropy: logits are kept (d->logits) up to this size, else only a
 * chunk of HEAD_CHUNK_FLOATS exists at a time (LOOM_KEEP_LOGITS=0/1 and LOOM_HEAD_ROWS=n in
 * the environment override both, for tests). */
#define LOGITS_KEEP_BYTES ((size_t)1 << 30)
#define HEAD_CHUNK_FLOATS ((size_t)64 << 20)

static bool has_head(const loom_decoder *d) {
  for (int c = 0; c < d->shard.n_chunks; c++)
    if (d->shard.chunk_head[c]) return true;
  return false;
}

static int max_chunk_layers(const loom_decoder *d) {
  int m = 0;
  for (int c = 0; c < d->shard.n_chunks; c++) {
    int n = d->shard.chunk_last[c] - d->shard.chunk_first[c];
    m = n > m ? n : m;
  }
  return m;
}

/* Which kinds of MLP the layers at index idx of the chunks have: *dense, *moe. */
static void layer_kinds(const loom_decoder *d, int idx, bool *dense, bool *moe) {
  *dense = *moe = false;
  for (int c = 0; c < d->shard.n_chunks; c++) {
    int l = d->shard.chunk_first[c] + idx;
    if (l >= d->shard.chunk_last[c]) continue;
    if (loom_model_layer_is_moe(&d->spec, l)) *moe = true;
    else *dense = true;
  }
}

/* The activations of the layers at index idx of the chunks (idx < 0: of any layer, the one set
 * activation checkpointing recomputes into). */
static void plan_layer(const loom_decoder *d, carver *c, loom_layer_acts *L, int idx) {
  size_t N = (size_t)d->N, Nr = (size_t)d->Nr, C = (size_t)d->spec.hidden;
  size_t QD = (size_t)d->lh * d->spec.head_dim, KD = (size_t)d->lkv * d->spec.head_dim;
  size_t I = (size_t)d->li;
  bool seqpar = d->shard.seq_parallel, uly = d->shard.sp > 1;
  int heads_att = uly ? d->lh / d->shard.sp : d->lh;
  size_t T_att = (size_t)d->T / d->shard.cp; /* tokens per sequence in attention */
  L->ln1 = carve(c, Nr * C);
  L->ln1_mean = carve(c, Nr);
  L->ln1_rstd = carve(c, Nr);
  L->ln1_full = seqpar ? carve(c, N * C) : NULL;
  L->q = carve(c, N * QD);
  L->k = carve(c, N * KD);
  L->v = carve(c, N * KD);
  L->att = carve(c, N * QD);
  L->qh = uly ? carve(c, N * QD) : L->q;
  L->kh = uly ? carve(c, N * KD) : L->k;
  L->vh = uly ? carve(c, N * KD) : L->v;
  L->atth = uly ? carve(c, N * QD) : L->att;
  L->lse = carve(c, (size_t)d->B * heads_att * T_att);
  L->mid = carve(c, Nr * C);
  L->ln2 = carve(c, Nr * C);
  L->ln2_mean = carve(c, Nr);
  L->ln2_rstd = carve(c, Nr);
  L->ln2_full = seqpar ? carve(c, N * C) : NULL;
  bool dense = true, moe = false;
  if (idx >= 0) layer_kinds(d, idx, &dense, &moe);
  else if (d->s->moe) moe = true, dense = d->s->moe->n < d->spec.layers;
  L->gate = dense && d->spec.arch == LOOM_ARCH_LLAMA ? carve(c, N * I) : NULL;
  L->up = dense ? carve(c, N * I) : NULL;
  L->act = dense ? carve(c, N * I) : NULL;
  L->moe = moe ? dec_moe_plan_acts(d, c, N, &d->s->moe->cand) : NULL;
  if (d->spec.qk_norm) { /* the projections before the per-head norms, and their 1/rms */
    L->q_pre = carve(c, N * QD);
    L->k_pre = carve(c, N * KD);
    L->q_rstd = carve(c, N * d->lh);
    L->k_rstd = carve(c, N * d->lkv);
  }
  /* bf16 copies of the GEMM inputs (carved in every bf16 run, so that the memory model does
   * not depend on the GEMM backend; only native bf16 GEMMs fill them) */
  bool b16 = d->bf16;
  L->ln1_16 = b16 ? (uint16_t *)carve(c, (N * C + 1) / 2) : NULL;
  L->att16 = b16 ? (uint16_t *)carve(c, (N * QD + 1) / 2) : NULL;
  L->ln2_16 = b16 ? (uint16_t *)carve(c, (N * C + 1) / 2) : NULL;
  L->act16 = b16 && dense ? (uint16_t *)carve(c, (N * I + 1) / 2) : NULL;
}

static void plan(loom_decoder *d, carver *c) {
  size_t N = (size_t)d->N, Nr = (size_t)d->Nr, C = (size_t)d->spec.hidden;
  size_t QD = (size_t)d->lh * d->spec.head_dim, KD = (size_t)d->lkv * d->spec.head_dim;
  size_t I = (size_t)d->li, V = (size_t)d->vloc;
  bool head = has_head(d), uly = d->shard.sp > 1;
  int nl = max_chunk_layers(d);
  const int *ms = d->spec.vision.mrope_section;
  bool mrope = ms[0] + ms[1] + ms[2] > 0;
  for (int i = 0; i < d->n_slots; i++) {
    loom_acts *a = &d->slots[i];
    a->resid = carve(c, (size_t)(nl + 1) * Nr * C);
    a->mcos = mrope ? (double *)carve(c, N * (size_t)(d->spec.head_dim / 2) * 2) : NULL;
    a->msin = mrope ? (double *)carve(c, N * (size_t)(d->spec.head_dim / 2) * 2) : NULL;
    if (!d->recompute)
      for (int l = 0; l < nl; l++) plan_layer(d, c, &a->layer[l], l);
    a->moe = d->s->moe ? dec_moe_plan_mb(d, c) : NULL;
    if (head) {
      a->lnf = carve(c, Nr * C);
      a->lnf_mean = carve(c, Nr);
      a->lnf_rstd = carve(c, Nr);
      a->lnf_full = d->shard.seq_parallel ? carve(c, N * C) : NULL;
      /* the fused head keeps the logits only while they are small (inspection, tests) */
      a->logits = !d->s->head_fused || d->s->keep_logits ? carve(c, N * V) : NULL;
      a->row_max = carve(c, N);
      a->row_sumexp = carve(c, N);
      a->losses = carve(c, N);
    }
  }
  struct loom_decoder_scratch *S = d->s;
  if (d->recompute) plan_layer(d, c, &S->rec, -1);
  S->dres = carve(c, Nr * C);
  S->d_norm = carve(c, maxz(N * C, 3 * N)); /* also the head's loss statistics (3N) */
  S->d_norm_r = carve(c, Nr * C);
  S->full = carve(c, N * C);
  S->d_q = carve(c, N * QD);
  S->d_k = carve(c, N * KD);
  S->d_v = carve(c, N * KD);
  S->d_att = carve(c, N * QD);
  S->d_qh = uly ? carve(c, N * QD) : NULL;
  S->d_kh = uly ? carve(c, N * KD) : NULL;
  S->d_vh = uly ? carve(c, N * KD) : NULL;
  S->d_atth = uly ? carve(c, N * QD) : NULL;
  S->d_act = carve(c, N * I);
  S->d_a = carve(c, N * I);
  S->d_b = carve(c, N * I);
  bool fused = S->head_fused;
  S->dlogits = head && !fused ? carve(c, N * V) : NULL;
  S->head_chunk = head && fused ? carve(c, (size_t)S->head_rows * V) : NULL;
  /* the head's gradients precomputed in the forward */
  S->head_dx = head && fused ? carve(c, N * C) : NULL;
  S->head_dw = head && fused ? carve(c, V * C) : NULL;
  S->row_targets = head ? (int32_t *)carve(c, N) : NULL;
  /* flash attention's backward scratch; the ring has its own (per block) */
  S->attn_work = d->shard.cp > 1 ? NULL
                                 : carve(c, (size_t)d->B * (uly ? d->lh / d->shard.sp : d->lh) * d->T);
  S->ring_work = d->shard.cp > 1 ? carve(c, loom_ring_attention_work_floats(
                                               d->B, d->T / d->shard.cp, d->lh / d->shard.sp,
                                               d->lkv / d->shard.sp, d->spec.head_dim))
                                 : NULL;
  S->d_qn = d->spec.qk_norm ? carve(c, N * QD) : NULL;
  S->d_kn = d->spec.qk_norm ? carve(c, N * KD) : NULL;
  S->qk_dw = d->spec.qk_norm ? carve(c, 2 * (size_t)d->spec.head_dim) : NULL;
  if (S->moe) dec_moe_plan_scratch(d, c);
  /* the fused head converts its logit gradient to bf16 in place: round_dy never holds it */
  size_t in = maxz(maxz(C, I), QD), out = maxz(maxz(in, KD), head && !fused ? V : 0);
  if (S->moe) { /* the shared expert's down projection in, the router and shared expert out */
    size_t Is = (size_t)d->lis;
    in = maxz(in, Is);
    out = maxz(out, maxz(Is, (size_t)d->spec.moe.experts));
  }
  S->round_x = d->bf16 ? carve(c, N * in) : NULL;
  S->round_dy = d->bf16 ? carve(c, N * out) : NULL;
  S->a2a = uly ? carve(c, 2 * N * QD) : NULL;
}

/* The weight copies bf16 matmuls read (none in fp32; params_lp == params there). */
static void weight_copies(loom_decoder *d) {
  size_t P = d->layout.total;
  /* bf16 weights for native bf16 GEMMs: pages are touched only when first converted, so a
   * ZeRO-3 run (which never uses them) does not hold them */
  if (d->bf16 && loom_gemm_bf16_native()) {
    size_t bytes = (P * sizeof(uint16_t) + 63) & ~(size_t)63;
    d->s->w16 = aligned_alloc(64, bytes ? bytes : 64); /* not zeroed: loom_alloc would touch it */
    if (!d->s->w16) loom_oom(bytes, 1, "bf16 weights of the decoder", __FILE__, __LINE__);
  }
  /* the rounded fp32 copy: the matmuls read it without native bf16 GEMMs; with them nothing
   * does (ZeRO-3 and the vision encoder reserve it themselves) and it is never allocated,
   * except for MoE layers, whose grouped experts multiply bf16 values held in fp32 */
  if (d->bf16 && (!d->s->w16 || loom_model_moe_layers(&d->spec) > 0))
    loom_decoder_params_lp_reserve(d);
}

static void free_weight_copies(loom_decoder *d) {
  if (d->params_lp != d->params) loom_free(d->params_lp);
  d->params_lp = d->bf16 ? NULL : d->params;
  if (d->s && d->s->w16) {
    loom_gemm_weights_release(d->s->w16, d->layout.total * sizeof(uint16_t));
    free(d->s->w16);
    d->s->w16 = NULL;
  }
}

/* The activation slots and scratch in one arena (measured, then carved). */
static void plan_arena(loom_decoder *d) {
  carver c = {NULL, 0};
  plan(d, &c);
  d->arena_bytes = c.used;
  d->arena = loom_alloc(c.used);
  c.base = d->arena;
  c.used = 0;
  plan(d, &c);
}

int loom_decoder_create_shard(loom_decoder **out, const loom_model_spec *spec,
                              const loom_shard *shard, int B, int T, bool bf16, bool recompute,
                              int slots, const loom_comm *tp_comm, const loom_comm *sp_comm,
                              const loom_comm *cp_comm) {
  if (loom_model_spec_check(spec)) return LOOM_ERR;
  if (B < 1 || T < 1) return loom_err("micro-batch shape must be positive, got B=%d T=%d", B, T);
  if (T > spec->max_seq)
    return loom_err("training.seq_len (%d) exceeds model.max_seq (%d); lower seq_len or raise "
                    "max_seq", T, spec->max_seq);
  if (spec->moe.experts > 0 && shard->module != LOOM_MODULE_VISION && shard->seq_parallel)
    return loom_err("the decoder's Mixture-of-Experts layers run without Megatron sequence "
                    "parallelism (every tp rank routes the group's tokens); data, tensor, "
                    "Ulysses and context parallelism, ZeRO, gradient accumulation and "
                    "activation checkpointing work with them");
  loom_decoder *d = loom_calloc(1, sizeof *d);
  LOOM_ASSERT(slots >= 1);
  d->spec = *spec;
  d->shard = *shard;
  d->B = B;
  d->T = T;
  d->bf16 = bf16;
  d->recompute = recompute;
  d->tp_comm = tp_comm;
  d->sp_comm = sp_comm;
  if (d->shard.cp < 1) d->shard.cp = 1, d->shard.cp_rank = 0;
  d->cp_comm = d->shard.cp > 1 ? cp_comm : NULL;
  LOOM_ASSERT(d->shard.cp == 1 || (cp_comm && cp_comm->size == d->shard.cp && T % (2 * d->shard.cp) == 0));
  int tp = shard->tp, sp = shard->sp, cp = d->shard.cp;
  d->N = B * T / sp / cp;
  d->Nr = shard->seq_parallel ? d->N / tp : d->N;
  d->lh = spec->heads / tp;
  d->lkv = spec->kv_heads / tp;
  d->li = spec->intermediate / tp;
  d->lie = spec->moe.intermediate / (shard->experts_over_tp ? 1 : tp); /* whole experts */
  d->lis = spec->moe.shared_intermediate / tp;
  d->vloc = loom_shard_vocab_local(shard, spec);
  d->v0 = shard->tp_rank * d->vloc;
  d->pos0 = shard->sp_rank * (T / sp);
  d->doc_eod = -1;
  loom_param_layout_build_shard(&d->layout, spec, shard);
  size_t P = d->layout.total;
  d->params = loom_alloc(2 * P * sizeof(float));
  d->grads = d->params + P;
  /* bf16: the rounded copy exists only where something reads it (below) */
  d->params_lp = bf16 ? NULL : d->params;
  d->n_slots = slots;
  d->slots = loom_calloc((size_t)slots, sizeof *d->slots);
  int nl = max_chunk_layers(d);
  for (int i = 0; i < slots; i++) {
    d->slots[i].chunk = -1;
    d->slots[i].layer = recompute ? NULL : loom_calloc((size_t)(nl > 0 ? nl : 1), sizeof(loom_layer_acts));
  }
  d->s = loom_calloc(1, sizeof *d->s);
  /* fused head: its softmax statistics are complete on this rank (tp == 1) and one activation
   * slot holds the only micro-batch whose gradient the head precomputes */
  d->s->head_fused = has_head(d) && tp == 1 && slots == 1;
  {
    size_t rows = HEAD_CHUNK_FLOATS / (size_t)(d->vloc > 0 ? d->vloc : 1);
    rows = rows < 64 ? 64 : rows / 64 * 64;
    const char *env = getenv("LOOM_HEAD_ROWS"); /* tests and tuning */
    if (env && atoi(env) > 0) rows = (size_t)atoi(env);
    d->s->head_rows = (int)(rows < (size_t)d->N ? rows : (size_t)d->N);
    env = getenv("LOOM_KEEP_LOGITS");
    d->s->keep_logits = env ? atoi(env) != 0
                            : (size_t)d->N * d->vloc * sizeof(float) <= LOGITS_KEEP_BYTES;
  }
  d->s->epoch = 1;
  d->s->head_guess = true;
  block_offsets *offs = loom_alloc((size_t)(spec->layers > 0 ? spec->layers : 1) * sizeof *offs);
  for (int l = 0; l < spec->layers; l++) offs[l] = loom_block_offsets(d, l);
  d->s->offs = offs; /* from now on loom_block_offsets reads them */
  d->s->moe = dec_moe_state_create(d);
  weight_copies(d);
  plan_arena(d);
  *out = d;
  return 0;
}

int loom_decoder_create(loom_decoder **out, const loom_model_spec *spec, int B, int T,
                        bool bf16, bool recompute) {
  loom_shard sh;
  loom_shard_full(&sh, spec);
  return loom_decoder_create_shard(out, spec, &sh, B, T, bf16, recompute, 1, NULL, NULL, NULL);
}

void loom_decoder_free(loom_decoder *d) {
  if (!d) return;
  free_weight_copies(d);
  loom_free(d->params);
  loom_free(d->arena);
  for (int i = 0; i < d->n_slots; i++) {
    free(d->slots[i].layer);
    free(d->slots[i].seg_lo);
  }
  free(d->slots);
  if (d->s) dec_moe_state_free(d->s->moe), loom_free(d->s->offs);
  free(d->s);
  loom_param_layout_free(&d->layout);
  free(d);
}

loom_acts *loom_decoder_slot_find(loom_decoder *d, int chunk, int mb) {
  for (int i = 0; i < d->n_slots; i++)
    if (d->slots[i].chunk == chunk && d->slots[i].mb == mb) return &d->slots[i];
  return NULL;
}

loom_acts *loom_decoder_slot_get(loom_decoder *d, int chunk, int mb) {
  loom_acts *a = loom_decoder_slot_find(d, chunk, mb);
  if (a) return a;
  for (int i = 0; i < d->n_slots; i++)
    if (d->slots[i].chunk < 0) {
      d->slots[i].chunk = chunk;
      d->slots[i].mb = mb;
      return &d->slots[i];
    }
  loom_panic(__FILE__, __LINE__, "more micro-batches in flight than activation slots planned");
}

void loom_decoder_slot_release(loom_decoder *d, loom_acts *a) {
  (void)d;
  a->chunk = -1;
  a->mb = -1;
}

void loom_decoder_zero_grads(loom_decoder *d) {
  /* in parallel chunks: one thread does not saturate the memory bandwidth */
  size_t n = d->layout.total, ch = (size_t)1 << 20, nch = (n + ch - 1) / ch;
  LOOM_PROF_PUSH(LOOM_PART_ZERO);
#pragma omp parallel for schedule(static) if (nch > 1)
  for (size_t c = 0; c < nch; c++)
    memset(d->grads + c * ch, 0, ((c + 1) * ch < n ? ch : n - c * ch) * sizeof(float));
  LOOM_PROF_POP(0, 4.0 * n); /* written once */
}

void loom_decoder_params_updated(loom_decoder *d) {
  d->s->epoch++; /* the bf16 weight copy is refreshed at its next use */
  /* bf16 parameters: params_lp == params, rounded in place (model.to(bfloat16) of fp32 values
   * loaded or initialised; a no-op after a bf16 optimizer step). A separate rounded copy is
   * rounded now when it exists (ZeRO-3 then keeps it current range by range), else made when
   * first read. */
  if (!d->params_lp) return;
  if (d->bf16) loom_round_bf16_f32(d->params_lp, d->params, d->layout.total);
  d->s->lp_epoch = d->s->epoch;
}

void loom_decoder_params_stepped(loom_decoder *d, bool w16_written) {
  struct loom_decoder_scratch *s = d->s;
  if (d->bf16 && d->params_lp != d->params)
    s->epoch++; /* params_lp stale until loom_decoder_params_lp */
  else
    loom_decoder_params_updated(d);
  if (w16_written) { /* the step wrote bf16(new params): current, but packed copies are not */
    loom_gemm_weights_changed(s->w16, d->layout.total * sizeof(uint16_t));
    s->w16_epoch = s->epoch;
  }
}

uint16_t *loom_decoder_weights16_for_step(loom_decoder *d) {
  struct loom_decoder_scratch *s = d->s;
  return s->w16 && !d->param_hook && s->w16_epoch == s->epoch ? s->w16 : NULL;
}

void loom_decoder_params_lp_reserve(loom_decoder *d) {
  if (d->params_lp || !d->bf16) return;
  d->params_lp = loom_alloc(d->layout.total * sizeof(float));
  loom_round_bf16_f32(d->params_lp, d->params, d->layout.total);
  d->s->lp_epoch = d->s->epoch;
}

const float *loom_decoder_params_lp(loom_decoder *d) {
  if (!d->bf16) return d->params; /* fp32: the parameters themselves */
  loom_decoder_params_lp_reserve(d); /* first read: allocated and rounded now */
  if (d->s->lp_epoch != d->s->epoch) {
    loom_round_bf16_f32(d->params_lp, d->params, d->layout.total);
    d->s->lp_epoch = d->s->epoch;
  }
  return d->params_lp;
}

int loom_decoder_set_bf16(loom_decoder *d, bool bf16) {
  if (d->bf16 == bf16) return 0;
  if (d->param_bf16 || d->param_hook)
    return loom_err("the matmul precision of a decoder with bf16 parameters or managed (ZeRO-3) "
                    "parameters is fixed at its creation");
  for (int i = 0; i < d->n_slots; i++)
    if (d->slots[i].chunk >= 0)
      return loom_err("the matmul precision of a decoder cannot change while activation slot "
                      "%d holds a micro-batch", i);
  free_weight_copies(d);
  loom_free(d->arena);
  d->bf16 = bf16;
  d->params_lp = bf16 ? NULL : d->params;
  d->s->epoch++; /* no copy made before matches the parameters */
  d->s->x16_src = NULL;
  weight_copies(d);
  plan_arena(d);
  return 0;
}

int loom_decoder_set_param_bf16(loom_decoder *d) {
  if (!d->bf16)
    return loom_err("bf16 parameters (training.param_dtype=bf16) need bf16 matmuls "
                    "(training.dtype=bf16)");
  if (d->param_bf16) return 0;
  /* the rounded copy is the parameters themselves */
  if (d->params_lp != d->params) loom_free(d->params_lp);
  d->params_lp = d->params;
  d->param_bf16 = true;
  d->s->epoch++;
  return 0;
}

size_t loom_decoder_param_bytes(const loom_decoder *d) {
  size_t P = d->layout.total, words = d->params_lp && d->params_lp != d->params ? 2 : 1;
  return words * P * sizeof(float) + (d->s->w16 ? P * sizeof(uint16_t) : 0);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

/* Fill this rank's slice of one global matrix: row r of the global tensor comes from the
 * stream (seed, name, r), so the values do not depend on the layout. */
static void init_matrix(float *w, const loom_param *p, uint64_t seed, double std, int real_rows) {
  int rows = p->shape[0], cols = p->shape[1], gcols = p->gshape[1];
  int r0 = p->split_dim == 0 ? p->split_start : 0;
  int c0 = p->split_dim == 1 ? p->split_start : 0;
  uint64_t name_hash = loom_hash64(p->name, strlen(p->name), seed);
  for (int r = 0; r < rows; r++) {
    int gr = r0 + r;
    float *row = w + (size_t)r * cols;
    if (gr >= real_rows) {
      memset(row, 0, (size_t)cols * sizeof(float));
      continue;
    }
    loom_rng rng;
    loom_rng_seed(&rng, name_hash ^ ((uint64_t)gr * 0x9e3779b97f4a7c15ull));
    for (int g = 0; g < gcols; g++) {
      double x = std * loom_rng_normal(&rng);
      if (g >= c0 && g < c0 + cols) row[g - c0] = (float)x;
    }
  }
}

void loom_decoder_init_params(loom_decoder *d, uint64_t seed) {
  const loom_model_spec *s = &d->spec;
  double scaled = s->init_std / sqrt(2.0 * s->layers);
  for (int i = 0; i < d->layout.count; i++) {
    const loom_param *p = &d->layout.params[i];
    float *w = d->params + p->offset;
    if (p->ndim == 1) {
      float v = ends_with(p->name, "norm.weight") ? 1.0f : 0.0f;
      for (size_t j = 0; j < p->numel; j++) w[j] = v;
      continue;
    }
    bool residual_out = ends_with(p->name, "attn.o.weight") || ends_with(p->name, "mlp.down.weight");
    double std = residual_out && s->arch == LOOM_ARCH_GPT2 ? scaled : s->init_std;
    bool vocab = !strcmp(p->name, "embed.weight") || !strcmp(p->name, "lm_head.weight");
    init_matrix(w, p, seed, std, vocab ? s->vocab_size : p->gshape[0]);
  }
  loom_decoder_params_updated(d);
}

void loom_decoder_set_doc_eod(loom_decoder *d, int32_t eod) {
  d->doc_eod = eod < 0 ? -1 : eod;
  size_t BT = (size_t)d->B * d->T;
  for (int i = 0; i < d->n_slots; i++) {
    loom_acts *a = &d->slots[i];
    if (eod < 0 || a->seg_lo) continue;
    a->seg_lo = loom_malloc((3 * BT + (size_t)d->N) * sizeof(int)); /* one block, freed as seg_lo */
    a->seg_hi = a->seg_lo + BT;
    a->doc_pos = a->seg_hi + BT;
    a->row_pos = a->doc_pos + BT;
  }
}

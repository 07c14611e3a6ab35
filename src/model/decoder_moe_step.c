/* The Mixture-of-Experts bookkeeping of the decoder (include/loom/decoder.h, "Mixture-of-
 * Experts"): each micro-batch's router statistics (selections and probabilities pooled over its
 * MoE layers, the z-loss), recorded by the forward of each MoE layer but not by activation
 * checkpointing's second forward, and handed between pipeline stages with the micro-batch
 * (loom_decoder_moe_mb_save/_load); the gradients of the aux and z terms its backward adds; the
 * step's sums (losses, per-layer loads, dropped pairs) and their reduction over the data-
 * parallel ranks; and DeepSeek-V3's auxiliary-loss-free balancing of the router bias after
 * the optimizer step. */
#include <string.h>

#include "loom/kernels_moe.h"
#include "model/decoder_internal.h"

struct loom_moe_mb *dec_moe_plan_mb(const loom_decoder *d, dec_carver *c) {
  size_t E = (size_t)d->spec.moe.experts;
  struct loom_moe_mb *m = dec_carve_bytes(c, sizeof *m);
  int64_t *selected = dec_carve_bytes(c, E * sizeof(int64_t));
  double *prob_sum = dec_carve_bytes(c, E * sizeof(double));
  if (m) *m = (struct loom_moe_mb){selected, prob_sum, 0, 0};
  return m;
}

void dec_moe_mb_reset(loom_decoder *d, loom_acts *a) {
  struct loom_moe_mb *m = a->moe;
  if (!m) return;
  size_t E = (size_t)d->spec.moe.experts;
  memset(m->selected, 0, E * sizeof(int64_t));
  memset(m->prob_sum, 0, E * sizeof(double));
  m->z = 0;
  m->layers = 0;
}

void dec_moe_record(loom_decoder *d, loom_acts *a, int layer, const dec_moe_acts *l) {
  dec_moe_state *st = d->s->moe;
  struct loom_moe_mb *m = a->moe;
  int E = d->spec.moe.experts, N = l->plan.N;
  double lse_sq = 0;
  loom_moe_router_stats_f32(m->selected, m->prob_sum, &lse_sq, l->probs, l->lse, l->idx, N, E,
                            d->spec.moe.top_k);
  m->z += N > 0 ? lse_sq / N : 0; /* Megatron: the mean over the layer's tokens */
  m->layers++;
  if (!st->collecting) return;
  int i = st->index[layer];
  for (int e = 0; e < E; e++) st->load[(size_t)i * E + e] += l->plan.selected[e];
  st->dropped[i] += l->plan.dropped;
}

/* Pipeline hand-over: [selected (E), prob_sum (E), z, layers] as doubles (counts below 2^53
 * are exact) */
size_t loom_decoder_moe_mb_doubles(const loom_decoder *d) {
  return d->s->moe ? 2 * (size_t)d->spec.moe.experts + 2 : 0;
}

void loom_decoder_moe_mb_save(const loom_decoder *d, const loom_acts *a, double *out) {
  const struct loom_moe_mb *m = a->moe;
  if (!m) return;
  size_t E = (size_t)d->spec.moe.experts;
  for (size_t e = 0; e < E; e++) out[e] = (double)m->selected[e], out[E + e] = m->prob_sum[e];
  out[2 * E] = m->z;
  out[2 * E + 1] = m->layers;
}

void loom_decoder_moe_mb_load(const loom_decoder *d, loom_acts *a, const double *in) {
  struct loom_moe_mb *m = a->moe;
  if (!m) return;
  size_t E = (size_t)d->spec.moe.experts;
  for (size_t e = 0; e < E; e++) m->selected[e] = (int64_t)in[e], m->prob_sum[e] = in[E + e];
  m->z = in[2 * E];
  m->layers = (int)in[2 * E + 1];
}

/* Ranks a micro-batch's tokens are split over (Ulysses sp x context parallelism): each routes
 * its own N tokens, and the aux and z terms are those of the whole micro-batch */
static int token_split(const loom_decoder *d) {
  return (d->shard.sp > 1 ? d->shard.sp : 1) * (d->shard.cp > 1 ? d->shard.cp : 1);
}

/* rows pooled by the aux loss of micro-batch m: its tokens (on every rank of the split) in
 * every MoE layer */
static int64_t pooled_rows(const loom_decoder *d, const struct loom_moe_mb *m) {
  return (int64_t)d->N * token_split(d) * m->layers;
}

/* The micro-batch's selections, probabilities and z terms summed over the ranks its tokens
 * are split over (counts below 2^53 are exact in doubles); z, a mean over each layer's tokens,
 * becomes the mean of the ranks' equal-sized means. */
static void pool_split(loom_decoder *d, struct loom_moe_mb *m) {
  int split = token_split(d);
  if (split == 1) return;
  size_t E = (size_t)d->spec.moe.experts;
  double *v = loom_alloc((2 * E + 1) * sizeof(double));
  for (size_t e = 0; e < E; e++) v[e] = (double)m->selected[e], v[E + e] = m->prob_sum[e];
  v[2 * E] = m->z;
  if (d->shard.sp > 1) loom_comm_allreduce_f64(d->sp_comm, v, 2 * E + 1, LOOM_OP_SUM);
  if (d->shard.cp > 1) loom_comm_allreduce_f64(d->cp_comm, v, 2 * E + 1, LOOM_OP_SUM);
  for (size_t e = 0; e < E; e++) m->selected[e] = (int64_t)v[e], m->prob_sum[e] = v[E + e];
  m->z = v[2 * E] / split;
  loom_free(v);
}

void dec_moe_mb_done(loom_decoder *d, loom_acts *a) {
  dec_moe_state *st = d->s->moe;
  struct loom_moe_mb *m = a->moe;
  if (!st->collecting || !m) return;
  pool_split(d, m);
  st->aux_sum += loom_moe_aux_loss(NULL, m->selected, m->prob_sum, d->spec.moe.experts,
                                   pooled_rows(d, m), 1.0);
  st->z_sum += m->z;
  st->mbs++;
}

const double *dec_moe_loss_grads(loom_decoder *d, const loom_acts *a, double *z_grad) {
  dec_moe_state *st = d->s->moe;
  const loom_moe_spec *ms = &d->spec.moe;
  /* each micro-batch's terms weigh 1/micro_batches in the step's objective */
  loom_moe_z_loss(z_grad, 0, (int64_t)d->N * token_split(d), ms->z_loss_coef / st->micro_batches);
  if (!(ms->aux_loss_coef > 0)) return NULL;
  loom_moe_aux_loss(st->aux_grad, a->moe->selected, a->moe->prob_sum, ms->experts,
                    pooled_rows(d, a->moe), ms->aux_loss_coef / st->micro_batches);
  return st->aux_grad;
}

void loom_decoder_moe_begin_step(loom_decoder *d, int micro_batches) {
  dec_moe_state *st = d->s->moe;
  if (!st) return;
  size_t E = (size_t)d->spec.moe.experts;
  st->collecting = true;
  st->micro_batches = micro_batches > 0 ? micro_batches : 1;
  st->aux_sum = st->z_sum = 0;
  st->mbs = 0;
  memset(st->load, 0, (size_t)st->n * E * sizeof(int64_t));
  memset(st->dropped, 0, (size_t)st->n * sizeof(int64_t));
}

/* The step's sums over the data-parallel ranks, or over every replica rank (dp x sp x cp):
 * the loads then count every token once, and the per-micro-batch terms, the same on the ranks
 * of a split, are divided back by it (counts below 2^53 are exact in doubles). */
static void reduce_stats(dec_moe_state *st, int E, const loom_comm *dp, int split,
                         const loom_comm *pp) {
  size_t nl = (size_t)st->n * E, n = 3 + nl + (size_t)st->n;
  double *v = loom_alloc(n * sizeof(double));
  v[0] = st->aux_sum, v[1] = st->z_sum, v[2] = (double)st->mbs;
  for (size_t i = 0; i < nl; i++) v[3 + i] = (double)st->load[i];
  for (int i = 0; i < st->n; i++) v[3 + nl + i] = (double)st->dropped[i];
  if (dp && dp->size > 1) loom_comm_allreduce_f64(dp, v, n, LOOM_OP_SUM);
  v[0] /= split, v[1] /= split, v[2] = (double)((long)v[2] / split);
  /* every layer's loads are on one stage, the per-micro-batch terms on the head stage */
  if (pp && pp->size > 1) loom_comm_allreduce_f64(pp, v, n, LOOM_OP_SUM);
  st->aux_sum = v[0], st->z_sum = v[1], st->mbs = (long)v[2];
  for (size_t i = 0; i < nl; i++) st->load[i] = (int64_t)v[3 + i];
  for (int i = 0; i < st->n; i++) st->dropped[i] = (int64_t)v[3 + nl + i];
  loom_free(v);
}

/* DeepSeek-V3: b_e -= rate * sign(load_e - mean load) (the sign from integers: exact) */
static void update_bias(loom_decoder *d, float *owned, size_t begin, size_t end) {
  dec_moe_state *st = d->s->moe;
  int E = d->spec.moe.experts;
  float rate = (float)d->spec.moe.bias_update_rate;
  for (int i = 0; i < st->n; i++) {
    size_t rb = loom_block_offsets(d, st->layer[i]).rb;
    if (rb == NONE) continue; /* not on this rank */
    const int64_t *load = st->load + (size_t)i * E;
    int64_t total = 0;
    for (int e = 0; e < E; e++) total += load[e];
    for (int e = 0; e < E; e++) {
      size_t flat = rb + (size_t)e;
      if (flat < begin || flat >= end) continue;
      int64_t x = load[e] * E;
      float sign = (float)((x > total) - (x < total));
      float *b = owned + (flat - begin);
      *b = *b - rate * sign;
      if (d->param_bf16) *b = loom_bf16_round(*b);
    }
  }
}

void loom_decoder_moe_end_step(loom_decoder *d, const loom_comm *dp, const loom_comm *pp,
                               float *owned, size_t begin, size_t end) {
  dec_moe_state *st = d->s->moe;
  if (!st) return;
  st->collecting = false;
  if ((dp && dp->size > 1) || (pp && pp->size > 1))
    reduce_stats(st, d->spec.moe.experts, dp, token_split(d), pp);
  st->stats.micro_batches = st->mbs;
  st->stats.aux_loss = st->mbs ? st->aux_sum / (double)st->mbs : 0;
  st->stats.z_loss = st->mbs ? st->z_sum / (double)st->mbs : 0;
  if (d->spec.moe.bias_update_rate > 0) update_bias(d, owned, begin, end);
}

const loom_moe_step_stats *loom_decoder_moe_stats(const loom_decoder *d) {
  static const loom_moe_step_stats dense = {0};
  return d->s->moe ? &d->s->moe->stats : &dense;
}

/* Gradient reduction across the mesh (tensor-parallel replicas under sequence parallelism,
 * tied embeddings across the pipeline, data-parallel replicas with bucketed overlap or ZeRO
 * partitioning), global-norm clipping and AdamW on the owned range. See grad_sync.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loom/grad_sync.h"
#include "loom/kernels.h"

#include "loom/comm_bf16.h"
#include "sync/grad_sync_internal.h"

int loom_gs_layer_of(const char *name) {
  int l;
  return sscanf(name, "layers.%d.", &l) == 1 ? l : -1;
}

static void build_buckets(loom_grad_sync *g, double bucket_mb) {
  loom_decoder *d = g->d;
  const loom_param_layout *lay = &d->layout;
  size_t limit = (size_t)(bucket_mb * 1048576.0 / sizeof(float));
  g->b = loom_calloc((size_t)d->spec.layers + 1, sizeof *g->b);
  int prev = -2;
  for (int i = 0; i < lay->count; i++) {
    int l = g->param_layer[i];
    if (l < 0) continue;
    size_t end = i + 1 < lay->count ? lay->params[i + 1].offset : lay->total;
    bool new_layer = l != prev;
    bucket *cur = g->nb ? &g->b[g->nb - 1] : NULL;
    bool contiguous = cur && prev >= 0 && l == prev + 1;
    if (new_layer && (!cur || !contiguous || cur->end - cur->begin >= limit)) {
      cur = &g->b[g->nb++];
      cur->begin = lay->params[i].offset;
    }
    if (new_layer) {
      cur->remaining++;
      g->layer_bucket[l] = g->nb - 1;
    }
    cur->end = end;
    prev = l;
  }
}

/* n ranks' parts of [0, P): 16-float aligned blocks, the last ones shorter or empty */
static void partition(size_t P, int n, int r, int *counts, size_t *begin, size_t *end) {
  size_t S = ((P + (size_t)n - 1) / (size_t)n + 15) & ~(size_t)15;
  for (int i = 0; i < n; i++) {
    size_t b = (size_t)i * S < P ? (size_t)i * S : P, e = b + S < P ? b + S : P;
    counts[i] = (int)(e - b);
    if (i == r) *begin = b, *end = e;
  }
}

/* Data-parallel reductions in training.reduce_dtype (fp32 or bf16; comm_bf16.c). */
static void dp_allreduce(loom_grad_sync *g, float *x, size_t n) {
  if (g->reduce_bf16) loom_comm_allreduce_bf16(&g->m->grad_comm, x, n);
  else loom_comm_allreduce_f32(&g->m->grad_comm, x, n, LOOM_OP_SUM);
}

static void bucket_start(loom_grad_sync *g, bucket *b) {
  b->started = true;
  float *x = g->d->grads + b->begin;
  if (g->reduce_bf16) loom_comm_iallreduce_bf16(&g->m->grad_comm, x, b->end - b->begin, &b->req, &b->buf16);
  else loom_comm_iallreduce_f32(&g->m->grad_comm, x, b->end - b->begin, &b->req);
}

static void bucket_wait(loom_grad_sync *g, bucket *b) {
  if (g->reduce_bf16) loom_comm_wait_bf16(&b->req, g->d->grads + b->begin, b->end - b->begin, &b->buf16);
  else loom_comm_wait(&b->req);
}

void loom_gs_reduce_scatter_v(loom_grad_sync *g, const float *in, float *out, const int *counts) {
  if (g->reduce_bf16) loom_comm_reduce_scatter_v_bf16(&g->m->grad_comm, in, out, counts);
  else loom_comm_reduce_scatter_v_f32(&g->m->grad_comm, in, out, counts);
}

void loom_grad_sync_set_reduce_bf16(loom_grad_sync *g, bool bf16) { g->reduce_bf16 = bf16; }

int loom_grad_sync_create(loom_grad_sync **out, loom_decoder *d, const loom_mesh *m,
                          const loom_config_parallel *p) {
  loom_grad_sync *g = loom_calloc(1, sizeof *g);
  g->d = d;
  g->m = m;
  g->zero = (int)p->zero;
  g->seqpar = d->shard.seq_parallel && d->shard.tp > 1;
  g->tied_pp = m->pp > 1 && d->spec.tied_embeddings &&
               loom_param_find(&d->layout, "embed.weight") != NULL;
  g->layer_bucket = loom_malloc((size_t)d->spec.layers * sizeof(int));
  for (int l = 0; l < d->spec.layers; l++) g->layer_bucket[l] = -1;
  g->param_layer = loom_malloc((size_t)d->layout.count * sizeof(int));
  for (int i = 0; i < d->layout.count; i++)
    g->param_layer[i] = d->layout.params[i].expert ? LOOM_GS_EXPERT
                                                   : loom_gs_layer_of(d->layout.params[i].name);
  g->xb = g->exb = d->layout.expert_begin, g->xe = g->exe = d->layout.total;
  build_buckets(g, p->bucket_mb);
  int n = m->grad_comm.size, r = m->grad_comm.rank;
  size_t P = g->xb; /* the dense region: everything but this rank's experts */
  g->counts = loom_calloc((size_t)n, sizeof(int));
  if (g->zero > 0) {
    partition(P, n, r, g->counts, &g->own_begin, &g->own_end);
    g->gshard = loom_alloc_for((g->own_end - g->own_begin + 1) * sizeof(float),
                               "this rank's ZeRO gradient shard");
    if (g->zero == 3) loom_z3_setup(g);
  } else {
    g->own_begin = 0;
    g->own_end = P;
  }
  *out = g;
  return 0;
}

void loom_grad_sync_free(loom_grad_sync *g) {
  if (!g) return;
  if (g->zero == 3) loom_z3_free(g);
  free(g->b);
  free(g->layer_bucket);
  free(g->param_layer);
  free(g->counts);
  free(g->ecounts);
  loom_free(g->gshard);
  loom_free(g->gx);
  free(g);
}

int loom_grad_sync_zero(const loom_grad_sync *g) { return g->zero; }

void loom_grad_sync_experts(const loom_grad_sync *g, size_t *begin, size_t *end) {
  *begin = g->xb;
  *end = g->xe;
}

void loom_grad_sync_set_experts(loom_grad_sync *g, const loom_comm *edp) {
  g->edp = edp && edp->size > 1 && g->xb < g->xe ? edp : NULL;
  if (!g->edp || g->zero == 0) return;
  g->ecounts = loom_malloc((size_t)g->edp->size * sizeof(int));
  size_t b = 0, e = 0;
  partition(g->xe - g->xb, g->edp->size, g->edp->rank, g->ecounts, &b, &e);
  g->exb = g->xb + b, g->exe = g->xb + e;
  g->gx = loom_alloc_for((e - b + 1) * sizeof(float), "this rank's share of the experts' "
                                                      "reduced gradients");
}

void loom_grad_sync_experts_owned(const loom_grad_sync *g, size_t *begin, size_t *end) {
  *begin = g->exb;
  *end = g->exe;
}

float *loom_grad_sync_expert_grads(loom_grad_sync *g) {
  return g->gx ? g->gx : g->d->grads + g->xb;
}

bool loom_grad_sync_writes_experts(const loom_grad_sync *g) {
  return g->xb < g->xe && (!g->edp || g->edp->rank == 0);
}

size_t loom_grad_sync_owned_count(const loom_grad_sync *g) {
  return (g->own_end - g->own_begin) + (g->exe - g->exb);
}

/* bf16 runs under ZeRO-3: the rounded copy of the experts (resident, never gathered) */
static void experts_round_lp(loom_grad_sync *g) {
  loom_decoder *d = g->d;
  if (g->xb < g->xe && d->bf16 && d->params_lp && d->params_lp != d->params)
    loom_round_bf16_f32(d->params_lp + g->xb, d->params + g->xb, g->xe - g->xb);
}

void loom_grad_sync_owned(const loom_grad_sync *g, size_t *begin, size_t *end) {
  *begin = g->own_begin;
  *end = g->own_end;
}

static void madvise_release(loom_decoder *d, size_t b, size_t e) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  float *bases[2] = {d->params, d->bf16 ? d->params_lp : NULL};
  for (int i = 0; i < 2 && bases[i]; i++) {
    uintptr_t lo = ((uintptr_t)(bases[i] + b) + page - 1) & ~(page - 1);
    uintptr_t hi = (uintptr_t)(bases[i] + e) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
  }
}

float *loom_grad_sync_owned_params(loom_grad_sync *g) {
  return g->zero == 3 ? g->pshard : g->d->params;
}

void loom_grad_sync_params_loaded(loom_grad_sync *g) {
  if (g->zero != 3) return;
  loom_decoder *d = g->d;
  memcpy(g->pshard, d->params + g->own_begin, (g->own_end - g->own_begin) * sizeof(float));
  /* keep only the owned range: drop everything else until a layer is gathered */
  for (int l = 0; l <= d->spec.layers; l++)
    for (int k = 0; k < g->units[l].nranges; k++)
      madvise_release(d, g->units[l].range[k][0], g->units[l].range[k][1]);
  experts_round_lp(g);
}

float *loom_grad_sync_owned_grads(loom_grad_sync *g) {
  return g->zero > 0 ? g->gshard : g->d->grads;
}

void loom_grad_sync_begin_step(loom_grad_sync *g) {
  for (int i = 0; i < g->nb; i++) g->b[i].started = false;
  for (int l = 0; l < g->d->spec.layers; l++)
    if (g->layer_bucket[l] >= 0) g->b[g->layer_bucket[l]].remaining = 0;
  for (int l = 0; l < g->d->spec.layers; l++)
    if (g->layer_bucket[l] >= 0) g->b[g->layer_bucket[l]].remaining++;
  if (g->gshard) memset(g->gshard, 0, (g->own_end - g->own_begin) * sizeof(float));
}

/* Sum over tp the gradients of tp-replicated tensors of one layer (-1: the non-layer ones),
 * which are partial per rank under sequence parallelism. */
void loom_gs_seqpar_reduce(loom_grad_sync *g, int layer) {
  if (!g->seqpar) return;
  loom_decoder *d = g->d;
  for (int i = 0; i < d->layout.count; i++) {
    const loom_param *p = &d->layout.params[i];
    if (p->seq_partial && g->param_layer[i] == layer)
      loom_comm_allreduce_f32(&g->m->tp_comm, d->grads + p->offset, p->numel, LOOM_OP_SUM);
  }
}

static void tied_reduce(loom_grad_sync *g) {
  if (!g->tied_pp) return;
  const loom_param *p = loom_param_find(&g->d->layout, "embed.weight");
  loom_comm_allreduce_f32(&g->m->embed_comm, g->d->grads + p->offset, p->numel, LOOM_OP_SUM);
}

void loom_grad_sync_layer_done(void *ctx, int layer) {
  loom_grad_sync *g = ctx;
  if (g->zero == 3) return; /* reduced after every micro-batch by the ZeRO-3 hook */
  loom_gs_seqpar_reduce(g, layer);
  if (g->zero > 0) return;
  int bi = g->layer_bucket[layer];
  if (bi < 0) return;
  bucket *b = &g->b[bi];
  if (--b->remaining > 0 || b->started) return;
  bucket_start(g, b);
}

static void reduce_scatter_into_shard(loom_grad_sync *g) {
  const loom_comm *c = &g->m->grad_comm;
  size_t n = g->own_end - g->own_begin;
  float *tmp = g->d->grads + g->own_begin; /* own block of the input is free after the call */
  if (c->size <= 1) {
    for (size_t i = 0; i < n; i++) g->gshard[i] += tmp[i];
    return;
  }
  float *recv = loom_alloc((n + 1) * sizeof(float));
  loom_gs_reduce_scatter_v(g, g->d->grads, recv, g->counts);
  for (size_t i = 0; i < n; i++) g->gshard[i] += recv[i];
  loom_free(recv);
}

void loom_grad_sync_microbatch_done(loom_grad_sync *g) {
  if (g->zero != 2 || g->m->pp > 1) return;
  for (int l = 0; l < g->d->spec.layers; l++)
    if (g->layer_bucket[l] >= 0) loom_gs_seqpar_reduce(g, l);
  loom_gs_seqpar_reduce(g, -1);
  reduce_scatter_into_shard(g);
  if (g->xb < g->xe) /* the experts' gradients accumulate until the end of the step */
    memset(g->d->grads, 0, g->xb * sizeof(float));
  else
    loom_decoder_zero_grads(g->d);
}

/* training.param_dtype=bf16: the reduced gradient of the owned range is stored in bf16 (the
 * reductions themselves sum fp32 values, as FSDP2's reduce_dtype=fp32 and Megatron's fp32
 * main_grad accumulation do). */
static void round_owned_grads(loom_grad_sync *g) {
  if (!g->d->param_bf16) return;
  float *o = g->zero > 0 ? g->gshard : g->d->grads + g->own_begin;
  loom_round_bf16_f32(o, o, g->own_end - g->own_begin);
  float *x = loom_grad_sync_expert_grads(g);
  loom_round_bf16_f32(x, x, g->exe - g->exb);
}

/* The experts' gradients summed over the ranks holding the same experts: in place, or under
 * ZeRO reduce-scattered into this rank's share gx. */
static void experts_reduce(loom_grad_sync *g) {
  if (g->xb == g->xe || !g->edp) return;
  float *x = g->d->grads + g->xb;
  if (g->gx && g->reduce_bf16) loom_comm_reduce_scatter_v_bf16(g->edp, x, g->gx, g->ecounts);
  else if (g->gx) loom_comm_reduce_scatter_v_f32(g->edp, x, g->gx, g->ecounts);
  else if (g->reduce_bf16) loom_comm_allreduce_bf16(g->edp, x, g->xe - g->xb);
  else loom_comm_allreduce_f32(g->edp, x, g->xe - g->xb, LOOM_OP_SUM);
}

static void reduce_all(loom_grad_sync *g);

void loom_grad_sync_reduce(loom_grad_sync *g) {
  reduce_all(g);
  experts_reduce(g);
  round_owned_grads(g);
}

static void reduce_all(loom_grad_sync *g) {
  loom_decoder *d = g->d;
  if (g->zero == 2 && g->m->pp == 1) return; /* done after every micro-batch */
  for (int i = 0; i < g->nb; i++) /* layers whose callback did not run (not expected) */
    if (!g->b[i].started && g->zero == 0 && g->b[i].remaining > 0) {
      for (int l = 0; l < d->spec.layers; l++)
        if (g->layer_bucket[l] == i) loom_gs_seqpar_reduce(g, l);
      bucket_start(g, &g->b[i]);
    }
  loom_gs_seqpar_reduce(g, -1);
  tied_reduce(g);
  if (g->zero == 3) {
    loom_z3_reduce_ends(g);
    return;
  }
  if (g->zero > 0) {
    reduce_scatter_into_shard(g);
    return;
  }
  /* the non-layer tensors: everything of the dense region outside the buckets */
  size_t lo = g->nb ? g->b[0].begin : g->xb, hi = g->nb ? g->b[g->nb - 1].end : g->xb;
  dp_allreduce(g, d->grads, lo);
  if (hi < g->xb) dp_allreduce(g, d->grads + hi, g->xb - hi);
  for (int i = 0; i < g->nb; i++) bucket_wait(g, &g->b[i]);
}

/* Whether tensor i's gradient is counted in the global norm on this rank. */
static bool counted(const loom_grad_sync *g, int i) {
  const loom_param *p = &g->d->layout.params[i];
  if (p->tp_replicated && g->m->tp > 1 && g->m->tp_rank != 0) return false;
  if (g->tied_pp && g->m->pp_rank != 0 && !strcmp(p->name, "embed.weight")) return false;
  return true;
}

/* Visit the part of each tensor inside the owned range: fn(tensor, flat begin, flat end). */
#define FOR_OWNED(g, i, b, e)                                                               \
  for (int i = 0; i < (g)->d->layout.count; i++)                                            \
    for (size_t b = (g)->d->layout.params[i].offset > (g)->own_begin                        \
                        ? (g)->d->layout.params[i].offset : (g)->own_begin,                 \
                e = (g)->d->layout.params[i].offset + (g)->d->layout.params[i].numel <      \
                            (g)->own_end                                                    \
                        ? (g)->d->layout.params[i].offset + (g)->d->layout.params[i].numel \
                        : (g)->own_end,                                                     \
                once = 1;                                                                   \
         once && b < e; once = 0)

static float *owned_grad(loom_grad_sync *g, size_t flat) {
  return g->zero > 0 ? g->gshard + (flat - g->own_begin) : g->d->grads + flat;
}

double loom_grad_sync_global_sumsq(loom_grad_sync *g) {
  double local = 0;
  bool experts = g->xb < g->xe;
  /* without ZeRO every replica holds the reduced dense gradients: counted on the first; with
   * expert parallelism the sum runs over every rank (the experts live on different ranks) */
  bool dense = g->zero > 0 || !experts || g->m->grad_comm.rank == 0;
  FOR_OWNED(g, i, b, e) {
    if (dense && counted(g, i) && !g->d->layout.params[i].frozen)
      local += loom_sumsq_f32(owned_grad(g, b), e - b);
  }
  /* each expert once: its group's first rank, or under ZeRO each rank its share */
  if (g->gx || loom_grad_sync_writes_experts(g)) {
    const float *x = loom_grad_sync_expert_grads(g);
    for (int i = 0; i < g->d->layout.count; i++) {
      const loom_param *p = &g->d->layout.params[i];
      size_t b = p->offset > g->exb ? p->offset : g->exb;
      size_t e = p->offset + p->numel < g->exe ? p->offset + p->numel : g->exe;
      if (p->expert && !p->frozen && b < e) local += loom_sumsq_f32(x + (b - g->exb), e - b);
    }
  }
  const loom_comm *c = g->zero > 0 || experts ? &g->m->world_comm : &g->m->mp_comm;
  loom_comm_allreduce_f64(c, &local, 1, LOOM_OP_SUM);
  return local;
}

double loom_grad_sync_step(loom_grad_sync *g, loom_adamw_state *opt,
                           const loom_config_training *t, double lr) {
  double norm = sqrt(loom_grad_sync_global_sumsq(g));
  loom_grad_sync_step_norm(g, opt, t, lr, norm);
  return norm;
}

/* AdamW on the expert region, in place on every rank of its group (same gradients, same
 * update); its moments follow the owned range's in the optimizer state. */
static void experts_step(loom_grad_sync *g, loom_adamw_state *opt, const loom_config_training *t,
                         double lr, float clip, uint16_t *w16) {
  loom_decoder *d = g->d;
  if (g->xb == g->xe) return;
  loom_adamw_segment seg[d->layout.count > 0 ? d->layout.count : 1];
  int nseg = 0;
  for (int i = 0; i < d->layout.count; i++) {
    const loom_param *p = &d->layout.params[i];
    size_t b = p->offset > g->exb ? p->offset : g->exb;
    size_t e = p->offset + p->numel < g->exe ? p->offset + p->numel : g->exe;
    if (!p->expert || p->frozen || b >= e) continue;
    double wd = (p->decay || t->decay_norms_and_biases) ? t->weight_decay : 0.0;
    seg[nseg++] = (loom_adamw_segment){b, e, wd};
  }
  size_t skip = g->own_end - g->own_begin;
  loom_adamw_state x = *opt; /* the same step count, the moments past the owned range's */
  if (x.m) x.m += skip, x.v += skip;
  if (x.m16) x.m16 += skip, x.v16 += skip;
  x.n = g->exe - g->exb;
  loom_adamw_state_update(&x, d->params + g->exb, loom_grad_sync_expert_grads(g), d->param_bf16,
                          w16 ? w16 + g->exb : NULL, g->exb, seg, nseg, clip, lr, t);
  if (g->gx) /* every rank of the group gets the whole updated experts */
    loom_comm_allgather_v_f32(g->edp, d->params + g->xb, g->ecounts);
}

void loom_grad_sync_step_norm(loom_grad_sync *g, loom_adamw_state *opt,
                              const loom_config_training *t, double lr, double norm) {
  loom_decoder *d = g->d;
  float coef = 1.0f;
  if (t->grad_clip > 0) coef = (float)(t->grad_clip / (norm + 1e-6));
  opt->step++;
  /* one pass of AdamW over the owned range (clipping folded in; bitwise the per-tensor update) */
  loom_adamw_segment seg[d->layout.count > 0 ? d->layout.count : 1];
  int nseg = 0;
  FOR_OWNED(g, i, b, e) {
    const loom_param *p = &d->layout.params[i];
    if (p->frozen) continue;
    double wd = (p->decay || t->decay_norms_and_biases) ? t->weight_decay : 0.0;
    seg[nseg++] = (loom_adamw_segment){b, e, wd};
  }
  float *param = g->zero == 3 ? g->pshard : d->params + g->own_begin;
  /* without ZeRO this rank updates every parameter: the bf16 weights in the same pass */
  uint16_t *w16 = g->zero == 0 ? loom_decoder_weights16_for_step(d) : NULL;
  loom_adamw_state_update(opt, param, owned_grad(g, g->own_begin), d->param_bf16,
                          w16 ? w16 + g->own_begin : NULL, g->own_begin, seg, nseg,
                          coef < 1.0f ? coef : 1.0f, lr, t);
  experts_step(g, opt, t, lr, coef < 1.0f ? coef : 1.0f, w16);
  if (g->zero == 3) { /* gathered layer by layer when next used; the experts are resident */
    experts_round_lp(g);
    return;
  }
  if (g->zero > 0) loom_comm_allgather_v_f32(&g->m->grad_comm, d->params, g->counts);
  loom_decoder_params_stepped(d, w16 != NULL);
}

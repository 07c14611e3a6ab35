/* The Mixture-of-Experts layer in place of a decoder block's MLP (Hugging Face's Qwen2-MoE /
 * Qwen3-MoE / Mixtral sparse block, include/loom/kernels_moe.h), forward and backward, on the
 * MoE kernels: the router is one of the decoder's linear layers (so bf16 runs multiply it as
 * the dense layers do), then softmax and top-k in fp32 (the balancing bias, when the model has
 * one, only for choosing), the dispatch plan (dropless, or the capacity with its drop policy),
 * the gather, every routed expert's SwiGLU as one grouped pass over the expert-major rows
 * (loom_moe_experts_forward_fast_f32: no loop of tiny products), the weighted combine, and the
 * shared expert with its sigmoid gate (decoder linears again).
 * bf16 (training.dtype=bf16): the routed experts run on bf16 values held in fp32 (the gathered
 * rows rounded, the weights from the rounded copy loom_decoder_params_lp) with fp32 products,
 * the numerics of the dense layers' bf16 GEMMs; softmax, combine and the gate stay fp32.
 * The backward reuses the layer's own activations as its scratch where the kernels allow it
 * (the permuted output rows become their gradient, the permuted input rows theirs), so it needs
 * only the router's and the shared expert's gradients besides.
 * Expert parallelism (shard.ep > 1, d->ep_comm; this rank holds only its experts' weights,
 * layout.c): the router and the plan run on this rank's
 * tokens with all E experts; the plan's rows for the El = E/ep experts of each ep rank (a
 * contiguous range, expert-major) go to that rank with one uneven all-to-all (the row counts
 * per expert exchanged first), arriving by source rank, then expert, then token; they are
 * reordered expert-major (expert, source rank, token), run through this rank's experts in one
 * grouped pass, reordered back and returned with a second all-to-all, and combined here. The
 * backward sends the output rows' gradients the same way and returns the input rows'.
 * Shapes: N tokens (rows of the residual stream: no sequence split), E experts, k per token,
 * C hidden, Ie / Is the routed / shared inner size this rank holds (d->lie, d->lis: /tp), R = kept (token, slot) pairs,
 * RL = ep*N*k the most rows this rank's experts may receive. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/comm_ep.h"
#include "loom/kernels.h"
#include "loom/kernels_moe.h"
#include "model/decoder_internal.h"

/* ep ranks the experts are spread over (1: every expert local) */
static int ep_ranks(const loom_decoder *d) { return d->shard.ep > 1 ? d->shard.ep : 1; }

dec_moe_acts *dec_moe_plan_acts(const loom_decoder *d, dec_carver *c, size_t N,
                                loom_moe_plan *cand) {
  const loom_moe_spec *ms = &d->spec.moe;
  size_t E = (size_t)ms->experts, k = (size_t)ms->top_k, C = (size_t)d->spec.hidden;
  size_t Ie = (size_t)d->lie, Is = (size_t)d->lis, NK = N * k;
  size_t P = (size_t)ep_ranks(d), RL = P * NK;
  dec_moe_acts *m = dec_carve_bytes(c, sizeof *m), a;
  memset(&a, 0, sizeof a);
  a.logits = dec_carve(c, N * E);
  a.probs = dec_carve(c, N * E);
  a.lse = dec_carve(c, N);
  a.idx = dec_carve_bytes(c, NK * sizeof(int32_t));
  a.w = dec_carve(c, NK);
  /* the plan's storage (loom_moe_plan_init's, carved); its sorting scratch is cand's */
  loom_moe_plan *p = &a.plan;
  p->max_tokens = (int)N, p->k = (int)k, p->E = (int)E;
  p->selected = dec_carve_bytes(c, E * sizeof(int));
  p->count = dec_carve_bytes(c, E * sizeof(int));
  p->offset = dec_carve_bytes(c, (E + 1) * sizeof(int));
  p->row_token = dec_carve_bytes(c, NK * sizeof(int32_t));
  p->row_pair = dec_carve_bytes(c, NK * sizeof(int32_t));
  p->pair_row = dec_carve_bytes(c, NK * sizeof(int32_t));
  p->scratch = cand->scratch;
  a.xp = dec_carve(c, NK * C);
  a.yp = dec_carve(c, NK * C);
  a.hg = dec_carve(c, RL * Ie); /* the experts' rows: this rank's (RL) with ep */
  a.hu = dec_carve(c, RL * Ie);
  a.act = dec_carve(c, RL * Ie);
  if (P > 1) {
    a.rc = dec_carve_bytes(c, E * sizeof(int));
    a.lcount = dec_carve_bytes(c, E / P * sizeof(int));
    a.xl = dec_carve(c, RL * C);
    a.yl = dec_carve(c, RL * C);
  }
  if (Is) {
    a.sh_g = dec_carve(c, N * Is);
    a.sh_u = dec_carve(c, N * Is);
    a.sh_act = dec_carve(c, N * Is);
    a.sh_y = dec_carve(c, N * C);
    a.sh_s = dec_carve(c, N);
  }
  if (m) *m = a;
  return m;
}

void dec_moe_plan_scratch(loom_decoder *d, dec_carver *c) {
  const loom_moe_spec *ms = &d->spec.moe;
  dec_moe_state *st = d->s->moe;
  size_t N = (size_t)d->N, E = (size_t)ms->experts, k = (size_t)ms->top_k;
  size_t C = (size_t)d->spec.hidden, Is = (size_t)d->lis;
  st->d_logits = dec_carve(c, N * E);
  st->d_w = dec_carve(c, N * k);
  size_t P = (size_t)ep_ranks(d);
  st->work = dec_carve(
      c, loom_moe_experts_work_floats((int)(P * N * k), (int)C, d->lie, d->bf16));
  st->a2a = P > 1 ? dec_carve(c, P * N * k * C) : NULL;
  st->d_sh = Is ? dec_carve(c, N * C + N) : NULL;
  st->d_inner = Is ? dec_carve(c, 3 * N * Is) : NULL;
  st->aux_grad = dec_carve_bytes(c, E * sizeof(double));
}

dec_moe_state *dec_moe_state_create(const loom_decoder *d) {
  const loom_model_spec *s = &d->spec;
  if (s->moe.experts <= 0 || loom_model_moe_layers(s) == 0) return NULL;
  dec_moe_state *m = loom_calloc(1, sizeof *m);
  m->index = loom_alloc((size_t)s->layers * sizeof(int));
  m->layer = loom_alloc((size_t)s->layers * sizeof(int));
  for (int l = 0; l < s->layers; l++) {
    m->index[l] = loom_model_layer_is_moe(s, l) ? m->n : -1;
    if (m->index[l] >= 0) m->layer[m->n++] = l;
  }
  loom_moe_plan_init(&m->cand, d->N, s->moe.top_k, s->moe.experts);
  m->load = loom_calloc((size_t)m->n * s->moe.experts, sizeof(int64_t));
  m->dropped = loom_calloc((size_t)m->n, sizeof(int64_t));
  m->micro_batches = 1;
  m->stats = (loom_moe_step_stats){.layers = m->n,
                                   .experts = s->moe.experts,
                                   .layer = m->layer,
                                   .load = m->load,
                                   .dropped = m->dropped};
  return m;
}

void dec_moe_state_free(dec_moe_state *m) {
  if (!m) return;
  loom_moe_plan_free(&m->cand);
  loom_free(m->index);
  loom_free(m->layer);
  loom_free(m->load);
  loom_free(m->dropped);
  loom_free(m);
}

/* The shared expert's gate, a linear of one output: a dot product per token, in a fixed order
 * (a GEMM of one column may split its sums over threads: oneDNN does, and the bits would
 * depend on the thread count). bf16 runs multiply bf16-rounded operands, as the linears do.
 * s (N) = h (N,C) . w (C) */
static void gate_forward(const loom_decoder *d, float *s, const float *h, const float *w, int N) {
  int C = d->spec.hidden;
  bool r = d->bf16;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= 65536)
  for (int t = 0; t < N; t++) {
    const float *x = h + (size_t)t * C;
    float acc = 0;
    for (int c = 0; c < C; c++)
      acc += (r ? loom_bf16_round(x[c]) * loom_bf16_round(w[c]) : x[c] * w[c]);
    s[t] = acc;
  }
}

/* dh (N,C) += ds w (when dh is given), dw (C) += sum_t ds_t h_t (tokens in order), ds rounded
 * in bf16 runs */
static void gate_backward(const loom_decoder *d, float *dh, float *dw, const float *ds,
                          const float *h, const float *w, int N) {
  int C = d->spec.hidden;
  bool r = d->bf16;
#pragma omp parallel for schedule(static) if (dh && (size_t)N * C >= 65536)
  for (int t = 0; t < (dh ? N : 0); t++) {
    float g = r ? loom_bf16_round(ds[t]) : ds[t];
    float *o = dh + (size_t)t * C;
    for (int c = 0; c < C; c++) o[c] += g * (r ? loom_bf16_round(w[c]) : w[c]);
  }
#pragma omp parallel for schedule(static) if ((size_t)N * C >= 65536)
  for (int c = 0; c < C; c++) {
    float acc = 0;
    for (int t = 0; t < N; t++) {
      float x = h[(size_t)t * C + c];
      acc += (r ? loom_bf16_round(ds[t]) * loom_bf16_round(x) : ds[t] * x);
    }
    dw[c] += acc;
  }
}

/* Tensor parallelism (shard.tp > 1, without Megatron sequence parallelism): every tp rank
 * routes the same tokens with the whole (replicated) router and runs its slice of every
 * expert's inner dimension (Ie/tp, and Is/tp of the shared expert), so its expert and shared
 * outputs are partial sums the block reduces over tp like the dense MLP's. In the backward the
 * quantities the replicated parts need from those outputs (the combine weights' and the shared
 * gate's gradients: dot products with the partial rows) are summed over tp first, and the
 * input gradient of the replicated router and gate is added on tp rank 0 only (the block
 * sums the partial input gradients over tp). */
static bool tp_split(const loom_decoder *d) { return d->shard.tp > 1; }
/* Experts folded on the tp ranks (shard experts_over_tp): the same partial sums, this rank
 * running its E/tp whole experts on their rows of the plan (the others' rows left zero). */
static bool over_tp(const loom_decoder *d) { return d->shard.experts_over_tp && d->shard.tp > 1; }

/* The plan rows [r0, r1) of this rank's experts [e0, e0 + El) when they are folded on tp */
static void local_rows(const loom_decoder *d, const dec_moe_acts *m, int *e0, int *El, size_t *r0,
                       size_t *r1) {
  *El = m->plan.E / d->shard.tp, *e0 = d->shard.tp_rank * *El;
  *r0 = (size_t)m->plan.offset[*e0], *r1 = (size_t)m->plan.offset[*e0 + *El];
}

/* Zero rows [0, r0) and [r1, R) of x (R,C): the rows of experts another rank runs */
static void zero_other_rows(float *x, size_t r0, size_t r1, size_t R, int C) {
  memset(x, 0, r0 * C * sizeof(float));
  memset(x + r1 * C, 0, (R - r1) * C * sizeof(float));
}
static bool tp_follower(const loom_decoder *d) { return d->shard.tp > 1 && d->shard.tp_rank; }

/* The weights the routed experts multiply: fp32, or bf16 values (the rounded copy) */
static const float *expert_weights(loom_decoder *d) {
  return d->bf16 ? loom_decoder_params_lp(d) : d->params;
}

/* ---- expert parallelism: the exchange of permuted rows ------------------------------------ */
static bool ep_active(const loom_decoder *d) { return d->ep_comm && d->ep_comm->size > 1; }

/* Rows to (out: send) and from (in: recv) each ep rank, from the plan and m->rc; v (2P) */
static void ep_rows(const loom_decoder *d, const dec_moe_acts *m, int *out, int *in) {
  int P = d->ep_comm->size, El = m->plan.E / P;
  for (int p = 0; p < P; p++) {
    out[p] = m->plan.offset[(p + 1) * El] - m->plan.offset[p * El];
    in[p] = 0;
    for (int j = 0; j < El; j++) in[p] += m->rc[p * El + j];
  }
}

/* Reorder the received rows between exchange order (source rank, expert, token) and this
 * rank's experts' order (expert, source rank, token): to_local from a to l, else back. */
static void ep_reorder(const loom_decoder *d, const dec_moe_acts *m, float *a, float *l,
                       bool to_local, int C) {
  int P = d->ep_comm->size, El = m->plan.E / P;
  size_t lo = 0;
  for (int j = 0; j < El; j++)
    for (int p = 0; p < P; p++) {
      size_t so = 0; /* the rows from ranks before p, then p's for experts before j */
      for (int q = 0; q < p; q++)
        for (int i = 0; i < El; i++) so += (size_t)m->rc[q * El + i];
      for (int i = 0; i < j; i++) so += (size_t)m->rc[p * El + i];
      size_t n = (size_t)m->rc[p * El + j] * C;
      if (to_local) memcpy(l + lo * C, a + so * C, n * sizeof(float));
      else memcpy(a + so * C, l + lo * C, n * sizeof(float));
      lo += (size_t)m->rc[p * El + j];
    }
}

/* The plan's rows (R,C) of this rank to the experts' ranks, arriving in l (lrows,C) in local
 * expert order (the forward's inputs, the backward's output gradients) */
static void ep_send(loom_decoder *d, dec_moe_acts *m, const float *rows, float *l, int C) {
  int P = d->ep_comm->size;
  int *v = loom_malloc(2 * (size_t)P * sizeof(int));
  ep_rows(d, m, v, v + P);
  float *a = d->s->moe->a2a;
  loom_comm_alltoallv_rows_f32(d->ep_comm, rows, v, a, v + P, (size_t)C);
  ep_reorder(d, m, a, l, true, C);
  free(v);
}

/* The local experts' rows l (lrows,C) back to the ranks they came from, into rows (R,C) in
 * this rank's plan order (the forward's outputs, the backward's input gradients) */
static void ep_return(loom_decoder *d, dec_moe_acts *m, float *l, float *rows, int C) {
  int P = d->ep_comm->size;
  int *v = loom_malloc(2 * (size_t)P * sizeof(int));
  ep_rows(d, m, v, v + P);
  float *a = d->s->moe->a2a;
  ep_reorder(d, m, a, l, false, C);
  loom_comm_alltoallv_rows_f32(d->ep_comm, a, v + P, rows, v, (size_t)C);
  free(v);
}

/* Forward dispatch: the counts per expert exchanged (rc), the plan's rows xp sent to the
 * ranks holding their experts, received rows reordered into xl (lcount per local expert). */
static void ep_dispatch(loom_decoder *d, dec_moe_acts *m, int C) {
  const loom_comm *c = d->ep_comm;
  int P = c->size, El = m->plan.E / P;
  loom_comm_alltoall_i32(c, m->plan.count, m->rc, El);
  m->lrows = 0;
  for (int j = 0; j < El; j++) {
    m->lcount[j] = 0;
    for (int p = 0; p < P; p++) m->lcount[j] += m->rc[p * El + j];
    m->lrows += m->lcount[j];
  }
  ep_send(d, m, m->xp, m->xl, C);
}

void dec_moe_forward(loom_decoder *d, dec_moe_acts *m, const block_offsets *o, const float *h,
                     uint16_t *h16, float *y, int N) {
  const loom_moe_spec *ms = &d->spec.moe;
  int C = d->spec.hidden, E = ms->experts, k = ms->top_k, Ie = d->lie, Is = d->lis;
  /* router: logits (N,E) = h Wr^T; probs, lse, idx, w (N,k) */
  dec_linear_fwd_keep(d, m->logits, h, h16, o->rw, NONE, N, C, E, 0);
  const float *bias = o->rb == NONE ? NULL : d->params + o->rb; /* (E) choosing only */
  loom_moe_router_forward_f32(m->probs, m->lse, m->idx, m->w, m->logits, bias, N, E, k,
                              ms->norm_topk);
  /* the (token, slot) pairs in expert-major order, over capacity dropped */
  int cap = m->dropless ? 0 : loom_moe_capacity(ms->capacity_factor, N, k, E);
  loom_moe_plan_build_f32(&m->plan, m->idx, m->w, N, cap, ms->drop_by_position);
  size_t R = (size_t)m->plan.rows;
  loom_moe_gather_f32(m->xp, h, &m->plan, C); /* xp (R,C) */
  if (d->bf16) loom_round_bf16_f32(m->xp, m->xp, R * C);
  const float *W = expert_weights(d);
  loom_moe_expert_acts ea = {m->hg, m->hu, m->act};
  if (ep_active(d)) {
    int El = E / d->ep_comm->size; /* this rank holds experts [rank*El, (rank+1)*El) only */
    ep_dispatch(d, m, C);
    loom_moe_experts_forward_fast_f32(m->yl, &ea, m->xl, W + o->eg, W + o->eu, W + o->ed,
                                      o->ews, m->lcount, El, C, Ie, d->bf16);
    ep_return(d, m, m->yl, m->yp, C);
  } else if (over_tp(d)) {
    int e0, El;
    size_t r0, r1;
    local_rows(d, m, &e0, &El, &r0, &r1);
    loom_moe_expert_acts la = {m->hg + r0 * Ie, m->hu + r0 * Ie, m->act + r0 * Ie};
    zero_other_rows(m->yp, r0, r1, R, C);
    loom_moe_experts_forward_fast_f32(m->yp + r0 * C, &la, m->xp + r0 * C, W + o->eg,
                                      W + o->eu, W + o->ed, o->ews, m->plan.count + e0, El, C,
                                      Ie, d->bf16);
  } else {
    loom_moe_experts_forward_fast_f32(m->yp, &ea, m->xp, W + o->eg, W + o->eu, W + o->ed,
                                      o->ews, m->plan.count, E, C, Ie, d->bf16);
  }
  loom_moe_combine_f32(y, m->yp, m->w, &m->plan, C); /* y (N,C) = sum_j w_j yp[row of j] */
  if (!Is) return;
  /* shared expert, gated per token: y += sigmoid(h . Wsg) * down(silu(gate h) * up h) */
  gate_forward(d, m->sh_s, h, d->params + o->sgate, N);
  dec_linear_fwd_keep(d, m->sh_g, h, h16, o->sg, NONE, N, C, Is, LIN_SAME_X);
  dec_linear_fwd_keep(d, m->sh_u, h, h16, o->su, NONE, N, C, Is, LIN_SAME_X);
  loom_swiglu_forward_fast_f32(m->sh_act, m->sh_g, m->sh_u, (size_t)N * Is);
  dec_linear_fwd(d, m->sh_y, m->sh_act, o->sd, NONE, N, Is, C);
#pragma omp parallel for schedule(static) if ((size_t)N * C >= 65536)
  for (int t = 0; t < N; t++) {
    float sig = 1.0f / (1.0f + expf(-m->sh_s[t]));
    float *yt = y + (size_t)t * C;
    const float *st = m->sh_y + (size_t)t * C;
    for (int c = 0; c < C; c++) yt[c] += sig * st[c];
  }
}

void dec_moe_backward(loom_decoder *d, dec_moe_acts *m, const block_offsets *o, const float *h,
                      const uint16_t *h16, const float *dy, float *dh, int N,
                      const double *aux_grad, double z_grad) {
  const loom_moe_spec *ms = &d->spec.moe;
  dec_moe_state *st = d->s->moe;
  int C = d->spec.hidden, E = ms->experts, k = ms->top_k, Ie = d->lie, Is = d->lis;
  if (Is) {
    /* y += sig * sh_y: d sh_y = sig dy, d sh_s = <dy, sh_y> sig (1 - sig) */
    float *dshy = st->d_sh, *ds = st->d_sh + (size_t)N * C; // (N,C), (N)
#pragma omp parallel for schedule(static) if ((size_t)N * C >= 65536)
    for (int t = 0; t < N; t++) {
      float sig = 1.0f / (1.0f + expf(-m->sh_s[t])), dot = 0;
      const float *dyt = dy + (size_t)t * C, *sy = m->sh_y + (size_t)t * C;
      float *g = dshy + (size_t)t * C;
      for (int c = 0; c < C; c++) dot += dyt[c] * sy[c], g[c] = sig * dyt[c];
      ds[t] = dot * sig * (1.0f - sig);
    }
    if (tp_split(d)) loom_comm_allreduce_f32(d->tp_comm, ds, (size_t)N, LOOM_OP_SUM);
    size_t NI = (size_t)N * Is;
    float *dact = st->d_inner, *dg = st->d_inner + NI, *du = st->d_inner + 2 * NI; // (N,Is)
    dec_linear_bwd_ex(d, dact, o->sd, NONE, dshy, m->sh_act, N, Is, C, LIN_DX_OVERWRITE);
    loom_swiglu_backward_fast_f32(dg, du, dact, m->sh_g, m->sh_u, NI);
    dec_linear_bwd_kept(d, dh, o->sg, NONE, dg, h, h16, N, C, Is, LIN_DX_OVERWRITE);
    dec_linear_bwd_kept(d, dh, o->su, NONE, du, h, h16, N, C, Is, LIN_SAME_X);
    gate_backward(d, tp_follower(d) ? NULL : dh, d->grads + o->sgate, ds, h,
                  d->params + o->sgate, N);
  } else {
    memset(dh, 0, (size_t)N * C * sizeof(float));
  }
  /* routed experts: the combine's gradient into yp's rows (dyp = w dy, dw = <dy, yp>), the
   * experts' into xp's rows (after their weight gradients), then back to the tokens */
  memset(st->d_w, 0, (size_t)N * k * sizeof(float));
  loom_moe_combine_backward_f32(m->yp, st->d_w, dy, m->yp, m->w, &m->plan, C);
  if (tp_split(d)) loom_comm_allreduce_f32(d->tp_comm, st->d_w, (size_t)N * k, LOOM_OP_SUM);
  const float *W = expert_weights(d);
  float *G = d->grads;
  loom_moe_expert_acts ea = {m->hg, m->hu, m->act};
  if (ep_active(d)) { /* dyp to the experts' ranks (into yl), dxl (in xl) back into xp */
    int El = E / d->ep_comm->size;
    ep_send(d, m, m->yp, m->yl, C);
    loom_moe_experts_backward_fast_f32(m->xl, G + o->eg, G + o->eu, G + o->ed, m->yl, &ea,
                                       m->xl, W + o->eg, W + o->eu, W + o->ed, o->ews,
                                       m->lcount, El, C, Ie, d->bf16, st->work);
    ep_return(d, m, m->xl, m->xp, C);
  } else if (over_tp(d)) { /* this rank's rows; the others' input gradients are zero here */
    int e0, El;
    size_t r0, r1;
    local_rows(d, m, &e0, &El, &r0, &r1);
    loom_moe_expert_acts la = {m->hg + r0 * Ie, m->hu + r0 * Ie, m->act + r0 * Ie};
    loom_moe_experts_backward_fast_f32(m->xp + r0 * C, G + o->eg, G + o->eu, G + o->ed,
                                       m->yp + r0 * C, &la, m->xp + r0 * C, W + o->eg,
                                       W + o->eu, W + o->ed, o->ews, m->plan.count + e0, El, C,
                                       Ie, d->bf16, st->work);
    zero_other_rows(m->xp, r0, r1, (size_t)m->plan.rows, C);
  } else {
    loom_moe_experts_backward_fast_f32(m->xp, G + o->eg, G + o->eu, G + o->ed, m->yp, &ea,
                                       m->xp, W + o->eg, W + o->eu, W + o->ed, o->ews,
                                       m->plan.count, E, C, Ie, d->bf16, st->work);
  }
  loom_moe_gather_backward_f32(dh, m->xp, &m->plan, C);
  /* router: d logits from the weights' gradient and the aux and z terms, then the linear */
  memset(st->d_logits, 0, (size_t)N * E * sizeof(float));
  loom_moe_router_backward_f32(st->d_logits, st->d_w, m->probs, m->lse, m->idx, m->w, aux_grad,
                               z_grad, N, E, k, ms->norm_topk);
  if (tp_follower(d)) /* the weight's gradient only: the input's comes from tp rank 0 */
    dec_linear_bwd_kept(d, d->s->full, o->rw, NONE, st->d_logits, h, h16, N, C, E,
                        LIN_DX_OVERWRITE);
  else
    dec_linear_bwd_kept(d, dh, o->rw, NONE, st->d_logits, h, h16, N, C, E, 0);
}

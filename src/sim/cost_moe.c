/* The MLP of a Mixture-of-Experts layer for one micro-batch on one rank, forward and backward:
 * the router GEMM and its softmax/top-k (with the aux-loss and z-loss passes), the permutation
 * of the routed rows (memory bound), the count exchange and the dispatch all-to-all over the
 * expert-parallel ranks, the expert-tensor-parallel all-gather, the experts' grouped GEMMs
 * (fc1 = gate+up, SwiGLU, fc2) at the per-expert batch the routing gives, the reduce-scatter,
 * the combine all-to-all and the un-permutation (a weighted sum of each token's k rows).
 *
 * Layout (Megatron's parallel folding, docs/SIMULATOR.md "Mixture-of-Experts"): each rank routes
 * its own tokens (the residual rows, or with tp > 1 and no sequence parallelism a 1/tp slice of
 * the replicated rows, all-gathered after the layer), sends each routed row to the ep rank
 * holding its expert (ep stride etp), and the etp ranks of an expert gather each other's rows.
 * The busiest rank receives `load` times the balanced share (the imbalance factor, capped by
 * the capacity factor); its expert GEMMs and all-to-alls take that much longer, and their ops
 * carry that stretch (on time-shared cores the other ranks wait meanwhile: sim_share.c). Dispatch and
 * combine overlap the compute of another micro-batch when the runtime does
 * (sim_ops.a2a_budget, cost_layer.c). */
#include <math.h>

#include "sim/sim_internal.h"

/* loom's CPU executor with tp > 1 (it runs MoE layers without Megatron sequence parallelism):
 * every tp rank routes all N tokens with the replicated router and runs its slice of every
 * expert (etp = tp: Ie/tp) on all their rows, or its E/tp whole experts on their rows of the
 * plan (etp = 1, ep = tp: folded, no all-to-all); the partial outputs are all-reduced over tp,
 * and in the backward the combine weights' gradients (N k) and the input gradient (N C). */
static bool cpu_tp(const loom_sim_ctx *c) { return c->loom_cpu && c->st->tp > 1; }
static bool cpu_fold(const loom_sim_ctx *c) {
  return cpu_tp(c) && sim_etp(c->st) == 1 && sim_ep(c->st) == c->st->tp;
}

double sim_moe_tokens(const loom_sim_ctx *c) {
  return c->st->tp > 1 && !cpu_tp(c) ? c->N / c->st->tp : c->N;
}

double sim_moe_load(const loom_sim_ctx *c) {
  double f = sim_imbalance(c->st), cf = c->spec->moe.capacity_factor;
  return cf > 0 ? fmin(f, cf) : f;
}

double sim_moe_kept(const loom_sim_ctx *c) {
  double cf = c->spec->moe.capacity_factor;
  return cf > 0 ? fmin(1, cf) : 1;
}

double sim_moe_rows(const loom_sim_ctx *c) {
  if (cpu_tp(c)) /* this rank's rows: all of them, or its experts' share when folded */
    return sim_moe_tokens(c) * c->spec->moe.top_k * sim_moe_load(c) /
           (cpu_fold(c) ? c->st->tp : 1);
  return sim_moe_tokens(c) * c->spec->moe.top_k * sim_etp(c->st) * sim_moe_load(c);
}

typedef struct {
  double C, e, t, k, E, rows, lie, local, routed, stretch;
  int ep, etp, eps;
  bool cpu_bf16, unsort;
} moe_shape;

static moe_shape shape_of(const loom_sim_ctx *c) {
  const loom_moe_spec *m = &c->spec->moe;
  moe_shape x;
  x.C = c->spec->hidden;
  x.e = c->act_bytes;
  x.t = sim_moe_tokens(c);
  x.k = m->top_k;
  x.E = m->experts;
  x.ep = sim_ep(c->st);
  x.etp = sim_etp(c->st);
  x.eps = x.etp; /* ep stride */
  x.local = x.E / x.ep;
  x.rows = sim_moe_rows(c);
  x.lie = (double)m->intermediate / x.etp;
  x.routed = x.t * x.k * sim_moe_kept(c); /* rows this rank dispatches */
  x.stretch = sim_moe_load(c) / sim_moe_kept(c);
  x.cpu_bf16 = c->loom_cpu && c->st->dtype == LOOM_DT_BF16;
  if (cpu_tp(c)) { /* no expert-tensor collectives; folded: no all-to-all either */
    x.etp = 1;
    x.ep = cpu_fold(c) ? 1 : x.ep;
    x.eps = c->st->tp; /* ep groups: dp ranks of one tp position */
  }
  x.unsort = x.ep > 1 && x.local > 1; /* (source rank, expert) -> expert-major order */
  return x;
}

/* loom's executor converts each matmul input to bf16 once (as the dense layer) */
static void to_bf16(sim_ops *b, const moe_shape *x, double elements) {
  if (x->cpu_bf16) sim_vec(b, "to bf16", LOOM_VOP_ROUND, elements, 6, 1);
}

static void a2a(sim_ops *b, const moe_shape *x, const char *name, int slot) {
  if (x->ep > 1)
    sim_comm_stretched(b, name, LOOM_COLL_ALLTOALL, x->routed * x->C * x->e, x->eps, x->ep,
                       b->a2a_budget[slot], x->stretch);
}

static void router_forward(sim_ops *b, const moe_shape *x) {
  const loom_moe_spec *m = &b->c->spec->moe;
  const loom_sim_strategy *st = b->c->st;
  to_bf16(b, x, x->t * x->C);
  sim_gemm(b, "router", LOOM_GEMM_FWD, x->t, x->E, x->C, 1);
  /* fp32 logits in, probabilities out, the top k of each row */
  sim_vec(b, "router softmax top-k", LOOM_VOP_SOFTMAX_FWD, x->t * x->E, 8, 6 + log2(x->k + 1));
  if (m->aux_loss_coef > 0) { /* per-expert token counts and mean probabilities */
    sim_vec(b, "aux loss", LOOM_VOP_ADD, x->t * x->E, 4, 2);
    /* Megatron's sequence-level statistics: summed over the tensor-parallel ranks */
    if (st->tp > 1 && !b->c->loom_cpu)
      sim_comm(b, "aux loss all-reduce", LOOM_COLL_ALLREDUCE, x->E * 4, sim_tp_stride(st), st->tp,
               0);
  }
  if (m->z_loss_coef > 0) sim_vec(b, "z loss", LOOM_VOP_ADD, x->t * x->E, 4, 3);
}

void sim_moe_forward(sim_ops *b) {
  const loom_sim_ctx *c = b->c;
  const loom_sim_strategy *st = c->st;
  moe_shape x = shape_of(c);
  bool fp8 = b->fp8;
  b->fp8 = false; /* the router is a plain linear */
  router_forward(b, &x);
  sim_vec(b, "permute", LOOM_VOP_COPY, x.routed * x.C, 2 * x.e, 0);
  if (x.ep > 1) { /* tokens per expert, for the receive sizes */
    sim_comm(b, "ep count exchange", LOOM_COLL_ALLTOALL, x.E * 8, x.eps, x.ep, 0);
    a2a(b, &x, "ep dispatch all-to-all", SIM_A2A_DISPATCH);
  }
  b->stretch = x.stretch; /* the busiest rank's rows, from here to the combine */
  if (x.etp > 1)
    sim_comm(b, "etp all-gather", LOOM_COLL_ALLGATHER, x.rows * x.C * x.e, 1, x.etp, 0);
  if (x.unsort) sim_vec(b, "sort by expert", LOOM_VOP_COPY, x.rows * x.C, 2 * x.e, 0);
  b->fp8 = fp8;
  double per = x.rows / x.local; /* rows into each expert of the busiest rank */
  to_bf16(b, &x, x.rows * x.C);
  sim_grouped_gemm(b, "experts fc1", LOOM_GEMM_FWD, x.local, per, 2 * x.lie, x.C);
  sim_vec(b, "experts swiglu", LOOM_VOP_SWIGLU_FWD, x.rows * x.lie, 3 * x.e, 20);
  to_bf16(b, &x, x.rows * x.lie);
  sim_grouped_gemm(b, "experts fc2", LOOM_GEMM_FWD, x.local, per, x.C, x.lie);
  b->fp8 = false;
  if (x.unsort) sim_vec(b, "unsort", LOOM_VOP_COPY, x.rows * x.C, 2 * x.e, 0);
  if (x.etp > 1)
    sim_comm(b, "etp reduce-scatter", LOOM_COLL_REDUCE_SCATTER, x.rows * x.C * x.e, 1, x.etp, 0);
  b->stretch = 1;
  a2a(b, &x, "ep combine all-to-all", SIM_A2A_COMBINE);
  /* each token's k rows weighted by their probabilities and summed */
  sim_vec(b, "unpermute", LOOM_VOP_ADD, x.routed * x.C, x.e + x.e / x.k + 4, 2);
  if (c->spec->moe.shared_intermediate > 0) { /* sigmoid(x . w) gate of the shared expert */
    sim_gemm(b, "shared expert gate", LOOM_GEMM_FWD, x.t, 1, x.C, 1);
    sim_vec(b, "shared expert gating", LOOM_VOP_ADD, x.t * x.C, 3 * x.e, 3);
  }
  if (cpu_tp(c) && c->spec->moe.shared_intermediate == 0) { /* (else the shared MLP's) */
    sim_comm(b, "tp all-reduce (moe)", LOOM_COLL_ALLREDUCE, c->N * x.C * x.e, sim_tp_stride(st),
             st->tp, 0);
    sim_vec(b, "copy", LOOM_VOP_COPY, c->N * x.C, 2 * x.e, 0);
  } else if (st->tp > 1 && !cpu_tp(c) && !(st->seq_par && st->tp > 1)) /* tp slices together */
    sim_comm(b, "tp all-gather (moe)", LOOM_COLL_ALLGATHER, c->N * x.C * x.e, sim_tp_stride(st),
             st->tp, 0);
  b->fp8 = fp8;
}

void sim_moe_backward(sim_ops *b) {
  const loom_sim_ctx *c = b->c;
  moe_shape x = shape_of(c);
  bool fp8 = b->fp8;
  loom_sim_phase keep = b->phase;
  b->fp8 = false;
  if (c->spec->moe.shared_intermediate > 0) {
    sim_vec(b, "shared expert gating bwd", LOOM_VOP_ADD, x.t * x.C, 4 * x.e, 4);
    sim_gemm(b, "shared expert gate dgrad", LOOM_GEMM_DGRAD, x.t, x.C, 1, 1);
  }
  /* the gradient to each routed row (and each probability's: a dot product per row) */
  sim_vec(b, "unpermute bwd", LOOM_VOP_ADD, x.routed * x.C, 3 * x.e, 2);
  if (cpu_tp(c)) /* the combine weights' gradients: dot products with partial rows */
    sim_comm(b, "tp all-reduce (moe weights)", LOOM_COLL_ALLREDUCE, x.t * x.k * 4,
             sim_tp_stride(c->st), c->st->tp, 0);
  a2a(b, &x, "ep combine all-to-all (bwd)", SIM_A2A_COMBINE_BWD);
  b->stretch = x.stretch; /* the busiest rank's rows, up to the dispatch's backward */
  if (x.etp > 1)
    sim_comm(b, "etp all-gather", LOOM_COLL_ALLGATHER, x.rows * x.C * x.e, 1, x.etp, 0);
  if (x.unsort) sim_vec(b, "unsort bwd", LOOM_VOP_COPY, x.rows * x.C, 2 * x.e, 0);
  b->fp8 = fp8;
  double per = x.rows / x.local;
  to_bf16(b, &x, x.rows * x.C);
  sim_grouped_gemm(b, "experts fc2 dgrad", LOOM_GEMM_DGRAD, x.local, per, x.lie, x.C);
  b->phase = LOOM_PHASE_BWD_W;
  sim_grouped_gemm(b, "experts fc2 wgrad", LOOM_GEMM_WGRAD, x.local, per, x.C, x.lie);
  b->phase = keep;
  sim_vec(b, "experts swiglu bwd", LOOM_VOP_SWIGLU_BWD, x.rows * x.lie, 5 * x.e, 25);
  to_bf16(b, &x, x.rows * 2 * x.lie);
  sim_grouped_gemm(b, "experts fc1 dgrad", LOOM_GEMM_DGRAD, x.local, per, x.C, 2 * x.lie);
  b->phase = LOOM_PHASE_BWD_W;
  sim_grouped_gemm(b, "experts fc1 wgrad", LOOM_GEMM_WGRAD, x.local, per, 2 * x.lie, x.C);
  b->phase = keep;
  b->fp8 = false;
  if (x.unsort) sim_vec(b, "sort bwd", LOOM_VOP_COPY, x.rows * x.C, 2 * x.e, 0);
  if (x.etp > 1)
    sim_comm(b, "etp reduce-scatter", LOOM_COLL_REDUCE_SCATTER, x.rows * x.C * x.e, 1, x.etp, 0);
  b->stretch = 1;
  a2a(b, &x, "ep dispatch all-to-all (bwd)", SIM_A2A_DISPATCH_BWD);
  sim_vec(b, "permute bwd", LOOM_VOP_ADD, x.routed * x.C, 3 * x.e, 1); /* scatter-add */
  sim_vec(b, "router softmax top-k bwd", LOOM_VOP_SOFTMAX_BWD, x.t * x.E, 12, 4);
  to_bf16(b, &x, x.t * x.E);
  sim_gemm(b, "router dgrad", LOOM_GEMM_DGRAD, x.t, x.C, x.E, 1);
  b->phase = LOOM_PHASE_BWD_W;
  sim_gemm(b, "router wgrad", LOOM_GEMM_WGRAD, x.E, x.C, x.t, 1);
  b->phase = keep;
  if (cpu_tp(c) && c->spec->moe.shared_intermediate == 0) /* the partial input gradient */
    sim_comm(b, "tp all-reduce (moe dgrad)", LOOM_COLL_ALLREDUCE, c->N * x.C * x.e,
             sim_tp_stride(c->st), c->st->tp, 0);
  b->fp8 = fp8;
}

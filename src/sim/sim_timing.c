/* Timing of each instruction of the schedule IR on the cost model (the callback of
 * loom_sched_replay_timed): forward/backward of a chunk from the cost of its layers and ends;
 * sends over the pipeline link (asynchronous; the data arrives after the transfer), recvs that
 * wait for it; data-parallel bucket reductions issued as the last backward of a chunk finishes
 * its layers (overlapped on a communication stream when the runtime allows it, else run at
 * reduce-grads); ZeRO reduce-scatter / all-gather; the optimizer step. Each rank keeps the
 * time its communication stream and its outgoing link are free. */
#include <math.h>

#include "sim/sim_internal_run.h"

static double coll(const sim_run *R, loom_coll_kind k, double bytes) {
  const loom_sim_strategy *st = R->c->st;
  return loom_hw_coll_time(R->c->hw, k, bytes, sim_grad_stride(st), sim_grad_size(st));
}

/* the same over the expert-data-parallel replicas of the routed experts (stride ep x etp) */
static double coll_e(const sim_run *R, loom_coll_kind k, double bytes) {
  const loom_sim_strategy *st = R->c->st;
  return loom_hw_coll_time(R->c->hw, k, bytes, sim_ep(st) * sim_etp(st), sim_edp(st));
}

/* the time-sharing the data-parallel (and expert-data-parallel) groups' collectives were timed
 * under, and the pipeline link's (loom_hw_coll_sharing) */
static double share_dp(const sim_run *R) {
  return loom_hw_coll_sharing(R->c->hw, sim_grad_stride(R->c->st), sim_grad_size(R->c->st));
}
static double share_edp(const sim_run *R) {
  const loom_sim_strategy *st = R->c->st;
  return loom_hw_coll_sharing(R->c->hw, sim_ep(st) * sim_etp(st), sim_edp(st));
}
static double share_pp(const sim_run *R) {
  return loom_hw_coll_sharing(R->c->hw, sim_pp_stride(R->c->st), 2);
}

/* bytes a rank sends for a collective, as the trainer counts them (comm.json) */
static void count(sim_run *R, int rank, loom_coll_kind k, double bytes, int p) {
  R->bytes[rank][k] += loom_hw_ring_bytes(k, bytes, p);
}

static void count_cost(sim_run *R, int rank, const loom_sim_cost *c, int phase) {
  for (int k = 0; k < LOOM_COLL_COUNT; k++) R->bytes[rank][k] += c->coll_bytes[phase][k];
}

/* sequence parallelism: the gradients of the tp-replicated tensors (norms, row-parallel
 * biases, positions) are partial per rank and all-reduced over tp once per step */
static double seqpar_bytes(const sim_run *R, int rank, int chunk) {
  const loom_sim_ctx *c = R->c;
  if (!(c->st->seq_par && c->st->tp > 1)) return 0;
  bool gpt2 = c->spec->arch == LOOM_ARCH_GPT2;
  double C = c->spec->hidden, n = 0;
  for (int ch = 0; ch < R->s->vpp; ch++) {
    if (chunk >= 0 && ch != chunk) continue;
    const sim_vstage *v = &R->vs[loom_sched_vstage(R->s, rank, ch)];
    n += v->layers * (gpt2 ? 6 : 2) * C;
    if (chunk < 0 && v->embed && gpt2) n += (double)c->spec->max_seq * C;
    if (chunk < 0 && v->head) n += (gpt2 ? 2 : 1) * C;
  }
  return n * 4;
}

/* loom's ZeRO-1/2 reduce-scatter: a fresh (zeroed) receive buffer for the owned range, then
 * the owned gradient shard accumulates it */
static double shard_update(const sim_run *R, double params, double experts) {
  const loom_sim_ctx *c = R->c;
  double own = ceil(params / sim_grad_size(c->st));
  if (experts > 0) own += ceil(experts / sim_edp(c->st));
  return loom_hw_vop_time(c->hw, c->st->dtype, LOOM_VOP_FAULT, own, 4, 0) +
         loom_hw_vop_time(c->hw, c->st->dtype, LOOM_VOP_ADD, own, 12, 1);
}

static double grad_elem_bytes(const loom_sim_ctx *c) {
  return c->loom_cpu || c->st->dtype == LOOM_DT_FP32 ? 4 : 2;
}

/* Data-parallel buckets of chunk `chunk` whose last backward runs [t0, t1): issued as the
 * layers finish (the backward walks the layers from last to first). Returns how much of them
 * overlaps [t0, t1). Without overlap nothing runs now (reduce-grads runs them). */
static double issue_buckets(sim_run *R, int rank, int chunk, double t0, double t1) {
  const loom_sim_ctx *c = R->c;
  const loom_sim_strategy *st = c->st;
  if (!c->hw->dp_overlap || (sim_grad_size(st) <= 1 && sim_edp(st) <= 1) || st->zero == 3)
    return 0;
  const sim_vstage *v = &R->vs[loom_sched_vstage(R->s, rank, chunk)];
  if (v->layers == 0) return 0;
  double overlap = 0;
  double limit = st->bucket_mb * 1048576.0, gl = v->layer_grad_bytes;
  double ge = v->moe > 0 ? v->expert_grad_bytes / v->moe : 0; /* an MoE layer's experts */
  int per = gl > 0 ? (int)ceil(limit / gl) : v->layers;
  if (per < 1) per = 1;
  loom_coll_kind k = st->zero == 0 ? LOOM_COLL_ALLREDUCE : LOOM_COLL_REDUCE_SCATTER;
  for (int done = 0; done < v->layers; done += per) {
    int n = done + per <= v->layers ? per : v->layers - done;
    double ready = t0 + (t1 - t0) * (double)(done + n) / v->layers;
    double dur = coll(R, k, n * gl);
    count(R, rank, k, n * gl, sim_grad_size(st));
    /* the bucket's routed experts over their own replicas (MoE layers spread evenly) */
    double eb = ge * n * v->moe / v->layers, de = sim_edp(st) > 1 ? coll_e(R, k, eb) : 0;
    if (de > 0) count(R, rank, k, eb, sim_edp(st));
    double s0 = fmax(ready, R->dp_free[rank]);
    R->dp_free[rank] = s0 + dur + de;
    R->hidden[rank] += dur + de;
    overlap += fmax(0, fmin(s0 + dur + de, t1) - s0);
    sim_event_add(R, rank, 1, -1, st->zero == 0 ? "dp all-reduce (bucket)" : "zero reduce-scatter (bucket)",
                  s0, s0 + dur, n * gl);
    if (de > 0)
      sim_event_add(R, rank, 1, -1, st->zero == 0 ? "edp all-reduce (experts)"
                                                  : "edp reduce-scatter (experts)",
                    s0 + dur, s0 + dur + de, eb);
  }
  return overlap;
}

/* reduce-grads on `rank`: what is left of the gradient reduction. loom's executor reduces
 * everything at every reduce-grads instruction (the chunk field is informative); a GPU stack
 * reduces the named chunk. */
static double reduce_grads(sim_run *R, int rank, double start, const loom_instr *in_,
                           double *exposed, double *alone) {
  const loom_sim_ctx *c = R->c;
  const loom_sim_strategy *st = c->st;
  loom_instr all = *in_;
  if (c->loom_cpu) all.chunk = -1;
  const loom_instr *in = &all;
  double gb = grad_elem_bytes(c), t = start, comm = 0, solo = 0; /* solo: comm's alone part */
  double sd = share_dp(R), se = share_edp(R);
  int Nd = sim_grad_size(st);
  double P = R->rank_params[rank], layer_bytes = 0;
  for (int ch = 0; ch < R->s->vpp; ch++)
    if (in->chunk < 0 || in->chunk == ch) layer_bytes += R->vs[loom_sched_vstage(R->s, rank, ch)].grad_bytes;
  double ends_bytes = (in->chunk < 0 ? P * gb : 0) - (in->chunk < 0 ? layer_bytes : 0);
  if (ends_bytes < 0) ends_bytes = 0;
  if (Nd > 1) {
    if (st->zero == 0 || (st->zero <= 2 && !c->loom_cpu)) {
      loom_coll_kind k = st->zero == 0 ? LOOM_COLL_ALLREDUCE : LOOM_COLL_REDUCE_SCATTER;
      if (!c->hw->dp_overlap) { /* the buckets run now, one after the other */
        double d = coll(R, k, layer_bytes);
        count(R, rank, k, layer_bytes, Nd);
        sim_event_add(R, rank, 1, -1, "dp reduction (buckets)", t, t + d, layer_bytes);
        t += d, comm += d, solo += d / sd;
      } else if (R->dp_free[rank] > t) {
        comm += R->dp_free[rank] - t;
        solo += (R->dp_free[rank] - t) / sd;
        t = R->dp_free[rank];
      }
      double d = coll(R, k, ends_bytes);
      count(R, rank, k, ends_bytes, Nd);
      if (d > 0) sim_event_add(R, rank, 1, -1, "dp reduction (embedding, head)", t, t + d, ends_bytes);
      t += d, comm += d, solo += d / sd;
    } else if (st->zero == 3) {
      double d = coll(R, LOOM_COLL_REDUCE_SCATTER, ends_bytes);
      count(R, rank, LOOM_COLL_REDUCE_SCATTER, ends_bytes, Nd);
      if (d > 0) sim_event_add(R, rank, 1, -1, "zero-3 reduce-scatter (ends)", t, t + d, ends_bytes);
      t += d, comm += d, solo += d / sd;
    } else if (!(st->zero == 2 && st->pp == 1)) { /* loom ZeRO-1/2: one reduce-scatter */
      double d = coll(R, LOOM_COLL_REDUCE_SCATTER, P * gb) + shard_update(R, P, 0);
      count(R, rank, LOOM_COLL_REDUCE_SCATTER, P * gb, Nd);
      sim_event_add(R, rank, 1, -1, "zero reduce-scatter", t, t + d, P * gb);
      t += d, comm += d, solo += d / sd;
    }
  }
  /* the routed experts' gradients over their own replicas (edp) */
  double eb = 0;
  for (int ch = 0; ch < R->s->vpp; ch++)
    if (in->chunk < 0 || in->chunk == ch)
      eb += R->vs[loom_sched_vstage(R->s, rank, ch)].expert_grad_bytes;
  bool per_mb = c->loom_cpu && st->zero == 2 && st->pp == 1; /* reduced after every backward */
  if (sim_edp(st) > 1 && eb > 0 && st->zero != 3 && !per_mb) {
    loom_coll_kind k = st->zero == 0 ? LOOM_COLL_ALLREDUCE : LOOM_COLL_REDUCE_SCATTER;
    if (!c->loom_cpu && c->hw->dp_overlap) { /* issued with the buckets */
      if (R->dp_free[rank] > t)
        comm += R->dp_free[rank] - t, solo += (R->dp_free[rank] - t) / se, t = R->dp_free[rank];
    } else {
      bool shard = c->loom_cpu && st->zero > 0;
      double d = coll_e(R, k, eb) + (shard ? shard_update(R, 0, eb / gb) : 0);
      count(R, rank, k, eb, sim_edp(st));
      sim_event_add(R, rank, 1, -1, "edp reduction (experts)", t, t + d, eb);
      t += d, comm += d, solo += d / se;
    }
  }
  double sq = seqpar_bytes(R, rank, in->chunk);
  if (sq > 0) {
    double d = loom_hw_coll_time(c->hw, LOOM_COLL_ALLREDUCE, sq, sim_tp_stride(st), st->tp);
    count(R, rank, LOOM_COLL_ALLREDUCE, sq, st->tp);
    t += d, comm += d, solo += d / loom_hw_coll_sharing(c->hw, sim_tp_stride(st), st->tp);
  }
  /* tied embedding shared by the first and last stage */
  if (st->pp > 1 && c->spec->tied_embeddings && (rank == 0 || rank == st->pp - 1) && in->chunk < 0) {
    double bytes = c->vloc * c->spec->hidden * gb;
    double d = loom_hw_coll_time(c->hw, LOOM_COLL_ALLREDUCE, bytes, sim_pp_stride(st) * (st->pp - 1), 2);
    count(R, rank, LOOM_COLL_ALLREDUCE, bytes, 2);
    sim_event_add(R, rank, 1, -1, "tied embedding all-reduce", t, t + d, bytes);
    t += d, comm += d, solo += d / share_pp(R);
  }
  *exposed = comm;
  *alone = solo;
  return t - start;
}

static double optimizer_step(sim_run *R, int rank, double start, double *exposed,
                             double *alone) {
  const loom_sim_ctx *c = R->c;
  const loom_sim_strategy *st = c->st;
  double P = R->rank_params[rank], Pe = R->rank_experts[rank];
  int Nd = sim_grad_size(st), Ne = sim_edp(st);
  double owned = st->zero > 0 ? ceil(P / Nd) + (Pe > 0 ? ceil(Pe / Ne) : 0) : P + Pe;
  bool e = false, h = false;
  int layers = 0;
  for (int ch = 0; ch < R->s->vpp; ch++) {
    const sim_vstage *x = &R->vs[loom_sched_vstage(R->s, rank, ch)];
    e |= x->embed, h |= x->head, layers += x->layers;
  }
  double t = loom_sim_optimizer_step_time(c, layers, e, h, P + Pe, owned);
  R->opt_time[rank] = t;
  /* the gradient norm: one scalar all-reduce over every rank */
  const loom_hw_tier *last = &c->hw->tier[c->hw->n_tiers - 1];
  double norm = loom_sim_world(st) > 1 ? 2 * ceil(log2(loom_sim_world(st))) * last->latency : 0;
  *exposed = norm;
  *alone = norm / loom_hw_coll_sharing(c->hw, 1, loom_sim_world(st));
  if ((st->zero == 1 || st->zero == 2) && (Nd > 1 || (Ne > 1 && Pe > 0))) {
    double pb = c->loom_cpu ? 4 : (st->dtype == LOOM_DT_FP32 ? 4 : 2);
    double d = coll(R, LOOM_COLL_ALLGATHER, P * pb) + coll_e(R, LOOM_COLL_ALLGATHER, Pe * pb);
    count(R, rank, LOOM_COLL_ALLGATHER, P * pb, Nd);
    if (Pe > 0) count(R, rank, LOOM_COLL_ALLGATHER, Pe * pb, Ne);
    if (c->loom_cpu || !c->hw->dp_overlap) {
      sim_event_add(R, rank, 1, -1, "zero all-gather (params)", start + t + norm, start + t + norm + d, P * pb);
      *exposed += d;
      *alone += d / share_dp(R); /* the experts' part (over edp) taken at the dp group's */
      return t + norm + d;
    }
    R->hidden[rank] += d; /* overlapped with the next step's forward */
    sim_event_add(R, rank, 1, -1, "zero all-gather (params, overlapped)", start + t + norm,
                  start + t + norm + d, P * pb);
  }
  return t + norm;
}

/* The vision encoder's part of a compute instruction of the first virtual stage, on a trace
 * row of its own: it runs before the embedding in the forward and last in the backward (its
 * recomputation included), scaled like the instruction (time-sharing). */
static void vision_span(sim_run *R, int rank, const loom_instr *in, double t0, double t1) {
  const sim_vstage *v = &R->vs[loom_sched_vstage(R->s, rank, in->chunk)];
  bool fwd = in->kind == LOOM_INSTR_FORWARD, w = in->kind == LOOM_INSTR_BACKWARD_WEIGHT;
  bool whole = in->kind == LOOM_INSTR_BACKWARD || R->c->loom_cpu;
  double vt = fwd ? v->vision[LOOM_PHASE_FWD]
              : w ? (R->c->loom_cpu ? 0 : v->vision[LOOM_PHASE_BWD_W])
                  : v->vision[LOOM_PHASE_BWD_IN] + (whole ? v->vision[LOOM_PHASE_BWD_W] : 0);
  double all = fwd ? v->cost.t[LOOM_PHASE_FWD]
               : w ? v->cost.t[LOOM_PHASE_BWD_W]
                   : v->cost.t[LOOM_PHASE_BWD_IN] + (whole ? v->cost.t[LOOM_PHASE_BWD_W] : 0);
  if (!v->embed || !(vt > 0) || !(all > 0)) return;
  double d = fmin(1, vt / all) * (t1 - t0);
  if (fwd) sim_event_add(R, rank, 2, -1, "vision encoder forward", t0, t0 + d, -1);
  else sim_event_add(R, rank, 2, -1, "vision encoder backward", t1 - d, t1, -1);
}

void sim_timing(void *ctx, int rank, int index, const loom_instr *in, loom_sched_timing *t) {
  sim_run *R = ctx;
  const loom_sim_ctx *c = R->c;
  const loom_sim_strategy *st = c->st;
  /* exposed: the collectives' seconds on the compute stream as the profile times them; alone:
   * each over the time-sharing it was timed under (loom_hw_coll_priced) */
  double slow = R->slow[rank][index], start = t->start, exposed = 0, alone = 0, dur = 0;
  switch (in->kind) {
  case LOOM_INSTR_FORWARD: {
    const sim_vstage *v = &R->vs[loom_sched_vstage(R->s, rank, in->chunk)];
    const loom_sim_cost *k = R->paired[rank][index] ? &v->cost : &v->solo;
    dur = k->t[LOOM_PHASE_FWD];
    exposed = k->comm[LOOM_PHASE_FWD];
    alone = k->comm_alone[LOOM_PHASE_FWD];
    R->waiting[rank][index] = dur > 0 ? fmin(1, k->unbalanced[LOOM_PHASE_FWD] / dur) : 0;
    count_cost(R, rank, k, LOOM_PHASE_FWD);
    break;
  }
  case LOOM_INSTR_BACKWARD:
  case LOOM_INSTR_BACKWARD_INPUT:
  case LOOM_INSTR_BACKWARD_WEIGHT: {
    const sim_vstage *v = &R->vs[loom_sched_vstage(R->s, rank, in->chunk)];
    const loom_sim_cost *k = R->paired[rank][index] ? &v->cost : &v->solo;
    bool whole = in->kind == LOOM_INSTR_BACKWARD || c->loom_cpu; /* the CPU executor runs both halves at backward-input */
    double unbalanced;
    if (in->kind == LOOM_INSTR_BACKWARD_WEIGHT) {
      dur = c->loom_cpu ? 0 : k->t[LOOM_PHASE_BWD_W];
      exposed = c->loom_cpu ? 0 : k->comm[LOOM_PHASE_BWD_W];
      alone = c->loom_cpu ? 0 : k->comm_alone[LOOM_PHASE_BWD_W];
      unbalanced = c->loom_cpu ? 0 : k->unbalanced[LOOM_PHASE_BWD_W];
      if (!c->loom_cpu) count_cost(R, rank, k, LOOM_PHASE_BWD_W);
    } else {
      dur = k->t[LOOM_PHASE_BWD_IN] + (whole ? k->t[LOOM_PHASE_BWD_W] : 0);
      exposed = k->comm[LOOM_PHASE_BWD_IN] + (whole ? k->comm[LOOM_PHASE_BWD_W] : 0);
      alone = k->comm_alone[LOOM_PHASE_BWD_IN] + (whole ? k->comm_alone[LOOM_PHASE_BWD_W] : 0);
      unbalanced = k->unbalanced[LOOM_PHASE_BWD_IN] + (whole ? k->unbalanced[LOOM_PHASE_BWD_W] : 0);
      count_cost(R, rank, k, LOOM_PHASE_BWD_IN);
      if (whole) count_cost(R, rank, k, LOOM_PHASE_BWD_W);
      R->flops_rec += k->flops_recompute;
    }
    R->hidden[rank] += k->comm_hidden * (in->kind == LOOM_INSTR_BACKWARD_WEIGHT ? 0 : 1);
    /* loom ZeRO-2 without a pipeline: every micro-batch's gradients are reduce-scattered */
    if (c->loom_cpu && st->zero == 2 && st->pp == 1 && in->chunk == 0 &&
        (sim_grad_size(st) > 1 || sim_edp(st) > 1)) {
      double P = R->rank_params[rank], Pe = R->rank_experts[rank];
      double d = coll(R, LOOM_COLL_REDUCE_SCATTER, P * 4) +
                 coll_e(R, LOOM_COLL_REDUCE_SCATTER, Pe * 4);
      if (sim_grad_size(st) > 1) count(R, rank, LOOM_COLL_REDUCE_SCATTER, P * 4, sim_grad_size(st));
      if (Pe > 0 && sim_edp(st) > 1) count(R, rank, LOOM_COLL_REDUCE_SCATTER, Pe * 4, sim_edp(st));
      d += shard_update(R, P, Pe);
      d += loom_hw_vop_time(c->hw, st->dtype, LOOM_VOP_COPY, P + Pe, 4, 0);
      dur += d, exposed += d, alone += d / share_dp(R);
    }
    R->waiting[rank][index] = dur > 0 ? fmin(1, unbalanced / dur) : 0; /* of the whole of it */
    break;
  }
  case LOOM_INSTR_SEND_ACT:
  case LOOM_INSTR_SEND_GRAD: {
    count(R, rank, LOOM_COLL_SENDRECV, R->msg_bytes, 2);
    if (c->loom_cpu) { /* shared memory: the receiver copies the data when it gets there */
      t->ready = start;
    } else if (!c->hw->p2p_overlap) { /* blocking send: the rank waits for the transfer */
      dur = R->t_p2p;
      exposed = R->t_p2p;
      alone = R->t_p2p / share_pp(R);
      t->ready = start + R->t_p2p * slow;
      sim_event_add(R, rank, 1, index, NULL, start, start + R->t_p2p * slow, R->msg_bytes);
    } else {
      double s0 = fmax(start, R->link_free[rank]);
      R->link_free[rank] = s0 + R->t_p2p;
      t->ready = s0 + R->t_p2p;
      R->hidden[rank] += R->t_p2p;
      sim_event_add(R, rank, 1, index, NULL, s0, s0 + R->t_p2p, R->msg_bytes);
    }
    break;
  }
  case LOOM_INSTR_RECV_ACT:
  case LOOM_INSTR_RECV_GRAD: {
    double arrive = fmax(start, t->arrival);
    double copy = (c->loom_cpu ? loom_hw_coll_priced(R->t_p2p, R->t_p2p / share_pp(R), slow) : 0) +
                  R->t_recv_gather * slow;
    R->t0[rank][index] = arrive;
    R->t1[rank][index] = arrive + copy;
    R->exposed[rank][index] = copy + (c->loom_cpu ? 0 : fmin(arrive - start, R->t_p2p));
    if (copy > 0) sim_event_add(R, rank, 1, index, NULL, arrive, arrive + copy, R->msg_bytes);
    t->end = arrive + copy;
    sim_event_add(R, rank, 0, index, NULL, start, t->end, -1);
    return;
  }
  case LOOM_INSTR_REDUCE_GRADS:
    dur = reduce_grads(R, rank, start, in, &exposed, &alone);
    break;
  case LOOM_INSTR_OPTIMIZER_STEP:
    dur = optimizer_step(R, rank, start, &exposed, &alone);
    break;
  default: /* load, gather-params (ZeRO-3 gathers are costed inside the layers) */
    break;
  }
  /* time-sharing slows the compute by `slow`, and each collective only by what it exceeds the
   * sharing its time was measured under */
  if (exposed > dur) alone *= dur / exposed, exposed = dur;
  double priced = loom_hw_coll_priced(exposed, alone, slow);
  dur = (dur - exposed) * slow + priced;
  R->t0[rank][index] = start;
  R->t1[rank][index] = start + dur;
  R->exposed[rank][index] = priced;
  t->end = start + dur;
  if (sim_is_compute(in->kind)) {
    if (in->kind != LOOM_INSTR_FORWARD && index == R->last_bwd[rank][in->chunk]) {
      /* the buckets' collectives slow the backward they overlap */
      double over = issue_buckets(R, rank, in->chunk, start, start + dur);
      dur += c->hw->overlap_slowdown * over;
      R->t1[rank][index] = start + dur;
      t->end = start + dur;
    }
    R->busy[rank] += dur;
    if (dur > 0) R->pipe_end[rank] = fmax(R->pipe_end[rank], start + dur);
  }
  sim_event_add(R, rank, 0, index, NULL, start, start + dur, -1);
  if (sim_is_compute(in->kind)) {
    vision_span(R, rank, in, start, start + dur);
    sim_trace_a2a(R, rank, index, in, start, start + dur);
  }
}

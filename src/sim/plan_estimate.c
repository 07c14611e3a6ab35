/* The planner's closed-form estimate of one strategy: the slowest pipeline stage per
 * micro-batch times (micro-batches + bubble), pipeline messages, the data-parallel / ZeRO
 * communication left exposed (an MoE model's routed experts over their edp replicas), the
 * optimizer; and the memory of the first pipeline rank (the
 * one with the most micro-batches in flight). Layer/embed/head costs come from the cost model
 * (computed once per tensor/sequence-parallel shape, micro-batch size and recomputation). */
#include <math.h>

#include "sim/plan_internal.h"

/* chunks in flight on pipeline rank 0 (the peak of loom_sched_peak_inflight) */
int plan_inflight(const loom_sim_strategy *st) {
  int p = st->pp, m = st->microbatches, v = st->vpp;
  if (p == 1) return 1;
  if (!strcmp(st->schedule, "gpipe")) return m;
  if (v == 1) return p < m ? p : m;
  int group = m % p == 0 ? p : m; /* the generator's group size (approximately) */
  if (group > p && m < p) group = m;
  long w = (long)(p - 1) * 2 + (long)(v - 1) * (group < p ? group : p) + 1;
  return w < (long)m * v ? (int)w : m * v;
}

double plan_estimate(const loom_sim_ctx *c, const plan_costs *k, plan_eval *out) {
  const loom_sim_strategy *st = c->st;
  const loom_hw_profile *hw = c->hw;
  int L = c->spec->layers, p = st->pp, v = st->vpp, m = st->microbatches;
  int K = p * v;
  double per_chunk = ceil((double)L / K);          /* the largest chunk */
  double stage_layers = ceil((double)L / p);
  /* an MoE model: its MoE layers spread evenly, the rest dense */
  double fm = (double)loom_model_moe_layers(c->spec) / L;
  double lay = fm * (k->layer.t[0] + k->layer.t[1] + k->layer.t[2]) +
               (1 - fm) * (k->dense.t[0] + k->dense.t[1] + k->dense.t[2]);
  /* host dispatch: each chunk's first layer's start-up (loom_sim_cost_of), v chunks per rank */
  double start = v * (k->layer.startup[0] + k->layer.startup[1] + k->layer.startup[2]);
  double head = k->head.t[0] + k->head.t[1] + k->head.t[2];
  double embed = k->embed.t[0] + k->embed.t[1] + k->embed.t[2];
  /* the slowest rank per micro-batch: its layers plus the head (last) or embedding (first) */
  double t_last = (p == 1 ? L : stage_layers) * lay + start + head + (p == 1 ? embed : 0);
  double t_first = stage_layers * lay + start + embed;
  double t_mb = fmax(t_last, t_first);
  double avg = (L * lay + head + embed) / p + start;
  /* pipeline messages on the compute stream: blocking sends (GPU) or receive copies (CPU) */
  double p2p = 0;
  if (p > 1) {
    double rows = c->Nr * c->spec->hidden * c->act_bytes, msg = rows;
    double extra = 0;
    if (!c->loom_cpu && !(st->seq_par && st->tp > 1) && st->tp > 1) {
      msg = rows / st->tp;
      extra = loom_hw_coll_time(hw, LOOM_COLL_ALLGATHER, rows, 1, st->tp);
    }
    double t = loom_hw_coll_time(hw, LOOM_COLL_SENDRECV, msg, sim_pp_stride(st), 2);
    bool blocking = c->loom_cpu || !hw->p2p_overlap;
    p2p = 2.0 * v * ((blocking ? t : 0) + extra); /* per micro-batch: act and grad each way */
  }
  double bubble = p > 1 ? (!strcmp(st->schedule, "interleaved") ? (p - 1.0) / v : p - 1.0) : 0;
  double pipe = m * (t_mb + p2p) + bubble * (avg + p2p);
  /* ZeRO-3: every layer's parameters gathered twice and its gradients scattered, per mb */
  int Nd = sim_grad_size(st);
  double gb = c->loom_cpu || st->dtype == LOOM_DT_FP32 ? 4 : 2;
  double Ple, Pl = loom_sim_layer_params(c->spec, st, fm > 0, &Ple);
  int Ne = sim_edp(st), es = sim_ep(st) * sim_etp(st);
  double z3 = 0;
  if (st->zero == 3 && (Nd > 1 || Ne > 1)) {
    double ag = loom_hw_coll_time(hw, LOOM_COLL_ALLGATHER, Pl * gb, st->tp, Nd) +
                loom_hw_coll_time(hw, LOOM_COLL_ALLGATHER, Ple * gb, es, Ne);
    double rs = loom_hw_coll_time(hw, LOOM_COLL_REDUCE_SCATTER, Pl * gb, st->tp, Nd) +
                loom_hw_coll_time(hw, LOOM_COLL_REDUCE_SCATTER, Ple * gb, es, Ne);
    double per = 2 * ag + rs;
    if (hw->dp_overlap) per = fmax(0, per - lay) + hw->overlap_slowdown * fmin(per, lay);
    z3 = m * stage_layers * per;
  }
  /* data-parallel reduction of the rank's gradients, and the ZeRO parameter gather */
  double Pe, P = loom_sim_rank_params_of(c->spec, st, (int)stage_layers,
                                         (int)lround(stage_layers * fm), p == 1, true, &Pe);
  double dp = 0;
  if ((Nd > 1 || (Ne > 1 && Pe > 0)) && st->zero < 3) {
    loom_coll_kind kind = st->zero == 0 ? LOOM_COLL_ALLREDUCE : LOOM_COLL_REDUCE_SCATTER;
    double red = loom_hw_coll_time(hw, kind, P * gb, st->tp, Nd) +
                 loom_hw_coll_time(hw, kind, Pe * gb, es, Ne);
    if (c->loom_cpu && st->zero == 2 && p == 1) red *= m; /* every micro-batch */
    if (hw->dp_overlap) { /* behind the last micro-batch's backward */
      double window = stage_layers * (k->layer.t[1] + k->layer.t[2]);
      red = fmax(0, red - window) + hw->overlap_slowdown * fmin(red, window);
    }
    double ag = 0;
    if (st->zero >= 1) {
      ag = loom_hw_coll_time(hw, LOOM_COLL_ALLGATHER, P * (c->loom_cpu ? 4 : gb), st->tp, Nd) +
           loom_hw_coll_time(hw, LOOM_COLL_ALLGATHER, Pe * (c->loom_cpu ? 4 : gb), es, Ne);
      if (!c->loom_cpu && hw->dp_overlap) ag = 0;
    }
    dp = red + ag;
  }
  double owned = st->zero > 0 ? ceil(P / Nd) + ceil(Pe / Ne) : P + Pe;
  double opt = loom_sim_optimizer_step_time(c, (int)stage_layers, p == 1, true, P + Pe, owned);
  double total = pipe + z3 + dp + opt;
  if (c->hw->timeshare) { /* ranks beyond the cores share them */
    int world = loom_sim_world(st);
    double share = (double)world / hw->devices_per_node; /* the reductions: loom_hw_coll_priced */
    if (share > 1)
      total = (total - dp) * share +
              loom_hw_coll_priced(dp, dp / loom_hw_coll_sharing(hw, st->tp, Nd), share);
  }
  /* memory of pipeline rank 0 */
  loom_sim_memory mem;
  int inflight = plan_inflight(st);
  loom_sim_memory_rank(c, (int)stage_layers, (int)per_chunk, true, p == 1, inflight, &mem);
  if (p > 1) { /* the last rank holds the head with fewer chunks in flight */
    loom_sim_memory last;
    loom_sim_memory_rank(c, (int)stage_layers, (int)per_chunk, false, true,
                         !strcmp(st->schedule, "gpipe") ? m : (v > 1 ? v : 1), &last);
    if (last.total > mem.total) mem = last;
  }
  out->time = total;
  out->mem = mem.total;
  out->bubble_time = bubble * (avg + p2p);
  out->comm_time = dp + z3 + m * p2p;
  return total;
}

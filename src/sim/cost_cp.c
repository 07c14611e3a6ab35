/* Context parallelism in the cost model: ring attention over the cp ranks (stride tp*sp in the
 * rank order) with causal load balancing, as src/comm/ring_attention.c runs it.
 *
 * With Ulysses (sp > 1) the ring runs in the attention layout: heads/sp over the T/cp tokens
 * of the cp rank's chunks, the same element counts as below (N = B*T/(sp*cp)).
 *
 * The sequence is cut into 2*cp chunks of c = T/(2cp) tokens and cp rank r holds chunks r and
 * 2cp-1-r, so every rank computes exactly 1/cp of the causal (query, key) pairs (sim_attention
 * divides them by cp) in cp steps: its own block (two causal diagonal blocks and one full one)
 * and cp-1 blocks of two full c x c pairs each. Per layer and micro-batch:
 *   forward:  cp-1 hops of the held K and V block (B*T/cp tokens x kv heads x head_dim each),
 *             posted before the step's block attention and waited after it (overlapped);
 *   backward: cp-1 hops of K and V again (overlapped likewise) and cp-1 hops of the dK/dV
 *             accumulators, which start one rank after their block's owner and arrive home
 *             after the last step: a rank waits for the incoming accumulator before computing
 *             on it, so these hops are on the critical path (exposed);
 * a hop is a point-to-point send counted like the trainer's loom_comm_isend_f32
 * (LOOM_COLL_SENDRECV, n bytes). Overlap: with runtime.p2p_overlap a K/V hop's exposed time
 * is max(0, hop - step compute) (plus the profile's overlap_slowdown share of the hidden part,
 * as for every overlapped collective); without it (CPU MPI has no asynchronous progress: the
 * transfer happens in the wait) every hop is exposed. Each block pair's partial output is
 * merged into the running one by its log-sum-exp (2cp+1 block pairs of c tokens per sequence:
 * (2cp+1)/2 x N x QD elements); backward adds each block pair's dq, dk, dv into their sums. */
#include <math.h>

#include "sim/sim_internal.h"

/* one hop of the ring: K and V (or dK and dV) of this rank's B*T/cp tokens, kv heads local to
 * the tp rank */
static double hop_bytes(const loom_sim_ctx *c) {
  return 2 * c->N * c->lkv * c->spec->head_dim * c->act_bytes;
}

/* `hops` equal transfers of `bytes` over the cp ring, each overlapped with `step` seconds of
 * compute when the profile overlaps point-to-point traffic: one op for all of them (their
 * bytes and time summed), split into hidden and exposed parts like sim_comm's */
static void ring(sim_ops *b, const char *name, double bytes, int hops, double step) {
  const loom_sim_ctx *c = b->c;
  int cp = sim_cp(c->st);
  if (hops <= 0) return;
  double one = loom_hw_coll_time(c->hw, LOOM_COLL_SENDRECV, bytes, sim_cp_stride(c->st), cp);
  int at = b->n;
  sim_comm(b, name, LOOM_COLL_SENDRECV, bytes * hops, sim_cp_stride(c->st), cp, 0);
  if (b->n == at) return;
  loom_sim_op *o = &b->ops[at];
  o->time = one * hops;
  if (!c->hw->p2p_overlap || step <= 0) return; /* blocking: all of it on the compute stream */
  double exposed = hops * (fmax(0, one - step) + c->hw->overlap_slowdown * fmin(one, step));
  if (exposed >= o->time) return;
  o->hidden = true;
  if (exposed > 0) { /* the part that sticks out: an exposed op of its own, no bytes */
    sim_comm(b, name, LOOM_COLL_SENDRECV, bytes, sim_cp_stride(c->st), cp, 0);
    loom_sim_op *x = &b->ops[b->n - 1];
    x->hidden = false;
    x->bytes = 0;
    x->time = exposed;
    o->time -= exposed;
  }
}

void sim_cp_attention(sim_ops *b, bool backward) {
  const loom_sim_ctx *c = b->c;
  int cp = sim_cp(c->st);
  if (cp == 1) {
    sim_attention(b, backward);
    return;
  }
  int at = b->n;
  sim_attention(b, backward); /* this rank's 1/cp of the causal pairs */
  double compute = 0;
  for (int i = at; i < b->n; i++) compute += b->ops[i].time;
  double step = compute / cp, pairs = (2.0 * cp + 1) / 2, e = c->act_bytes;
  double qd = c->N * c->lh * c->spec->head_dim, kd = c->N * c->lkv * c->spec->head_dim;
  if (!backward) {
    sim_vec(b, "cp merge", LOOM_VOP_ADD, pairs * qd, 3 * e, 4);
    ring(b, "cp ring k/v", hop_bytes(c), cp - 1, step);
    return;
  }
  sim_vec(b, "cp grad add", LOOM_VOP_ADD, pairs * (qd + 2 * kd), 3 * e, 1);
  ring(b, "cp ring k/v", hop_bytes(c), cp - 1, step);
  ring(b, "cp ring dk/dv", hop_bytes(c), cp - 1, 0);
}

double sim_cp_workspace_bytes(const loom_sim_ctx *c) {
  if (sim_cp(c->st) == 1) return 0;
  /* loom_ring_attention_work_floats: K/V blocks and dK/dV accumulators, two slots each
   * (8 blocks of B*T/cp x kv heads), one chunk's partial output and dq, dk and dv, and three
   * per-head rows of chunk statistics (fp32 on loom's CPU executor, the activation dtype on
   * the GPU engine); heads in the attention layout (Ulysses: heads/sp over T/cp tokens) */
  int sp = c->st->sp > 1 ? c->st->sp : 1;
  double Tl = (double)c->st->seq / sim_cp(c->st), D = c->spec->head_dim;
  double hq = c->lh / sp, hkv = c->lkv / sp, blk = c->st->micro_batch * Tl * hkv * D;
  return (8 * blk + Tl * hq * D + Tl * hkv * D + 1.5 * hq * Tl) * c->act_bytes;
}

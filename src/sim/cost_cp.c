/* Context parallelism in the cost model: ring attention over the cp ranks (stride tp*sp in the
 * rank order) with causal load balancing.
 *
 * The sequence is cut into 2*cp chunks of T/(2cp) tokens and cp rank r holds chunks r and
 * 2cp-1-r, so every rank computes exactly 1/cp of the causal (query, key) pairs (sim_attention
 * divides them by cp): own block 2s^2 + s, every other block 2s^2 (s = T/(2cp) per sequence
 * and head), in cp equal steps of the ring. The ring, per layer and micro-batch:
 *   forward:  cp-1 hops of the rank's K and V block (B*T/cp tokens x kv heads x head_dim
 *             each), each hop overlapped with one step's block attention;
 *   backward: cp-1 hops of K and V again and cp hops of the travelling dK/dV partial sums
 *             (the last one, home to the block's owner, after the last step: nothing to hide
 *             behind);
 * a hop is a point-to-point send counted like the trainer's loom_comm_isend_f32
 * (LOOM_COLL_SENDRECV, n bytes). Overlap: with runtime.p2p_overlap a hop's exposed time is
 * max(0, hop - step compute) (plus the profile's overlap_slowdown of the hidden part, as for
 * every overlapped collective); without it (CPU MPI has no asynchronous progress: the
 * transfer happens in the wait) every hop is exposed. Merging a step's partial output into
 * the running one (online softmax with the log-sum-exp) reads two outputs and writes one,
 * N x QD per step but the first; backward adds each step's dK/dV into the travelling sums. */
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
  double step = compute / cp, qd = c->N * c->lh * c->spec->head_dim;
  double kd = c->N * c->lkv * c->spec->head_dim, e = c->act_bytes;
  if (!backward) {
    sim_vec(b, "cp merge", LOOM_VOP_ADD, qd * (cp - 1), 3 * e, 4);
    ring(b, "cp ring k/v", hop_bytes(c), cp - 1, step);
    return;
  }
  sim_vec(b, "cp dk/dv add", LOOM_VOP_ADD, 2 * kd * (cp - 1), 3 * e, 1);
  /* steps 0..cp-2: the next K/V block and the previous step's dK/dV travel together */
  ring(b, "cp ring k/v", hop_bytes(c), cp - 1, step / 2);
  ring(b, "cp ring dk/dv", hop_bytes(c), cp - 1, step / 2);
  ring(b, "cp ring dk/dv home", hop_bytes(c), 1, 0);
}

double sim_cp_workspace_bytes(const loom_sim_ctx *c) {
  if (sim_cp(c->st) == 1) return 0;
  double kd = c->N * c->lkv * c->spec->head_dim, qd = c->N * c->lh * c->spec->head_dim;
  /* K/V: the block computed on and the one arriving; dK/dV likewise; the running output */
  return (8 * kd + qd) * c->act_bytes;
}

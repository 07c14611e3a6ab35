/* The cost model's op builder: each op gets its FLOPs, bytes and time on the profile as it is
 * added (FP8 linears with their casts, grouped expert GEMMs, collectives stretched by load
 * imbalance), and the attention core per kernel (loom's reference kernel as measured, flash
 * attention at a fraction of the matrix peak, or unfused batched GEMMs with softmax and
 * dropout over the score matrix). */
#include <math.h>

#include "loom/core.h"
#include "sim/sim_internal.h"

void sim_ops_init(sim_ops *b, const loom_sim_ctx *c, loom_sim_op *ops, int cap) {
  b->c = c;
  b->ops = ops;
  b->n = 0;
  b->cap = cap;
  b->phase = LOOM_PHASE_FWD;
  b->stretch = 1;
  b->recompute = false;
  b->vision = false;
  b->module = b->modules = 0;
  b->chained = false;
  b->fp8 = false;
  for (int i = 0; i < 4; i++) b->a2a_budget[i] = 0;
}

void sim_module(sim_ops *b) {
  b->module = ++b->modules;
  b->chained = false;
}

void sim_module_chained(sim_ops *b) {
  sim_module(b);
  b->chained = true;
}

void sim_sync(sim_ops *b, int mark) {
  if (b->n > mark && !b->c->loom_cpu) b->ops[b->n - 1].sync = true;
}

void sim_host(sim_ops *b, int mark, double dtensor, double eager) {
  const loom_hw_profile *hw = b->c->hw;
  if (b->n <= mark || b->c->loom_cpu) return;
  b->ops[mark].host = dtensor * hw->host_dtensor + eager * hw->host_eager;
}

/* The aten ops of one nn.Linear as PyTorch runs it; each goes through the dispatcher on its
 * own (under DTensor each is a DTensor dispatch with its sharding propagation). Forward:
 * at::linear on a 2-D input is aten.t(weight) + aten.addmm (without a bias t + mm, through
 * matmul), on a contiguous 3-D input (batch, tokens, features) also the flattening view and
 * the view of the output (_flatten_nd_linear; matmul's fold: view + _unsafe_view): 2 or 4.
 * Data gradient: autograd's mm_mat1_backward, grad.mm(mat2.t()): t + mm, for a 3-D input also
 * the two views' backwards: 2 or 4. Weight gradient: mm_mat2_backward for mat2 = weight.t()
 * (column-major): grad.t().mm(mat1).t(): t + mm + t, the backward of the forward's aten.t,
 * AccumulateGrad's detach of the new gradient (the first micro-batch's path): 5; a bias adds
 * its gradient's sum over the rows and its AccumulateGrad: 7 (derivatives.yaml, addmm and mm;
 * torch/csrc/autograd/functions/accumulate_grad.h). */
double sim_linear_fwd_ops(bool input_3d) { return input_3d ? 4 : 2; }
double sim_linear_dgrad_ops(bool input_3d) { return input_3d ? 4 : 2; }
double sim_linear_wgrad_ops(bool bias) { return bias ? 7 : 5; }

/* PyTorch eager kernels (HuggingFace modules, runtime.elementwise: eager): the memory traffic
 * per element and the kernel launches of RMSNorm and rotary as their op-by-op code moves
 * them, e = bytes of an activation element. Qwen2RMSNorm.forward (transformers): x.to(fp32)
 * (e + 4), pow(2) (4 + 4), mean(-1) (4), x * rsqrt(var + eps) (4 + 4), .to(bf16) (4 + e),
 * weight * x (e + e) = 5e + 28 bytes in 7 kernels (rsqrt and the eps add are per row); its
 * autograd backward runs each op's backward, reading the saved input and the incoming
 * gradient and writing one gradient: twice the forward's traffic and kernels.
 * apply_rotary_pos_emb_vision (Qwen2.5-VL vision, fp32): q.float() (e + 4), rotate_half's
 * negated half (4 per element) and cat (4 + 4), q * cos (4 + 4 + 4), rotate_half(q) * sin
 * (4 + 4 + 4), the sum (4 + 4 + 4), .to(bf16) (4 + e) = 2e + 56 in 7 kernels; the text
 * decoder's apply_multimodal_rotary_pos_emb in bf16: q * cos (3e), the negated half (e), cat
 * (2e), * sin (3e), the sum (3e) = 12e in 5 kernels. Other kernels (LayerNorm, SwiGLU's two
 * ops, residual adds) move about what the fused ones move. */
static bool eager_vop(const sim_ops *b, loom_vop v, double *bytes, int *kernels) {
  double e = b->c->act_bytes;
  if (!b->c->hw->elementwise_eager || b->c->loom_cpu) return false;
  switch (v) {
  case LOOM_VOP_RMSNORM_FWD: *bytes = 5 * e + 28, *kernels = 7; return true;
  case LOOM_VOP_RMSNORM_BWD: *bytes = 2 * (5 * e + 28), *kernels = 14; return true;
  case LOOM_VOP_ROPE:
    if (b->vision) *bytes = 2 * e + 56, *kernels = 7;
    else *bytes = 12 * e, *kernels = 5;
    return true;
  default: return false;
  }
}

static loom_sim_op *add(sim_ops *b, const char *name, loom_sim_op_type type) {
  LOOM_ASSERT(b->n < b->cap);
  loom_sim_op *o = &b->ops[b->n++];
  memset(o, 0, sizeof *o);
  o->name = name;
  o->type = type;
  o->phase = b->phase;
  o->recompute = b->recompute;
  o->module = b->module;
  o->chained = b->chained;
  o->stretch = b->stretch > 1 ? b->stretch : 1;
  if (!b->c->loom_cpu) o->host = b->c->hw->host_eager; /* one eager op, until sim_host says */
  return o;
}

void sim_host_sync(sim_ops *b, const char *name, double eager) {
  if (b->c->loom_cpu) return;
  loom_sim_op *o = add(b, name, LOOM_OP_VEC);
  o->host = eager * b->c->hw->host_eager;
  o->sync = true;
}

/* FP8 with per-tensor current scaling (Transformer Engine): before a linear's forward and data
 * gradient GEMM its activation operand (m x k: the input, or the incoming gradient) is cast:
 * an amax pass reading it (2 bytes an element), then the cast reading it again and writing the
 * fp8 copy and its transpose for the other GEMM (2 + 1 + 1); the weight gradient reuses them.
 * Weights are cast once a step (loom_sim_optimizer_time). */
static double fp8_cast(sim_ops *b, loom_gemm_role role, double m, double k, double batch) {
  if (!b->fp8 || role == LOOM_GEMM_WGRAD) return 0;
  return sim_vec(b, "fp8 cast", LOOM_VOP_COPY, m * k * batch, 6, 1);
}

double sim_gemm(sim_ops *b, const char *name, loom_gemm_role role, double m, double n, double k,
                double batch) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  fp8_cast(b, role, m, k, batch);
  loom_hw_dtype dt = b->fp8 ? LOOM_DT_FP8 : b->c->st->dtype;
  loom_sim_op *o = add(b, name, LOOM_OP_GEMM);
  o->flops = 2 * m * n * k * batch;
  o->time = loom_hw_gemm_time(b->c->hw, dt, role, m, n, k, batch);
  return o->time;
}

double sim_grouped_gemm(sim_ops *b, const char *name, loom_gemm_role role, double groups,
                        double rows, double n, double k) {
  if (groups <= 0 || rows <= 0 || n <= 0 || k <= 0) return 0;
  if (b->c->loom_cpu) { /* loom's executor: one product per expert */
    if (role == LOOM_GEMM_WGRAD) return sim_gemm(b, name, role, n, k, rows, groups);
    return sim_gemm(b, name, role, rows, n, k, groups);
  }
  fp8_cast(b, role, groups * rows, k, 1);
  loom_hw_dtype dt = b->fp8 ? LOOM_DT_FP8 : b->c->st->dtype;
  loom_sim_op *o = add(b, name, LOOM_OP_GEMM);
  o->flops = 2 * groups * rows * n * k;
  o->time = loom_hw_grouped_gemm_time(b->c->hw, dt, role, groups, rows, n, k);
  return o->time;
}

double sim_vec(sim_ops *b, const char *name, loom_vop v, double elements, double bytes_per_elem,
               double flops_per_elem) {
  if (elements <= 0) return 0;
  loom_sim_op *o = add(b, name, LOOM_OP_VEC);
  int kernels = 1;
  double eager;
  if (eager_vop(b, v, &eager, &kernels)) bytes_per_elem = eager;
  o->bytes = elements * bytes_per_elem;
  o->time = loom_hw_vop_time(b->c->hw, b->c->st->dtype, v, elements, o->bytes,
                             elements * flops_per_elem) +
            (kernels - 1) * b->c->hw->kernel_overhead;
  o->host *= kernels; /* one eager op per kernel (eager norms and rotary: one per op) */
  return o->time;
}

/* The time-sharing a layer's collective meets no more than as timed: where ranks outnumber a
 * node's devices and share them in time (CPU cores under `mpirun --oversubscribe`), a collective
 * of a group holding only some of the node's ranks (tp, cp, sp or ep beside other replicas or
 * stages) waits asleep between its polls (loom_comm_poll naps 200 us when ranks outnumber the
 * cores), and its core-mates outside the group compute meanwhile. It costs the step about its
 * time alone, not that time stretched by the sharing as the compute is: two pairs of ranks on
 * 2 cores, each computing 0.5-2 ms and then all-reducing 0.26 or 1 MB in its pair through
 * loom's calls, added 0.44-1.29x (median 1.07) what one pair alone added per iteration, not 2x
 * (bench/coll_beside_compute.sh; docs/SIMULATOR.md, "A layer's collectives beside other
 * ranks' compute"). A
 * group of every rank of its node has no such compute beside it and keeps the stretch. Returns
 * the ranks per device it is priced as timed under (1: stretched as the compute). */
static double sharing_beside(const loom_sim_ctx *c, int stride, int size) {
  const loom_hw_profile *hw = c->hw;
  int world = loom_sim_world(c->st);
  if (!hw->timeshare || hw->devices_per_node < 1) return 1;
  /* the ranks of a node: the first tier's domain across namespaced nodes, else every rank */
  int per_node = hw->n_tiers > 1 && hw->tier[0].domain > 0 && hw->tier[0].domain < world
                     ? hw->tier[0].domain : world;
  if (per_node <= hw->devices_per_node) return 1;
  long span = (long)stride * size;
  int here = span <= per_node ? size : stride < per_node ? per_node / stride : 1;
  return here < per_node ? (double)per_node / hw->devices_per_node : 1;
}

double sim_comm(sim_ops *b, const char *name, loom_coll_kind kind, double bytes, int stride,
                int size, double budget) {
  return sim_comm_stretched(b, name, kind, bytes, stride, size, budget, 1);
}

double sim_comm_stretched(sim_ops *b, const char *name, loom_coll_kind kind, double bytes,
                          int stride, int size, double budget, double stretch) {
  if (size <= 1 || bytes <= 0) return 0;
  loom_sim_op *o = add(b, name, LOOM_OP_COMM);
  o->coll = kind;
  o->stride = stride;
  o->size = size;
  o->bytes = bytes;
  o->time = loom_hw_coll_time(b->c->hw, kind, bytes * stretch, stride, size);
  o->sharing = fmax(loom_hw_coll_sharing(b->c->hw, stride, size), sharing_beside(b->c, stride, size));
  if (stretch > o->stretch) o->stretch = stretch;
  if (budget > 0) {
    /* overlapped: split into the hidden part and what sticks out of the compute (plus the
     * compute the concurrent collective slows down) */
    double exposed = o->time > budget ? o->time - budget : 0;
    exposed += b->c->hw->overlap_slowdown * fmin(o->time, budget);
    if (exposed < o->time) {
      o->hidden = true;
      if (exposed > 0) { /* the excess is an exposed op of its own */
        loom_sim_op *x = add(b, name, LOOM_OP_COMM);
        *x = *o;
        x->hidden = false;
        x->time = exposed;
        x->bytes = 0;
        x->host = 0; /* issued once */
        b->ops[b->n - 2].time -= exposed;
      }
    }
  }
  return o->time;
}

/* Causal attention of one micro-batch on this rank: heads and sequence in the attention
 * layout (Ulysses: all T tokens, heads/sp). */
void sim_attention(sim_ops *b, bool backward) {
  const loom_sim_ctx *c = b->c;
  const loom_sim_strategy *st = c->st;
  const loom_hw_profile *hw = c->hw;
  double B = st->micro_batch, T = st->seq, D = c->spec->head_dim;
  double heads = c->lh / st->sp;          /* query heads in the attention layout */
  double e = c->act_bytes;
  /* causal (query, key) pairs; context parallelism with causal load balancing gives every
   * cp rank exactly 1/cp of them (src/sim/cost_cp.c) */
  double pairs = B * heads * T * (T + 1) / 2 / sim_cp(st);
  if (hw->attention == LOOM_ATTN_LOOM) {
    /* what the kernel computes: its tile grid over the causal sequence, or with cp its 2 causal
     * diagonal blocks and 2cp-1 full ones of c = T/(2cp) tokens (src/sim/cost_cp.c); each
     * call's query rows once */
    int cp = sim_cp(st);
    double computed = loom_hw_causal_tile_pairs(hw, T), rows = T, c = T / (2.0 * cp);
    if (cp > 1)
      computed = 2 * loom_hw_causal_tile_pairs(hw, c) + (2.0 * cp - 1) * c * c,
      rows = (2.0 * cp + 1) * c;
    loom_sim_op *o = add(b, backward ? "attention bwd" : "attention", LOOM_OP_ATTN);
    o->flops = (backward ? 8 : 4) * pairs * D;
    o->time = loom_hw_loom_attn_time(hw, backward, B * heads * computed, B * heads * rows, D);
    return;
  }
  if (hw->attention == LOOM_ATTN_FLASH) {
    loom_sim_op *o = add(b, backward ? "attention bwd" : "attention", LOOM_OP_ATTN);
    double fwd = 4 * pairs * D; /* QK^T and PV over the causal half */
    double peak = hw->peak_flops[st->dtype] > 0 ? hw->peak_flops[st->dtype] : hw->peak_flops[0];
    o->flops = backward ? 2.5 * fwd : fwd; /* backward recomputes P: 5 matmuls vs 2 */
    o->time = o->flops / (peak * hw->attn_eff) + hw->gemm_overhead;
    return;
  }
  /* unfused (Megatron 2022): full T x T scores, masked softmax, dropout; batched GEMMs, not
   * linears (no FP8) */
  double bh = B * heads, sc = bh * T * T;
  bool fp8 = b->fp8;
  b->fp8 = false;
  if (!backward) {
    sim_gemm(b, "attn scores", LOOM_GEMM_FWD, T, T, D, bh);
    sim_vec(b, "softmax", LOOM_VOP_SOFTMAX_FWD, sc, 2 * e, 5);
    if (st->dropout) sim_vec(b, "attn dropout", LOOM_VOP_DROPOUT, sc, 2 * e + 1, 2);
    sim_gemm(b, "attn values", LOOM_GEMM_FWD, T, D, T, bh);
  } else {
    sim_gemm(b, "attn dV", LOOM_GEMM_WGRAD, T, D, T, bh);
    sim_gemm(b, "attn dP", LOOM_GEMM_DGRAD, T, T, D, bh);
    if (st->dropout) sim_vec(b, "attn dropout bwd", LOOM_VOP_DROPOUT, sc, 2 * e + 1, 2);
    sim_vec(b, "softmax bwd", LOOM_VOP_SOFTMAX_BWD, sc, 3 * e, 4);
    sim_gemm(b, "attn dQ", LOOM_GEMM_DGRAD, T, D, T, bh);
    sim_gemm(b, "attn dK", LOOM_GEMM_WGRAD, T, D, T, bh);
  }
  b->fp8 = fp8;
}

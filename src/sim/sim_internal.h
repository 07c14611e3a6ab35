/* Private to src/sim: the op-list builder the cost model's files share, group placement of
 * the mesh axes (stride and size of each communicator in the rank order), and helpers. */
#ifndef LOOM_SIM_INTERNAL_H
#define LOOM_SIM_INTERNAL_H
#include "loom/sim.h"

typedef struct {
  const loom_sim_ctx *c;
  loom_sim_op *ops;
  int n, cap;
  loom_sim_phase phase; /* phase of the ops added next */
  bool recompute;       /* ops added next are recomputation */
  bool vision;          /* ops added next belong to the vision encoder */
  int module, modules;  /* module of the ops added next (0: none), modules opened so far */
  bool chained;         /* the current module is one of identical copies run back to back */
  bool fp8;             /* GEMMs added next are FP8 linears (Transformer Engine: the layers'
                           linears; not the router, the attention core or the LM head) */
  /* compute each expert all-to-all may hide behind (0: none), by sim_a2a_slot */
  double a2a_budget[4];
  double stretch;       /* ops added next: the busiest rank's work over the mean rank's (1) */
} sim_ops;

/* the expert all-to-alls of one MoE layer: dispatch and combine, forward and backward */
enum { SIM_A2A_DISPATCH = 0, SIM_A2A_COMBINE, SIM_A2A_COMBINE_BWD, SIM_A2A_DISPATCH_BWD };

void sim_ops_init(sim_ops *b, const loom_sim_ctx *c, loom_sim_op *ops, int cap);
/* y (m x n) = x (m x k) @ w: one GEMM `batch` times; returns its time */
double sim_gemm(sim_ops *b, const char *name, loom_gemm_role role, double m, double n, double k,
                double batch);
/* a grouped GEMM (the experts of an MoE layer): `groups` products of rows x n x k, one kernel
 * on the GPU engine (loom_hw_grouped_gemm_time), one GEMM per group on loom's executor */
double sim_grouped_gemm(sim_ops *b, const char *name, loom_gemm_role role, double groups,
                        double rows, double n, double k);
/* a vector kernel over `elements`, with memory traffic bytes_per_elem per element */
double sim_vec(sim_ops *b, const char *name, loom_vop v, double elements, double bytes_per_elem,
               double flops_per_elem);
/* a collective; `budget` > 0: overlapped with that much compute (only the excess is exposed) */
double sim_comm(sim_ops *b, const char *name, loom_coll_kind kind, double bytes, int stride,
                int size, double budget);
/* the same, taking `stretch` times as long as `bytes` take: the busiest rank of an unbalanced
 * exchange (expert all-to-alls under load imbalance; the bytes counted stay the balanced ones) */
double sim_comm_stretched(sim_ops *b, const char *name, loom_coll_kind kind, double bytes,
                          int stride, int size, double budget, double stretch);
/* Host dispatch (runtime.host_dispatch_us). Every op added on the GPU engine costs the host
 * one plain eager op per kernel it launches; sim_host sets the host cost of the op added at
 * index `mark` or later (b->n before the call that added it; nothing when no op was added) to
 * `dtensor` ops through DTensor's dispatcher and `eager` plain ones. sim_module starts a new
 * module: the ops until the next call run between two host synchronisations, replayed as an
 * issue queue (loom_sim_module_time, loom_sim_cost_of). */
void sim_host(sim_ops *b, int mark, double dtensor, double eager);
void sim_module(sim_ops *b);
/* a module that is one of identical copies issued back to back with no synchronisation between
 * them (a stage's text layers): per copy the queue's steady state (loom_sim_cost_of) */
void sim_module_chained(sim_ops *b);
/* the op added at `mark` or later (the last one) is followed by a host synchronisation: the
 * CPU waits for the device there (GPU engine only; nothing when no op was added) */
void sim_sync(sim_ops *b, int mark);
/* a host synchronisation of its own: `eager` plain ops whose last reads a device value back
 * (.item()); no device time (GPU engine only) */
void sim_host_sync(sim_ops *b, const char *name, double eager);
/* aten ops a PyTorch nn.Linear issues (F.linear; autograd's addmm/mm backward; AccumulateGrad),
 * each through DTensor's dispatcher when the linear is tensor-parallel under DTensor:
 * forward, data gradient, weight gradient (with the bias gradient and the accumulations) */
double sim_linear_fwd_ops(bool input_3d);
double sim_linear_dgrad_ops(bool input_3d);
double sim_linear_wgrad_ops(bool bias);
/* attention core forward or backward (by the profile's kernel) */
void sim_attention(sim_ops *b, bool backward);
/* the vision encoder of a vision-language model (first stage), forward and backward */
void sim_vision_ops(sim_ops *b);

/* The MLP of an MoE layer (src/sim/cost_moe.c), forward or backward, after the second norm:
 * router, routing, permutation, the count exchange and the dispatch all-to-all over the ep
 * ranks, the etp all-gather, the experts' grouped GEMMs, the etp reduce-scatter, the combine
 * all-to-all and the un-permutation (the shared expert is the caller's dense MLP). */
void sim_moe_forward(sim_ops *b);
void sim_moe_backward(sim_ops *b);
/* tokens this rank routes per MoE layer and micro-batch, and rows into its experts on the
 * busiest rank (tokens x k x etp x load) */
double sim_moe_tokens(const loom_sim_ctx *c);
double sim_moe_rows(const loom_sim_ctx *c);
/* the busiest rank's tokens over the balanced share: the imbalance factor, at most the
 * capacity factor (dropped tokens); the share of the tokens that are dispatched at all */
double sim_moe_load(const loom_sim_ctx *c);
double sim_moe_kept(const loom_sim_ctx *c);

/* communicator placement: (stride, size) of the groups in the rank order
 * rank = (((pp_rank * dp + dp_rank) * cp + cp_rank) * sp + sp_rank) * tp + tp_rank */
static inline int sim_cp(const loom_sim_strategy *s) { return s->cp > 1 ? s->cp : 1; }
static inline int sim_tp_stride(const loom_sim_strategy *s) { (void)s; return 1; }
static inline int sim_sp_stride(const loom_sim_strategy *s) { return s->tp; }
static inline int sim_cp_stride(const loom_sim_strategy *s) { return s->tp * s->sp; }
static inline int sim_grad_stride(const loom_sim_strategy *s) { return s->tp; } /* dp x cp x sp */
static inline int sim_grad_size(const loom_sim_strategy *s) { return s->dp * sim_cp(s) * s->sp; }
static inline int sim_pp_stride(const loom_sim_strategy *s) {
  return s->tp * s->sp * sim_cp(s) * s->dp;
}
/* ranks of one pipeline stage: dp x cp x sp x tp */
static inline int sim_stage_ranks(const loom_sim_strategy *s) { return sim_pp_stride(s); }
/* expert parallelism (0 in a hand-built strategy: none; etp 0: tp), the expert groups on a
 * stage's ranks (Megatron's folding: etp stride 1, ep stride etp, edp stride etp*ep) and the
 * load factor of the busiest rank (0: balanced) */
static inline int sim_ep(const loom_sim_strategy *s) { return s->ep > 1 ? s->ep : 1; }
static inline int sim_etp(const loom_sim_strategy *s) { return s->etp > 0 ? s->etp : s->tp; }
static inline int sim_edp(const loom_sim_strategy *s) {
  int g = sim_ep(s) * sim_etp(s), S = sim_stage_ranks(s);
  return g > 0 && S % g == 0 ? S / g : 1;
}
static inline double sim_imbalance(const loom_sim_strategy *s) {
  return s->moe_imbalance >= 1 ? s->moe_imbalance : 1;
}
/* attention core with context parallelism (src/sim/cost_cp.c): the ring's K/V (and, backward,
 * dK/dV) transfers overlapped with the block computations; sim_attention when cp = 1 */
void sim_cp_attention(sim_ops *b, bool backward);
/* the ring's buffers on one rank (bytes; 0 without cp) */
double sim_cp_workspace_bytes(const loom_sim_ctx *c);

/* layers of each virtual stage (pp*vpp + 1 entries: first[v], first[K] = layers) */
int sim_stage_split(const loom_sim_strategy *st, int layers, int *first);

/* The peak MFU and HFU are taken against (FLOP/s, all `devices` together), the trainer's
 * (loom_mfu_peak_hw): a CPU profile's devices are its cores, one thread each, so `devices`
 * threads' instruction peak where the profile has one (not `devices` x one thread's: cores
 * share caches and AMX units), else `devices` x the one-core GEMM figure; an accelerator's
 * matrix peak x devices. src (may be NULL) gets the peak's name and source. */
double sim_mfu_peak(const loom_sim_ctx *c, double devices, loom_mfu_source *src);
#endif

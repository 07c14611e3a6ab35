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
} sim_ops;

void sim_ops_init(sim_ops *b, const loom_sim_ctx *c, loom_sim_op *ops, int cap);
/* y (m x n) = x (m x k) @ w: one GEMM `batch` times; returns its time */
double sim_gemm(sim_ops *b, const char *name, loom_gemm_role role, double m, double n, double k,
                double batch);
/* a vector kernel over `elements`, with memory traffic bytes_per_elem per element */
double sim_vec(sim_ops *b, const char *name, loom_vop v, double elements, double bytes_per_elem,
               double flops_per_elem);
/* a collective; `budget` > 0: overlapped with that much compute (only the excess is exposed) */
double sim_comm(sim_ops *b, const char *name, loom_coll_kind kind, double bytes, int stride,
                int size, double budget);
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
/* attention core with context parallelism (src/sim/cost_cp.c): the ring's K/V (and, backward,
 * dK/dV) transfers overlapped with the block computations; sim_attention when cp = 1 */
void sim_cp_attention(sim_ops *b, bool backward);
/* the ring's buffers on one rank (bytes; 0 without cp) */
double sim_cp_workspace_bytes(const loom_sim_ctx *c);

/* layers of each virtual stage (pp*vpp + 1 entries: first[v], first[K] = layers) */
int sim_stage_split(const loom_sim_strategy *st, int layers, int *first);
#endif

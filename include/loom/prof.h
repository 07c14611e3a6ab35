/* Step profiler for the roofline report (`loom bench model --roofline`): the parts of a
 * training step, each with its exclusive wall time, calls and work (FLOPs or bytes moved, the
 * closed forms written at each instrumented site). Off unless a report is requested: every
 * site costs one load and branch then. Parts nest: time goes to the innermost open part (a
 * bf16 conversion inside a linear layer is the conversion's, not the GEMM's), and the time of
 * the step outside every part is LOOM_PART_OTHER, so the parts add up to the step exactly.
 * Only the thread outside OpenMP parallel regions records (the kernels parallelise inside). */
#ifndef LOOM_PROF_H
#define LOOM_PROF_H
#include <stdbool.h>

typedef enum {
  LOOM_PART_OTHER = 0, /* the step outside every part (decoder glue, copies) */
  /* GEMMs: role x (forward, backward data gradient, backward weight gradient) */
  LOOM_PART_QKV_FWD, LOOM_PART_QKV_DGRAD, LOOM_PART_QKV_WGRAD,
  LOOM_PART_PROJ_FWD, LOOM_PART_PROJ_DGRAD, LOOM_PART_PROJ_WGRAD,
  LOOM_PART_FC1_FWD, LOOM_PART_FC1_DGRAD, LOOM_PART_FC1_WGRAD,
  LOOM_PART_FC2_FWD, LOOM_PART_FC2_DGRAD, LOOM_PART_FC2_WGRAD,
  LOOM_PART_HEAD_FWD, LOOM_PART_HEAD_DGRAD, LOOM_PART_HEAD_WGRAD,
  LOOM_PART_ROUTER_FWD, LOOM_PART_ROUTER_DGRAD, LOOM_PART_ROUTER_WGRAD, /* MoE router (H -> E) */
  LOOM_PART_ATTN_FWD, LOOM_PART_ATTN_BWD,
  LOOM_PART_EXPERTS_FWD, LOOM_PART_EXPERTS_BWD, /* MoE: the routed experts' grouped GEMMs */
  LOOM_PART_NORM,     /* residual add + norm forward, norm backward */
  LOOM_PART_ACT,      /* bias + activation and backward, residual add, bias grads, scale, rotary */
  LOOM_PART_XENT,     /* cross-entropy statistics and gradient of the head */
  LOOM_PART_EMBED,    /* token (+ position) embedding forward and backward */
  LOOM_PART_ZERO,     /* zeroing the gradient buffer */
  LOOM_PART_CLIP,     /* the global gradient norm for clipping */
  LOOM_PART_ADAMW,    /* the optimizer pass (clip factor folded in) */
  LOOM_PART_BF16_CVT, /* fp32 -> bf16 conversions (weights once per update, activations) */
  LOOM_PART_MOE_ROUTE,   /* MoE: softmax + top-k, router statistics, router backward */
  LOOM_PART_MOE_PERMUTE, /* MoE: the dispatch plan, gathering token rows and its backward */
  LOOM_PART_MOE_COMBINE, /* MoE: the weighted combine of expert rows and its backward */
  LOOM_PART_DATA,     /* data loading */
  LOOM_PART_N
} loom_part;

/* GEMM roles and phases for loom_prof_gemm_part */
enum {
  LOOM_GEMM_QKV,
  LOOM_GEMM_PROJ,
  LOOM_GEMM_FC1,
  LOOM_GEMM_FC2,
  LOOM_GEMM_HEAD,
  LOOM_GEMM_ROUTER
};
enum { LOOM_PHASE_FWD, LOOM_PHASE_DGRAD, LOOM_PHASE_WGRAD };
static inline loom_part loom_prof_gemm_part(int role, int phase) {
  return (loom_part)(LOOM_PART_QKV_FWD + 3 * role + phase);
}
/* role of a linear layer from its weight's name ("layers.3.attn.q.weight" -> LOOM_GEMM_QKV;
 * an MoE layer's shared expert counts as the MLP's fc1/fc2, its router as LOOM_GEMM_ROUTER);
 * -1 when the name is none of q/k/v/o/gate/up/down, the router's or the head's */
int loom_prof_gemm_role(const char *param_name);

typedef struct {
  double seconds[LOOM_PART_N]; /* exclusive wall time */
  double flops[LOOM_PART_N];   /* arithmetic work (GEMMs, attention) */
  double bytes[LOOM_PART_N];   /* memory traffic (memory-bound parts) */
  long calls[LOOM_PART_N];
  double total;                /* wall time from loom_prof_start to loom_prof_stop */
} loom_prof_report;

extern bool loom_prof_on; /* read at every site; set by loom_prof_start/stop only */

/* reset, open LOOM_PART_OTHER and start recording */
void loom_prof_start(void);
/* close everything, stop recording, copy the figures */
void loom_prof_stop(loom_prof_report *r);
/* open part p (nested inside the open one); close the innermost, adding work to it */
void loom_prof_push(loom_part p);
void loom_prof_pop(double flops, double bytes);

#define LOOM_PROF_PUSH(p)                   \
  do {                                      \
    if (loom_prof_on) loom_prof_push(p);    \
  } while (0)
#define LOOM_PROF_POP(flops, bytes)                                 \
  do {                                                              \
    if (loom_prof_on) loom_prof_pop((double)(flops), (double)(bytes)); \
  } while (0)

/* short name of a part ("qkv fwd", "attention bwd", ...) */
const char *loom_prof_part_name(loom_part p);
#endif

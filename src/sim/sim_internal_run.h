/* Private to the simulator's replay (sim_run.c, sim_timing.c, sim_trace.c, sim_share.c): the
 * costs of each virtual stage, the per-rank state of the compute and communication streams,
 * and the recorded timeline. */
#ifndef LOOM_SIM_INTERNAL_RUN_H
#define LOOM_SIM_INTERNAL_RUN_H
#include "sim/sim_internal.h"

typedef struct {
  int layers, moe;     /* layers of the chunk, of which MoE layers */
  bool embed, head;
  loom_sim_cost cost;  /* one micro-batch: layers x layer + ends */
  loom_sim_cost solo;  /* the same outside the 1F1B steady state (no expert all-to-all overlap) */
  double grad_bytes;   /* gradient bytes of the chunk's layers reduced over dp x cp x sp (DP
                          buckets) */
  double layer_grad_bytes; /* ... of one layer (the chunk's mean) */
  double expert_grad_bytes; /* of the chunk's routed experts, reduced over the edp replicas */
  double vision[LOOM_PHASE_COUNT]; /* of cost.t: the vision encoder's share (first stage) */
} sim_vstage;

/* one timed piece of the trace: compute (tid 0) or communication (tid 1) */
typedef struct {
  int rank, tid, instr; /* pipeline rank, stream, instruction index (-1: none) */
  const char *name;     /* static text, or NULL: the instruction's text */
  double t0, t1, bytes;
} sim_event;

/* the expert all-to-alls of one MoE layer for the trace: where each starts in the layer's
 * forward (bwd false) or backward time, how long it takes (overlapped part included) */
typedef struct {
  const char *name;
  bool bwd;
  double offset, dur, bytes;
} sim_a2a_event;
#define SIM_A2A_EVENTS 8

typedef struct {
  sim_a2a_event ev[SIM_A2A_EVENTS];
  int n;
  double fwd, bwd; /* the layer's forward and backward (both halves) on the compute stream */
} sim_a2a_layer;

typedef struct {
  const loom_sim_ctx *c;
  const loom_schedule *s;
  int K;                   /* virtual stages */
  sim_vstage *vs;          /* (K) */
  double *rank_params;     /* (pp) parameters each pipeline rank holds (routed experts apart) */
  double *rank_experts;    /* (pp) routed-expert parameters each pipeline rank holds */
  int *rank_layers, *rank_moe; /* (pp) layers and MoE layers each pipeline rank holds */
  int **last_bwd;          /* (pp)(vpp) index of each chunk's last backward */
  double **slow;           /* (pp)(count) time-sharing slowdown of each instruction */
  double **waiting;        /* (pp)(count) of each compute instruction, the part the mean rank of
                              its stage waits for the busiest (unbalanced MoE layers), 0..1 */
  double **t0, **t1;       /* (pp)(count) when the instruction's work starts / ends */
  double **exposed;        /* (pp)(count) communication on the compute stream */
  bool **paired;           /* (pp)(count) a forward or backward of the 1F1B steady state */
  double *dp_free, *link_free; /* (pp) communication streams */
  double *hidden;          /* (pp) communication overlapped with compute */
  double *busy;            /* (pp) compute-instruction time */
  double *pipe_end;        /* (pp) end of the last forward/backward */
  double *opt_time;        /* (pp) */
  double (*bytes)[LOOM_COLL_COUNT]; /* (pp) bytes sent per collective kind, this step */
  double msg_bytes, t_p2p, t_recv_gather;
  double flops_rec;        /* recomputation FLOPs per step on one rank of each stage, summed */
  sim_a2a_layer a2a[2];     /* an MoE layer's all-to-alls: [0] in the 1F1B steady state,
                              [1] alone (the trace's expert all-to-all row) */
  double dense_fwd, dense_bwd; /* a dense layer's forward and backward, for their offsets */
  bool record;             /* keep events for the trace */
  sim_event *ev;
  int n_ev, cap_ev;
} sim_run;

static inline bool sim_is_compute(loom_instr_kind k) {
  return k == LOOM_INSTR_FORWARD || k == LOOM_INSTR_BACKWARD ||
         k == LOOM_INSTR_BACKWARD_INPUT || k == LOOM_INSTR_BACKWARD_WEIGHT;
}
void sim_timing(void *ctx, int rank, int index, const loom_instr *in, loom_sched_timing *t);
void sim_event_add(sim_run *R, int rank, int tid, int instr, const char *name, double t0,
                   double t1, double bytes);
/* Processor sharing (timeshare profiles): update slow[][] from the last replay's timeline;
 * returns the largest change. */
double sim_share_update(sim_run *R, int ranks_per_stage, int nodes, double devices);
int sim_trace_write(const sim_run *R, const char *path, bool per_world_rank);
/* the expert all-to-alls of an MoE layer's op list, for the trace */
void sim_a2a_layer_of(const loom_sim_op *ops, int n, sim_a2a_layer *out);
/* the dispatch and combine all-to-alls of every MoE layer of the compute instruction `index`
 * (on the trace's row 3), laid out over its [t0, t1) */
void sim_trace_a2a(sim_run *R, int rank, int index, const loom_instr *in, double t0, double t1);
#endif

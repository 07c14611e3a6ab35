/* The simulator: a cost model (FLOPs, bytes and time of every op of a transformer layer, the
 * embedding, the head and the optimizer, forward / input-gradient / weight-gradient, with
 * recomputation and the communication of each parallel strategy), a memory model per rank,
 * and a replay of the schedule IR (the very instruction lists the executor runs) on that cost
 * model, with a compute and a communication stream per rank, giving step time, tokens/s,
 * MFU/HFU, the bubble, exposed communication, peak memory per rank and a Chrome trace.
 *
 * Everything is per rank. The ranks of one pipeline stage (its dp x sp x tp peers) run the
 * same list with the same costs, so the replay runs one list per pipeline rank.
 * See docs/SIMULATOR.md for the model, its assumptions and its calibration. */
#ifndef LOOM_SIM_H
#define LOOM_SIM_H
#include <stdbool.h>

#include "loom/config.h"
#include "loom/hw.h"
#include "loom/model.h"
#include "loom/sched.h"

typedef enum { LOOM_RECOMPUTE_NONE = 0, LOOM_RECOMPUTE_SELECTIVE, LOOM_RECOMPUTE_FULL } loom_recompute;
const char *loom_recompute_name(loom_recompute r);
int loom_recompute_parse(const char *s, loom_recompute *out); /* none | selective | full */

/* A parallel strategy and the training shape. */
typedef struct {
  int dp, tp, pp, sp;        /* mesh axes (sp: Ulysses); world = dp*tp*pp*cp*sp */
  int cp;                    /* context parallelism (ring attention); 0 or 1: none */
  bool seq_par;              /* Megatron sequence parallelism over the tp ranks */
  int zero;                  /* ZeRO stage 0..3 over the dp x sp replicas */
  int vpp;                   /* model chunks per pipeline rank */
  char schedule[32];         /* none | gpipe | 1f1b | interleaved | the name of a file's */
  char stage_layers[128];    /* "3,3,2": layers per virtual stage ("" = even split) */
  int micro_batch, seq;      /* B, T */
  int microbatches;          /* per optimizer step and data-parallel replica */
  loom_recompute recompute;
  loom_hw_dtype dtype;          /* compute dtype of the matmuls */
  bool dropout;              /* the recipe uses dropout (Megatron GPT-3): masks and kernels */
  double bucket_mb;          /* data-parallel gradient bucket (MiB) */
  /* vision-language models: the encoder's own strategy (a strategy per module) */
  char vision_mode[12];      /* replicate | tp | sp over the tensor-parallel ranks */
  bool vision_zero_own;      /* the encoder has a ZeRO stage of its own (vision.parallel.zero) */
  int vision_zero;           /* ... which is this (else it follows zero) */
  int vision_patches;        /* patches per sequence's image (0: no image) */
  bool freeze_vision;        /* the encoder is not trained: no backward */
  /* precision policy (training.param_dtype, optim_dtype, reduce_dtype; vision.param_dtype,
   * optim_dtype): parameters and gradients stored in param (fp32 in a 16-bit run: a 16-bit
   * working copy beside fp32 master weights; bf16: the model cast to bf16, no master), AdamW
   * moments in optim, data-parallel gradient reductions in reduce */
  loom_hw_dtype param_dtype, optim_dtype, reduce_dtype, vision_param_dtype, vision_optim_dtype;
  /* Mixture-of-Experts (parallel.ep, parallel.etp): Megatron's parallel folding. Attention and
   * the dense layers run on the stage's tp x cp x sp x dp ranks; the routed experts of every MoE
   * layer on the same ranks as etp x ep x edp (etp stride 1, ep stride etp, edp the rest): ep
   * ranks hold E/ep experts each, every expert's SwiGLU split over etp ranks, expert gradients
   * reduced (and ZeRO-partitioned) over the edp replicas. */
  int ep, etp;
  double moe_imbalance; /* tokens routed to the busiest rank's experts over the balanced share
                           (1 = perfectly balanced, as published MoE benchmarks force it) */
  int ep_overlap;       /* dispatch/combine all-to-alls overlapped with another micro-batch's
                           compute: -1 the profile's runtime.ep_comm_overlap, 0 no, 1 yes */
  bool fp8;             /* GEMMs in FP8 with per-tensor current scaling (Transformer Engine's
                           recipe): activations stay bf16; the simulator only, not loom train */
} loom_sim_strategy;

/* From a train config (parallel.*, training.*); `world` > 0 fills parallel.dp when the config
 * leaves it at 1 and the other axes divide world. Errors name the keys. */
int loom_sim_strategy_from_config(loom_sim_strategy *st, const loom_config *cfg, int world);
/* The layout rules of the trainer (loom_mesh_check_model) plus the simulator's own. */
int loom_sim_strategy_check(const loom_sim_strategy *st, const loom_model_spec *spec);
int loom_sim_world(const loom_sim_strategy *st);
/* Write the strategy into a train config (parallel.*, training.micro_batch_size, grad_accum,
 * seq_len, dtype, activation_checkpointing). Fails for what loom train cannot run (selective
 * recompute, fp16). */
int loom_sim_strategy_to_config(const loom_sim_strategy *st, loom_config *cfg);
/* "dp=2 tp=4 pp=2 vpp=1 sp=1 zero=1 mbs=1 ..." (static buffer) */
const char *loom_sim_strategy_str(const loom_sim_strategy *st);

/* What the cost model needs, with the per-rank shapes derived once. */
typedef struct {
  const loom_model_spec *spec;
  const loom_hw_profile *hw;
  const loom_sim_strategy *st;
  /* derived */
  double N, Nr;         /* rows into the linears, residual rows (seq-par: N/tp) */
  double lh, lkv, li;   /* local heads, kv heads, intermediate */
  double vloc;          /* local vocabulary rows */
  double act_bytes;     /* bytes per activation element */
  bool loom_cpu;        /* the loom CPU executor's op sequence */
  bool moe_layer;       /* the layer the cost and memory functions describe is an MoE layer (set
                           for models with MoE layers; clear it for their dense layers) */
} loom_sim_ctx;
void loom_sim_ctx_init(loom_sim_ctx *c, const loom_model_spec *spec, const loom_hw_profile *hw,
                       const loom_sim_strategy *st);

/* ---- cost model --------------------------------------------------------------------------- */
typedef enum { LOOM_PHASE_FWD = 0, LOOM_PHASE_BWD_IN, LOOM_PHASE_BWD_W, LOOM_PHASE_COUNT } loom_sim_phase;
typedef enum { LOOM_OP_GEMM = 0, LOOM_OP_ATTN, LOOM_OP_VEC, LOOM_OP_COMM } loom_sim_op_type;

typedef struct {
  const char *name;
  loom_sim_op_type type;
  loom_sim_phase phase;
  bool recompute;        /* extra work of recomputation (runs in the backward) */
  bool hidden;           /* communication overlapped with compute (off the compute stream) */
  loom_coll_kind coll;   /* comm: kind, group (stride, size) */
  int stride, size;
  double flops;          /* GEMM/attention FLOPs executed */
  double bytes;          /* comm payload per rank / vector-op memory traffic */
  double time;           /* seconds on this profile */
  double host;           /* seconds the CPU spends issuing it (runtime.host_dispatch_us) */
  int module;            /* ops between two host synchronisations (0: the op alone, max(device,
                            host)): replayed op by op (loom_sim_module_time) */
  bool sync;             /* the host waits for the device after issuing it (.item(), .tolist()) */
  bool chained;          /* its module is one of identical copies issued back to back with no
                            synchronisation between them (a stage's text layers) */
  double stretch;        /* the busiest rank's work over the mean rank's (an unbalanced MoE
                            layer's routed rows: the imbalance factor); 1: balanced */
  double sharing;        /* comm: the time-sharing its time holds (loom_hw_coll_sharing) */
} loom_sim_op;
#define LOOM_SIM_MAX_OPS 320

/* Ops of one transformer layer, the embedding (first stage) and the head with the loss (last
 * stage), for one micro-batch on one rank, in execution order; returns the count. */
int loom_sim_layer_ops(const loom_sim_ctx *c, loom_sim_op *ops, int cap);
int loom_sim_embed_ops(const loom_sim_ctx *c, loom_sim_op *ops, int cap);
int loom_sim_head_ops(const loom_sim_ctx *c, loom_sim_op *ops, int cap);

typedef struct {
  double t[LOOM_PHASE_COUNT];     /* compute-stream seconds (incl. exposed communication) */
  double recompute;               /* of t[BWD_IN]: recomputation */
  double comm[LOOM_PHASE_COUNT];  /* of t: communication on the compute stream */
  double comm_alone[LOOM_PHASE_COUNT]; /* the same, each op over its sharing
                                          (loom_hw_coll_priced) */
  double comm_hidden;             /* communication overlapped with compute */
  double flops;                   /* FLOPs executed, recomputation included */
  double flops_recompute;
  double host_wait;               /* of t: the GPU waiting for the CPU to issue (the replay of
                                     each module's issue queue, over its device time) */
  double startup[LOOM_PHASE_COUNT]; /* chained modules: the first copy's wait beyond the steady
                                       state, once per run of copies (not in t) */
  double coll_bytes[LOOM_PHASE_COUNT][LOOM_COLL_COUNT]; /* bytes sent (comm.h's ring accounting) */
  double unbalanced[LOOM_PHASE_COUNT]; /* of t: what the busiest rank of an unbalanced MoE
                                          layer works beyond the mean rank (sum of time x
                                          (1 - 1/stretch)), while the others wait for it */
} loom_sim_cost;
void loom_sim_cost_of(const loom_sim_op *ops, int n, loom_sim_cost *out);
/* Host dispatch: the issue queue of one module's n ops replayed op by op. The CPU issues op i
 * at H_i (the sum of the host costs up to and including it); the device starts it at
 * max(H_i, end of op i-1) (communication off the compute stream takes no stream time); after
 * an op with `sync` the CPU waits for the device, which then starts the next op with an empty
 * queue. A module with a sync op is one period of identical blocks separated by that sync (a
 * vision block: its attention's .item()), so it is replayed from just after its last sync op,
 * wrapping around; a module without one starts with an empty queue and ends in a
 * synchronisation. Returns the module's time, which lies in [max(device, host), device + host];
 * *device and *host (may be NULL) get the sums. */
double loom_sim_module_time(const loom_sim_op *ops, int n, double *device, double *host);
void loom_sim_layer_cost(const loom_sim_ctx *c, loom_sim_cost *out);
void loom_sim_embed_cost(const loom_sim_ctx *c, loom_sim_cost *out);
void loom_sim_head_cost(const loom_sim_ctx *c, loom_sim_cost *out);

/* Parameters one rank holds (closed form, equal to the trainer's shard layout without
 * alignment padding): `layers` dense transformer layers, plus the embedding / the head. */
double loom_sim_rank_params(const loom_model_spec *spec, int tp, int layers, bool embed, bool head);
/* Parameters of one layer on one rank of a strategy: what every data-parallel replica holds
 * (attention, norms, and the dense MLP or an MoE layer's router and shared expert; split by
 * tp), returned, and for an MoE layer the routed experts this rank holds in *expert (E/ep
 * experts, each split over etp; 0 for a dense layer). Expert weights are replicated over the
 * edp ranks only. */
double loom_sim_layer_params(const loom_model_spec *spec, const loom_sim_strategy *st, bool moe,
                             double *expert);
/* The same for a rank holding `layers` layers of which `moe` are MoE layers, plus the
 * embedding / the head (and the vision encoder with the embedding). */
double loom_sim_rank_params_of(const loom_model_spec *spec, const loom_sim_strategy *st,
                               int layers, int moe, bool embed, bool head, double *expert);
/* MoE layers among layers [first, first + count) of the model. */
int loom_sim_moe_layers_in(const loom_model_spec *spec, int first, int count);
/* Bytes per parameter of one module's state on the GPU engine under the strategy's precision
 * policy (vision: the encoder's overrides): the 16/32-bit working weights, the gradients, and
 * the optimizer state ZeRO-1 partitions (fp32 master weights when parameters are fp32 in a
 * 16-bit run, and the two AdamW moments). */
void loom_sim_state_bytes(const loom_sim_strategy *st, bool vision, double *weights,
                          double *grads, double *optimizer);
/* Parameters of a vision-language model's encoder and merger (replicated on the first stage's
 * tensor-parallel ranks, as the trainer lays them out); 0 for text models. */
double loom_sim_vision_params(const loom_model_spec *spec);
/* Optimizer step of one rank over `params` (its gradients) owning `owned` of them: gradient
 * norm, clipping, AdamW, (bf16 copy), zeroing; without the ZeRO communication. */
double loom_sim_optimizer_time(const loom_sim_ctx *c, double params, double owned);
/* Host dispatch of the optimizer step (runtime.host_dispatch_us; the seed's torch.optim.Adam
 * with foreach=False, i.e. _single_tensor_adam: a Python loop over the parameter tensors).
 * Per tensor: 8 device ops in the weight-decay group (grad.add(param), exp_avg.lerp_,
 * exp_avg_sq.mul_, addcmul_, sqrt, div, add_(eps), param.addcdiv_), 7 without weight decay
 * (norm weights, biases), each a DTensor dispatch for a parallelize_module'd parameter and an
 * eager one otherwise, plus 2 eager ops on the CPU `step` tensor (step_t += 1, .item()).
 * A ZeRO engine (DeepSpeed, zero >= 1) runs the same Adam over one flat partition per group
 * (2 groups) plus flatten, fp32 cast, copy back and all-gather per group and a global norm:
 * LOOM_SIM_OPT_FLAT_OPS eager ops in all. */
typedef struct {
  int dtensor[2], eager[2]; /* parameter tensors by dispatch, [0] weight decay, [1] none */
  int flat;                 /* 1: a ZeRO engine's flat partitions instead of the tensors */
} loom_sim_opt_tensors;
#define LOOM_SIM_ADAM_OPS_DECAY 8
#define LOOM_SIM_ADAM_OPS_NODECAY 7
#define LOOM_SIM_ADAM_CPU_OPS 2
#define LOOM_SIM_OPT_FLAT_OPS 30
/* The text part (`layers` transformer layers, the embedding, the head) and the encoder's (on
 * the rank holding the embedding) of one rank's optimizer. */
void loom_sim_opt_tensors_of(const loom_sim_ctx *c, int layers, bool embed, bool head,
                             loom_sim_opt_tensors *text, loom_sim_opt_tensors *vision);
/* Seconds of CPU to issue one optimizer's step (0 without host dispatch). */
double loom_sim_opt_host(const loom_hw_profile *hw, const loom_sim_opt_tensors *t);
/* The optimizer step with host dispatch: the text's then the encoder's optimizer (the seed's
 * two execute_all("optimizer_step") calls), each a module of its own: max(device, host), the
 * device time (loom_sim_optimizer_time) split by parameter count. Without host dispatch, the
 * device time. */
double loom_sim_optimizer_step_time(const loom_sim_ctx *c, int layers, bool embed, bool head,
                                    double params, double owned);

/* ---- memory model ------------------------------------------------------------------------- */
typedef struct {
  double weights, grads, optimizer;  /* bytes */
  double activations;                /* saved activations of the micro-batches in flight */
  double workspace;                  /* backward scratch, recompute buffers, logits */
  double comm_buffers;               /* pipeline message buffers, DP buckets, ZeRO shards */
  double fragmentation;              /* allocator headroom (the profile's share of the rest) */
  double total;
  double per_layer;                  /* activations of one layer, one micro-batch */
  int inflight;                      /* chunks in flight at the peak */
} loom_sim_memory;
/* Activation bytes one layer saves for its backward (one micro-batch, one rank); with_stats
 * adds the norms' mean/rstd and the attention's log-sum-exp (ignored by Megatron's formula). */
double loom_sim_layer_act_bytes(const loom_sim_ctx *c, bool with_stats);
/* Memory of pipeline rank r holding `layers` layers (embed/head flags), with `inflight`
 * chunks' activations alive at the peak, each of at most `chunk_layers` layers (an MoE
 * model's MoE layers spread over them in the model's proportion). */
void loom_sim_memory_rank(const loom_sim_ctx *c, int layers, int chunk_layers, bool embed,
                          bool head, int inflight, loom_sim_memory *m);
/* The same with the MoE layers counted: `moe` of the rank's layers, `chunk_moe` of the
 * largest chunk's; the head's activations (logits) for `head_inflight` micro-batches (0: the
 * rank has no head; of the chunks in flight, those of the head's chunk). Routed experts:
 * weights, gradients and optimizer state over ep (and etp), ZeRO over the edp replicas; their
 * activations on the busiest rank's routed rows; the dispatch buffers in the workspace. */
void loom_sim_memory_rank_of(const loom_sim_ctx *c, int layers, int moe, int chunk_layers,
                             int chunk_moe, bool embed, int head_inflight, int inflight,
                             loom_sim_memory *m);
/* Usable memory of one rank (device memory less reserved; shared when timesharing). */
double loom_sim_memory_limit(const loom_hw_profile *hw, int ranks_per_node);

/* ---- closed forms (tests, the planner's pruning) ----------------------------------------- */
/* Model FLOPs per token: 6 x matmul parameters (LM head included) + the causal attention
 * term 6 L T (heads*head_dim) -- what loom train reports MFU with. An MoE layer counts the
 * routed experts a token uses (top k) and the shared expert, not the router, as Megatron-LM's
 * num_floating_point_operations does (megatron/training/training.py). */
double loom_sim_flops_per_token(const loom_model_spec *spec, int T);
/* Megatron's model FLOPs per iteration (Narayanan et al. 2021, eq. 3, without recompute):
 * 72 B s L h^2 (1 + s/(6h) + V/(12 h L)). */
double loom_sim_megatron_flops(double B, double s, double L, double h, double V);
/* Korthikanti et al. 2022, activation bytes per layer (16-bit, dropout, unfused attention):
 * no parallelism s b h (34 + 5 a s / h); tensor parallel t: s b h (10 + 24/t + 5 a s/(h t));
 * + sequence parallel: s b h/t (34 + 5 a s / h); selective recompute drops the 5as/h term;
 * full recompute keeps the 2 s b h input (/t with sequence parallelism). */
double loom_sim_megatron_act_bytes(double s, double b, double h, double a, double t, bool sp,
                                   loom_recompute rc);
/* ZeRO (Rajbhandari et al. 2020) bytes per parameter with mixed-precision Adam (K = 12),
 * over Nd data-parallel ranks: stage 0: 16, 1: 4 + 12/Nd, 2: 2 + 14/Nd, 3: 16/Nd. */
double loom_sim_zero_bytes_per_param(int stage, double Nd);
/* Bubble fraction (idle over busy): gpipe/1f1b (p-1)/m, interleaved (p-1)/(v m) (m >= p). */
double loom_sim_bubble_closed(const char *schedule, int p, int m, int v);

/* ---- the simulator ------------------------------------------------------------------------ */
typedef struct {
  double step_time;       /* seconds per optimizer step */
  double tokens_per_s;    /* over the whole job */
  double mfu, hfu;        /* model / hardware FLOPs utilisation */
  double bubble;          /* pipeline bubble: idle over busy compute time, summed over ranks */
  double exposed_comm;    /* communication on the critical rank's compute stream (s) */
  double comm_total;      /* all communication time of the critical rank (s) */
  double compute_time;    /* compute (non-communication) busy time of the critical rank */
  double optimizer_time;
  double model_flops;     /* per step, whole job */
  int world, critical_rank;
  int pp;
  loom_sim_memory *mem;   /* (pp) per pipeline rank */
  double mem_limit;
  int oom_rank;           /* first pipeline rank over the limit, -1 when everything fits */
  char oom_msg[1024];     /* rank, instruction and numbers when oom_rank >= 0 */
  double timeshare;       /* ranks per device (CPU oversubscription), 1 on GPUs */
  double (*comm_bytes)[LOOM_COLL_COUNT]; /* (pp) bytes each rank of a stage sends per step,
                                            by collective (the trainer's comm.json) */
} loom_sim_result;
void loom_sim_result_free(loom_sim_result *r);

typedef struct {
  const char *trace_path;   /* Chrome trace (NULL: none) */
  bool per_world_rank;      /* one trace row per world rank (else per pipeline rank) */
  int nodes;                /* nodes the ranks spread over (0: as few as hold them) */
} loom_sim_opts;

/* Replay the schedule (validated first; its pp/vpp/microbatches must match the strategy) on
 * the cost model. Fails with the rank, instruction and reason for an invalid schedule; a rank
 * over the memory limit is reported in oom_rank/oom_msg (rank, instruction, bytes). */
int loom_sim_run(const loom_sim_ctx *c, const loom_schedule *s, const loom_sim_opts *o,
                 loom_sim_result *r);
/* The schedule a strategy runs (generated like the executor does, or loaded from a file). */
int loom_sim_schedule(const loom_sim_strategy *st, const char *schedule_file, loom_schedule *s);
/* Print the metrics, the per-rank memory and communication volume as a report. */
void loom_sim_print(const loom_sim_ctx *c, const loom_sim_result *r);
/* The same as JSON (step_time, mfu, ..., per stage memory and bytes sent by collective, the
 * keys of the trainer's comm.json). */
int loom_sim_write_json(const loom_sim_ctx *c, const loom_sim_result *r, const char *path);

/* ---- planner ------------------------------------------------------------------------------ */
typedef struct {
  const loom_model_spec *spec;
  const loom_hw_profile *hw;
  int gpus;                  /* ranks available */
  int global_batch, seq;     /* sequences per step, T */
  loom_hw_dtype dtype;
  /* the config's precision policy (loom_sim_strategy's fields of the same names; zero: fp32) */
  loom_hw_dtype param_dtype, optim_dtype, reduce_dtype, vision_param_dtype, vision_optim_dtype;
  bool dropout;
  bool trainable_only;       /* only what loom train runs (no selective recompute, no fp16) */
  int finalists;             /* simulated after the closed-form pruning */
  int top;                   /* rows printed */
  int vision_patches;        /* vision-language models: patches per sample (searches the
                                encoder's own strategy: replicate | tp | sp) */
  bool freeze_vision;
  bool fp8;                  /* FP8 GEMMs (loom_sim_strategy.fp8) */
  double moe_imbalance;      /* MoE: the busiest rank's load factor (0 or 1: balanced) */
  int ep_overlap;            /* MoE: -1 the profile's, 0 off, 1 on */
} loom_plan_request;

typedef struct {
  loom_sim_strategy st;
  double est_time;           /* closed form */
  double sim_time;           /* simulated (finalists), 0 otherwise */
  double tokens_per_s, mfu, mem, bubble, exposed_comm;
  int gpus_used;
} loom_plan_entry;

typedef struct {
  loom_plan_entry *best;     /* (n) sorted by simulated step time */
  int n;
  long evaluated;            /* configurations costed by the closed form */
  long pruned_memory, invalid;
  double seconds;            /* wall time, simulation of the finalists included */
  double search_seconds;     /* the closed-form search alone */
} loom_plan_result;
int loom_plan_search(const loom_plan_request *q, loom_plan_result *out);
void loom_plan_result_free(loom_plan_result *r);
void loom_plan_print(const loom_plan_request *q, const loom_plan_result *r);
#endif

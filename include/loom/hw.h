/* Hardware profiles for the simulator and planner: what one device computes (matrix peak per
 * dtype, GEMM efficiency by shape, memory size and bandwidth, vector-op throughput, the
 * attention kernel), how many devices a node holds, the network tiers between devices
 * (bandwidth, latency, domain size, collective algorithm) and what the software running on it
 * does (memory layout of the training engine, which communication overlaps compute).
 *
 * Profiles are YAML files (configs/hardware/NAME.yaml; `loom bench` writes the one of this
 * machine), loaded with libyaml. Every number in a shipped file carries its source. The time
 * functions here are the cost model's primitives: one GEMM, one vector kernel, one collective
 * on a group of ranks placed on the mesh. Units: seconds, bytes, FLOP. */
#ifndef LOOM_HW_H
#define LOOM_HW_H
#include <stdbool.h>
#include <stddef.h>

#include "loom/comm.h"

/* Matrix dtypes of a profile's peaks. FP8 is not a training dtype: it is the rate of the GEMMs
 * of a bf16 run with FP8 GEMMs (loom_sim_strategy.fp8; Transformer Engine's recipe). */
typedef enum {
  LOOM_DT_FP32 = 0,
  LOOM_DT_BF16,
  LOOM_DT_FP16,
  LOOM_DT_FP8,
  LOOM_DT_COUNT
} loom_hw_dtype;
const char *loom_hw_dtype_name(loom_hw_dtype d);
int loom_hw_dtype_parse(const char *s, loom_hw_dtype *out); /* "fp32" | "bf16" | "fp16" | "fp8" */

/* The training framework a GPU profile models (runtime.recipe): what it keeps per parameter and
 * how it runs data parallelism. loom-cpu profiles run loom's own executor (LOOM_RECIPE_LOOM). */
typedef enum {
  LOOM_RECIPE_MEGATRON = 0, /* Megatron-LM: 16-bit weights, fp32 main gradients (bf16 runs
                               accumulate and reduce in fp32), distributed optimizer */
  LOOM_RECIPE_FSDP2,        /* PyTorch FSDP2 (torchtitan): fp32 sharded parameters, bf16
                               compute copies gathered per layer, fp32 gradient reduce-scatter */
  LOOM_RECIPE_HF_EAGER,     /* Hugging Face modules under PyTorch eager (the seed's stack) */
  LOOM_RECIPE_LOOM,         /* loom's own executor */
  LOOM_RECIPE_COUNT
} loom_hw_recipe;
const char *loom_hw_recipe_name(loom_hw_recipe r);
/* One line saying what the recipe keeps and runs (the planner prints it). */
const char *loom_hw_recipe_text(loom_hw_recipe r);

/* Vector (non-matrix) kernels the trainer runs, by class. `elements` of each op are counted
 * by the cost model; a profile gives either a measured rate (elements/s of loom's own kernel,
 * written by `loom bench`) or nothing, in which case the time is the op's memory traffic over
 * the memory bandwidth (or its FLOPs over the vector peak, whichever is longer). */
typedef enum {
  LOOM_VOP_LAYERNORM_FWD = 0,
  LOOM_VOP_LAYERNORM_BWD,
  LOOM_VOP_RMSNORM_FWD,
  LOOM_VOP_RMSNORM_BWD,
  LOOM_VOP_GELU_FWD,
  LOOM_VOP_GELU_BWD,
  LOOM_VOP_SWIGLU_FWD,
  LOOM_VOP_SWIGLU_BWD,
  LOOM_VOP_ROPE,          /* forward or backward (same rotation) */
  LOOM_VOP_SOFTMAX_FWD,   /* unfused attention: scale-mask-softmax over the score matrix */
  LOOM_VOP_SOFTMAX_BWD,
  LOOM_VOP_DROPOUT,       /* dropout forward or backward (mask applied) */
  LOOM_VOP_XENT_FWD,      /* cross-entropy over the logits (per logit) */
  LOOM_VOP_XENT_BWD,
  LOOM_VOP_ADAMW,         /* per parameter */
  LOOM_VOP_ADD,           /* residual / bias add, bias gradient (per element) */
  LOOM_VOP_COPY,          /* memcpy / memset / gather of rows (per element) */
  LOOM_VOP_ROUND,         /* bf16 rounding of a matmul input (per element) */
  LOOM_VOP_SUMSQ,         /* gradient norm (per element) */
  LOOM_VOP_FAULT,         /* first touch of released or newly mapped memory (per float):
                             ZeRO-3's paged-out layers, fresh receive buffers */
  LOOM_VOP_COUNT
} loom_vop;
const char *loom_vop_name(loom_vop v);

/* The execution units of a CPU's instruction peaks (device.instruction_peak.bf16_unit; loom
 * bench's peak section): fused multiply-adds on fp32 vectors (vfmadd231ps on zmm with AVX-512F,
 * else on ymm with AVX2 + FMA; a bf16 matmul without a native bf16 dot product computes in
 * them), AVX512_BF16's vdpbf16ps (pairs of bf16 products into fp32 lanes), AMX's tdpbf16ps
 * (a 16 x 32 by 32 x 16 bf16 tile product into a 16 x 16 fp32 tile). */
typedef enum { LOOM_UNIT_FMA = 0, LOOM_UNIT_AVX512_BF16, LOOM_UNIT_AMX, LOOM_UNIT_COUNT } loom_hw_unit;
const char *loom_hw_unit_name(loom_hw_unit u);        /* "fma", "avx512_bf16", "amx" */
const char *loom_hw_unit_instruction(loom_hw_unit u); /* "FMA vfmadd231ps", ..., "AMX tdpbf16ps" */
int loom_hw_unit_parse(const char *s, loom_hw_unit *out);

typedef enum { LOOM_ATTN_FLASH = 0, LOOM_ATTN_UNFUSED, LOOM_ATTN_LOOM } loom_attn_kernel;
const char *loom_attn_kernel_name(loom_attn_kernel k);
typedef enum { LOOM_ALGO_RING = 0, LOOM_ALGO_TREE } loom_coll_algo;

/* GEMM roles, as the linear layers call them: forward y = x W^T, input gradient dx = dy W,
 * weight gradient dW = dy^T x. */
typedef enum { LOOM_GEMM_FWD = 0, LOOM_GEMM_DGRAD, LOOM_GEMM_WGRAD, LOOM_GEMM_ROLES } loom_gemm_role;

#define LOOM_HW_MAX_POINTS 24
#define LOOM_HW_MAX_TIERS 4
#define LOOM_HW_GRID 6

typedef struct {
  char name[32];
  int domain;          /* ranks inside one domain of this tier; 0 = every rank (last tier) */
  double bandwidth;    /* bytes/s per rank and direction (link or NIC) */
  double latency;      /* seconds per message step */
  double efficiency[LOOM_COLL_COUNT]; /* achieved bus bandwidth / bandwidth, per collective */
  loom_coll_algo algo; /* all-reduce algorithm */
  /* optional (0 points = 1): the all-reduce's bandwidth at a message of ar_size_bytes per rank
   * times ar_size_factor, interpolated in log2 of the size and clamped at the ends (loom bench:
   * measured against its fitted line; on CPUs it halves once the buffers leave the caches) */
  int n_ar_size;
  double ar_size_bytes[LOOM_HW_MAX_POINTS], ar_size_factor[LOOM_HW_MAX_POINTS];
  /* the time-sharing its times hold: ranks per core while `loom bench` timed them (key
   * ranks_per_core; 0 = node.collective_ranks_per_core) */
  double ranks_per_core;
} loom_hw_tier;

typedef struct {
  char name[64];
  char description[256];
  char path[512];      /* file it was loaded from */
  /* device */
  double peak_flops[LOOM_DT_COUNT];    /* matrix unit peak, FLOP/s (0 = dtype unsupported);
                                          loom bench: the library's best GEMM on one core */
  /* optional instruction peaks (device.instruction_peak; loom bench's peak section): the
   * FLOP/s of the machine's own instructions kept busy from registers, summed over
   * ipeak_threads[i] threads running at once (increasing, >= 1): fp32 from FMAs, bf16 from
   * ipeak_bf16_unit. 0 entries: none (MFU and the roofline then take peak_flops). */
  int n_ipeak;
  int ipeak_threads[LOOM_HW_MAX_POINTS];
  double ipeak_flops[2][LOOM_HW_MAX_POINTS]; /* [LOOM_DT_FP32], [LOOM_DT_BF16]: FLOP/s */
  loom_hw_unit ipeak_bf16_unit;
  double vector_flops[LOOM_DT_COUNT];  /* non-matrix peak, FLOP/s */
  int n_gemm_eff;
  double gemm_eff_dim[LOOM_HW_MAX_POINTS], gemm_eff[LOOM_HW_MAX_POINTS]; /* by smallest dim */
  /* optional measured grid (loom bench): efficiency at (m, n, k) per role, interpolated in
   * log2 space; overrides the curve inside its range when present */
  int grid_n[3];                       /* points along m, n, k (0 = no grid) */
  /* 0: every role at its product's (m, n, k), C (m,n) = A (m,k) B (k,n), as the simulator asks
   * (gemm_grid.order: gemm); 1: a profile of loom bench before 2026-11-29, which measured dgrad
   * and wgrad at their linear layer's (tokens, out, in) (no order key) */
  int grid_layer_order;
  double grid_axis[3][LOOM_HW_GRID];
  double grid_eff[LOOM_GEMM_ROLES][LOOM_HW_GRID * LOOM_HW_GRID * LOOM_HW_GRID];
  /* optional FP8 curve (device.gemm_efficiency_fp8, by the smallest dimension, measured as it
   * is: no size factor); 0 points = the bf16 curve */
  int n_gemm_eff_fp8;
  double gemm_eff_fp8_dim[LOOM_HW_MAX_POINTS], gemm_eff_fp8[LOOM_HW_MAX_POINTS];
  /* optional factor of a grouped GEMM (MoE experts) by its rows per group
   * (device.grouped_gemm_efficiency); 0 points = 1 */
  int n_grouped;
  double grouped_rows[LOOM_HW_MAX_POINTS], grouped_eff[LOOM_HW_MAX_POINTS];
  int n_gemm_size;                     /* optional factor by GEMM size (FLOPs), 0 = none */
  double gemm_size_flops[LOOM_HW_MAX_POINTS], gemm_size_eff[LOOM_HW_MAX_POINTS];
  double gemm_overhead;                /* seconds per GEMM call */
  double mem_bytes;                    /* device memory */
  double mem_reserved;                 /* bytes the runtime keeps (context, allocator slack) */
  double mem_bw;                       /* bytes/s */
  double mem_eff;                      /* fraction of mem_bw memory-bound kernels reach */
  double vop_rate[LOOM_VOP_COUNT];     /* measured elements/s (0 = from bandwidth) */
  double kernel_overhead;              /* seconds per vector kernel */
  loom_attn_kernel attention;
  double attn_eff;                     /* flash: fraction of matrix peak */
  double attn_rate_fwd, attn_rate_bwd; /* loom kernel: (query,key) pairs x head_dim per s */
  /* loom kernel with attn_tile (loom bench since 2026-11-29): the pairs above are those of the
   * kernel's tile grid (a causal diagonal tile is computed whole), and each query row a kernel
   * call processes costs head_dim / attn_row_rate besides (loading and transposing its q, the
   * per-tile rescales, the final normalisation and store; 0 = no such term) */
  double attn_row_rate_fwd, attn_row_rate_bwd;
  /* loom kernel: seconds per query row a call processes whatever head_dim (the online
   * softmax's running max and sum and their rescales per key tile: a 64-key tile's 64 exps
   * and compares cost the same at head_dim 16 as at 128; 0 = none, the time all in head_dim):
   * without it the fwd at head_dim 32 was priced 34% short on the AMX Xeon */
  double attn_row_s_fwd, attn_row_s_bwd;
  /* tile quantisation (0 = not modelled): a GEMM computes whole output tiles of
   * gemm_tile[0] x gemm_tile[1]; flash attention processes each (varlen) segment in tiles of
   * attn_tile[0] queries x attn_tile[1] keys and pads the head dimension to a multiple of
   * attn_hdim_step */
  double gemm_tile[2], attn_tile[2], attn_hdim_step;
  double mem_fragmentation;            /* allocator headroom: a share of the allocated bytes */
  /* node */
  int devices_per_node;
  bool timeshare;      /* more ranks than devices on a node share them in time (CPU cores) */
  double coll_ranks_per_core; /* ranks per core while `loom bench` timed the collectives (1: a
                                 core each; 2: the 4 ranks of two namespaced nodes on 2 cores):
                                 their times hold that much time-sharing already; a tier's own
                                 ranks_per_core overrides it */
  /* network */
  int n_tiers;
  loom_hw_tier tier[LOOM_HW_MAX_TIERS];
  /* runtime: the training engine this profile models */
  bool engine_loom_cpu;  /* loom's CPU executor: fp32 params/grads/activations; else mixed
                            precision (16-bit params, grads and activations, fp32 optimizer) */
  bool bf16_native;      /* loom-cpu: the bf16 matmuls run natively on 2-byte weights (no
                            rounded fp32 copy of the weights); else rounded fp32 inputs */
  bool tp_overlap;       /* backward TP communication overlaps weight-gradient GEMMs */
  bool dp_overlap;       /* data-parallel bucket reductions overlap the backward */
  double optimizer_bytes_per_param; /* memory traffic of the optimizer step per parameter */
  double overlap_slowdown; /* fraction of overlapped communication that still costs compute
                              time (collective kernels take SMs and memory bandwidth) */
  bool p2p_overlap;        /* pipeline sends overlap compute (else they block the sender) */
  /* the framework's tensor parallelism: Megatron (one all-reduce per column-parallel group of
   * GEMMs) or PyTorch DTensor parallelize_module (one per ColwiseParallel module: q, k, v,
   * gate and up each all-reduce their input gradient; nothing overlapped) */
  bool tp_dtensor;
  bool vision_sp_local_windows; /* Ulysses splits the encoder's patches at window boundaries:
                                   windowed blocks run locally, all-to-alls only in full blocks */
  bool elementwise_eager;  /* norms and rotary as PyTorch eager ops (fp32 upcasts, one kernel
                              per op) rather than fused kernels */
  /* host dispatch (runtime.host_dispatch_us; 0 = not modelled): seconds of CPU per op the
   * framework issues, through DTensor's dispatcher (an op on DTensor arguments: sharding
   * propagation, redistribution, the local op) or PyTorch's plain eager dispatcher. The CPU
   * issues asynchronously ahead of the GPU; between two host synchronisations (a module of
   * the cost model) the time is max(device time, host time). */
  double host_dtensor, host_eager;
  bool ep_overlap;         /* expert-parallel dispatch/combine all-to-alls overlap the compute
                              of another micro-batch (Megatron's moe_a2a_overlap) */
  loom_hw_recipe recipe;   /* the framework the profile models (runtime.recipe) */
  char gemm_backend[16];   /* runtime.gemm_backend: the GEMM backend loom bench's gemm section
                              measured peak_flops through (onednn, openblas; its bf16 path may
                              run another kernel, e.g. loom's AMX tiles; "": not recorded) */
} loom_hw_profile;

/* Defaults (every field set; a generic GPU-like device), then a file or a name over them.
 * NAME resolves to configs/hardware/NAME.yaml under the current directory, then under
 * LOOM_SOURCE_DIR; "this-machine" also looks at $LOOM_HW_PROFILE and ~/.loom/hardware. */
void loom_hw_defaults(loom_hw_profile *hw);
int loom_hw_load(loom_hw_profile *hw, const char *name_or_path);
int loom_hw_load_file(loom_hw_profile *hw, const char *path);
/* Parse YAML text (errors name `filename`:line and the key). */
int loom_hw_parse(loom_hw_profile *hw, const char *text, const char *filename);
/* Cross-field checks: positive peaks and bandwidths, sorted efficiency curve, tiers whose
 * domains grow, the last tier unbounded. */
int loom_hw_check(const loom_hw_profile *hw);
/* Profile as YAML text (malloc'd); `notes` (may be NULL) are written as comments on top. */
char *loom_hw_to_yaml(const loom_hw_profile *hw, const char *notes);
/* Print the shipped profiles (and this machine's, when written) with their descriptions. */
void loom_hw_list(void);

/* ---- time primitives -------------------------------------------------------------------- */
/* Share of a GEMM's computed output that is useful under tile quantisation, m x n over the
 * tiles covering it (1 when the profile has no gemm_tile). */
double loom_hw_gemm_quant(const loom_hw_profile *hw, double m, double n);
/* Fraction of peak of an (m x k) @ (k x n) GEMM in a role. */
double loom_hw_gemm_eff(const loom_hw_profile *hw, loom_gemm_role role, double m, double n,
                        double k);
/* One GEMM, `batch` times: 2*m*n*k*batch FLOPs. LOOM_DT_FP8: at the FP8 peak (the bf16 one
 * without) and on the FP8 curve when the profile has one. */
double loom_hw_gemm_time(const loom_hw_profile *hw, loom_hw_dtype dt, loom_gemm_role role,
                         double m, double n, double k, double batch);
/* A grouped GEMM (MoE experts): `groups` GEMMs of rows x n x k each, one kernel. Computed as
 * one GEMM of groups*rows rows (the same output tiles, the same k), each group's rows padded
 * to whole tiles, times the profile's factor by rows per group (grouped_gemm_efficiency). */
double loom_hw_grouped_gemm_time(const loom_hw_profile *hw, loom_hw_dtype dt, loom_gemm_role role,
                                 double groups, double rows, double n, double k);
/* loom's flash attention kernel (device.attention: loom): `pairs` (query, key) pairs computed
 * and `rows` query rows processed, at head dimension D, per (batch, head) summed: pairs x D /
 * attn_rate + rows x (D / attn_row_rate + attn_row_s), the row terms only where the profile
 * measured them. */
double loom_hw_loom_attn_time(const loom_hw_profile *hw, bool backward, double pairs, double rows,
                              double D);
/* The (query, key) pairs loom's kernel computes for one causal sequence of T tokens: whole
 * tiles of attn_tile on and below the diagonal (partial tiles at the end as they are); the
 * causal T (T + 1) / 2 when the profile has no attn_tile. */
double loom_hw_causal_tile_pairs(const loom_hw_profile *hw, double T);
/* One vector kernel over `elements` elements moving `bytes` bytes and doing `flops`. */
double loom_hw_vop_time(const loom_hw_profile *hw, loom_hw_dtype dt, loom_vop v, double elements,
                        double bytes, double flops);

/* A group of `size` ranks whose members are `stride` apart in the rank order (tp stride 1,
 * sp stride tp, dp stride tp*sp, pp stride tp*sp*dp): the tier its traffic crosses (the
 * first tier whose domain holds stride*size ranks). */
int loom_hw_group_tier(const loom_hw_profile *hw, int stride, int size);
/* Time of one collective of `bytes` payload per rank (all-reduce: the buffer; reduce-scatter:
 * the full input; all-gather: the full output; all-to-all: the whole send buffer; send: the
 * message) on a group; 0 for size 1: the bytes each rank moves (comm.h's ring accounting)
 * over the tier's bandwidth times its efficiency for that collective, plus one latency per
 * algorithm step (ring: p-1 per phase; tree all-reduce: 2*ceil(log2 p), same bandwidth term,
 * as NCCL's double binary tree reaches the ring's bus bandwidth). */
double loom_hw_coll_time(const loom_hw_profile *hw, loom_coll_kind kind, double bytes,
                         int stride, int size);
/* The time-sharing a group's collectives were timed under: its tier's ranks_per_core, else
 * node.collective_ranks_per_core; never below 1. */
double loom_hw_coll_sharing(const loom_hw_profile *hw, int stride, int size);
/* Collectives under time-sharing. `as_timed`: their times as the profile gives them; `alone`:
 * the same, each over the sharing its tier was timed under (loom_hw_coll_sharing). Where
 * time-sharing slows the compute by `slow`, each is slowed by what `slow` exceeds its tier's
 * sharing, never below its time: max(as_timed, slow x alone) (exact when every tier's sharing
 * lies on the same side of `slow`). */
double loom_hw_coll_priced(double as_timed, double alone, double slow);
/* An all-to-all whose group spans several domains of the tier below the one that holds it (an
 * expert-parallel group over nodes) sends each member's share for the peers of its own domain
 * over the inner tier and the rest over the outer one, at the same time: the longer of the two
 * (nccl-tests: a GPU's remote peers get its NIC's bandwidth, its local ones NVLink), plus one
 * latency per peer domain (the sends are posted together, not in ring steps). */
/* Bytes one rank sends for a collective of `bytes` on p ranks under the ring algorithm (the
 * formulas of comm.h: all-reduce 2(p-1)/p n, reduce-scatter/all-gather/all-to-all (p-1)/p n,
 * send n). */
double loom_hw_ring_bytes(loom_coll_kind kind, double bytes, int p);

/* ---- MFU (src/sim/mfu.c) ---- */
/* The instruction peak (FLOP/s) of dtype (fp32 or bf16; 0 for the others) that `threads`
 * threads reach at once, from the profile's device.instruction_peak: the entry for that count;
 * between or beyond entries, the per-thread figure of the nearest smaller entry times threads
 * (a thread among fewer runs at least as fast: the figure errs high, MFU low); below the first
 * entry, the first entry's figure (fewer threads never reach more). 0 without the key. basis[]
 * (may be NULL) gets how it was taken ("2 threads", "3 threads = 3 x the per-thread figure of
 * 2 threads"). */
double loom_hw_instruction_peak(const loom_hw_profile *hw, loom_hw_dtype dt, int threads,
                                char *basis, size_t n);

/* Where a run's MFU peak comes from. */
typedef struct {
  double peak;         /* FLOP/s per rank MFU is taken against; 0: none (why says why) */
  double library_peak; /* the library's GEMM figure for the same threads (peak_flops x threads),
                          FLOP/s; 0 beside an instruction peak when the profile measured none */
  bool instruction;    /* peak is the profile's instruction peak (else the library's figure) */
  const char *kind;    /* "instruction", "library" (a CPU profile's GEMM figure), "device" (an
                          accelerator's matrix peak); "" when there is no peak */
  char name[64];       /* the peak in a few words: "AMX tdpbf16ps instruction peak", ... */
  loom_hw_unit unit;   /* instruction: the unit of the dtype's figure */
  int threads;         /* the threads the peak counts (a CPU profile's; 1 otherwise) */
  char profile[512];   /* the profile's file ("" when none) */
  char why[640];       /* one line: the peak and its source, or why MFU is not shown */
} loom_mfu_source;
/* The MFU peak of one rank running `threads` threads (>= 1) of a run in dtype ("fp32" or
 * "bf16") on the machine of profile hw: a CPU profile (engine loom-cpu) with an instruction
 * peak gives it (loom_hw_instruction_peak), with the library's GEMM figure beside it in why;
 * without one, the library's one-core GEMM peak times threads; an accelerator profile's
 * device peak as it is. Returns src->peak. */
double loom_mfu_peak_hw(const loom_hw_profile *hw, const char *dtype, int threads,
                        loom_mfu_source *src);
/* The same for this machine's profile (loom_hw_load "this-machine"), threads capped at the
 * online cores; no profile: 0 with why saying to run loom bench. */
double loom_mfu_source_get(const char *dtype, int threads, loom_mfu_source *src);
/* The peak (FLOP/s) of dtype ("fp32" or "bf16") in this machine's hardware profile (`loom
 * bench` writes it; see loom_hw_load "this-machine") for one thread (loom_mfu_peak_from with
 * 1), or 0 with why[] saying why MFU is not shown. */
double loom_mfu_peak(const char *dtype, char *why, size_t n);
/* The peak of one rank that runs `threads` threads (loom_mfu_source_get's): the instruction
 * peak of min(threads, online cores) where the profile has one, else a CPU profile's one-core
 * GEMM peak times that; an accelerator profile's device peak as it is. The profile's file goes
 * to profile[] ("" when there is none). */
double loom_mfu_peak_from(const char *dtype, int threads, char *profile, size_t np, char *why,
                          size_t n);
/* MFU, the one definition (progress line, summary.json, registry, sweep summary, loom sim):
 * tokens * flops_per_token / (seconds * peak_flops), a fraction, with flops_per_token and
 * peak_flops per rank (or both per job); NAN without a peak or a time. The callers show no
 * figure above 1: such a peak is not what this run can reach, and MFU is then absent. */
double loom_mfu(double tokens, double seconds, double flops_per_token, double peak_flops);

#endif

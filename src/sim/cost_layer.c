/* Ops of one transformer layer for one micro-batch on one rank: forward, input gradient and
 * weight gradient, with recomputation, tensor/sequence parallel and Ulysses communication,
 * and ZeRO-3 parameter gathering. Two op sequences:
 *  - loom's CPU executor (src/model/decoder_block.c, op for op: separate q/k/v and gate/up
 *    GEMMs sharing one bf16 conversion of their input, fused residual+norm and bias+GELU,
 *    flash attention, every communication blocking);
 *  - a GPU training stack in the style of Megatron-LM (fused QKV and gate/up GEMMs, fused
 *    bias-activation and bias-dropout-add kernels, backward tensor-parallel communication
 *    overlapped with the weight-gradient GEMM, the sequence-parallel all-gather redone in
 *    backward instead of stored).
 * The MLP is the dense one, or in an MoE layer the routed experts (src/sim/cost_moe.c) and the
 * shared expert (the dense MLP at the shared expert's size). With FP8 (Transformer Engine) the
 * layer's linears run at the FP8 rate with their casts.
 * Shapes per rank: N rows into the linears (B*T/sp), Nr residual rows (N/tp with sequence
 * parallelism), C hidden, lh/lkv local heads, li local intermediate. */
#include <string.h>

#include "sim/sim_internal.h"

typedef struct {
  double N, Nr, C, QD, KD, li, e;
  bool gpt2, llama, bias, seqpar, uly, bf16, qk_norm;
  bool moe;   /* the MLP is routed experts (cost_moe.c), plus a shared expert when li > 0 */
  int tp, sp, tps, sps;
} shape;

static shape shape_of(const loom_sim_ctx *c) {
  const loom_sim_strategy *st = c->st;
  const loom_model_spec *s = c->spec;
  shape x;
  x.N = c->N;
  x.Nr = c->Nr;
  x.C = s->hidden;
  x.QD = c->lh * s->head_dim;
  x.KD = c->lkv * s->head_dim;
  x.li = c->li;
  x.e = c->act_bytes;
  x.gpt2 = s->arch == LOOM_ARCH_GPT2;
  x.llama = !x.gpt2;
  x.bias = s->qkv_bias;
  x.qk_norm = s->qk_norm;
  x.seqpar = st->seq_par && st->tp > 1;
  x.uly = st->sp > 1;
  x.bf16 = c->loom_cpu && st->dtype == LOOM_DT_BF16;
  x.tp = st->tp;
  x.sp = st->sp;
  x.tps = sim_tp_stride(st);
  x.sps = sim_sp_stride(st);
  x.moe = c->moe_layer;
  if (x.moe) x.li = (double)s->moe.shared_intermediate / st->tp; /* the shared expert (0: none) */
  return x;
}

static loom_vop norm_vop(const shape *x, bool bwd) {
  if (x->gpt2) return bwd ? LOOM_VOP_LAYERNORM_BWD : LOOM_VOP_LAYERNORM_FWD;
  return bwd ? LOOM_VOP_RMSNORM_BWD : LOOM_VOP_RMSNORM_FWD;
}

/* ---- loom's CPU executor ------------------------------------------------------------------ */

/* the bf16 path converts (or, on OpenBLAS, rounds) every matmul input to bf16 once */
static void loom_to_bf16(sim_ops *b, const shape *x, double elements) {
  if (x->bf16) sim_vec(b, "to bf16", LOOM_VOP_ROUND, elements, 6, 1);
}

/* y = x W^T (+ bias in the GEMM); `convert`: the input is converted here (not reused) */
static void loom_linear_fwd(sim_ops *b, const shape *x, const char *name, double in, double out,
                            bool convert) {
  if (convert) loom_to_bf16(b, x, x->N * in);
  sim_gemm(b, name, LOOM_GEMM_FWD, x->N, out, in, 1);
}

/* dx = dy W (written), dW += dy^T x, db += colsum(dy) */
static void loom_linear_bwd(sim_ops *b, const shape *x, const char *dname, const char *wname,
                            double in, double out, bool bias, bool convert_x) {
  if (bias) sim_vec(b, "bias grad", LOOM_VOP_ADD, x->N * out, x->e, 1);
  loom_to_bf16(b, x, x->N * out);
  if (convert_x) loom_to_bf16(b, x, x->N * in);
  sim_gemm(b, dname, LOOM_GEMM_DGRAD, x->N, in, out, 1);
  loom_sim_phase keep = b->phase;
  if (!b->recompute) b->phase = LOOM_PHASE_BWD_W;
  sim_gemm(b, wname, LOOM_GEMM_WGRAD, out, in, x->N, 1);
  b->phase = keep;
}

/* dec_reduce_rows: partial sums (N,C) -> (Nr,C); no tensor parallelism: nothing */
static void loom_reduce_rows(sim_ops *b, const shape *x, const char *name) {
  if (x->tp <= 1) return;
  if (x->seqpar) {
    sim_comm(b, name, LOOM_COLL_REDUCE_SCATTER, x->N * x->C * x->e, x->tps, x->tp, 0);
    return;
  }
  sim_comm(b, name, LOOM_COLL_ALLREDUCE, x->N * x->C * x->e, x->tps, x->tp, 0);
  sim_vec(b, "copy", LOOM_VOP_COPY, x->N * x->C, 2 * x->e, 0);
}

static void loom_gather_rows(sim_ops *b, const shape *x, const char *name) {
  if (x->seqpar) sim_comm(b, name, LOOM_COLL_ALLGATHER, x->N * x->C * x->e, x->tps, x->tp, 0);
}

/* Ulysses re-layout of a (N, width) tensor: pack, all-to-all, unpack */
static void loom_a2a(sim_ops *b, const shape *x, const char *name, double width) {
  if (!x->uly) return;
  sim_vec(b, "a2a pack", LOOM_VOP_COPY, x->N * width, 2 * x->e, 0);
  sim_comm(b, name, LOOM_COLL_ALLTOALL, x->N * width * x->e, x->sps, x->sp, 0);
  sim_vec(b, "a2a unpack", LOOM_VOP_COPY, x->N * width, 2 * x->e, 0);
}

/* the dense MLP (or an MoE layer's shared expert) after the second norm */
static void loom_mlp_forward(sim_ops *b, const shape *x) {
  double C = x->C, N = x->N;
  loom_gather_rows(b, x, "tp all-gather");
  if (x->gpt2) {
    loom_linear_fwd(b, x, "mlp up", C, x->li, true);
    sim_vec(b, "bias-gelu", LOOM_VOP_GELU_FWD, N * x->li, 2 * x->e, 20);
  } else {
    loom_linear_fwd(b, x, "mlp gate", C, x->li, true);
    loom_linear_fwd(b, x, "mlp up", C, x->li, false);
    sim_vec(b, "swiglu", LOOM_VOP_SWIGLU_FWD, N * x->li, 3 * x->e, 20);
  }
  loom_linear_fwd(b, x, "mlp down", x->li, C, true);
  loom_reduce_rows(b, x, "tp reduce");
}

static void loom_mlp_backward(sim_ops *b, const shape *x) {
  double C = x->C, N = x->N, li = x->li;
  loom_gather_rows(b, x, "tp all-gather");
  loom_linear_bwd(b, x, "mlp down dgrad", "mlp down wgrad", li, C, false, true);
  if (x->gpt2) {
    sim_vec(b, "gelu bwd", LOOM_VOP_GELU_BWD, N * li, 3 * x->e, 25);
    loom_linear_bwd(b, x, "mlp up dgrad", "mlp up wgrad", C, li, true, true);
  } else {
    sim_vec(b, "swiglu bwd", LOOM_VOP_SWIGLU_BWD, N * li, 5 * x->e, 25);
    loom_linear_bwd(b, x, "mlp gate dgrad", "mlp gate wgrad", C, li, false, true);
    loom_linear_bwd(b, x, "mlp up dgrad", "mlp up wgrad", C, li, false, false);
  }
  loom_reduce_rows(b, x, "tp reduce");
}

static void loom_forward(sim_ops *b, const shape *x) {
  double C = x->C, N = x->N, Nr = x->Nr;
  sim_vec(b, "norm1", norm_vop(x, false), Nr * C, 2 * x->e, 8);
  loom_gather_rows(b, x, "tp all-gather");
  loom_linear_fwd(b, x, "q", C, x->QD, true);
  loom_linear_fwd(b, x, "k", C, x->KD, false);
  loom_linear_fwd(b, x, "v", C, x->KD, false);
  if (x->qk_norm) sim_vec(b, "q/k norm", LOOM_VOP_RMSNORM_FWD, N * (x->QD + x->KD), 2 * x->e, 8);
  if (x->llama) sim_vec(b, "rope", LOOM_VOP_ROPE, N * (x->QD + x->KD), 2 * x->e, 6);
  loom_a2a(b, x, "ulysses a2a q", x->QD);
  loom_a2a(b, x, "ulysses a2a k", x->KD);
  loom_a2a(b, x, "ulysses a2a v", x->KD);
  sim_cp_attention(b, false);
  loom_a2a(b, x, "ulysses a2a out", x->QD);
  loom_linear_fwd(b, x, "o", x->QD, C, true);
  loom_reduce_rows(b, x, "tp reduce");
  sim_vec(b, "residual", LOOM_VOP_ADD, Nr * C, 3 * x->e, 1); /* fused with norm2 */
  sim_vec(b, "norm2", norm_vop(x, false), Nr * C, 2 * x->e, 8);
  if (x->moe) sim_moe_forward(b);
  if (x->li > 0) loom_mlp_forward(b, x);
  sim_vec(b, "residual", LOOM_VOP_ADD, Nr * C, 3 * x->e, 1);
}

static void loom_backward(sim_ops *b, const shape *x) {
  double C = x->C, N = x->N, Nr = x->Nr;
  /* MLP */
  if (x->gpt2) sim_vec(b, "bias grad", LOOM_VOP_ADD, Nr * C, x->e, 1);
  if (x->li > 0) loom_mlp_backward(b, x);
  if (x->moe) sim_moe_backward(b);
  sim_vec(b, "norm2 bwd", norm_vop(x, true), Nr * C, 3 * x->e, 12);
  /* attention */
  if (x->gpt2) sim_vec(b, "bias grad", LOOM_VOP_ADD, Nr * C, x->e, 1);
  loom_gather_rows(b, x, "tp all-gather");
  loom_linear_bwd(b, x, "o dgrad", "o wgrad", x->QD, C, false, true);
  loom_a2a(b, x, "ulysses a2a dout", x->QD);
  sim_cp_attention(b, true);
  loom_a2a(b, x, "ulysses a2a dq", x->QD);
  loom_a2a(b, x, "ulysses a2a dk", x->KD);
  loom_a2a(b, x, "ulysses a2a dv", x->KD);
  if (x->llama) sim_vec(b, "rope bwd", LOOM_VOP_ROPE, N * (x->QD + x->KD), 2 * x->e, 6);
  if (x->qk_norm)
    sim_vec(b, "q/k norm bwd", LOOM_VOP_RMSNORM_BWD, N * (x->QD + x->KD), 3 * x->e, 12);
  loom_linear_bwd(b, x, "q dgrad", "q wgrad", C, x->QD, x->bias, true);
  loom_linear_bwd(b, x, "k dgrad", "k wgrad", C, x->KD, x->bias, false);
  loom_linear_bwd(b, x, "v dgrad", "v wgrad", C, x->KD, x->bias, false);
  loom_reduce_rows(b, x, "tp reduce");
  sim_vec(b, "norm1 bwd", norm_vop(x, true), Nr * C, 3 * x->e, 12);
}

/* ---- GPU stack (Megatron-LM style) -------------------------------------------------------- */

/* host dispatch (runtime.host_dispatch_us) of the GEMM added at `mark` standing for `linears`
 * nn.Linear modules of a HuggingFace decoder ((batch, tokens, hidden) inputs), `ops` aten ops
 * each (sim_linear_*_ops): through DTensor under DTensor tensor parallelism, else eager */
static void lin_host(sim_ops *b, const shape *x, int mark, double linears, double ops) {
  bool dt = x->tp > 1 && b->c->hw->tp_dtensor;
  sim_host(b, mark, dt ? linears * ops : 0, dt ? 0 : linears * ops);
}

static void tp_reduce(sim_ops *b, const shape *x, const char *name, double budget) {
  loom_coll_kind k = x->seqpar ? LOOM_COLL_REDUCE_SCATTER : LOOM_COLL_ALLREDUCE;
  int mark = b->n;
  sim_comm(b, name, k, x->N * x->C * x->e, x->tps, x->tp, budget);
  if (b->c->hw->tp_dtensor) sim_host(b, mark, 1, 0); /* one DTensor redistribute */
}

static void tp_gather(sim_ops *b, const shape *x, const char *name, double budget) {
  if (x->seqpar) sim_comm(b, name, LOOM_COLL_ALLGATHER, x->N * x->C * x->e, x->tps, x->tp, budget);
}

static void a2a(sim_ops *b, const shape *x, const char *name, double width) {
  if (x->uly) sim_comm(b, name, LOOM_COLL_ALLTOALL, x->N * width * x->e, x->sps, x->sp, 0);
}

/* the dense MLP (or an MoE layer's shared expert) after the second norm */
static void gpu_mlp_forward(sim_ops *b, const shape *x) {
  double C = x->C, N = x->N, e = x->e;
  tp_gather(b, x, "tp all-gather", 0);
  int m = b->n;
  if (x->gpt2) {
    sim_gemm(b, "mlp up", LOOM_GEMM_FWD, N, x->li, C, 1);
    lin_host(b, x, m, 1, sim_linear_fwd_ops(true));
    sim_vec(b, "bias-gelu", LOOM_VOP_GELU_FWD, N * x->li, 2 * e, 20);
  } else {
    sim_gemm(b, "mlp gate+up", LOOM_GEMM_FWD, N, 2 * x->li, C, 1);
    lin_host(b, x, m, 2, sim_linear_fwd_ops(true));
    sim_vec(b, "swiglu", LOOM_VOP_SWIGLU_FWD, N * x->li, 3 * e, 20);
  }
  m = b->n;
  sim_gemm(b, "mlp down", LOOM_GEMM_FWD, N, C, x->li, 1);
  lin_host(b, x, m, 1, sim_linear_fwd_ops(true));
  tp_reduce(b, x, "tp reduce", 0);
}

static void gpu_forward(sim_ops *b, const shape *x) {
  const loom_sim_strategy *st = b->c->st;
  double C = x->C, N = x->N, Nr = x->Nr, e = x->e, drop = st->dropout ? 1 : 0;
  int m;
  sim_vec(b, "norm1", norm_vop(x, false), Nr * C, 2 * e, 8);
  tp_gather(b, x, "tp all-gather", 0);
  m = b->n;
  sim_gemm(b, "qkv", LOOM_GEMM_FWD, N, x->QD + 2 * x->KD, C, 1);
  lin_host(b, x, m, 3, sim_linear_fwd_ops(true));
  if (x->qk_norm) sim_vec(b, "q/k norm", LOOM_VOP_RMSNORM_FWD, N * (x->QD + x->KD), 2 * e, 8);
  if (x->llama) sim_vec(b, "rope", LOOM_VOP_ROPE, N * (x->QD + x->KD), 2 * e, 6);
  a2a(b, x, "ulysses a2a q", x->QD);
  a2a(b, x, "ulysses a2a k", x->KD);
  a2a(b, x, "ulysses a2a v", x->KD);
  sim_cp_attention(b, false);
  a2a(b, x, "ulysses a2a out", x->QD);
  m = b->n;
  sim_gemm(b, "o", LOOM_GEMM_FWD, N, C, x->QD, 1);
  lin_host(b, x, m, 1, sim_linear_fwd_ops(true));
  tp_reduce(b, x, "tp reduce", 0);
  sim_vec(b, "bias-dropout-add", LOOM_VOP_ADD, Nr * C, 3 * e + drop, 2);
  sim_vec(b, "norm2", norm_vop(x, false), Nr * C, 2 * e, 8);
  if (x->moe) sim_moe_forward(b);
  if (x->li > 0) gpu_mlp_forward(b, x);
  sim_vec(b, "bias-dropout-add", LOOM_VOP_ADD, Nr * C, 3 * e + drop, 2);
}

/* backward of a column-parallel linear (in -> out) whose input was the all-gathered norm
 * output: dgrad, then the input-gradient reduction overlapped with the wgrad GEMM (and, with
 * sequence parallelism, the all-gather of the input redone behind the dgrad GEMM) */
static void gpu_column_bwd(sim_ops *b, const shape *x, const char *dname, const char *wname,
                           double out, int modules, bool bias) {
  bool overlap = b->c->hw->tp_overlap;
  /* DTensor (runtime.tp_style: dtensor): each ColwiseParallel module all-reduces its own input
   * gradient (q, k and v; gate and up); Megatron one per fused GEMM */
  int reductions = b->c->hw->tp_dtensor ? modules : 1;
  int m = b->n;
  double td = sim_gemm(b, dname, LOOM_GEMM_DGRAD, x->N, x->C, out, 1);
  lin_host(b, x, m, modules, sim_linear_dgrad_ops(true));
  if (x->seqpar && !b->recompute) tp_gather(b, x, "tp all-gather (redo)", overlap ? td : 0);
  loom_sim_phase keep = b->phase;
  b->phase = LOOM_PHASE_BWD_W;
  double tw = loom_hw_gemm_time(b->c->hw, b->c->st->dtype, LOOM_GEMM_WGRAD, out, x->C, x->N, 1);
  b->phase = keep;
  for (int i = 0; i < reductions && x->tp > 1; i++)
    tp_reduce(b, x, "tp reduce", overlap ? tw / reductions : 0);
  b->phase = LOOM_PHASE_BWD_W;
  m = b->n;
  sim_gemm(b, wname, LOOM_GEMM_WGRAD, out, x->C, x->N, 1);
  lin_host(b, x, m, modules, sim_linear_wgrad_ops(bias));
  b->phase = keep;
}

static void gpu_mlp_backward(sim_ops *b, const shape *x) {
  double C = x->C, N = x->N, e = x->e;
  loom_sim_phase keep = b->phase;
  tp_gather(b, x, "tp all-gather", 0);
  int m = b->n;
  sim_gemm(b, "mlp down dgrad", LOOM_GEMM_DGRAD, N, x->li, C, 1);
  lin_host(b, x, m, 1, sim_linear_dgrad_ops(true));
  b->phase = LOOM_PHASE_BWD_W;
  m = b->n;
  sim_gemm(b, "mlp down wgrad", LOOM_GEMM_WGRAD, C, x->li, N, 1);
  lin_host(b, x, m, 1, sim_linear_wgrad_ops(x->gpt2));
  b->phase = keep;
  if (x->gpt2) sim_vec(b, "bias-gelu bwd", LOOM_VOP_GELU_BWD, N * x->li, 3 * e, 25);
  else sim_vec(b, "swiglu bwd", LOOM_VOP_SWIGLU_BWD, N * x->li, 5 * e, 25);
  gpu_column_bwd(b, x, "mlp up dgrad", "mlp up wgrad", x->li * (x->llama ? 2 : 1), x->llama ? 2 : 1,
                 x->gpt2);
}

static void gpu_backward(sim_ops *b, const shape *x) {
  const loom_sim_strategy *st = b->c->st;
  double C = x->C, N = x->N, Nr = x->Nr, e = x->e;
  loom_sim_phase keep = b->phase;
  /* MLP */
  if (st->dropout) sim_vec(b, "dropout bwd", LOOM_VOP_DROPOUT, Nr * C, 2 * e + 1, 2);
  if (x->gpt2) sim_vec(b, "bias grad", LOOM_VOP_ADD, Nr * C, e, 1);
  if (x->li > 0) gpu_mlp_backward(b, x);
  if (x->moe) sim_moe_backward(b);
  sim_vec(b, "norm2 bwd", norm_vop(x, true), Nr * C, 3 * e, 12);
  sim_vec(b, "residual grad", LOOM_VOP_ADD, Nr * C, 3 * e, 1);
  /* attention */
  if (st->dropout) sim_vec(b, "dropout bwd", LOOM_VOP_DROPOUT, Nr * C, 2 * e + 1, 2);
  if (x->gpt2) sim_vec(b, "bias grad", LOOM_VOP_ADD, Nr * C, e, 1);
  tp_gather(b, x, "tp all-gather", 0);
  int m = b->n;
  sim_gemm(b, "o dgrad", LOOM_GEMM_DGRAD, N, x->QD, C, 1);
  lin_host(b, x, m, 1, sim_linear_dgrad_ops(true));
  b->phase = LOOM_PHASE_BWD_W;
  m = b->n;
  sim_gemm(b, "o wgrad", LOOM_GEMM_WGRAD, C, x->QD, N, 1);
  lin_host(b, x, m, 1, sim_linear_wgrad_ops(x->gpt2));
  b->phase = keep;
  a2a(b, x, "ulysses a2a dout", x->QD);
  sim_cp_attention(b, true);
  a2a(b, x, "ulysses a2a dq", x->QD);
  a2a(b, x, "ulysses a2a dk", x->KD);
  a2a(b, x, "ulysses a2a dv", x->KD);
  if (x->llama) sim_vec(b, "rope bwd", LOOM_VOP_ROPE, N * (x->QD + x->KD), 2 * e, 6);
  if (x->qk_norm) sim_vec(b, "q/k norm bwd", LOOM_VOP_RMSNORM_BWD, N * (x->QD + x->KD), 3 * e, 12);
  gpu_column_bwd(b, x, "qkv dgrad", "qkv wgrad", x->QD + 2 * x->KD, 3, x->bias || x->gpt2);
  sim_vec(b, "norm1 bwd", norm_vop(x, true), Nr * C, 3 * e, 12);
  sim_vec(b, "residual grad", LOOM_VOP_ADD, Nr * C, 3 * e, 1);
}

/* ZeRO-3: the layer's parameters gathered before its forward and its backward, its gradients
 * reduce-scattered after its backward (every micro-batch); prefetched behind the previous
 * layer's compute when the runtime overlaps data-parallel communication. The routed experts of
 * an MoE layer over their own replicas (the expert-data-parallel ranks). */
static void zero3_gather(sim_ops *b, double budget) {
  const loom_sim_ctx *c = b->c;
  const loom_sim_strategy *st = c->st;
  if (st->zero != 3) return;
  double Pe, P = loom_sim_layer_params(c->spec, st, c->moe_layer, &Pe);
  double pb = c->loom_cpu ? 4 : (st->dtype == LOOM_DT_FP32 ? 4 : 2);
  budget = c->hw->dp_overlap ? budget : 0;
  sim_comm(b, "zero-3 gather", LOOM_COLL_ALLGATHER, P * pb, sim_grad_stride(st),
           sim_grad_size(st), budget);
  sim_comm(b, "zero-3 gather (experts)", LOOM_COLL_ALLGATHER, Pe * pb, sim_ep(st) * sim_etp(st),
           sim_edp(st), budget);
  if (c->loom_cpu) { /* the owned piece copied in, the released pages faulted back, bf16 copy */
    double own = P / sim_grad_size(st) + Pe / sim_edp(st);
    P += Pe;
    sim_vec(b, "zero-3 own copy", LOOM_VOP_COPY, own, 8, 0);
    sim_vec(b, "zero-3 page faults", LOOM_VOP_FAULT, P * (st->dtype == LOOM_DT_BF16 ? 2 : 1), 4, 0);
    if (st->dtype == LOOM_DT_BF16) sim_vec(b, "zero-3 bf16 copy", LOOM_VOP_ROUND, P, 8, 1);
  }
}

static void zero3_scatter(sim_ops *b, double budget) {
  const loom_sim_ctx *c = b->c;
  const loom_sim_strategy *st = c->st;
  if (st->zero != 3) return;
  double Pe, P = loom_sim_layer_params(c->spec, st, c->moe_layer, &Pe);
  double gb = c->loom_cpu ? 4 : (st->dtype == LOOM_DT_FP32 ? 4 : 2);
  budget = c->hw->dp_overlap ? budget : 0;
  sim_comm(b, "zero-3 grad reduce-scatter", LOOM_COLL_REDUCE_SCATTER, P * gb, sim_grad_stride(st),
           sim_grad_size(st), budget);
  sim_comm(b, "zero-3 grad reduce-scatter (experts)", LOOM_COLL_REDUCE_SCATTER, Pe * gb,
           sim_ep(st) * sim_etp(st), sim_edp(st), budget);
  if (c->loom_cpu) { /* the layer's gradient pages (released after the scatter) faulted back on
                        the next backward; a fresh receive buffer; the shard accumulated */
    double own = P / sim_grad_size(st) + Pe / sim_edp(st);
    sim_vec(b, "zero-3 grad page faults", LOOM_VOP_FAULT, P + Pe + own, 4, 0);
    sim_vec(b, "zero-3 shard add", LOOM_VOP_ADD, own, 12, 1);
  }
}

static double phase_compute(const loom_sim_op *ops, int from, int to) {
  double t = 0;
  for (int i = from; i < to; i++)
    if (ops[i].type != LOOM_OP_COMM) t += ops[i].time;
  return t;
}

/* Expert all-to-alls overlapped with another micro-batch's compute, as Megatron-LM pairs them
 * (--overlap-moe-expert-parallel-comm; megatron/core/models/common/model_chunk_schedule_plan.py,
 * TransformerLayerSchedulePlan.run: the forward of one micro-batch beside the backward of
 * another, in three slots of the communication and compute streams):
 *   comm: combine bwd        | dispatch fwd, dispatch bwd       | combine fwd
 *   comp: pre-dispatch fwd   | experts bwd (dgrad, wgrad), fwd  | pre-dispatch bwd
 * (pre-dispatch: attention, norms, router, permutation). Each all-to-all may hide behind its
 * slot's compute (the two dispatches share theirs); budgets[] by SIM_A2A_*. Nothing overlaps
 * when the runtime does not, on loom's executor (blocking MPI_Alltoallv) or with one
 * micro-batch (no other micro-batch to pair with). */
static void a2a_budgets(const loom_sim_ctx *c, const shape *x,
                        void (*fwd)(sim_ops *, const shape *),
                        void (*bwd)(sim_ops *, const shape *), double *budgets) {
  const loom_sim_strategy *st = c->st;
  for (int i = 0; i < 4; i++) budgets[i] = 0;
  bool on = st->ep_overlap > 0 || (st->ep_overlap < 0 && c->hw->ep_overlap);
  if (!on || c->loom_cpu || !x->moe || sim_ep(st) < 2 || st->microbatches < 2) return;
  loom_sim_op probe[LOOM_SIM_MAX_OPS];
  sim_ops p;
  sim_ops_init(&p, c, probe, LOOM_SIM_MAX_OPS);
  p.fp8 = st->fp8;
  fwd(&p, x);
  int nf = p.n;
  p.phase = LOOM_PHASE_BWD_IN;
  bwd(&p, x);
  /* the compute between the all-to-alls: forward pre | experts | post, backward pre | experts
   * | post (the post parts join the pre-dispatch ones: unpermutation, residual) */
  double part[2][3] = {{0}};
  for (int i = 0, seg = 0, dir = 0; i < p.n; i++) {
    if (i == nf) dir = 1, seg = 0;
    const char *n = probe[i].name;
    if (!strncmp(n, "ep dispatch", 11) || !strncmp(n, "ep combine", 10)) {
      if (probe[i].hidden || i + 1 >= p.n || strcmp(probe[i + 1].name, n)) seg++;
      continue;
    }
    if (probe[i].type != LOOM_OP_COMM) part[dir][seg < 3 ? seg : 2] += probe[i].time;
  }
  double fwd_pre = part[0][0] + part[0][2], bwd_pre = part[1][0] + part[1][2];
  budgets[SIM_A2A_COMBINE_BWD] = fwd_pre;
  budgets[SIM_A2A_DISPATCH] = budgets[SIM_A2A_DISPATCH_BWD] = (part[0][1] + part[1][1]) / 2;
  budgets[SIM_A2A_COMBINE] = bwd_pre;
}

int loom_sim_layer_ops(const loom_sim_ctx *c, loom_sim_op *ops, int cap) {
  sim_ops b;
  sim_ops_init(&b, c, ops, cap);
  shape x = shape_of(c);
  void (*fwd)(sim_ops *, const shape *) = c->loom_cpu ? loom_forward : gpu_forward;
  void (*bwd)(sim_ops *, const shape *) = c->loom_cpu ? loom_backward : gpu_backward;
  b.fp8 = c->st->fp8 && !c->loom_cpu; /* the layer's linears (Transformer Engine) */
  a2a_budgets(c, &x, fwd, bwd, b.a2a_budget);
  /* forward */
  loom_sim_op probe[LOOM_SIM_MAX_OPS];
  sim_ops p;
  sim_ops_init(&p, c, probe, LOOM_SIM_MAX_OPS);
  p.fp8 = b.fp8;
  fwd(&p, &x);
  double t_fwd = phase_compute(probe, 0, p.n);
  zero3_gather(&b, t_fwd);
  /* host dispatch: the forward, then recomputation + backward, each a module; the stage's
   * identical layers run back to back with no host synchronisation between them (the seed's
   * Qwen2_5_VLDecoderLayer has none), so per layer the queue's steady state max(device, host),
   * and the first layer's start-up once per run (loom_sim_cost_of) */
  sim_module_chained(&b);
  fwd(&b, &x);
  b.module = 0;
  /* backward, with the recomputation first */
  b.phase = LOOM_PHASE_BWD_IN;
  zero3_gather(&b, t_fwd);
  sim_module_chained(&b);
  b.recompute = true;
  if (c->st->recompute == LOOM_RECOMPUTE_FULL) {
    fwd(&b, &x);
  } else if (c->st->recompute == LOOM_RECOMPUTE_SELECTIVE && c->hw->attention == LOOM_ATTN_UNFUSED) {
    sim_cp_attention(&b, false); /* only the attention core: its T x T tensors were not kept */
  }
  b.recompute = false;
  int mark = b.n;
  bwd(&b, &x);
  b.module = 0;
  zero3_scatter(&b, c->hw->dp_overlap ? phase_compute(ops, mark, b.n) : 0);
  return b.n;
}

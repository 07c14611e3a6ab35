/* Ops of the two ends of the decoder for one micro-batch on one rank: the (vocabulary-
 * parallel) embedding on the first stage, and on the last the final norm, the LM head GEMM
 * and the (vocabulary-parallel) cross-entropy, whose softmax statistics are all-reduced over
 * the tensor-parallel ranks (src/model/decoder_ends.c). */
#include <math.h>
#include <string.h>

#include "sim/sim_internal.h"

static bool gpt2(const loom_sim_ctx *c) { return c->spec->arch == LOOM_ARCH_GPT2; }

static void zero3_ends(sim_ops *b, double params) {
  const loom_sim_strategy *st = b->c->st;
  if (st->zero != 3) return;
  double pb = b->c->loom_cpu ? 4 : (st->dtype == LOOM_DT_FP32 ? 4 : 2);
  sim_comm(b, "zero-3 gather", LOOM_COLL_ALLGATHER, params * pb, sim_grad_stride(st),
           sim_grad_size(st), 0);
}

int loom_sim_embed_ops(const loom_sim_ctx *c, loom_sim_op *ops, int cap) {
  const loom_sim_strategy *st = c->st;
  sim_ops b;
  sim_ops_init(&b, c, ops, cap);
  double N = c->N, Nr = c->Nr, C = c->spec->hidden, e = c->act_bytes;
  int tp = st->tp;
  bool seqpar = st->seq_par && tp > 1;
  /* ZeRO-3 gathers the rank's whole "ends" unit (both ends when one rank holds them) */
  double P = loom_sim_rank_params(c->spec, tp, 0, true, st->pp == 1 && st->vpp == 1);
  zero3_ends(&b, P);
  sim_vision_ops(&b); /* a vision-language model's encoder feeds the embedding */
  b.phase = LOOM_PHASE_FWD;
  if (tp > 1) {
    sim_vec(&b, "embed gather", LOOM_VOP_COPY, N * C, 2 * e, 0);
    loom_coll_kind k = seqpar ? LOOM_COLL_REDUCE_SCATTER : LOOM_COLL_ALLREDUCE;
    sim_comm(&b, "tp reduce", k, N * C * e, sim_tp_stride(st), tp, 0);
    if (c->loom_cpu && !seqpar) sim_vec(&b, "copy", LOOM_VOP_COPY, N * C, 2 * e, 0);
  } else {
    sim_vec(&b, "embed gather", LOOM_VOP_COPY, Nr * C, 2 * e, 0);
  }
  if (gpt2(c)) sim_vec(&b, "positions", LOOM_VOP_ADD, Nr * C, 3 * e, 1);
  if (st->dropout) sim_vec(&b, "dropout", LOOM_VOP_DROPOUT, Nr * C, 2 * e + 1, 2);
  b.phase = LOOM_PHASE_BWD_IN; /* (the ends stay gathered from the forward: no gather) */
  if (gpt2(c)) sim_vec(&b, "positions grad", LOOM_VOP_ADD, Nr * C, 3 * e, 1);
  if (tp > 1) {
    if (seqpar) sim_comm(&b, "tp all-gather", LOOM_COLL_ALLGATHER, N * C * e, sim_tp_stride(st), tp, 0);
    b.phase = LOOM_PHASE_BWD_W;
    sim_vec(&b, "embed grad", LOOM_VOP_ADD, N * C / tp + N, 3 * e, 1);
  } else {
    b.phase = LOOM_PHASE_BWD_W;
    sim_vec(&b, "embed grad", LOOM_VOP_ADD, Nr * C, 3 * e, 1);
  }
  return b.n;
}

/* loom's fused classifier + cross-entropy (one tensor-parallel rank, one micro-batch in
 * flight on the rank): the forward computes the logits, their statistics, the unscaled logit
 * gradient and the head's input and weight gradients chunk by chunk; the backward only scales
 * them (src/model/decoder_ends.c) */
static bool loom_fused_head(const loom_sim_ctx *c) {
  const loom_sim_strategy *st = c->st;
  return c->loom_cpu && st->tp == 1 && (st->pp == 1 || !strcmp(st->schedule, "1f1b"));
}

int loom_sim_head_ops(const loom_sim_ctx *c, loom_sim_op *ops, int cap) {
  const loom_sim_strategy *st = c->st;
  sim_ops b;
  sim_ops_init(&b, c, ops, cap);
  double N = c->N, Nr = c->Nr, C = c->spec->hidden, e = c->act_bytes, V = c->vloc;
  int tp = st->tp, tps = sim_tp_stride(st);
  bool seqpar = st->seq_par && tp > 1, bf16 = c->loom_cpu && st->dtype == LOOM_DT_BF16;
  loom_vop nf = gpt2(c) ? LOOM_VOP_LAYERNORM_FWD : LOOM_VOP_RMSNORM_FWD;
  loom_vop nb = gpt2(c) ? LOOM_VOP_LAYERNORM_BWD : LOOM_VOP_RMSNORM_BWD;
  double P = loom_sim_rank_params(c->spec, tp, 0, st->pp == 1 && st->vpp == 1, true);
  zero3_ends(&b, P);
  sim_vec(&b, "final norm", nf, Nr * C, 2 * e, 8);
  if (seqpar) sim_comm(&b, "tp all-gather", LOOM_COLL_ALLGATHER, N * C * e, tps, tp, 0);
  if (bf16) sim_vec(&b, "to bf16", LOOM_VOP_ROUND, N * C, 6, 1);
  if (loom_fused_head(c)) {
    double rows = floor((64.0 * 1048576) / V / 64) * 64, R = fmin(N, fmax(64, rows));
    double chunks = ceil(N / R);
    sim_gemm(&b, "lm head", LOOM_GEMM_FWD, R, V, C, chunks);
    sim_vec(&b, "cross-entropy", LOOM_VOP_XENT_FWD, N * V, e + 8, 6);
    sim_vec(&b, "cross-entropy grad", LOOM_VOP_XENT_BWD, N * V, 2 * e, 6);
    if (bf16) sim_vec(&b, "to bf16", LOOM_VOP_ROUND, N * V, 6, 1);
    sim_gemm(&b, "lm head dgrad", LOOM_GEMM_DGRAD, R, C, V, chunks);
    sim_gemm(&b, "lm head wgrad", LOOM_GEMM_WGRAD, V, C, R, chunks);
    b.phase = LOOM_PHASE_BWD_IN;
    zero3_ends(&b, P);
    sim_vec(&b, "scale", LOOM_VOP_ADD, N * C + V * C, 3 * e, 1);
    sim_vec(&b, "memset", LOOM_VOP_COPY, Nr * C, e, 0);
    sim_vec(&b, "final norm bwd", nb, Nr * C, 3 * e, 12);
    return b.n;
  }
  sim_gemm(&b, "lm head", LOOM_GEMM_FWD, N, V, C, 1);
  /* cross-entropy: max, sum of exp and target logit, reduced over tp (fp32 statistics) */
  sim_vec(&b, "cross-entropy", LOOM_VOP_XENT_FWD, N * V, e + 24, 6);
  sim_comm(&b, "tp all-reduce (max)", LOOM_COLL_ALLREDUCE, N * 4, tps, tp, 0);
  sim_comm(&b, "tp all-reduce (sum)", LOOM_COLL_ALLREDUCE, 2 * N * 4, tps, tp, 0);
  b.phase = LOOM_PHASE_BWD_IN;
  zero3_ends(&b, P);
  sim_vec(&b, "cross-entropy bwd", LOOM_VOP_XENT_BWD, N * V, e + 8, 6);
  if (bf16) {
    sim_vec(&b, "to bf16", LOOM_VOP_ROUND, N * V, 6, 1);
    sim_vec(&b, "to bf16", LOOM_VOP_ROUND, N * C, 6, 1);
  }
  double tw = loom_hw_gemm_time(c->hw, st->dtype, LOOM_GEMM_WGRAD, V, C, N, 1);
  sim_gemm(&b, "lm head dgrad", LOOM_GEMM_DGRAD, N, C, V, 1);
  if (tp > 1) {
    loom_coll_kind k = seqpar ? LOOM_COLL_REDUCE_SCATTER : LOOM_COLL_ALLREDUCE;
    sim_comm(&b, "tp reduce", k, N * C * e, tps, tp, c->hw->tp_overlap && !c->loom_cpu ? tw : 0);
    if (c->loom_cpu && !seqpar) sim_vec(&b, "copy", LOOM_VOP_COPY, N * C, 2 * e, 0);
  }
  if (c->loom_cpu) sim_vec(&b, "memset", LOOM_VOP_COPY, Nr * C, e, 0);
  sim_vec(&b, "final norm bwd", nb, Nr * C, 3 * e, 12);
  b.phase = LOOM_PHASE_BWD_W;
  sim_gemm(&b, "lm head wgrad", LOOM_GEMM_WGRAD, V, C, N, 1);
  return b.n;
}

/* The memory model of one rank: weights, gradients and optimizer state per ZeRO stage and
 * training engine, the activations each layer saves for its backward (with and without
 * recomputation, tensor / sequence / Ulysses parallel), the chunks in flight in the schedule,
 * backward scratch and communication buffers.
 *
 * loom's CPU executor keeps fp32 parameters, gradients (and a bf16-rounded fp32 copy of the
 * parameters in bf16 mode), AdamW moments of the owned range, and carves the activations of
 * src/model/decoder_memory.c (an MoE layer's router, dispatch plan, expert rows and shared expert
 * as src/model/decoder_moe.c carves them); the GPU engine is mixed precision (16-bit parameters and
 * gradients, fp32 master weights and moments: 16 bytes per parameter, ZeRO's K = 12, by
 * default; the precision policy changes the parts: a model cast to bf16 has no master weights,
 * bf16 AdamW moments halve them) with activations itemised as in Korthikanti et al. 2022,
 * section 4; the total carries the profile's allocator headroom. */
#include <math.h>
#include <string.h>

#include "sim/sim_internal.h"

typedef struct {
  double e, N, Nr, C, QD, KD, li, B, T, heads_att;
  bool llama, seqpar, uly;
} dims;

static dims dims_of(const loom_sim_ctx *c) {
  const loom_sim_strategy *st = c->st;
  dims d = {c->act_bytes, c->N, c->Nr, c->spec->hidden, c->lh * c->spec->head_dim,
            c->lkv * c->spec->head_dim, c->li, st->micro_batch, st->seq / sim_cp(st), c->lh / st->sp,
            c->spec->arch == LOOM_ARCH_LLAMA, st->seq_par && st->tp > 1, st->sp > 1};
  if (c->moe_layer) d.li = (double)c->spec->moe.shared_intermediate / st->tp; /* shared expert */
  return d;
}

/* An MoE layer's routed part, in elements of e bytes (fp8: the GEMM inputs TE keeps in FP8
 * count 1/e), on the busiest rank: the router's fp32 logits and probabilities (2 x 4/e per
 * token and expert), the permuted rows the experts read (C per routed row), fc1's output
 * (gate and up, 2 Ie/etp), the SwiGLU output fc2 reads (Ie/etp) and fc2's output (C: the
 * probabilities' gradient needs it). */
static double moe_elems(const loom_sim_ctx *c, double e, bool fp8) {
  const loom_moe_spec *m = &c->spec->moe;
  double rows = sim_moe_rows(c), lie = (double)m->intermediate / sim_etp(c->st);
  double in = fp8 ? 1 / e : 1;
  return sim_moe_tokens(c) * m->experts * 8 / e +
         rows * (c->spec->hidden * (in + 1) + lie * (2 + in));
}

/* loom's CPU executor: an MoE layer's activations as src/model/decoder_moe.c carves them
 * (dec_moe_plan_acts), in 4-byte elements (fp32 values and int32 indices). N tokens (the
 * decoder runs MoE layers without a sequence or context split; each tp rank holds Ie/tp and
 * Is/tp of every expert's inner dimension: etp = tp), E experts, k per token, ep ranks, RL = ep N k the rows this rank's experts may receive (whatever the routing
 * or capacity: the buffers are carved for the most). */
static double cpu_moe_acts(const loom_sim_ctx *c) {
  const loom_moe_spec *m = &c->spec->moe;
  double N = c->N, E = m->experts, k = m->top_k, C = c->spec->hidden;
  double Ie = m->intermediate / sim_etp(c->st), Is = m->shared_intermediate / sim_etp(c->st);
  double P = sim_ep(c->st);
  double NK = N * k, RL = P * NK;
  double f = 2 * N * E + N;      /* router: logits, probs (N,E), lse (N) */
  f += 2 * NK;                   /* idx, w (N,k): the top k and their weights */
  f += 3 * E + 1 + 3 * NK;       /* plan: selected, count, offset (E+1); row_token, row_pair,
                                    pair_row (N k) */
  f += 2 * NK * C;               /* xp, yp: the plan's gathered input and output rows */
  f += 3 * RL * Ie;              /* hg, hu, act: the experts' gate, up and SwiGLU rows */
  if (P > 1) f += E + E / P + 2 * RL * C; /* rc, lcount; xl, yl: the rows received */
  if (Is > 0) f += 3 * N * Is + N * C + N; /* shared expert: sh_g, sh_u, sh_act, sh_y, sh_s */
  return f;
}

/* loom's CPU executor: what src/model/decoder_memory.c's plan_layer carves for one layer, in
 * bytes: the dense MLP's buffers (`dense`), the MoE layer's (`moe`), or both (the one set
 * activation checkpointing recomputes into, in a model with both kinds of layer). */
static double cpu_layer(const loom_sim_ctx *c, const dims *d, bool dense, bool moe, bool stats) {
  double b = 0, I = c->li; /* the dense MLP's inner size (the MoE layer's d->li is Is) */
  b += d->Nr * d->C * 4;                                   /* x, ln1, mid, ln2 */
  if (d->seqpar) b += 2 * d->N * d->C;                     /* gathered ln1, ln2 */
  b += d->N * (2 * d->QD + 2 * d->KD) * (d->uly ? 2 : 1); /* q, k, v, att (+ head layout) */
  if (c->spec->qk_norm) /* q_pre, k_pre before the per-head norms, q_rstd, k_rstd */
    b += d->N * (d->QD + d->KD + c->lh + c->lkv);
  if (dense) b += d->N * I * (d->llama ? 3 : 2);           /* gate, up, act | up, act */
  if (moe) b += cpu_moe_acts(c);
  b *= d->e;
  /* bf16: the forward's bf16 copies of the GEMM inputs (gathered ln1, att, gathered ln2, and
   * the dense MLP's act), kept for the weight gradients */
  if (c->st->dtype == LOOM_DT_BF16) b += d->N * (2 * d->C + d->QD + (dense ? I : 0)) * 2;
  if (stats) b += 4 * d->Nr * 4 + d->B * d->heads_att * d->T * 4;
  return b;
}

/* everything the layer saves when nothing is recomputed (or, with `selective`, all but the
 * attention core's T x T tensors). FP8 (GPU engine): the inputs of the linears (the two norms'
 * outputs, the attention output, the MLP's activation) are kept in FP8, 1 byte. */
static double layer_full(const loom_sim_ctx *c, const dims *d, bool selective, bool stats) {
  if (c->loom_cpu) return cpu_layer(c, d, !c->moe_layer, c->moe_layer, stats);
  const loom_sim_strategy *st = c->st;
  double e = d->e, b = 0;
  double mlp = d->N * d->li * (d->llama ? 3 : 2);           /* gate, up, act | up, act */
  bool fp8 = st->fp8;
  if (c->moe_layer) mlp += moe_elems(c, e, fp8);
  double drop = st->dropout ? 1 : 0;
  b += d->Nr * d->C * 4 * e;                                 /* x, ln1, mid, ln2 */
  b += d->Nr * d->C * 2 * drop;                              /* two dropout masks */
  b += d->N * (2 * d->QD + 2 * d->KD) * e;                   /* q, k, v, att */
  b += mlp * e;
  if (fp8) b -= (2 * d->Nr * d->C + d->N * d->QD + d->N * d->li) * (e - 1);
  double scores = d->B * d->heads_att * d->T * d->T;
  if (c->hw->attention == LOOM_ATTN_UNFUSED && !selective)
    b += scores * (e + drop * (1 + e));                      /* softmax, mask, dropout out */
  if (stats) {
    b += 4 * d->Nr * 4;
    if (c->hw->attention != LOOM_ATTN_UNFUSED) b += d->B * d->heads_att * d->T * 4; /* lse */
  }
  return b;
}

double loom_sim_layer_act_bytes(const loom_sim_ctx *c, bool with_stats) {
  dims d = dims_of(c);
  switch (c->st->recompute) {
  case LOOM_RECOMPUTE_FULL: return d.Nr * d.C * d.e; /* the layer's input */
  case LOOM_RECOMPUTE_SELECTIVE: return layer_full(c, &d, true, with_stats);
  default: return layer_full(c, &d, false, with_stats);
  }
}

/* activations of the head for one micro-batch (final norm, logits, loss statistics) */
static double head_acts(const loom_sim_ctx *c, const dims *d) {
  double b = d->Nr * d->C * d->e + d->Nr * 8 + 3 * d->N * 4;
  if (d->seqpar && c->loom_cpu) b += d->N * d->C * d->e;
  return b + d->N * c->vloc * 4; /* logits (fp32 for the softmax) */
}

/* loom's CPU executor: the MoE layers' backward scratch, once per decoder
 * (dec_moe_plan_scratch), in 4-byte elements */
static double cpu_moe_scratch(const loom_sim_ctx *c) {
  const loom_moe_spec *m = &c->spec->moe;
  double N = c->N, E = m->experts, k = m->top_k, C = c->spec->hidden;
  double Ie = m->intermediate / sim_etp(c->st), Is = m->shared_intermediate / sim_etp(c->st);
  double RL = sim_ep(c->st) * N * k;
  double f = N * E + N * k; /* d_logits (N,E), d_w (N,k) */
  /* work: the grouped experts' backward (loom_moe_experts_work_floats over RL rows) */
  f += RL * (3 * Ie + (c->st->dtype == LOOM_DT_BF16 ? C : 0));
  if (sim_ep(c->st) > 1) f += RL * C;       /* a2a: the all-to-all's rows */
  if (Is > 0) f += N * C + N + 3 * N * Is;  /* d_sh, d_inner: the shared expert's gradients */
  return f + 2 * E;                         /* aux_grad (E doubles) */
}

/* backward scratch and the recompute buffer */
static double workspace(const loom_sim_ctx *c, const dims *d, bool head, int inflight) {
  double f = 0, e = d->e;
  if (c->loom_cpu) {
    /* a model with MoE layers carves their scratch (and their set in the recompute buffer)
     * on every rank, whichever layers the rank holds */
    int moe_layers = loom_model_moe_layers(c->spec);
    double I = c->li; /* the dense MLP's scratch is carved in MoE models too */
    f += 2 * d->Nr * d->C + fmax(d->N * d->C, 2 * d->N) + d->N * d->C;
    f += d->N * (2 * d->QD + 2 * d->KD) * (d->uly ? 2 : 1) + 3 * d->N * I;
    if (c->spec->qk_norm) /* d_qn, d_kn, qk_dw: the per-head q/k norms' gradients */
      f += d->N * (d->QD + d->KD) + 2 * c->spec->head_dim;
    if (moe_layers > 0) f += cpu_moe_scratch(c);
    if (sim_cp(c->st) == 1) f += d->B * d->heads_att * d->T; /* flash backward scratch; the
                                                                ring has its own (cost_cp.c) */
    if (head) f += d->N; /* targets */
    /* the head's logit gradient: whole, or (fused head: one rank, one micro-batch in
     * flight) a chunk of rows plus the head's input and weight gradients */
    if (head && c->st->tp == 1 && inflight == 1)
      f += fmin(d->N, fmax(64, floor((64 << 20) / c->vloc / 64) * 64)) * c->vloc +
           d->N * d->C + c->vloc * d->C;
    else if (head)
      f += d->N * c->vloc;
    /* bf16: round_x, round_dy (a GEMM's input and its output gradient rounded) */
    if (c->st->dtype == LOOM_DT_BF16) {
      bool fused = head && c->st->tp == 1 && inflight == 1;
      double in = fmax(fmax(d->C, I), d->QD);
      double out = fmax(fmax(in, d->KD), head && !fused ? c->vloc : 0);
      if (moe_layers > 0) { /* the shared expert's down projection in; router, shared out */
        double Is = c->spec->moe.shared_intermediate / sim_etp(c->st);
        in = fmax(in, Is);
        out = fmax(out, fmax(Is, c->spec->moe.experts));
      }
      f += d->N * in + d->N * out;
    }
    if (d->uly) f += 2 * d->N * d->QD;
    f *= 4;
    /* the set recomputed into (S->rec), less the layer's input x: that stays in the slot's
     * residual stream, counted with the activations */
    if (c->st->recompute == LOOM_RECOMPUTE_FULL)
      f += cpu_layer(c, d, moe_layers < c->spec->layers, moe_layers > 0, true) -
           d->Nr * d->C * d->e;
    return f + sim_cp_workspace_bytes(c);
  }
  f = d->N * (d->C + 2 * d->li) * e * 2 + (head ? d->N * c->vloc * 4 : 0);
  if (c->moe_layer) { /* the dispatch buffers (the permuted rows sent, the rows received and
                         gathered over etp) and the experts' backward scratch */
    double rows = sim_moe_rows(c), lie = (double)c->spec->moe.intermediate / sim_etp(c->st);
    double sent = sim_moe_tokens(c) * c->spec->moe.top_k * sim_moe_kept(c);
    f += (sent * d->C + 2 * rows * d->C + 2 * rows * lie) * e;
  }
  if (c->st->recompute == LOOM_RECOMPUTE_FULL) { /* one layer's full set while recomputing */
    loom_sim_strategy none = *c->st;
    none.recompute = LOOM_RECOMPUTE_NONE;
    loom_sim_ctx c2 = *c;
    c2.st = &none;
    f += loom_sim_layer_act_bytes(&c2, true);
  }
  return f + sim_cp_workspace_bytes(c);
}

/* fp32 main gradients: Megatron keeps bf16 runs' gradients in fp32 buffers (main_grad,
 * --accumulate-allreduce-grads-in-fp32, forced for bf16), FSDP2 reduce-scatters them into fp32
 * shards (MixedPrecisionPolicy.reduce_dtype): the reduce dtype's bytes when the parameters
 * have an fp32 master; otherwise (fp16, a model cast to bf16, HF eager) the 16-bit ones */
static double main_grad_bytes(const loom_sim_ctx *c, double gb) {
  const loom_sim_strategy *st = c->st;
  bool framework = c->hw->recipe == LOOM_RECIPE_MEGATRON || c->hw->recipe == LOOM_RECIPE_FSDP2;
  if (framework && st->dtype == LOOM_DT_BF16 && st->param_dtype == LOOM_DT_FP32 &&
      st->reduce_dtype == LOOM_DT_FP32)
    return 4;
  return gb;
}

/* Weights, gradients and optimizer state of a rank holding P parameters replicated over the Nd
 * data-parallel replicas (Pl of them in one layer: ZeRO-3 keeps two layers gathered), and Pe
 * routed-expert parameters replicated over the Ne expert-data-parallel ones (Ple in one
 * layer). The gradient buffers are allocated per rank either way (loom-cpu). */
static void state(const loom_sim_ctx *c, double P, double Pl, double Pe, double Ple, double ends,
                  loom_sim_memory *m) {
  const loom_sim_strategy *st = c->st;
  double Nd = sim_grad_size(st), Ne = sim_edp(st);
  double owned = st->zero > 0 ? ceil(P / Nd) + (Pe > 0 ? ceil(Pe / Ne) : 0) : P + Pe;
  double all = P + Pe, layer = Pl + Ple;
  if (c->loom_cpu) {
    /* bf16: the matmuls read 2-byte weights (native bf16 GEMMs) or a rounded fp32 copy;
     * ZeRO-3 pages layers into the rounded copy either way */
    bool bf16 = st->dtype == LOOM_DT_BF16;
    if (st->zero == 3) {
      double copies = bf16 ? 2 : 1;
      double resident = fmin(all, 2 * layer + ends); /* two layers + the ends */
      m->weights = 4 * owned + 4 * copies * resident;
      m->grads = 4 * fmin(all, layer + ends) + 4 * owned;
    } else {
      /* beside the fp32 words: the native GEMMs' 2-byte weights, or the rounded copy (which
       * bf16 parameters are themselves); with native GEMMs an MoE model keeps the rounded copy
       * too (its grouped experts multiply bf16 values held in fp32) */
      bool lp = st->param_dtype != LOOM_DT_BF16;
      double extra = !bf16               ? 0
                     : c->hw->bf16_native ? 2 + (lp && loom_model_moe_layers(c->spec) > 0 ? 4 : 0)
                     : lp                 ? 4
                                          : 0;
      m->weights = (4 + extra) * all;
      m->grads = 4 * all + (st->zero > 0 ? 4 * owned : 0);
    }
    m->optimizer = 8 * owned;
    return;
  }
  double pb, gb, K;
  loom_sim_state_bytes(st, false, &pb, &gb, &K);
  gb = main_grad_bytes(c, gb);
  if (c->hw->recipe == LOOM_RECIPE_FSDP2 && st->zero >= 3 && pb < 4 && K >= 12) {
    /* FSDP2: the fp32 sharded parameters are the master (no 16-bit shard); bf16 copies of two
     * layers gathered, one layer's unsharded gradients before its reduce-scatter */
    m->weights = 4 * (P / Nd + Pe / Ne) + pb * 2 * layer;
    m->grads = gb * (P / Nd + Pe / Ne) + gb * layer;
    m->optimizer = (K - 4) * (P / Nd + Pe / Ne);
    return;
  }
  m->weights = st->zero >= 3 ? pb * (P / Nd + Pe / Ne) + pb * 2 * layer : pb * all;
  m->grads = st->zero >= 2 ? gb * (P / Nd + Pe / Ne) : gb * all;
  m->optimizer = st->zero >= 1 ? K * (P / Nd + Pe / Ne) : K * all;
}

void loom_sim_memory_rank(const loom_sim_ctx *c, int layers, int chunk_layers, bool embed,
                          bool head, int inflight, loom_sim_memory *m) {
  /* an MoE model's MoE layers spread evenly over the ranks */
  int L = c->spec->layers, moe = loom_model_moe_layers(c->spec);
  int lm = L > 0 ? (int)lround((double)layers * moe / L) : 0;
  int cm = L > 0 ? (int)lround((double)chunk_layers * moe / L) : 0;
  loom_sim_memory_rank_of(c, layers, lm, chunk_layers, cm, embed, head ? inflight : 0, inflight,
                          m);
}

void loom_sim_memory_rank_of(const loom_sim_ctx *c, int layers, int moe, int chunk_layers,
                             int chunk_moe, bool embed, int head_inflight, int inflight,
                             loom_sim_memory *m) {
  bool head = head_inflight > 0;
  const loom_sim_strategy *st = c->st;
  dims d = dims_of(c);
  memset(m, 0, sizeof *m);
  double Pe, Ple = 0, P = loom_sim_rank_params_of(c->spec, st, layers, moe, embed, head, &Pe);
  double Pl = loom_sim_layer_params(c->spec, st, moe > 0, &Ple);
  double ends = loom_sim_rank_params(c->spec, st->tp, 0, embed, head);
  double Pv = embed ? loom_sim_vision_params(c->spec) : 0; /* the encoder: a module of its own */
  P -= Pv;
  ends -= Pv;
  double Nd = sim_grad_size(st);
  double owned = st->zero > 0 ? ceil(P / Nd) + (Pe > 0 ? ceil(Pe / sim_edp(st)) : 0) : P + Pe;
  state(c, P, Pl, Pe, Ple, ends, m);
  if (Pv > 0) { /* encoder parameters, gradients and moments: split by vision tp, ZeRO over
                    its own replicas (dp, and the tp ranks when they split its patches) */
    bool split = st->tp > 1 && !strcmp(st->vision_mode, "tp");
    bool seq = st->tp > 1 && !strcmp(st->vision_mode, "sp");
    double Pr = split ? Pv / st->tp : Pv, Nv = (double)st->dp * (seq ? st->tp : 1);
    int z = st->vision_zero_own ? st->vision_zero : st->zero;
    double own = z > 0 ? ceil(Pr / Nv) : Pr;
    if (c->loom_cpu) {
      double copies = st->dtype == LOOM_DT_BF16 ? 2 : 1;
      m->weights += z == 3 ? 4 * own + 4 * copies * Pr : 4 * copies * Pr; /* gathered whole */
      m->grads += z == 3 ? 4 * Pr + 4 * own : 4 * Pr + (z > 0 ? 4 * own : 0);
      m->optimizer += 8 * own;
    } else {
      double pb, gb, K;
      loom_sim_state_bytes(st, true, &pb, &gb, &K);
      m->weights += z >= 3 ? pb * Pr / Nv : pb * Pr;
      m->grads += z >= 2 ? gb * Pr / Nv : gb * Pr;
      m->optimizer += z >= 1 ? K * Pr / Nv : K * Pr;
    }
  }
  m->per_layer = loom_sim_layer_act_bytes(c, true);
  m->inflight = inflight;
  double dense = m->per_layer;
  if (c->moe_layer) { /* an MoE model's dense layers */
    loom_sim_ctx cd = *c;
    cd.moe_layer = false;
    dense = loom_sim_layer_act_bytes(&cd, true);
  }
  double chunk = chunk_moe * m->per_layer + (chunk_layers - chunk_moe) * dense +
                 d.Nr * d.C * d.e; /* + the chunk's output */
  if (embed && st->dropout) chunk += d.Nr * d.C;
  /* loom's CPU executor: a slot's router statistics in a model with MoE layers
   * (dec_moe_plan_mb: pairs per expert as int64, probabilities summed as double) */
  if (c->loom_cpu && loom_model_moe_layers(c->spec) > 0) chunk += 16.0 * c->spec->moe.experts;
  if (embed && st->vision_patches > 0 && c->spec->vision.arch != LOOM_VISION_NONE &&
      !st->freeze_vision) {
    /* the encoder's saved activations per block: by patch x, norms, mid (4 x hidden) and
     * q/k/v/att (4 x hidden), MLP (3 x intermediate). Ulysses splits all of it over the
     * ranks; tensor parallelism only the head and MLP parts. With full recomputation a block
     * keeps its input and one block's full set exists at a time. */
    const loom_vision_spec *v = &c->spec->vision;
    double P = (double)st->micro_batch * st->vision_patches, Cv = v->hidden, I = v->intermediate;
    double by_patch = 4 * Cv, split = 4 * Cv + 3 * I;
    if (st->tp > 1 && !strcmp(st->vision_mode, "sp")) P /= st->tp;
    else if (st->tp > 1 && !strcmp(st->vision_mode, "tp")) split /= st->tp;
    double block = P * (by_patch + split) * d.e;
    chunk += st->recompute == LOOM_RECOMPUTE_FULL ? v->depth * P * Cv * d.e + block
                                                  : v->depth * block;
  }
  m->activations = inflight * chunk + (head ? head_inflight * head_acts(c, &d) : 0);
  m->workspace = workspace(c, &d, head, inflight);
  double msg = d.Nr * d.C * d.e;
  if (c->loom_cpu) {
    if (st->pp > 1 || st->vpp > 1) {
      m->comm_buffers = 3.0 * st->vpp * st->microbatches * msg;
      /* MoE: each micro-batch's router statistics going forward and back (2E + 2 doubles) */
      if (loom_model_moe_layers(c->spec) > 0)
        m->comm_buffers += 8.0 * (2 * c->spec->moe.experts + 2) *
                           (2.0 * st->vpp * st->microbatches + 1);
    }
    if (st->zero > 0) m->comm_buffers += 4 * owned; /* reduce-scatter receive buffer */
  } else {
    if (st->pp > 1) m->comm_buffers = 2 * msg;
    if (st->zero == 0 && Nd > 1) m->comm_buffers += 2 * st->bucket_mb * 1048576.0;
  }
  m->total = m->weights + m->grads + m->optimizer + m->activations + m->workspace + m->comm_buffers;
  /* the caching allocator's fragmentation: blocks it reserved but cannot hand out. It comes
   * from the allocations made and freed every step (activations, scratch, buffers of
   * differing sizes); parameters, gradients and optimizer state are allocated once. */
  m->fragmentation = (m->activations + m->workspace + m->comm_buffers) * c->hw->mem_fragmentation;
  m->total += m->fragmentation;
}

void loom_sim_state_bytes(const loom_sim_strategy *st, bool vision, double *weights,
                          double *grads, double *optimizer) {
  loom_hw_dtype param = vision ? st->vision_param_dtype : st->param_dtype;
  loom_hw_dtype optim = vision ? st->vision_optim_dtype : st->optim_dtype;
  double moments = 2 * (optim == LOOM_DT_BF16 ? 2 : 4); /* AdamW m and v */
  if (st->dtype == LOOM_DT_FP32) { /* fp32 training: the parameters are the master */
    *weights = *grads = 4;
    *optimizer = moments;
  } else if (param == LOOM_DT_BF16) { /* the model cast to bf16 (no master weights) */
    *weights = *grads = 2;
    *optimizer = moments;
  } else { /* mixed precision: 16-bit working weights and gradients, fp32 master */
    *weights = *grads = 2;
    *optimizer = 4 + moments;
  }
}

double loom_sim_memory_limit(const loom_hw_profile *hw, int ranks_per_node) {
  double usable = hw->mem_bytes - hw->mem_reserved;
  if (hw->timeshare && ranks_per_node > hw->devices_per_node)
    usable *= (double)hw->devices_per_node / ranks_per_node;
  return usable;
}

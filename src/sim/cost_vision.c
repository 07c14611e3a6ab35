/* Ops of the vision encoder of a vision-language model for one micro-batch on the first
 * pipeline stage: patch embedding, pre-norm ViT blocks (Qwen2.5-VL: RMSNorm, 2D rotary,
 * SwiGLU with biases, bidirectional attention inside windows of window/patch patches per side
 * except in the full-attention blocks; LLaVA: LayerNorm, learned positions, GELU MLP, full
 * attention over the image), and the merger/projector to the text hidden size
 * (src/model/vision_encoder.c). The encoder has its own strategy (a strategy per module):
 *   replicate  every rank of the tensor-parallel group runs the whole encoder (no comm);
 *   tp         Megatron tensor parallelism over the tp ranks (heads and MLP split, two
 *              all-reduces of (patches x Cv) forward and two backward);
 *   sp         the patches split over the tp ranks, all-to-alls around attention (Ulysses);
 *              with runtime.vision_sp_local_windows the split follows window boundaries and
 *              the windowed blocks attend locally: all-to-alls only in the full blocks (the
 *              seed's sequence_parallel_utils.py, _compute_window_cut_positions).
 * q, k, v and (Qwen) gate, up are separate GEMMs, as in both loom's encoder and HF's; under
 * DTensor tensor parallelism (runtime.tp_style: dtensor) each of these ColwiseParallel modules
 * all-reduces its own input gradient. With activation checkpointing on the GPU engine every
 * block's forward (collectives included) is rerun in the backward (HF gradient checkpointing
 * per block). Flash attention over short varlen segments (the 64-patch windows) computes whole
 * tiles of the profile's attention_tile, with the head dimension padded to its step.
 * A frozen encoder (training.freeze_vision) has no backward. */
#include <math.h>
#include <string.h>

#include "sim/sim_internal.h"

typedef struct {
  double P, Cv, I, D, H, pv, M, in, ph, Ct, e, win;
  int depth, tp;
  bool qwen, split_tp, split_sp;
} vshape;

static vshape vshape_of(const loom_sim_ctx *c) {
  const loom_vision_spec *v = &c->spec->vision;
  const loom_sim_strategy *st = c->st;
  vshape x;
  memset(&x, 0, sizeof x);
  x.qwen = v->arch == LOOM_VISION_QWEN;
  x.tp = st->tp;
  x.split_tp = !strcmp(st->vision_mode, "tp") && st->tp > 1;
  x.split_sp = !strcmp(st->vision_mode, "sp") && st->tp > 1;
  x.P = (double)st->micro_batch * st->vision_patches; /* patches of the micro-batch's images */
  x.Cv = v->hidden;
  x.H = v->heads;
  x.D = v->hidden / v->heads;
  x.I = v->intermediate;
  x.pv = 3.0 * v->temporal * v->patch * v->patch;
  double unit = (double)v->merge * v->merge;
  x.M = x.P / unit;
  x.in = x.Cv * unit;
  x.ph = x.qwen ? x.in : c->spec->hidden;
  x.Ct = c->spec->hidden;
  x.e = c->act_bytes;
  x.depth = v->depth;
  x.win = x.qwen && v->window > 0 ? pow((double)v->window / v->patch, 2) : 0;
  return x;
}

/* Share of flash attention's computed (query, key) tiles that are useful for segments of
 * `len` patches, times the head dimension over its padded size (1 when the profile does not
 * model tiles) */
static double attn_quant(const loom_hw_profile *hw, double len, double D) {
  double f = 1, tq = hw->attn_tile[0], tk = hw->attn_tile[1], step = hw->attn_hdim_step;
  if (tq > 0 && tk > 0 && len > 0) f *= len * len / (ceil(len / tq) * tq * ceil(len / tk) * tk);
  if (step > 0) f *= D / (ceil(D / step) * step);
  return f;
}

/* bidirectional attention of `rows` query patches over `keys` keys each (segments of `keys`
 * patches: windows or whole images) on `heads` heads */
static void vattention(sim_ops *b, const vshape *x, double rows, double keys, double heads,
                       bool backward) {
  const loom_sim_ctx *c = b->c;
  /* host: in the forward the segment lengths' maximum read back to the host before the kernel
   * (cu_seqlens[1:] - cu_seqlens[:-1], .max(), .item(): the seed's Qwen2_5_VLVisionAttention,
   * all three paths, every block, recomputation included): 3 eager ops and a host
   * synchronisation; then flash_attn_varlen_func, one more (its backward: one) */
  if (!backward) sim_host_sync(b, "vit seqlens max (.item())", 3);
  if (b->n >= b->cap) return;
  double pairs = rows * keys * heads;
  loom_sim_op *a = &b->ops[b->n++];
  memset(a, 0, sizeof *a);
  a->name = backward ? "vit attention bwd" : "vit attention";
  a->type = LOOM_OP_ATTN;
  a->phase = b->phase;
  a->recompute = b->recompute;
  a->module = b->module;
  a->chained = b->chained;
  if (!c->loom_cpu) a->host = c->hw->host_eager;
  if (c->hw->attention == LOOM_ATTN_LOOM) { /* loom's kernel, as measured: every pair of a segment */
    a->flops = (backward ? 8 : 4) * pairs * x->D;
    a->time = loom_hw_loom_attn_time(c->hw, backward, pairs, rows * heads, x->D);
    return;
  }
  double peak = c->hw->peak_flops[c->st->dtype] > 0 ? c->hw->peak_flops[c->st->dtype] : c->hw->peak_flops[0];
  a->flops = (backward ? 2.5 : 1) * 4 * pairs * x->D;
  a->time = a->flops / (peak * c->hw->attn_eff * attn_quant(c->hw, keys, x->D)) + c->hw->gemm_overhead;
}

static bool full_block(const loom_vision_spec *v, int l) {
  if (v->arch != LOOM_VISION_QWEN) return true;
  for (int i = 0; i < v->n_full; i++)
    if (v->full_layers[i] == l) return true;
  return false;
}

/* Host dispatch of a linear's op added at `mark` (`ops` aten ops, sim_linear_*_ops): through
 * DTensor when the encoder is tensor-parallel under DTensor (parallelize_module), else plain
 * eager (SP: DeepSpeed's engine over plain modules; replicate) */
static void vlin(sim_ops *b, const vshape *x, int mark, double ops) {
  bool dt = x->split_tp && b->c->hw->tp_dtensor;
  sim_host(b, mark, dt ? ops : 0, dt ? 0 : ops);
}

/* a tensor-parallel all-reduce: under DTensor one redistribute (Partial -> Replicate) */
static void vreduce(sim_ops *b, const vshape *x, const char *name, double bytes) {
  int mark = b->n;
  sim_comm(b, name, LOOM_COLL_ALLREDUCE, bytes, 1, x->tp, 0);
  if (b->c->hw->tp_dtensor) sim_host(b, mark, 1, 0);
}

/* the input-gradient all-reduce(s) after a column-parallel group of `modules` GEMMs */
static void col_reduce(sim_ops *b, const vshape *x, int modules) {
  int n = b->c->hw->tp_dtensor ? modules : 1;
  for (int i = 0; i < n && x->split_tp; i++) vreduce(b, x, "vit tp all-reduce", x->P * x->Cv * x->e);
}

/* a linear of the encoder (all have a bias; Qwen's blocks take 2-D (patches, C) inputs,
 * CLIP's 3-D ones): forward, or its data and weight gradients */
static void vlinear_fwd(sim_ops *b, const vshape *x, const char *name, double m, double n, double k) {
  int mark = b->n;
  sim_gemm(b, name, LOOM_GEMM_FWD, m, n, k, 1);
  vlin(b, x, mark, sim_linear_fwd_ops(!x->qwen));
}

static void vlinear_bwd(sim_ops *b, const vshape *x, const char *dname, const char *wname,
                        double m, double in, double out) {
  int mark = b->n;
  sim_gemm(b, dname, LOOM_GEMM_DGRAD, m, in, out, 1);
  vlin(b, x, mark, sim_linear_dgrad_ops(!x->qwen));
  mark = b->n;
  sim_gemm(b, wname, LOOM_GEMM_WGRAD, out, in, m, 1);
  vlin(b, x, mark, sim_linear_wgrad_ops(true));
}

/* a Ulysses all-to-all and the number of _SeqAllToAll calls it stands for */
static void va2a(sim_ops *b, const vshape *x, const char *name, double bytes, int calls) {
  int mark = b->n;
  sim_comm(b, name, LOOM_COLL_ALLTOALL, bytes, sim_tp_stride(b->c->st), x->tp, 0);
  sim_host(b, mark, 0, calls);
}

static void vblock(sim_ops *b, const vshape *x, bool full, bool backward) {
  const loom_sim_strategy *st = b->c->st;
  double P = x->P, Cv = x->Cv, e = x->e;
  double rows = x->split_sp ? P / x->tp : P;        /* rows into the linears */
  double wdiv = x->split_tp ? x->tp : 1;            /* weights split */
  double keys = full || x->win <= 0 ? P / st->micro_batch : x->win; /* keys per query */
  /* Ulysses all-to-alls: every block, or only the full ones when windows stay local */
  bool a2a = x->split_sp && (full || x->win <= 0 || !b->c->hw->vision_sp_local_windows);
  /* attention layout: all patches on heads/tp (tp, or sp after its all-to-all), or this
   * rank's patches on every head (sp, local windows) */
  double arows = x->split_sp && !a2a ? rows : P;
  double heads = x->split_tp || a2a ? x->H / x->tp : x->H;
  loom_vop nf = x->qwen ? LOOM_VOP_RMSNORM_FWD : LOOM_VOP_LAYERNORM_FWD;
  loom_vop nb = x->qwen ? LOOM_VOP_RMSNORM_BWD : LOOM_VOP_LAYERNORM_BWD;
  double Cl = Cv / wdiv, Il = x->I / wdiv;          /* local attention and MLP widths */
  if (!backward) {
    sim_vec(b, "vit norm1", nf, rows * Cv, 2 * e, 8);
    vlinear_fwd(b, x, "vit q", rows, Cl, Cv);
    vlinear_fwd(b, x, "vit k", rows, Cl, Cv);
    vlinear_fwd(b, x, "vit v", rows, Cl, Cv);
    if (x->qwen) sim_vec(b, "vit rope", LOOM_VOP_ROPE, rows * 2 * Cl, 2 * e, 6);
    /* the seed's full blocks: q, k, v, cos, sin and the padding mask each go through
     * _SeqAllToAll */
    /* the seed's full blocks under SP read the unpadded lengths back after the all-to-alls
     * (unpad_batch_to_pack: mask.sum(dim=1).tolist(), sequence_parallel_utils.py): a host
     * synchronisation after those of q, k, v, cos, sin and the mask, and after the output's */
    int mark = b->n;
    if (a2a) va2a(b, x, "vit a2a qkv", rows * 3 * Cv * e, 6), sim_sync(b, mark);
    vattention(b, x, arows, keys, heads, false);
    mark = b->n;
    if (a2a) va2a(b, x, "vit a2a out", rows * Cv * e, 1), sim_sync(b, mark);
    vlinear_fwd(b, x, "vit o", rows, Cv, Cl);
    if (x->split_tp) vreduce(b, x, "vit tp all-reduce", rows * Cv * e);
    sim_vec(b, "vit residual", LOOM_VOP_ADD, rows * Cv, 3 * e, 1);
    sim_vec(b, "vit norm2", nf, rows * Cv, 2 * e, 8);
    if (x->qwen) {
      vlinear_fwd(b, x, "vit mlp gate", rows, Il, Cv);
      vlinear_fwd(b, x, "vit mlp up", rows, Il, Cv);
    } else {
      vlinear_fwd(b, x, "vit mlp up", rows, Il, Cv);
    }
    sim_vec(b, "vit act", x->qwen ? LOOM_VOP_SWIGLU_FWD : LOOM_VOP_GELU_FWD, rows * Il, 3 * e, 20);
    vlinear_fwd(b, x, "vit mlp out", rows, Cv, Il);
    if (x->split_tp) vreduce(b, x, "vit tp all-reduce", rows * Cv * e);
    sim_vec(b, "vit residual", LOOM_VOP_ADD, rows * Cv, 3 * e, 1);
    return;
  }
  vlinear_bwd(b, x, "vit mlp out dgrad", "vit mlp out wgrad", rows, Il, Cv);
  sim_vec(b, "vit act bwd", x->qwen ? LOOM_VOP_SWIGLU_BWD : LOOM_VOP_GELU_BWD, rows * Il, 5 * e, 25);
  int mlp_in = x->qwen ? 2 : 1;
  for (int i = 0; i < mlp_in; i++) vlinear_bwd(b, x, "vit mlp in dgrad", "vit mlp in wgrad", rows, Cv, Il);
  col_reduce(b, x, mlp_in);
  sim_vec(b, "vit norm2 bwd", nb, rows * Cv, 3 * e, 12);
  vlinear_bwd(b, x, "vit o dgrad", "vit o wgrad", rows, Cl, Cv);
  if (a2a) va2a(b, x, "vit a2a dout", rows * Cv * e, 1);
  vattention(b, x, arows, keys, heads, true);
  if (a2a) va2a(b, x, "vit a2a dqkv", rows * 3 * Cv * e, 3);
  if (x->qwen) sim_vec(b, "vit rope bwd", LOOM_VOP_ROPE, rows * 2 * Cl, 2 * e, 6);
  for (int i = 0; i < 3; i++) vlinear_bwd(b, x, "vit qkv dgrad", "vit qkv wgrad", rows, Cv, Cl);
  col_reduce(b, x, 3);
  sim_vec(b, "vit norm1 bwd", nb, rows * Cv, 3 * e, 12);
}

/* the ops of the blocks of one kind (windowed or full attention), added once and scaled by
 * the number of such blocks */
static void vblocks(sim_ops *b, const vshape *x, const loom_vision_spec *v, bool full, bool backward) {
  int n = 0;
  for (int l = 0; l < x->depth; l++) n += full_block(v, l) == full;
  if (n == 0) return;
  int from = b->n;
  /* one module per block: the host synchronises with the GPU in every block's attention
   * forward (.item()), its recomputation included, so the queue is empty after it; the module
   * is replayed as one period from that synchronisation to the next (the forward: a block's
   * attention to its MLP, then the next block's norm, q, k, v and rotary up to its .item();
   * the backward: the recomputed attention and MLP, the block's backward, then the next
   * recomputed block up to its .item()): loom_sim_module_time wraps the list around at the
   * last sync op. Scaling every op's device and host time by the n blocks scales the replay
   * by n (it is made of sums and maxima). */
  sim_module(b);
  if (backward && b->c->st->recompute == LOOM_RECOMPUTE_FULL && !b->c->loom_cpu) {
    b->recompute = true; /* the block's forward again, from its checkpointed input */
    vblock(b, x, full, false);
    b->recompute = false;
  }
  vblock(b, x, full, backward);
  for (int i = from; i < b->n; i++) {
    b->ops[i].time *= n;
    b->ops[i].flops *= n;
    b->ops[i].bytes *= n;
    b->ops[i].host *= n;
  }
}

/* appends the encoder's forward (phase FWD) and backward (BWD_IN/BWD_W) to b */
void sim_vision_ops(sim_ops *b) {
  const loom_sim_ctx *c = b->c;
  if (c->spec->vision.arch == LOOM_VISION_NONE || c->st->vision_patches <= 0) return;
  vshape x = vshape_of(c);
  double rows = x.split_sp ? x.P / x.tp : x.P;
  loom_sim_phase keep = b->phase;
  bool keep_vision = b->vision;
  b->vision = true;
  b->phase = LOOM_PHASE_FWD;
  sim_module(b);
  sim_gemm(b, "vit patch embed", LOOM_GEMM_FWD, rows, x.Cv, x.pv, 1);
  vblocks(b, &x, &c->spec->vision, false, false);
  vblocks(b, &x, &c->spec->vision, true, false);
  double mrows = x.split_sp ? x.M / x.tp : x.M;
  sim_module(b);
  sim_vec(b, "merger norm", x.qwen ? LOOM_VOP_RMSNORM_FWD : LOOM_VOP_LAYERNORM_FWD, rows * x.Cv, 2 * x.e, 8);
  /* tp: the merger's fc1 column- and fc2 row-parallel (its hidden width split), fc2's output
   * summed over the ranks (src/model/vision_encoder.c; the seed's
   * _parallelize_projector_or_merger) */
  double phl = x.split_tp ? x.ph / x.tp : x.ph;
  vlinear_fwd(b, &x, "merger fc1", mrows, phl, x.in);
  sim_vec(b, "merger gelu", LOOM_VOP_GELU_FWD, mrows * phl, 2 * x.e, 20);
  vlinear_fwd(b, &x, "merger fc2", mrows, x.Ct, phl);
  if (x.split_tp) vreduce(b, &x, "merger tp all-reduce", mrows * x.Ct * x.e);
  if (x.split_sp) sim_comm(b, "vit all-gather tokens", LOOM_COLL_ALLGATHER, x.M * x.Ct * x.e, 1, x.tp, 0);
  if (c->st->freeze_vision) {
    b->phase = keep;
    b->vision = keep_vision;
    b->module = 0;
    return;
  }
  b->phase = LOOM_PHASE_BWD_IN;
  sim_module(b);
  vlinear_bwd(b, &x, "merger fc2 dgrad", "merger fc2 wgrad", mrows, phl, x.Ct);
  sim_vec(b, "merger gelu bwd", LOOM_VOP_GELU_BWD, mrows * phl, 3 * x.e, 25);
  vlinear_bwd(b, &x, "merger fc1 dgrad", "merger fc1 wgrad", mrows, x.in, phl);
  if (x.split_tp) vreduce(b, &x, "merger tp all-reduce", mrows * x.in * x.e);
  vblocks(b, &x, &c->spec->vision, true, true);
  vblocks(b, &x, &c->spec->vision, false, true);
  sim_module(b);
  sim_gemm(b, "vit patch embed wgrad", LOOM_GEMM_WGRAD, x.Cv, x.pv, rows, 1);
  b->phase = keep;
  b->vision = keep_vision;
  b->module = 0; /* what follows (the embedding) is outside the encoder's modules */
}

/* The simulator: costs each virtual stage of the strategy, replays the schedule's per-rank
 * lists with loom_sched_replay_timed (sim_timing.c), repeats the replay with time-shared
 * devices when ranks outnumber them (CPU cores, sim_share.c), and derives the step's metrics
 * and every pipeline rank's memory, with the first instruction at which a rank runs out. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "sim/sim_internal_run.h"

static void **grid_alloc(const loom_schedule *s, size_t elem) {
  void **g = loom_calloc((size_t)s->pp, sizeof *g);
  for (int r = 0; r < s->pp; r++) {
    g[r] = loom_calloc((size_t)(s->count[r] ? s->count[r] : 1), elem);
  }
  return g;
}

static void grid_free(const loom_schedule *s, void **g) {
  if (!g) return;
  for (int r = 0; r < s->pp; r++) free(g[r]);
  free(g);
}

/* one micro-batch of a chunk: its MoE and dense layers (the first one's host start-up once)
 * and its ends */
static void chunk_cost(const sim_vstage *x, const loom_sim_cost *layer, const loom_sim_cost *dense,
                       const loom_sim_cost *embed, const loom_sim_cost *head, loom_sim_cost *out) {
  double nm = x->moe, nd = x->layers - x->moe;
  const loom_sim_cost *l0 = x->moe ? layer : dense; /* the chunk's first layer */
  memset(out, 0, sizeof *out);
  for (int p = 0; p < LOOM_PHASE_COUNT; p++) {
    /* host dispatch: the chunk's layers run back to back, the first one's start-up once */
    out->t[p] = nm * layer->t[p] + nd * dense->t[p] + (x->layers > 0 ? l0->startup[p] : 0) +
                (x->embed ? embed->t[p] : 0) + (x->head ? head->t[p] : 0);
    out->comm[p] = nm * layer->comm[p] + nd * dense->comm[p] + (x->embed ? embed->comm[p] : 0) +
                   (x->head ? head->comm[p] : 0);
    out->comm_alone[p] = nm * layer->comm_alone[p] + nd * dense->comm_alone[p] +
                         (x->embed ? embed->comm_alone[p] : 0) + (x->head ? head->comm_alone[p] : 0);
    out->unbalanced[p] = nm * layer->unbalanced[p]; /* only MoE layers are unbalanced */
  }
  out->recompute = nm * layer->recompute + nd * dense->recompute;
  out->host_wait = nm * layer->host_wait + nd * dense->host_wait +
                   (x->embed ? embed->host_wait : 0) + (x->head ? head->host_wait : 0);
  for (int p = 0; p < LOOM_PHASE_COUNT && x->layers > 0; p++) out->host_wait += l0->startup[p];
  out->comm_hidden = nm * layer->comm_hidden + nd * dense->comm_hidden +
                     (x->head ? head->comm_hidden : 0);
  out->flops = nm * layer->flops + nd * dense->flops + (x->embed ? embed->flops : 0) +
               (x->head ? head->flops : 0);
  out->flops_recompute = nm * layer->flops_recompute + nd * dense->flops_recompute;
  for (int p = 0; p < LOOM_PHASE_COUNT; p++)
    for (int k = 0; k < LOOM_COLL_COUNT; k++)
      out->coll_bytes[p][k] = nm * layer->coll_bytes[p][k] + nd * dense->coll_bytes[p][k] +
                              (x->embed ? embed->coll_bytes[p][k] : 0) +
                              (x->head ? head->coll_bytes[p][k] : 0);
}

/* Megatron pairs each forward of the 1F1B steady state with a backward (its all-to-alls behind
 * the other's compute): a compute instruction is paired when the compute instruction before
 * or after it on its rank runs the other direction */
static void mark_paired(sim_run *R) {
  const loom_schedule *s = R->s;
  for (int r = 0; r < s->pp; r++) {
    int prev = -1;
    for (int i = 0; i < s->count[r]; i++) {
      loom_instr_kind k = s->instr[r][i].kind;
      if (!sim_is_compute(k)) continue;
      bool fwd = k == LOOM_INSTR_FORWARD;
      if (prev >= 0 && (s->instr[r][prev].kind == LOOM_INSTR_FORWARD) != fwd)
        R->paired[r][i] = R->paired[r][prev] = true;
      prev = i;
    }
  }
}

static int setup(sim_run *R, const loom_sim_ctx *c, const loom_schedule *s) {
  const loom_sim_strategy *st = c->st;
  memset(R, 0, sizeof *R);
  R->c = c;
  R->s = s;
  R->K = s->pp * s->vpp;
  int *first = loom_malloc((size_t)(R->K + 1) * sizeof *first);
  if (sim_stage_split(st, c->spec->layers, first)) {
    free(first);
    return -1;
  }
  loom_sim_cost layer, dense, embed, head, solo;
  loom_sim_ctx cd = *c; /* an MoE model's dense layers */
  cd.moe_layer = false;
  loom_sim_layer_cost(c, &layer);
  loom_sim_layer_cost(&cd, &dense);
  /* an MoE layer outside the 1F1B steady state: no other micro-batch's compute to hide its
   * all-to-alls behind (Megatron pairs a forward with a backward) */
  loom_sim_strategy alone = *st;
  alone.ep_overlap = 0;
  loom_sim_ctx ca = *c;
  ca.st = &alone;
  loom_sim_layer_cost(&ca, &solo);
  { /* the trace's expert all-to-all row: where they fall in an MoE layer */
    loom_sim_op ops[LOOM_SIM_MAX_OPS];
    sim_a2a_layer d;
    if (c->moe_layer) {
      sim_a2a_layer_of(ops, loom_sim_layer_ops(c, ops, LOOM_SIM_MAX_OPS), &R->a2a[0]);
      sim_a2a_layer_of(ops, loom_sim_layer_ops(&ca, ops, LOOM_SIM_MAX_OPS), &R->a2a[1]);
    }
    sim_a2a_layer_of(ops, loom_sim_layer_ops(&cd, ops, LOOM_SIM_MAX_OPS), &d);
    R->dense_fwd = d.fwd, R->dense_bwd = d.bwd;
  }
  loom_sim_embed_cost(c, &embed);
  loom_sim_head_cost(c, &head);
  /* gradient bytes reduced over dp x sp: fp32 on loom's CPU engine and in fp32 runs, else the
   * precision policy's reduce dtype (Megatron accumulates and reduces bf16 runs' gradients in
   * fp32 by default; FSDP2's MixedPrecisionPolicy.reduce_dtype) */
  double gb = c->loom_cpu || st->dtype == LOOM_DT_FP32 || st->reduce_dtype == LOOM_DT_FP32 ? 4 : 2;
  double pe, pl = loom_sim_layer_params(c->spec, st, false, &pe);
  double pm = loom_sim_layer_params(c->spec, st, true, &pe); /* an MoE layer's (pe: experts) */
  R->vs = loom_calloc((size_t)R->K, sizeof *R->vs);
  R->rank_params = loom_calloc((size_t)s->pp, sizeof(double));
  R->rank_experts = loom_calloc((size_t)s->pp, sizeof(double));
  R->rank_layers = loom_calloc((size_t)s->pp, sizeof(int));
  R->rank_moe = loom_calloc((size_t)s->pp, sizeof(int));
  for (int v = 0; v < R->K; v++) {
    sim_vstage *x = &R->vs[v];
    x->layers = first[v + 1] - first[v];
    x->moe = loom_sim_moe_layers_in(c->spec, first[v], x->layers);
    x->embed = v == 0;
    x->head = v == R->K - 1;
    double nm = x->moe, nd = x->layers - x->moe;
    chunk_cost(x, &layer, &dense, &embed, &head, &x->cost);
    chunk_cost(x, &solo, &dense, &embed, &head, &x->solo);
    x->grad_bytes = (nd * pl + nm * pm) * gb;
    x->layer_grad_bytes = x->layers > 0 ? x->grad_bytes / x->layers : pl * gb;
    x->expert_grad_bytes = nm * pe * gb;
    if (x->embed) { /* the encoder's own time, for its span in the trace */
      loom_sim_op ops[LOOM_SIM_MAX_OPS];
      sim_ops b;
      sim_ops_init(&b, c, ops, LOOM_SIM_MAX_OPS);
      sim_vision_ops(&b);
      loom_sim_cost vc;
      loom_sim_cost_of(ops, b.n, &vc);
      for (int p = 0; p < LOOM_PHASE_COUNT; p++) x->vision[p] = vc.t[p];
    }
  }
  for (int r = 0; r < s->pp; r++) {
    bool e = false, h = false;
    int layers = 0, moe = 0;
    for (int ch = 0; ch < s->vpp; ch++) {
      const sim_vstage *x = &R->vs[loom_sched_vstage(s, r, ch)];
      e |= x->embed, h |= x->head, layers += x->layers, moe += x->moe;
    }
    R->rank_params[r] =
        loom_sim_rank_params_of(c->spec, st, layers, moe, e, h, &R->rank_experts[r]);
    R->rank_layers[r] = layers, R->rank_moe[r] = moe;
  }
  free(first);
  if (s->pp < 1 || s->vpp < 1) LOOM_ASSERT(!"a schedule has pp, vpp >= 1");
  R->last_bwd = loom_calloc((size_t)s->pp, sizeof *R->last_bwd);
  for (int r = 0; r < s->pp; r++) {
    R->last_bwd[r] = loom_malloc((size_t)s->vpp * sizeof(int));
    for (int ch = 0; ch < s->vpp; ch++) R->last_bwd[r][ch] = -1;
    for (int i = 0; i < s->count[r]; i++) {
      loom_instr_kind k = s->instr[r][i].kind;
      if (k == LOOM_INSTR_BACKWARD || k == LOOM_INSTR_BACKWARD_INPUT ||
          (k == LOOM_INSTR_BACKWARD_WEIGHT && !c->loom_cpu))
        R->last_bwd[r][s->instr[r][i].chunk] = i;
    }
  }
  R->slow = (double **)grid_alloc(s, sizeof(double));
  R->waiting = (double **)grid_alloc(s, sizeof(double));
  R->t0 = (double **)grid_alloc(s, sizeof(double));
  R->t1 = (double **)grid_alloc(s, sizeof(double));
  R->exposed = (double **)grid_alloc(s, sizeof(double));
  R->paired = (bool **)grid_alloc(s, sizeof(bool));
  mark_paired(R);
  for (int r = 0; r < s->pp; r++)
    for (int i = 0; i < s->count[r]; i++) R->slow[r][i] = 1;
  R->dp_free = loom_calloc((size_t)s->pp, sizeof(double));
  R->link_free = loom_calloc((size_t)s->pp, sizeof(double));
  R->hidden = loom_calloc((size_t)s->pp, sizeof(double));
  R->busy = loom_calloc((size_t)s->pp, sizeof(double));
  R->pipe_end = loom_calloc((size_t)s->pp, sizeof(double));
  R->opt_time = loom_calloc((size_t)s->pp, sizeof(double));
  R->bytes = loom_calloc((size_t)s->pp, sizeof *R->bytes);
  /* pipeline messages: the executor sends its Nr x C rows; a GPU stack without sequence
   * parallelism sends 1/tp of them and all-gathers on the receiver (Megatron's scatter-gather) */
  double rows = c->Nr * c->spec->hidden * c->act_bytes;
  int pps = sim_pp_stride(st);
  if (!c->loom_cpu && !(st->seq_par && st->tp > 1) && st->tp > 1) {
    R->msg_bytes = rows / st->tp;
    R->t_recv_gather = loom_hw_coll_time(c->hw, LOOM_COLL_ALLGATHER, rows, 1, st->tp);
  } else {
    R->msg_bytes = rows;
  }
  /* loom's executor with MoE layers: each micro-batch's router statistics (2E + 2 doubles) go
   * with it, a message of their own beside the rows (counted in the same send here) */
  if (c->loom_cpu && loom_model_moe_layers(c->spec) > 0)
    R->msg_bytes += 8.0 * (2 * c->spec->moe.experts + 2);
  R->t_p2p = st->pp > 1 ? loom_hw_coll_time(c->hw, LOOM_COLL_SENDRECV, R->msg_bytes, pps, 2) : 0;
  return 0;
}

static void teardown(sim_run *R) {
  const loom_schedule *s = R->s;
  if (R->last_bwd)
    for (int r = 0; r < s->pp; r++) free(R->last_bwd[r]);
  free(R->last_bwd);
  grid_free(s, (void **)R->slow);
  grid_free(s, (void **)R->waiting);
  grid_free(s, (void **)R->t0);
  grid_free(s, (void **)R->t1);
  grid_free(s, (void **)R->exposed);
  grid_free(s, (void **)R->paired);
  free(R->vs);
  free(R->rank_params);
  free(R->rank_experts);
  free(R->rank_layers);
  free(R->rank_moe);
  free(R->dp_free);
  free(R->link_free);
  free(R->hidden);
  free(R->busy);
  free(R->pipe_end);
  free(R->opt_time);
  free(R->bytes);
  free(R->ev);
}

static int replay(sim_run *R, double *makespan) {
  int pp = R->s->pp;
  for (int r = 0; r < pp; r++) {
    R->dp_free[r] = R->link_free[r] = R->hidden[r] = R->busy[r] = R->pipe_end[r] = 0;
    for (int k = 0; k < LOOM_COLL_COUNT; k++) R->bytes[r][k] = 0;
  }
  R->flops_rec = 0;
  R->n_ev = 0;
  return loom_sched_replay_timed(R->s, sim_timing, R, makespan);
}

/* appends ", " (after the first) and the formatted text to out[n] at *k; truncates */
static void add_remedy(char *out, size_t n, size_t *k, const char *fmt, ...) {
  va_list ap;
  if (*k > 0 && *k < n) *k += (size_t)snprintf(out + *k, n - *k, ", ");
  if (*k >= n) return;
  va_start(ap, fmt);
  *k += (size_t)vsnprintf(out + *k, n - *k, fmt, ap);
  va_end(ap);
}

/* What would lower a rank's memory under this layout, as config keys: only the remedies that
 * apply (no "1F1B instead of GPipe" without a pipeline, no "recomputation" when every layer
 * already recomputes, no "ZeRO-3" at ZeRO-3). `activations`: the activations are part of the
 * overflow (false: the state alone is over the limit). */
static void oom_remedies(const loom_sim_strategy *st, const loom_model_spec *spec,
                         bool activations, int inflight, char *out, size_t n) {
  size_t k = 0;
  out[0] = '\0';
  /* an MoE model: the experts over more ranks (they fold onto the stage's ranks) */
  int ep = sim_ep(st), etp = sim_etp(st), S = sim_stage_ranks(st);
  if (spec->moe.experts > 0 && spec->moe.experts % (2 * ep) == 0 && S % (2 * ep * etp) == 0)
    add_remedy(out, n, &k, "more expert parallelism (parallel.ep=%d)", 2 * ep);
  else if (spec->moe.experts > 0 && etp > 1 && spec->moe.experts % (ep * etp) == 0)
    add_remedy(out, n, &k, "the experts folded over the tensor-parallel ranks (parallel.ep=%d "
               "parallel.etp=1: Megatron's folding)", ep * etp);
  if (activations && inflight > 1 && strcmp(st->schedule, "gpipe") == 0)
    add_remedy(out, n, &k,
               "fewer micro-batches in flight (parallel.schedule=1f1b instead of gpipe)");
  if (activations && st->micro_batch > 1)
    add_remedy(out, n, &k, "a smaller micro-batch (training.micro_batch_size=%d)",
               st->micro_batch / 2);
  if (activations && st->recompute != LOOM_RECOMPUTE_FULL)
    add_remedy(out, n, &k, "recomputation (training.activation_checkpointing=true)");
  if (st->dp * st->sp > 1 && st->zero < 3)
    add_remedy(out, n, &k, "a higher ZeRO stage (parallel.zero=%d)", st->zero + 1);
  add_remedy(out, n, &k, "more tensor or pipeline parallelism (parallel.tp, parallel.pp)");
  if (st->optim_dtype != LOOM_DT_BF16)
    add_remedy(out, n, &k, "bf16 optimizer state (training.optim_dtype=bf16)");
}

/* The forwards in flight on pipeline rank r after each instruction, and of them those of the
 * head's chunk (the last virtual stage: its logits are kept only for those), at the peak. */
static void inflight_peak(const sim_run *R, int r, int *total, int *head) {
  const loom_schedule *s = R->s;
  int now = 0, hn = 0, hc = -1;
  *total = *head = 0;
  for (int ch = 0; ch < s->vpp; ch++)
    if (R->vs[loom_sched_vstage(s, r, ch)].head) hc = ch;
  for (int i = 0; i < s->count[r]; i++) {
    const loom_instr *in = &s->instr[r][i];
    if (in->kind == LOOM_INSTR_FORWARD) {
      now++, hn += in->chunk == hc;
      if (now > *total) *total = now, *head = hn;
    }
    if (in->kind == LOOM_INSTR_BACKWARD || in->kind == LOOM_INSTR_BACKWARD_WEIGHT)
      now--, hn -= in->chunk == hc;
  }
}

/* memory of each pipeline rank; the first instruction where one is over the limit */
static void memory(const sim_run *R, loom_sim_result *out, char *why, size_t n) {
  const loom_schedule *s = R->s;
  const loom_sim_ctx *c = R->c;
  out->mem = loom_calloc((size_t)s->pp, sizeof *out->mem);
  out->oom_rank = -1;
  for (int r = 0; r < s->pp; r++) {
    bool e = false, h = false;
    int layers = 0, most = 0, most_moe = 0, moe = 0;
    for (int ch = 0; ch < s->vpp; ch++) {
      const sim_vstage *x = &R->vs[loom_sched_vstage(s, r, ch)];
      e |= x->embed, h |= x->head, layers += x->layers, moe += x->moe;
      if (x->layers > most || (x->layers == most && x->moe > most_moe))
        most = x->layers, most_moe = x->moe;
    }
    int peak, head_peak;
    inflight_peak(R, r, &peak, &head_peak);
    loom_sim_memory_rank_of(c, layers, moe, most, most_moe, e, h ? head_peak : 0, peak,
                            &out->mem[r]);
    if (out->oom_rank >= 0 || out->mem[r].total <= out->mem_limit) continue;
    /* walk the list to the instruction that crosses the limit */
    int now = 0, hn = 0, hc = -1;
    for (int ch = 0; ch < s->vpp; ch++)
      if (R->vs[loom_sched_vstage(s, r, ch)].head) hc = ch;
    for (int i = 0; i < s->count[r]; i++) {
      loom_instr_kind k = s->instr[r][i].kind;
      if (k == LOOM_INSTR_FORWARD) {
        loom_sim_memory m;
        hn += s->instr[r][i].chunk == hc;
        loom_sim_memory_rank_of(c, layers, moe, most, most_moe, e, h ? hn : 0, ++now, &m);
        if (m.total > out->mem_limit || now == peak) {
          char text[96], fix[512];
          loom_instr_format(&s->instr[r][i], text, sizeof text);
          /* state alone over the limit: no activation remedy can help */
          oom_remedies(c->st, c->spec, m.weights + m.grads + m.optimizer <= out->mem_limit, now,
                       fix, sizeof fix);
          snprintf(why, n,
                   "rank %d, instruction %d '%s': memory over the limit: %d chunk(s) of "
                   "activations in flight need %.2f GiB (weights %.2f, gradients %.2f, "
                   "optimizer %.2f, activations %.2f, other %.2f) but a rank has %.2f GiB; "
                   "try %s",
                   r, i, text, now, m.total / 1073741824.0, m.weights / 1073741824.0,
                   m.grads / 1073741824.0, m.optimizer / 1073741824.0,
                   m.activations / 1073741824.0,
                   (m.workspace + m.comm_buffers + m.fragmentation) / 1073741824.0,
                   out->mem_limit / 1073741824.0, fix);
          out->oom_rank = r;
          break;
        }
      }
      if (k == LOOM_INSTR_BACKWARD || k == LOOM_INSTR_BACKWARD_WEIGHT)
        now--, hn -= s->instr[r][i].chunk == hc;
    }
    if (out->oom_rank < 0) { /* over the limit before any activation */
      char fix[512];
      oom_remedies(c->st, c->spec, false, 0, fix, sizeof fix);
      snprintf(why, n, "rank %d, instruction 0: memory over the limit before the first forward: "
               "weights, gradients and optimizer state need %.2f GiB but a rank has %.2f GiB; "
               "try %s",
               r, (out->mem[r].weights + out->mem[r].grads + out->mem[r].optimizer) / 1073741824.0,
               out->mem_limit / 1073741824.0, fix);
      out->oom_rank = r;
    }
  }
}

static void metrics(const sim_run *R, double makespan, loom_sim_result *out) {
  const loom_sim_ctx *c = R->c;
  const loom_sim_strategy *st = c->st;
  const loom_schedule *s = R->s;
  int pp = s->pp;
  out->step_time = makespan;
  out->pp = pp;
  out->world = loom_sim_world(st);
  double last = -1;
  for (int r = 0; r < pp; r++) {
    double end = s->count[r] ? R->t1[r][s->count[r] - 1] : 0;
    if (end > last) last = end, out->critical_rank = r;
  }
  double pipe = 0, busy = 0;
  for (int r = 0; r < pp; r++) pipe = fmax(pipe, R->pipe_end[r]);
  for (int r = 0; r < pp; r++) busy += R->busy[r];
  out->bubble = busy > 0 ? (pp * pipe - busy) / busy : 0;
  int r = out->critical_rank;
  double exposed = 0, inline_comm = 0;
  for (int i = 0; i < s->count[r]; i++) {
    exposed += R->exposed[r][i];
    if (sim_is_compute(s->instr[r][i].kind)) inline_comm += R->exposed[r][i];
  }
  out->exposed_comm = exposed;
  out->comm_total = exposed + R->hidden[r];
  out->compute_time = R->busy[r] - inline_comm;
  out->optimizer_time = R->opt_time[r];
  double tokens = (double)st->dp * st->microbatches * st->micro_batch * st->seq;
  out->tokens_per_s = makespan > 0 ? tokens / makespan : 0;
  out->model_flops = loom_sim_flops_per_token(c->spec, st->seq) * tokens;
  double devices = out->world;
  if (c->hw->timeshare && out->timeshare > 1) devices = out->world / out->timeshare;
  double denom = makespan * sim_mfu_peak(c, devices, NULL);
  double rec = R->flops_rec * sim_stage_ranks(st);
  out->mfu = denom > 0 ? out->model_flops / denom : 0;
  out->hfu = denom > 0 ? (out->model_flops + rec) / denom : 0;
}

double sim_mfu_peak(const loom_sim_ctx *c, double devices, loom_mfu_source *src) {
  loom_mfu_source own;
  if (!src) src = &own;
  const loom_hw_profile *hw = c->hw;
  loom_hw_dtype dt = c->st->dtype;
  if (hw->engine_loom_cpu) {
    /* fp8 and fp16 runs have no CPU path: their GEMMs are priced at the bf16 / fp32 rates */
    const char *name = dt == LOOM_DT_FP32 ? "fp32" : "bf16";
    return loom_mfu_peak_hw(hw, name, (int)lround(devices), src);
  }
  double peak = hw->peak_flops[dt] > 0 ? hw->peak_flops[dt] : hw->peak_flops[0];
  memset(src, 0, sizeof *src);
  src->peak = src->library_peak = peak * devices;
  src->kind = "device";
  snprintf(src->name, sizeof src->name, "%s matrix peak of the device",
           loom_hw_dtype_name(hw->peak_flops[dt] > 0 ? dt : LOOM_DT_FP32));
  return src->peak;
}

int loom_sim_run(const loom_sim_ctx *c, const loom_schedule *s, const loom_sim_opts *o,
                 loom_sim_result *out) {
  const loom_sim_strategy *st = c->st;
  memset(out, 0, sizeof *out);
  out->oom_rank = -1;
  if (s->pp != st->pp || s->vpp != st->vpp || s->microbatches != st->microbatches)
    return loom_err("the schedule is for pp=%d vpp=%d microbatches=%d but the strategy has "
                    "pp=%d vpp=%d and %d micro-batches per step", s->pp, s->vpp, s->microbatches,
                    st->pp, st->vpp, st->microbatches);
  if (loom_sched_validate(s)) return -1;
  sim_run R;
  if (setup(&R, c, s)) return -1;
  int world = loom_sim_world(st);
  /* a time-shared profile (this CPU) runs every rank on its one node unless told otherwise */
  int nodes = o && o->nodes > 0 ? o->nodes
              : c->hw->timeshare ? 1 : (world + c->hw->devices_per_node - 1) / c->hw->devices_per_node;
  int per_node = (world + nodes - 1) / nodes;
  out->timeshare = 1;
  if (per_node > c->hw->devices_per_node) {
    if (!c->hw->timeshare) {
      teardown(&R);
      return loom_err("%d ranks on a node of %d devices: the profile '%s' does not share devices "
                      "(node.oversubscribe: error); use more nodes", per_node,
                      c->hw->devices_per_node, c->hw->name);
    }
    out->timeshare = (double)per_node / c->hw->devices_per_node;
  }
  double makespan = 0;
  int rc = replay(&R, &makespan);
  if (!rc && out->timeshare > 1) { /* processor sharing: a fixed point of the slowdowns */
    int stage_ranks = sim_stage_ranks(st);
    for (int it = 0; it < 12 && !rc; it++) {
      double change = sim_share_update(&R, stage_ranks, nodes, c->hw->devices_per_node);
      rc = replay(&R, &makespan);
      if (change < 1e-3) break;
    }
  }
  if (!rc && o && o->trace_path) {
    R.record = true;
    rc = replay(&R, &makespan);
    R.record = false;
  }
  if (!rc) {
    metrics(&R, makespan, out);
    out->comm_bytes = loom_calloc((size_t)s->pp, sizeof *out->comm_bytes);
    memcpy(out->comm_bytes, R.bytes, (size_t)s->pp * sizeof *R.bytes);
    out->mem_limit = loom_sim_memory_limit(c->hw, per_node);
    char why[1024] = "";
    memory(&R, out, why, sizeof why);
    if (out->oom_rank >= 0) snprintf(out->oom_msg, sizeof out->oom_msg, "%s", why);
  }
  if (!rc && o && o->trace_path) rc = sim_trace_write(&R, o->trace_path, o->per_world_rank);
  teardown(&R);
  return rc;
}

void loom_sim_result_free(loom_sim_result *r) {
  free(r->mem);
  free(r->comm_bytes);
  r->mem = NULL;
  r->comm_bytes = NULL;
}

int loom_sim_schedule(const loom_sim_strategy *st, const char *schedule_file, loom_schedule *s) {
  if (schedule_file && schedule_file[0]) {
    if (loom_sched_load(s, schedule_file)) return -1;
    if (s->pp != st->pp || s->vpp != st->vpp || s->microbatches != st->microbatches) {
      int pp = s->pp, vpp = s->vpp, m = s->microbatches;
      loom_sched_free(s);
      return loom_err("%s: the schedule is for pp=%d vpp=%d microbatches=%d, but the strategy has "
                      "parallel.pp=%d parallel.vpp=%d and %d micro-batches per step",
                      schedule_file, pp, vpp, m, st->pp, st->vpp, st->microbatches);
    }
    if (loom_sched_validate(s)) {
      loom_err_prefix("%s: ", schedule_file);
      loom_sched_free(s);
      return -1;
    }
    return 0;
  }
  const char *name = st->pp == 1 && st->vpp == 1 ? "none" : st->schedule;
  return loom_sched_generate(s, name, st->pp, st->vpp, st->microbatches);
}

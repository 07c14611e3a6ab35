/* The executor: one optimizer step of the schedule IR on this rank (see exec.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/vision_module.h"
#include "loom/comm_ep.h"
#include "loom/exec.h"
#include "loom/kernels.h"
#include "loom/vision.h"
#include "loom/vqa.h"

struct loom_executor {
  const loom_config *cfg;
  loom_mesh *mesh;
  loom_schedule sched;
  loom_schedule eval_sched;    /* forward only (evaluation), same pp, vpp and micro-batches */
  loom_decoder *d;
  loom_grad_sync *gs;
  loom_adamw_state opt;
  int A, K, vpp;               /* micro-batches, virtual stages, chunks per rank */
  size_t rows;                 /* Nr * C floats of one activation */
  float *act_send, *grad_in, *dx; /* (vpp, A, Nr, C) each */
  /* MoE under a pipeline split: each micro-batch's router statistics (loom_decoder_moe_mb_*,
   * D doubles) go forward with its activations and come back, complete, with its gradients */
  size_t moe_n;                /* D (0: dense, or no split) */
  double *moe_fwd, *moe_back;  /* (vpp, A, D) each: after a chunk's forward / backward */
  double *moe_tmp;             /* (D) a received message or a local hand-over */
  loom_comm_request *reqs;
  int n_reqs, cap_reqs;
  int *last_backward;          /* (vpp) index of the last backward of each chunk */
  loom_exec_trace_fn trace;
  void *trace_ctx;
  /* vision-language models: the encoder is a module of its own (vision_module.c) */
  loom_vmod *vision;
  const loom_vqa_batch *const *vqa; /* (A) this step's micro-batches */
  int *inject_slot;            /* (A, B*T) row of the vision tokens replacing each token */
  loom_comm ep_comm;           /* expert parallelism: ep consecutive dp ranks (parallel.ep) */
  loom_comm edp_comm;          /* the replicas holding the same experts (dp_rank mod ep) */
};

void loom_exec_set_vision_batches(loom_executor *ex, const void *const *vqa_batches) {
  ex->vqa = (const loom_vqa_batch *const *)vqa_batches;
}

static int create_vision(loom_executor *ex, const loom_config *cfg, const loom_model_spec *spec) {
  if (loom_vmod_create(&ex->vision, cfg, spec, ex->mesh)) return LOOM_ERR;
  int T = (int)cfg->training.seq_len, B = (int)cfg->training.micro_batch_size;
  ex->inject_slot = loom_malloc((size_t)ex->A * B * T * sizeof(int));
  return 0;
}

/* The text model takes multimodal rotary positions (Qwen2.5-VL); else plain 1D positions. */
static bool mrope(const loom_decoder *d) {
  const int *s = d->spec.vision.mrope_section;
  return s[0] + s[1] + s[2] > 0;
}

/* Hand micro-batch mb's vision tokens to the first chunk (the encoder runs on its ranks). */
static void vision_forward(loom_executor *ex, loom_acts *a, int mb) {
  const loom_vqa_batch *b = ex->vqa[mb];
  loom_decoder *d = ex->d;
  int BT = d->B * d->T, n = 0;
  int *slot = ex->inject_slot + (size_t)mb * BT;
  for (int i = 0; i < BT; i++) slot[i] = -1;
  for (int i = 0; i < b->n_images; i++)
    for (int k = 0; k < b->image_tokens[i]; k++)
      slot[b->image_row[i] * d->T + b->image_token_offset[i] + k] = n++;
  a->inject_slot = slot;
  a->inject_feats = loom_vmod_forward(ex->vision, b, mb);
}

int loom_exec_stage_split(const loom_config_parallel *p, int layers, int *first) {
  int K = (int)(p->pp * p->vpp);
  if (p->stage_layers[0]) {
    int n = 0, total = 0;
    const char *s = p->stage_layers;
    while (*s) {
      char *end;
      long v = strtol(s, &end, 10);
      if (end == s || v < 1)
        return loom_err("parallel.stage_layers '%s': expected a comma-separated list of "
                        "positive layer counts", p->stage_layers);
      if (n == K) break;
      first[n++] = total;
      total += (int)v;
      s = *end == ',' ? end + 1 : end;
      if (*end && *end != ',')
        return loom_err("parallel.stage_layers '%s': unexpected '%c'", p->stage_layers, *end);
    }
    if (n != K || *s)
      return loom_err("parallel.stage_layers '%s' must list %d counts (pp*vpp chunks)",
                      p->stage_layers, K);
    if (total != layers)
      return loom_err("parallel.stage_layers '%s' adds up to %d layers but the model has %d",
                      p->stage_layers, total, layers);
  } else {
    int base = layers / K, extra = layers % K;
    for (int v = 0, at = 0; v < K; v++) {
      first[v] = at;
      at += base + (v < extra ? 1 : 0);
    }
  }
  first[K] = layers;
  return 0;
}

static int build_schedule(loom_executor *ex) {
  const loom_config_parallel *p = &ex->cfg->parallel;
  int pp = (int)p->pp, vpp = (int)p->vpp, A = ex->A;
  loom_schedule *s = &ex->sched;
  if (p->schedule_file[0]) {
    if (loom_sched_load(s, p->schedule_file)) return LOOM_ERR;
    if (s->pp != pp || s->vpp != vpp || s->microbatches != A)
      return loom_err("%s: the schedule is for pp=%d vpp=%d microbatches=%d, but the config has "
                      "parallel.pp=%d parallel.vpp=%d training.grad_accum=%d",
                      p->schedule_file, s->pp, s->vpp, s->microbatches, pp, vpp, A);
  } else {
    const char *name = pp == 1 && vpp == 1 ? "none" : p->schedule;
    if (loom_sched_generate(s, name, pp, vpp, A)) return LOOM_ERR;
  }
  if (loom_sched_validate(s))
    return p->schedule_file[0] ? loom_err_prefix("%s: ", p->schedule_file) : LOOM_ERR;
  if (loom_sched_generate_forward(&ex->eval_sched, pp, vpp, A) ||
      loom_sched_validate_forward(&ex->eval_sched))
    return loom_err_prefix("the forward-only (evaluation) schedule: ");
  return 0;
}

static void plan_last_backward(loom_executor *ex) {
  int r = ex->mesh->pp_rank;
  ex->last_backward = loom_malloc((size_t)ex->vpp * sizeof(int));
  for (int c = 0; c < ex->vpp; c++) ex->last_backward[c] = -1;
  for (int i = 0; i < ex->sched.count[r]; i++) {
    const loom_instr *in = &ex->sched.instr[r][i];
    if (in->kind == LOOM_INSTR_BACKWARD || in->kind == LOOM_INSTR_BACKWARD_INPUT)
      ex->last_backward[in->chunk] = i;
  }
}

/* What the trainer does not run yet, refused before anything is built: Mixture-of-Experts
 * layers with Megatron sequence parallelism over tp (a vision encoder beside an MoE text
 * decoder splits its own way); expert parallelism (parallel.ep) needs ep to divide
 * parallel.dp (its groups are ep consecutive data-parallel ranks of one tp, sp, cp and pp
 * position), or folds on the tp ranks (etp = 1, ep = tp). */
static int refuse_layouts(const loom_config *cfg, const loom_model_spec *spec) {
  const loom_config_parallel *p = &cfg->parallel;
  const char *works = "MoE models train today with data parallelism (parallel.dp, ZeRO 0-3 by "
                      "parallel.zero), expert parallelism over the dp ranks (parallel.ep), "
                      "tensor parallelism (parallel.tp, sp_mode=ulysses), Ulysses and context "
                      "parallelism (parallel.sp, parallel.cp), pipeline parallelism "
                      "(parallel.pp, parallel.vpp), gradient accumulation and "
                      "activation checkpointing, also under a vision encoder with its own "
                      "vision.parallel.*";
  if (p->ep > 1 && spec->moe.experts == 0)
    return loom_err("parallel.ep = %ld: expert parallelism applies to Mixture-of-Experts models "
                    "(model.moe.experts > 0) and this model is dense: set parallel.ep=1",
                    p->ep);
  if (spec->moe.experts == 0) return 0;
  bool fold = p->etp == 1 && p->tp > 1; /* the experts spread over the tp ranks, whole */
  if (fold && p->ep != p->tp)
    return loom_err("parallel.etp = 1 with parallel.tp = %ld folds expert parallelism on the "
                    "tensor-parallel ranks (each holds E/tp whole experts): set parallel.ep = "
                    "%ld (found %ld); expert parallelism over the data-parallel ranks as well "
                    "is not combined with it yet", p->tp, p->tp, p->ep);
  if (fold && spec->moe.experts % p->tp)
    return loom_err("parallel.ep = parallel.tp = %ld (parallel.etp = 1) does not divide "
                    "model.moe.experts = %d", p->tp, spec->moe.experts);
  if (p->etp > 0 && !fold && p->etp != p->tp)
    return loom_err("parallel.etp = %ld: loom train splits every expert over the tensor-"
                    "parallel ranks (etp = tp = %ld) or folds whole experts on them "
                    "(etp = 1, ep = tp); other expert tensor splits are for loom sim and loom "
                    "plan; set parallel.etp=0", p->etp, p->tp);
  if (fold && !strcmp(p->sp_mode, "megatron"))
    return loom_err("parallel.sp_mode = megatron with Mixture-of-Experts layers: the router "
                    "and experts need every token of the tp group; set parallel.sp_mode=ulysses");
  if (fold) return p->sp > 1 || p->cp > 1
                       ? loom_err("parallel.etp = 1 (experts folded on tp) runs with tp, dp "
                                  "and pp only; set parallel.sp and parallel.cp to 1")
                       : 0;
  if (p->ep > 1 && spec->moe.experts % p->ep)
    return loom_err("parallel.ep = %ld does not divide model.moe.experts = %d: each expert-"
                    "parallel rank runs E/ep of the experts; choose an ep that divides %d",
                    p->ep, spec->moe.experts, spec->moe.experts);
  if (p->ep > 1 && p->dp % p->ep)
    return loom_err("parallel.ep = %ld does not divide parallel.dp = %ld: expert parallelism "
                    "groups ep consecutive data-parallel ranks (each holding E/ep experts' "
                    "work); set parallel.dp to a multiple of parallel.ep",
                    p->ep, p->dp);
  if (p->tp > 1 && !strcmp(p->sp_mode, "megatron"))
    return loom_err("parallel.sp_mode = megatron with Mixture-of-Experts layers (parallel.tp = "
                    "%ld): the router and experts need every token of the tp group, which "
                    "Megatron sequence parallelism splits; set parallel.sp_mode=ulysses (%s)",
                    p->tp, works);
  return 0;
}

/* After each block: one poll of every pending send (the decoder's on_block_done). Over TCP a
 * pipeline message beyond Open MPI's eager size moves only while its sender polls: without
 * these polls the next stage got a micro-batch's activations only when this rank reached its
 * next wait, one forward later (pp2 x dp2 across two nodes: docs/MULTINODE.md). */
static void poll_sends(void *ctx) {
  loom_executor *ex = ctx;
  for (int i = 0; i < ex->n_reqs; i++) loom_comm_test(&ex->reqs[i]);
}

int loom_exec_create(loom_executor **out, const loom_config *cfg, const loom_model_spec *spec,
                     loom_mesh *m) {
  if (refuse_layouts(cfg, spec)) return LOOM_ERR;
  const loom_config_parallel *p = &cfg->parallel;
  const loom_config_training *t = &cfg->training;
  loom_executor *ex = loom_calloc(1, sizeof *ex);
  ex->cfg = cfg;
  ex->mesh = m;
  ex->A = (int)t->grad_accum;
  ex->vpp = (int)p->vpp;
  ex->K = m->pp * ex->vpp;
  int first[LOOM_MAX_CHUNKS * 64 + 1];
  if (ex->K > LOOM_MAX_CHUNKS * 64 || ex->vpp > LOOM_MAX_CHUNKS) {
    int vpp = ex->vpp;
    free(ex);
    return loom_err("parallel.vpp (%d) is larger than loom supports (%d)", vpp, LOOM_MAX_CHUNKS);
  }
  if (loom_exec_stage_split(p, spec->layers, first) || build_schedule(ex)) {
    loom_exec_free(ex);
    return LOOM_ERR;
  }
  if (!m->member) { /* a rank of the vision encoder only (placement separate) */
    if (create_vision(ex, cfg, spec)) {
      loom_exec_free(ex);
      return LOOM_ERR;
    }
    *out = ex;
    return 0;
  }
  loom_shard sh;
  memset(&sh, 0, sizeof sh);
  sh.module = spec->vision.arch != LOOM_VISION_NONE ? LOOM_MODULE_TEXT : LOOM_MODULE_ALL;
  sh.tp = m->tp, sh.tp_rank = m->tp_rank, sh.sp = m->sp, sh.sp_rank = m->sp_rank;
  sh.cp = m->cp, sh.cp_rank = m->cp_rank;
  sh.experts_over_tp = spec->moe.experts > 0 && p->etp == 1 && p->tp > 1;
  if (p->ep > 1 && spec->moe.experts > 0 && !sh.experts_over_tp) { /* ep consecutive dp ranks */
    loom_comm_split(&ex->ep_comm, &m->dp_comm, m->dp_rank / (int)p->ep, m->dp_rank, "ep");
    /* the ranks holding the same experts: every dp x sp x cp replica at this ep position (the
     * sp and cp ranks route different tokens through the same experts) */
    loom_comm_split(&ex->edp_comm, &m->grad_comm, m->dp_rank % (int)p->ep, m->grad_comm.rank,
                    "edp");
    sh.ep = ex->ep_comm.size, sh.ep_rank = ex->ep_comm.rank;
  }
  sh.seq_parallel = m->tp > 1 && !strcmp(p->sp_mode, "megatron");
  sh.n_chunks = ex->vpp;
  for (int c = 0; c < ex->vpp; c++) {
    int v = c * m->pp + m->pp_rank;
    sh.chunk_first[c] = first[v];
    sh.chunk_last[c] = first[v + 1];
    sh.chunk_embed[c] = v == 0;
    sh.chunk_head[c] = v == ex->K - 1;
  }
  int slots = loom_sched_peak_inflight(&ex->sched, m->pp_rank);
  if (slots < 1) slots = 1;
  if (loom_decoder_create_shard(&ex->d, spec, &sh, (int)t->micro_batch_size, (int)t->seq_len,
                                !strcmp(t->dtype, "bf16"), t->activation_checkpointing, slots,
                                &m->tp_comm, &m->sp_comm, &m->cp_comm) ||
      (!strcmp(t->param_dtype, "bf16") && loom_decoder_set_param_bf16(ex->d))) {
    loom_exec_free(ex);
    return LOOM_ERR;
  }
  if (sh.ep > 1) ex->d->ep_comm = &ex->ep_comm;
  for (int i = 0; i < ex->d->layout.count; i++) /* training.freeze_lm (the encoder: its module) */
    ex->d->layout.params[i].frozen |= t->freeze_lm; /* (the MoE balancing bias is frozen) */
  if (spec->vision.arch != LOOM_VISION_NONE && create_vision(ex, cfg, spec)) {
    loom_exec_free(ex);
    return LOOM_ERR;
  }
  loom_grad_sync_create(&ex->gs, ex->d, m, p);
  loom_grad_sync_set_reduce_bf16(ex->gs, !strcmp(t->reduce_dtype, "bf16"));
  if (sh.ep > 1) loom_grad_sync_set_experts(ex->gs, &ex->edp_comm);
  loom_adamw_state_init_dtype(&ex->opt, loom_grad_sync_owned_count(ex->gs) + 1,
                              !strcmp(t->optim_dtype, "bf16"));
  ex->rows = (size_t)ex->d->Nr * spec->hidden;
  size_t per = (size_t)ex->vpp * ex->A * ex->rows;
  if (m->pp > 1 || ex->vpp > 1) {
    ex->act_send = loom_alloc_for(3 * per * sizeof(float), "pipeline activation buffers");
    ex->grad_in = ex->act_send + per;
    ex->dx = ex->grad_in + per;
    ex->moe_n = loom_decoder_moe_mb_doubles(ex->d);
    ex->d->on_block_done = poll_sends;
    ex->d->on_block_done_ctx = ex;
  }
  if (ex->moe_n) {
    size_t all = (size_t)ex->vpp * ex->A * ex->moe_n;
    ex->moe_fwd = loom_alloc_for((2 * all + ex->moe_n) * sizeof(double),
                                 "pipeline router statistics");
    ex->moe_back = ex->moe_fwd + all;
    ex->moe_tmp = ex->moe_back + all;
  }
  plan_last_backward(ex);
  *out = ex;
  return 0;
}

void loom_exec_free(loom_executor *ex) {
  if (!ex) return;
  loom_sched_free(&ex->sched);
  loom_sched_free(&ex->eval_sched);
  loom_grad_sync_free(ex->gs); /* reads the decoder (ZeRO-3 units): free it first */
  loom_vmod_free(ex->vision);
  loom_decoder_free(ex->d);
  loom_adamw_state_free(&ex->opt);
  loom_free(ex->act_send);
  loom_free(ex->moe_fwd);
  free(ex->inject_slot);
  free(ex->reqs);
  free(ex->last_backward);
  if (ex->ep_comm.name) loom_comm_split_free(&ex->ep_comm);
  if (ex->edp_comm.name) loom_comm_split_free(&ex->edp_comm);
  free(ex);
}

loom_decoder *loom_exec_decoder(loom_executor *ex) { return ex->d; }
loom_vmod *loom_exec_vision(loom_executor *ex) { return ex->vision; }
loom_adamw_state *loom_exec_optimizer(loom_executor *ex) { return &ex->opt; }
loom_grad_sync *loom_exec_grad_sync(loom_executor *ex) { return ex->gs; }
const loom_schedule *loom_exec_schedule(const loom_executor *ex) { return &ex->sched; }

void loom_exec_set_trace(loom_executor *ex, loom_exec_trace_fn fn, void *ctx) {
  ex->trace = fn;
  ex->trace_ctx = ctx;
}

static float *buf(loom_executor *ex, float *base, int chunk, int mb) {
  return base + ((size_t)chunk * ex->A + mb) * ex->rows;
}

/* a micro-batch's router statistics after a chunk (moe_fwd or moe_back) */
static double *moe_buf(loom_executor *ex, double *base, int chunk, int mb) {
  return base + ((size_t)chunk * ex->A + mb) * ex->moe_n;
}

/* message tag of the boundary after virtual stage v for micro-batch mb (dir 0: act, 1: grad;
 * 2, 3: the router statistics going with them) */
static int tag_of(const loom_executor *ex, int v, int mb, int dir) {
  return ((mb * ex->K) + v) * 4 + dir;
}

static loom_comm_request *new_request(loom_executor *ex) {
  if (ex->n_reqs == ex->cap_reqs) {
    ex->cap_reqs = ex->cap_reqs ? 2 * ex->cap_reqs : 64;
    ex->reqs = loom_realloc(ex->reqs, (size_t)ex->cap_reqs, sizeof *ex->reqs);
  }
  return &ex->reqs[ex->n_reqs++];
}

/* the router statistics of a received message into the slot of (chunk, mb) */
static void moe_recv(loom_executor *ex, int chunk, int mb, int peer, int tag) {
  loom_comm_recv_f32(&ex->mesh->pp_comm, (float *)ex->moe_tmp, 2 * ex->moe_n, peer, tag);
  loom_decoder_moe_mb_load(ex->d, loom_decoder_slot_find(ex->d, chunk, mb), ex->moe_tmp);
}

/* send the statistics in a moe_buf (as floats: the bits travel unchanged) */
static void moe_send(loom_executor *ex, const double *stats, int peer, int tag) {
  loom_comm_isend_f32(&ex->mesh->pp_comm, (const float *)stats, 2 * ex->moe_n, peer, tag,
                      new_request(ex));
}

typedef struct {
  const int32_t *tokens, *targets;
  size_t mb_size;  /* B*T */
  float scale;
  double loss_sum;
  double norm, lr;
} step_ctx;

static void run_forward(loom_executor *ex, const loom_instr *in, step_ctx *sc) {
  loom_decoder *d = ex->d;
  int pp = ex->mesh->pp, v = in->chunk * pp + ex->mesh->pp_rank;
  loom_acts *a = loom_decoder_slot_get(d, in->chunk, in->mb);
  if (v > 0 && pp == 1) { /* previous chunk on this rank: hand over locally */
    loom_acts *prev = loom_decoder_slot_find(d, in->chunk - 1, in->mb);
    LOOM_ASSERT(prev);
    memcpy(loom_acts_input(a), loom_acts_output(d, prev), ex->rows * sizeof(float));
    if (ex->moe_n) { /* the router statistics so far */
      loom_decoder_moe_mb_save(d, prev, ex->moe_tmp);
      loom_decoder_moe_mb_load(d, a, ex->moe_tmp);
    }
  }
  double part = 0;
  size_t off = (size_t)in->mb * sc->mb_size;
  if (ex->vision) {
    LOOM_ASSERT(ex->vqa);
    a->mrope_pos = mrope(d) ? ex->vqa[in->mb]->position_ids : NULL;
    if (d->shard.chunk_embed[in->chunk]) vision_forward(ex, a, in->mb);
  }
  loom_decoder_forward_chunk(d, a, sc->tokens + off, sc->targets + off, &part, NULL);
  if (d->shard.chunk_head[in->chunk]) sc->loss_sum += part;
  if (pp > 1 && v < ex->K - 1) { /* keep a copy for the non-blocking send */
    memcpy(buf(ex, ex->act_send, in->chunk, in->mb), loom_acts_output(d, a),
           ex->rows * sizeof(float));
    if (ex->moe_n) loom_decoder_moe_mb_save(d, a, moe_buf(ex, ex->moe_fwd, in->chunk, in->mb));
  }
}

static void run_backward(loom_executor *ex, const loom_instr *in, int index, step_ctx *sc) {
  loom_decoder *d = ex->d;
  int pp = ex->mesh->pp, v = in->chunk * pp + ex->mesh->pp_rank;
  loom_acts *a = loom_decoder_slot_find(d, in->chunk, in->mb);
  LOOM_ASSERT(a);
  const float *dout = NULL;
  if (v < ex->K - 1) dout = pp == 1 ? buf(ex, ex->dx, in->chunk + 1, in->mb)
                                    : buf(ex, ex->grad_in, in->chunk, in->mb);
  /* the micro-batch's complete router statistics: from the chunk after on this rank (pp 1),
   * else loaded in a by recv-grad */
  if (ex->moe_n && v < ex->K - 1 && pp == 1)
    loom_decoder_moe_mb_load(d, a, moe_buf(ex, ex->moe_back, in->chunk + 1, in->mb));
  bool last = index == ex->last_backward[in->chunk];
  d->on_layer_grads = last ? loom_grad_sync_layer_done : NULL;
  d->on_layer_grads_ctx = ex->gs;
  if (ex->vision && d->shard.chunk_embed[in->chunk])
    a->inject_grads = loom_vmod_grads_for(ex->vision, ex->vqa[in->mb]);
  loom_decoder_backward_chunk(d, a, dout, v > 0 ? buf(ex, ex->dx, in->chunk, in->mb) : NULL,
                              sc->scale);
  bool vision_trains = !ex->cfg->training.freeze_vision || !ex->cfg->training.freeze_projector;
  if (ex->vision && vision_trains && d->shard.chunk_embed[in->chunk])
    loom_vmod_backward(ex->vision, ex->vqa[in->mb], in->mb);
  d->on_layer_grads = NULL;
  if (ex->moe_n && v > 0) /* the totals, for the chunk before */
    loom_decoder_moe_mb_save(d, a, moe_buf(ex, ex->moe_back, in->chunk, in->mb));
  loom_decoder_slot_release(d, a);
  if (pp == 1 && in->chunk == 0) loom_grad_sync_microbatch_done(ex->gs);
}

static void run_instr(loom_executor *ex, const loom_instr *in, int index, step_ctx *sc) {
  const loom_comm *pc = &ex->mesh->pp_comm;
  int v = in->chunk * ex->mesh->pp + ex->mesh->pp_rank;
  switch (in->kind) {
  case LOOM_INSTR_FORWARD:
    run_forward(ex, in, sc);
    break;
  case LOOM_INSTR_BACKWARD:
  case LOOM_INSTR_BACKWARD_INPUT: /* the CPU executor computes both halves here */
    run_backward(ex, in, index, sc);
    break;
  case LOOM_INSTR_BACKWARD_WEIGHT:
  case LOOM_INSTR_LOAD_MB:
  case LOOM_INSTR_GATHER_PARAMS: /* parameters are gathered inside the optimizer step */
    break;
  case LOOM_INSTR_SEND_ACT:
    loom_comm_isend_f32(pc, buf(ex, ex->act_send, in->chunk, in->mb), ex->rows, in->peer,
                        tag_of(ex, v, in->mb, 0), new_request(ex));
    if (ex->moe_n)
      moe_send(ex, moe_buf(ex, ex->moe_fwd, in->chunk, in->mb), in->peer, tag_of(ex, v, in->mb, 2));
    break;
  case LOOM_INSTR_RECV_ACT:
    loom_comm_recv_f32(pc, loom_acts_input(loom_decoder_slot_get(ex->d, in->chunk, in->mb)),
                       ex->rows, in->peer, tag_of(ex, v - 1, in->mb, 0));
    if (ex->moe_n) moe_recv(ex, in->chunk, in->mb, in->peer, tag_of(ex, v - 1, in->mb, 2));
    break;
  case LOOM_INSTR_SEND_GRAD:
    loom_comm_isend_f32(pc, buf(ex, ex->dx, in->chunk, in->mb), ex->rows, in->peer,
                        tag_of(ex, v - 1, in->mb, 1), new_request(ex));
    if (ex->moe_n)
      moe_send(ex, moe_buf(ex, ex->moe_back, in->chunk, in->mb), in->peer,
               tag_of(ex, v - 1, in->mb, 3));
    break;
  case LOOM_INSTR_RECV_GRAD:
    loom_comm_recv_f32(pc, buf(ex, ex->grad_in, in->chunk, in->mb), ex->rows, in->peer,
                       tag_of(ex, v, in->mb, 1));
    if (ex->moe_n) moe_recv(ex, in->chunk, in->mb, in->peer, tag_of(ex, v, in->mb, 3));
    break;
  case LOOM_INSTR_REDUCE_GRADS:
    loom_grad_sync_reduce(ex->gs);
    if (ex->vision) loom_vmod_reduce(ex->vision);
    break;
  case LOOM_INSTR_OPTIMIZER_STEP:
    sc->lr = loom_lr_at(&ex->cfg->training, ex->opt.step);
    if (ex->vision) { /* one norm over both modules clips both */
      double text = loom_grad_sync_global_sumsq(ex->gs);
      sc->norm = sqrt(loom_vmod_total_sumsq(ex->vision, text, ex->mesh->rank == 0));
      loom_grad_sync_step_norm(ex->gs, &ex->opt, &ex->cfg->training, sc->lr, sc->norm);
      loom_vmod_step(ex->vision, &ex->cfg->training, sc->lr, sc->norm);
    } else {
      sc->norm = loom_grad_sync_step(ex->gs, &ex->opt, &ex->cfg->training, sc->lr);
    }
    break;
  default:
    LOOM_ASSERT(!"unknown instruction");
  }
}

/* A rank of the vision encoder only: follow the first stage's instruction list, encoding at
 * its forwards and back-propagating at its backwards (the text ranks hand tokens and
 * gradients over at the same points). */
static void vision_only_step(loom_executor *ex, loom_step_result *r) {
  const loom_config_training *t = &ex->cfg->training;
  bool trains = !t->freeze_vision || !t->freeze_projector;
  loom_vmod_begin_step(ex->vision);
  double lr = loom_lr_at(t, loom_vmod_optimizer(ex->vision)->step), norm = 0;
  for (int i = 0; i < ex->sched.count[0]; i++) {
    const loom_instr *in = &ex->sched.instr[0][i];
    double t0 = ex->trace ? loom_now() : 0;
    if (in->kind == LOOM_INSTR_FORWARD && in->chunk == 0) {
      loom_vmod_forward(ex->vision, ex->vqa[in->mb], in->mb);
    } else if ((in->kind == LOOM_INSTR_BACKWARD || in->kind == LOOM_INSTR_BACKWARD_INPUT) &&
               in->chunk == 0 && trains) {
      loom_vmod_backward(ex->vision, ex->vqa[in->mb], in->mb);
    } else if (in->kind == LOOM_INSTR_REDUCE_GRADS) {
      loom_vmod_reduce(ex->vision);
    } else if (in->kind == LOOM_INSTR_OPTIMIZER_STEP) {
      norm = sqrt(loom_vmod_total_sumsq(ex->vision, 0, false));
      loom_vmod_step(ex->vision, t, lr, norm);
    } else {
      continue;
    }
    if (ex->trace) ex->trace(ex->trace_ctx, in, t0, loom_now());
  }
  memset(r, 0, sizeof *r);
  r->grad_norm = norm;
  r->lr = lr;
}

/* Vision-language models: the loss and token counts of text rank 0 on every rank of the job
 * (ranks of the encoder only have none of their own). */
static void share_result(loom_executor *ex, loom_step_result *r) {
  double v[4] = {r->loss, (double)r->counted, (double)r->tokens, r->grad_norm};
  loom_comm_bcast_bytes(loom_vmod_job_comm(ex->vision), v, sizeof v, 0);
  r->loss = v[0], r->counted = (int)v[1], r->tokens = (long)v[2], r->grad_norm = v[3];
}

void loom_exec_step(loom_executor *ex, const int32_t *tokens, const int32_t *targets,
                    loom_step_result *r) {
  if (!ex->mesh->member) {
    vision_only_step(ex, r);
    share_result(ex, r);
    return;
  }
  loom_decoder *d = ex->d;
  const loom_mesh *m = ex->mesh;
  step_ctx sc = {tokens, targets, (size_t)d->B * d->T, 0, 0, 0, 0};
  size_t n = (size_t)ex->A * sc.mb_size;
  double counts[1] = {0};
  for (size_t i = 0; i < n; i++) counts[0] += targets[i] != LOOM_IGNORE_INDEX;
  loom_comm_allreduce_f64(&m->dp_comm, counts, 1, LOOM_OP_SUM);
  sc.scale = counts[0] > 0 ? (float)(1.0 / counts[0]) : 0.0f;
  loom_decoder_zero_grads(d);
  loom_grad_sync_begin_step(ex->gs);
  loom_decoder_moe_begin_step(d, ex->A * m->dp); /* router losses: means over every mb */
  if (ex->vision) loom_vmod_begin_step(ex->vision);
  int rank = m->pp_rank;
  for (int i = 0; i < ex->sched.count[rank]; i++) {
    const loom_instr *in = &ex->sched.instr[rank][i];
    double t0 = ex->trace ? loom_now() : 0;
    run_instr(ex, in, i, &sc);
    if (ex->trace) ex->trace(ex->trace_ctx, in, t0, loom_now());
  }
  for (int i = 0; i < ex->n_reqs; i++) loom_comm_wait(&ex->reqs[i]);
  ex->n_reqs = 0;
  /* MoE: the step's router statistics over the dp x sp x cp ranks, the balancing bias moved in
   * the parameters this rank's optimizer owns (ZeRO-3: its shard; else the whole buffer) */
  size_t ob = 0, oe = d->layout.total;
  if (loom_grad_sync_zero(ex->gs) == 3) loom_grad_sync_owned(ex->gs, &ob, &oe);
  loom_decoder_moe_end_step(d, &m->grad_comm, &m->pp_comm, loom_grad_sync_owned_params(ex->gs),
                            ob, oe);
  /* the loss: summed over the dp x sp replicas on the last stage, then shared along the pipe */
  double loss[1] = {sc.loss_sum};
  loom_comm_allreduce_f64(&m->grad_comm, loss, 1, LOOM_OP_SUM);
  loom_comm_allreduce_f64(&m->pp_comm, loss, 1, LOOM_OP_SUM); /* only the head stage has it */
  r->loss = counts[0] > 0 ? loss[0] / counts[0] : 0;
  r->counted = (int)counts[0];
  r->tokens = (long)n * m->dp;
  r->grad_norm = sc.norm;
  r->lr = sc.lr;
  if (ex->vision && loom_vmod_get_plan(ex->vision)->separate) share_result(ex, r);
}

/* Forward-only instruction of the evaluation schedule on a text rank; activation slots are
 * released as soon as nothing needs them (the head chunk's loss is summed in run_forward,
 * a sent output was copied for the send, a local hand-off has been copied). */
static void eval_instr(loom_executor *ex, const loom_instr *in, step_ctx *sc) {
  if (in->kind != LOOM_INSTR_FORWARD) {
    LOOM_ASSERT(in->kind == LOOM_INSTR_LOAD_MB || in->kind == LOOM_INSTR_SEND_ACT ||
                in->kind == LOOM_INSTR_RECV_ACT);
    run_instr(ex, in, -1, sc);
    return;
  }
  loom_decoder *d = ex->d;
  run_forward(ex, in, sc);
  if (ex->mesh->pp == 1 && in->chunk > 0) /* the previous chunk handed over locally */
    loom_decoder_slot_release(d, loom_decoder_slot_find(d, in->chunk - 1, in->mb));
  if (ex->mesh->pp > 1 || d->shard.chunk_head[in->chunk])
    loom_decoder_slot_release(d, loom_decoder_slot_find(d, in->chunk, in->mb));
}

void loom_exec_eval(loom_executor *ex, const int32_t *tokens, const int32_t *targets,
                    double *loss_sum, double *count) {
  const loom_schedule *es = &ex->eval_sched;
  *loss_sum = *count = 0;
  if (!ex->mesh->member) { /* an encoder-only rank: encode at the first stage's forwards */
    for (int i = 0; i < es->count[0]; i++) {
      const loom_instr *in = &es->instr[0][i];
      if (in->kind == LOOM_INSTR_FORWARD && in->chunk == 0)
        loom_vmod_forward(ex->vision, ex->vqa[in->mb], in->mb);
    }
    return;
  }
  loom_decoder *d = ex->d;
  const loom_mesh *m = ex->mesh;
  step_ctx sc = {tokens, targets, (size_t)d->B * d->T, 0, 0, 0, 0};
  size_t n = (size_t)ex->A * sc.mb_size;
  double counts[1] = {0};
  for (size_t i = 0; i < n; i++) counts[0] += targets[i] != LOOM_IGNORE_INDEX;
  loom_comm_allreduce_f64(&m->dp_comm, counts, 1, LOOM_OP_SUM);
  int rank = m->pp_rank;
  for (int i = 0; i < es->count[rank]; i++) {
    const loom_instr *in = &es->instr[rank][i];
    double t0 = ex->trace ? loom_now() : 0;
    eval_instr(ex, in, &sc);
    if (ex->trace) ex->trace(ex->trace_ctx, in, t0, loom_now());
  }
  for (int i = 0; i < ex->n_reqs; i++) loom_comm_wait(&ex->reqs[i]);
  ex->n_reqs = 0;
  /* as in a step: summed over the dp x sp replicas on the head stage, then along the pipe */
  double loss[1] = {sc.loss_sum};
  loom_comm_allreduce_f64(&m->grad_comm, loss, 1, LOOM_OP_SUM);
  loom_comm_allreduce_f64(&m->pp_comm, loss, 1, LOOM_OP_SUM);
  *loss_sum = loss[0];
  *count = counts[0];
}

const float *loom_exec_forward_only(loom_executor *ex, const int32_t *tokens, const void *vqa_batch) {
  loom_decoder *d = ex->d;
  LOOM_ASSERT(ex->mesh->pp == 1);
  const loom_vqa_batch *batch = vqa_batch;
  const loom_vqa_batch *const *keep = ex->vqa;
  ex->vqa = &batch;
  for (int c = 0; c < ex->vpp; c++) {
    loom_acts *a = loom_decoder_slot_get(d, c, 0);
    if (c > 0) memcpy(loom_acts_input(a), loom_acts_output(d, loom_decoder_slot_find(d, c - 1, 0)),
                      ex->rows * sizeof(float));
    if (ex->vision) {
      a->mrope_pos = mrope(d) ? batch->position_ids : NULL;
      if (d->shard.chunk_embed[c]) vision_forward(ex, a, 0);
    }
    loom_decoder_forward_chunk(d, a, tokens, NULL, NULL, NULL);
  }
  for (int c = 0; c < ex->vpp; c++) loom_decoder_slot_release(d, loom_decoder_slot_find(d, c, 0));
  ex->vqa = keep;
  return d->logits;
}

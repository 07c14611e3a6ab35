/* The vision encoder as a module with its own parallel strategy (vision.parallel.*): its
 * mesh (dp x sp x tp over the first ranks of the job), its parameter container and gradient
 * synchroniser (ZeRO stage of its own over its dp x sp replicas), its optimizer state, and
 * the hand-off of vision tokens to the text decoder's ranks and of their gradients back.
 *
 * Roles. Data-parallel group j (same samples in both modules) has g_v = sp_v * tp_v encoder
 * ranks ("producers", world ranks first_v + j*g_v + k) and g_t = cp_t * sp_t * tp_t text ranks of
 * the first pipeline stage ("consumers", world ranks j*g_t + k).
 *   collocated: the encoder runs on first-stage text ranks of the same group (at the same
 *     instruction of the schedule as their text work): first_v = 0, and g_v == g_t unless
 *     dp == 1 (g_v <= g_t);
 *   separate: the encoder has ranks of its own after the text decoder's (first_v = the text
 *     ranks); they follow the first stage's instruction list, encoding at its forwards and
 *     back-propagating at its backwards.
 *
 * Hand-off (per micro-batch, n tokens of the group's images, (n, Ct) floats):
 *   forward:  every producer ends with all n tokens; consumer k receives them from producer
 *             k mod g_v (itself when collocated with the same shape: a copy, no traffic);
 *   backward: consumers holding distinct rows of the text sequence (tp rank 0 of each text sp
 *             rank; every tp rank under Megatron sequence parallelism) send their token
 *             gradients (zero outside their rows) to every producer, which sums them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/vision_module.h"
#include "loom/kernels.h"

#define TAG_FEATS 7001
#define TAG_GRADS 7002

struct loom_vmod {
  const loom_config *cfg;
  loom_vmod_plan plan;
  loom_mesh mesh;          /* the encoder's ranks (mesh.member: this rank runs it) */
  loom_mesh all;           /* one axis over every rank: the hand-off communicator */
  const loom_mesh *text;
  loom_decoder *d;         /* parameter container (module vision), members only */
  loom_vision *enc;
  loom_grad_sync *gs;
  loom_adamw_state opt;
  int Ct;
  int producer;            /* index in the group, -1 if none */
  int consumer;            /* index in the group, -1 if none */
  bool sends_grads;        /* consumer whose rows are distinct (see above) */
  int group;               /* data-parallel group */
  int last_mb;             /* micro-batch whose activations the encoder holds, -1 */
  int max_tokens;
  float *out;              /* (max_tokens, Ct) producer: the encoder's tokens */
  float *feats, *grads;    /* (max_tokens, Ct) consumer: tokens received, their gradient */
  float *sum;              /* (max_tokens, Ct) producer: gradient received */
};

static int pick(long v, long dflt) { return v > 0 ? (int)v : (int)dflt; }

int loom_vmod_resolve(const loom_config *cfg, const loom_model_spec *spec, int world,
                      loom_vmod_plan *pl) {
  const loom_config_parallel *p = &cfg->parallel;
  const loom_config_vision_parallel *v = &cfg->vision_parallel;
  memset(pl, 0, sizeof *pl);
  bool follow = v->tp == 0 && v->sp == 0 && v->cp <= 1;
  pl->dp = pick(v->dp, p->dp);
  pl->tp = follow ? (int)p->tp : pick(v->tp, 1);
  pl->sp = follow ? (int)p->sp : pick(v->sp, 1);
  pl->cp = pick(v->cp, 1);
  pl->zero = v->zero >= 0 ? (int)v->zero : (int)p->zero;
  if (pl->cp > 1 && pl->sp > 1)
    return loom_err("vision.parallel.cp = %d with vision.parallel.sp = %d: the encoder splits "
                    "its patches one way, ring attention (cp) or Ulysses (sp); set one of them "
                    "to 1", pl->cp, pl->sp);
  pl->g_t = (int)(p->cp * p->sp * p->tp); /* text ranks of a dp group on the first stage */
  pl->megatron_sp = p->tp > 1 && !strcmp(p->sp_mode, "megatron");
  if (pl->dp != p->dp)
    return loom_err("vision.parallel.dp (%d) must equal parallel.dp (%ld): each vision replica "
                    "encodes the images of the text replica with the same index", pl->dp, p->dp);
  if (pl->zero < 0 || pl->zero > 3)
    return loom_err("vision.parallel.zero must be 0, 1, 2 or 3 (or -1 for parallel.zero), got %d",
                    pl->zero);
  if (pl->tp < 1 || pl->sp < 1)
    return loom_err("vision.parallel.tp and .sp must be positive (0 = follow the text decoder)");
  pl->separate = !strcmp(v->placement, "separate");
  pl->g_v = pl->cp * pl->sp * pl->tp;
  pl->text_ranks = (int)(p->pp * p->dp * p->cp * p->sp * p->tp);
  pl->first = pl->separate ? pl->text_ranks : 0;
  const loom_vision_spec *s = &spec->vision;
  int unit = s->merge * s->merge;
  int ph = s->arch == LOOM_VISION_QWEN ? s->hidden * unit : spec->hidden;
  if (s->heads % (pl->tp * pl->sp))
    return loom_err("vision.parallel: tp*sp = %d*%d must divide the vision encoder's %d heads",
                    pl->tp, pl->sp, s->heads);
  if (s->intermediate % pl->tp || ph % pl->tp)
    return loom_err("vision.parallel.tp (%d) must divide the vision MLP width (%d) and the "
                    "projector width (%d)", pl->tp, s->intermediate, ph);
  if (pl->separate) {
    if (pl->text_ranks + pl->dp * pl->g_v != world)
      return loom_err("vision.parallel.placement=separate: the text decoder's pp*dp*cp*sp*tp = %d "
                      "ranks plus the encoder's dp*cp*sp*tp = %d*%d*%d*%d = %d make %d, but %d "
                      "ranks were started; start %d", pl->text_ranks, pl->dp, pl->cp, pl->sp, pl->tp,
                      pl->dp * pl->g_v, pl->text_ranks + pl->dp * pl->g_v, world,
                      pl->text_ranks + pl->dp * pl->g_v);
    return 0;
  }
  if (pl->dp > 1 && pl->g_v != pl->g_t)
    return loom_err("vision.parallel: with parallel.dp = %d the encoder's cp*tp*sp (%d*%d*%d = "
                    "%d) must equal the text decoder's tp*sp*cp (%ld*%ld*%ld = %d), so that a "
                    "rank encodes the images of the samples its text work uses", pl->dp, pl->cp,
                    pl->tp, pl->sp, pl->g_v, p->tp, p->sp, p->cp, pl->g_t);
  if (pl->g_v > pl->g_t)
    return loom_err("vision.parallel: the encoder's cp*tp*sp (%d) is larger than the text "
                    "decoder's cp*tp*sp (%d) on the first pipeline stage; the encoder runs there",
                    pl->g_v, pl->g_t);
  if ((long)pl->dp * pl->g_v > world)
    return loom_err("vision.parallel: dp*tp*sp = %d does not fit in %d ranks",
                    pl->dp * pl->g_v, world);
  return 0;
}

int loom_vmod_create(loom_vmod **out, const loom_config *cfg, const loom_model_spec *spec,
                     const loom_mesh *text) {
  loom_vmod *vm = loom_calloc(1, sizeof *vm);
  vm->cfg = cfg;
  vm->text = text;
  vm->Ct = spec->hidden;
  vm->last_mb = -1;
  if (loom_vmod_resolve(cfg, spec, loom_dist_world(), &vm->plan)) {
    free(vm);
    return LOOM_ERR;
  }
  const loom_vmod_plan *pl = &vm->plan;
  double timeout = cfg->parallel.timeout_s;
  if (loom_mesh_create_on(&vm->mesh, 1, pl->dp, pl->cp, pl->sp, pl->tp, timeout, pl->first) ||
      loom_mesh_create_on(&vm->all, 1, loom_dist_world(), 1, 1, 1, timeout, 0)) {
    free(vm);
    return LOOM_ERR;
  }
  const loom_config_training *t = &cfg->training;
  const loom_vision_spec *vs = &spec->vision;
  long side = vs->patch > 0 ? vs->image_size / vs->patch : 0;
  long per_image = vs->arch == LOOM_VISION_LLAVA ? side * side /* fixed-size images */
                                                 : (cfg->data.image_max_pixels + 195) / 196 + 4;
  int max_patches = (int)(t->micro_batch_size * per_image);
  int unit = spec->vision.merge * spec->vision.merge;
  vm->max_tokens = max_patches / unit + 1;
  size_t bytes = (size_t)vm->max_tokens * vm->Ct * sizeof(float);
  vm->consumer = vm->producer = -1;
  if (text->member && text->pp_rank == 0) {
    vm->consumer = (text->cp_rank * text->sp + text->sp_rank) * text->tp + text->tp_rank;
    vm->group = text->dp_rank;
    vm->sends_grads = pl->megatron_sp || text->tp_rank == 0;
    vm->feats = loom_alloc_for(bytes, "vision tokens for the decoder");
    vm->grads = loom_alloc_for(bytes, "vision token gradients");
  }
  if (vm->mesh.member) {
    const loom_mesh *m = &vm->mesh;
    vm->producer = (m->cp_rank * m->sp + m->sp_rank) * m->tp + m->tp_rank;
    LOOM_ASSERT(pl->separate ? vm->consumer < 0 : vm->consumer >= 0 && vm->group == m->dp_rank);
    vm->group = m->dp_rank;
    loom_shard sh;
    memset(&sh, 0, sizeof sh);
    sh.module = LOOM_MODULE_VISION;
    /* the encoder's patch split: Ulysses over sp, or the cp ring (one of them is 1) */
    bool ring = m->cp > 1;
    const loom_comm *split = ring ? &m->cp_comm : &m->sp_comm;
    sh.tp = m->tp, sh.tp_rank = m->tp_rank;
    sh.sp = ring ? m->cp : m->sp, sh.sp_rank = ring ? m->cp_rank : m->sp_rank;
    /* a parameter container: the smallest text shape (its activations are never used) */
    /* precision policy: vision.param_dtype / optim_dtype, "" = the text module's */
    const char *pdt = cfg->vision.param_dtype[0] ? cfg->vision.param_dtype : t->param_dtype;
    const char *odt = cfg->vision.optim_dtype[0] ? cfg->vision.optim_dtype : t->optim_dtype;
    if (loom_decoder_create_shard(&vm->d, spec, &sh, 1, sh.sp, !strcmp(t->dtype, "bf16"), false,
                                  1, &m->tp_comm, split, NULL) ||
        (!strcmp(pdt, "bf16") && loom_decoder_set_param_bf16(vm->d)) ||
        loom_vision_create_parallel(&vm->enc, vm->d, max_patches, &m->tp_comm, split, ring)) {
      loom_vmod_free(vm);
      return LOOM_ERR;
    }
    for (int i = 0; i < vm->d->layout.count; i++) { /* training.freeze_* */
      loom_param *p = &vm->d->layout.params[i];
      p->frozen = !strncmp(p->name, "vision.merger.", 14) ? t->freeze_projector : t->freeze_vision;
    }
    loom_config_parallel vp = cfg->parallel;
    vp.zero = pl->zero;
    loom_grad_sync_create(&vm->gs, vm->d, m, &vp);
    loom_grad_sync_set_reduce_bf16(vm->gs, !strcmp(t->reduce_dtype, "bf16"));
    size_t b, e;
    loom_grad_sync_owned(vm->gs, &b, &e);
    loom_adamw_state_init_dtype(&vm->opt, e - b + 1, !strcmp(odt, "bf16"));
    vm->out = loom_alloc_for(bytes, "vision encoder output tokens");
    vm->sum = loom_alloc_for(bytes, "vision token gradient sums");
  }
  *out = vm;
  return 0;
}

void loom_vmod_free(loom_vmod *vm) {
  if (!vm) return;
  loom_grad_sync_free(vm->gs);
  loom_vision_free(vm->enc);
  loom_decoder_free(vm->d);
  loom_adamw_state_free(&vm->opt);
  loom_free(vm->out);
  loom_free(vm->sum);
  loom_free(vm->feats);
  loom_free(vm->grads);
  loom_mesh_free(&vm->mesh);
  loom_mesh_free(&vm->all);
  free(vm);
}

const loom_vmod_plan *loom_vmod_get_plan(const loom_vmod *vm) { return &vm->plan; }
const loom_mesh *loom_vmod_mesh(const loom_vmod *vm) { return &vm->mesh; }
loom_decoder *loom_vmod_decoder(loom_vmod *vm) { return vm->d; }
loom_grad_sync *loom_vmod_grad_sync(loom_vmod *vm) { return vm->gs; }
loom_adamw_state *loom_vmod_optimizer(loom_vmod *vm) { return &vm->opt; }

size_t loom_vmod_buffer_bytes(const loom_vmod *vm) {
  size_t tokens = (size_t)vm->max_tokens * vm->Ct * sizeof(float);
  size_t n = vm->consumer >= 0 ? 2 * tokens : 0;  /* feats, grads */
  if (vm->producer >= 0) n += 2 * tokens + loom_vision_arena_bytes(vm->enc) + vm->d->arena_bytes;
  return n;
}

static int tokens_of(const loom_vqa_batch *b) {
  int n = 0;
  for (int i = 0; i < b->n_images; i++) n += b->image_tokens[i];
  return n;
}

/* World rank of producer k / consumer k of this rank's group. */
static int producer_rank(const loom_vmod *vm, int k) {
  return vm->plan.first + vm->group * vm->plan.g_v + k;
}
static int consumer_rank(const loom_vmod *vm, int k) { return vm->group * vm->plan.g_t + k; }

static void encode(loom_vmod *vm, const loom_vqa_batch *b, int mb) {
  loom_decoder *d = vm->d;
  loom_vision_input in = {b->n_images, (const int(*)[3])b->grid_thw, b->pixel_values,
                          (int)b->total_patches};
  if (d->param_hook) d->param_hook(d->param_hook_ctx, LOOM_UNIT_ENDS, LOOM_PARAMS_ACQUIRE_FWD);
  if (loom_vision_forward(vm->enc, &in, vm->out))
    loom_dist_abort("vision encoder: %s", loom_errmsg());
  if (d->param_hook) d->param_hook(d->param_hook_ctx, LOOM_UNIT_ENDS, LOOM_PARAMS_RELEASE);
  vm->last_mb = mb;
}

const float *loom_vmod_forward(loom_vmod *vm, const void *batch, int mb) {
  const loom_vqa_batch *b = batch;
  int n = tokens_of(b);
  if (n > vm->max_tokens)
    loom_dist_abort("vision: %d image tokens in a micro-batch, more than the %d planned", n,
                    vm->max_tokens);
  size_t count = (size_t)n * vm->Ct;
  const loom_comm *w = &vm->all.world_comm;
  int me = vm->all.rank, nreq = 0;
  loom_comm_request req[64];
  if (vm->producer >= 0) {
    encode(vm, b, mb);
    for (int k = vm->producer; k < vm->plan.g_t; k += vm->plan.g_v) {
      int to = consumer_rank(vm, k);
      if (to == me) memcpy(vm->feats, vm->out, count * sizeof(float));
      else {
        LOOM_ASSERT(nreq < 64);
        loom_comm_isend_f32(w, vm->out, count, to, TAG_FEATS, &req[nreq++]);
      }
    }
  }
  if (vm->consumer >= 0) {
    int from = producer_rank(vm, vm->consumer % vm->plan.g_v);
    if (from != me) loom_comm_recv_f32(w, vm->feats, count, from, TAG_FEATS);
  }
  for (int i = 0; i < nreq; i++) loom_comm_wait(&req[i]);
  return vm->consumer >= 0 ? vm->feats : NULL;
}

float *loom_vmod_grads_for(loom_vmod *vm, const void *batch) {
  if (vm->consumer < 0) return NULL;
  memset(vm->grads, 0, (size_t)tokens_of(batch) * vm->Ct * sizeof(float));
  return vm->grads;
}

void loom_vmod_backward(loom_vmod *vm, const void *batch, int mb) {
  const loom_vqa_batch *b = batch;
  size_t count = (size_t)tokens_of(b) * vm->Ct;
  const loom_comm *w = &vm->all.world_comm;
  int me = vm->all.rank, nreq = 0;
  loom_comm_request req[64];
  if (vm->consumer >= 0 && vm->sends_grads)
    for (int k = 0; k < vm->plan.g_v; k++) {
      int to = producer_rank(vm, k);
      if (to == me) continue; /* added below */
      LOOM_ASSERT(nreq < 64);
      loom_comm_isend_f32(w, vm->grads, count, to, TAG_GRADS, &req[nreq++]);
    }
  if (vm->producer >= 0) {
    memset(vm->sum, 0, count * sizeof(float));
    float *tmp = vm->out; /* free again: the tokens were handed over in the forward */
    for (int k = 0; k < vm->plan.g_t; k++) {
      bool sends = vm->plan.megatron_sp || k % vm->text->tp == 0;
      if (!sends) continue;
      int from = consumer_rank(vm, k);
      const float *src = vm->grads;
      if (from != me) {
        loom_comm_recv_f32(w, tmp, count, from, TAG_GRADS);
        src = tmp;
      }
      for (size_t i = 0; i < count; i++) vm->sum[i] += src[i];
    }
    loom_decoder *d = vm->d;
    if (vm->last_mb != mb) encode(vm, b, mb); /* pipelined: recompute the encoder's forward */
    if (d->param_hook) d->param_hook(d->param_hook_ctx, LOOM_UNIT_ENDS, LOOM_PARAMS_ACQUIRE_BWD);
    loom_vision_backward(vm->enc, vm->sum);
    if (d->param_hook) d->param_hook(d->param_hook_ctx, LOOM_UNIT_ENDS, LOOM_PARAMS_RELEASE);
    vm->last_mb = -1;
    loom_grad_sync_microbatch_done(vm->gs);
  }
  for (int i = 0; i < nreq; i++) loom_comm_wait(&req[i]);
}

void loom_vmod_begin_step(loom_vmod *vm) {
  if (!vm->mesh.member) return;
  loom_decoder_zero_grads(vm->d);
  loom_grad_sync_begin_step(vm->gs);
  vm->last_mb = -1;
}

void loom_vmod_reduce(loom_vmod *vm) {
  if (vm->mesh.member) loom_grad_sync_reduce(vm->gs);
}

double loom_vmod_total_sumsq(loom_vmod *vm, double text_sumsq, bool text_root) {
  double s[1] = {text_root ? text_sumsq : 0};
  if (vm->mesh.member) {
    double mine = loom_grad_sync_global_sumsq(vm->gs);
    if (vm->mesh.rank == 0) s[0] += mine; /* each module counted once over the whole job */
  }
  loom_comm_allreduce_f64(&vm->all.world_comm, s, 1, LOOM_OP_SUM);
  return s[0];
}

const loom_comm *loom_vmod_job_comm(const loom_vmod *vm) { return &vm->all.world_comm; }

void loom_vmod_step(loom_vmod *vm, const loom_config_training *t, double lr, double norm) {
  if (vm->mesh.member) loom_grad_sync_step_norm(vm->gs, &vm->opt, t, lr, norm);
}

void loom_vmod_init_params(loom_vmod *vm, uint64_t seed) {
  if (vm->mesh.member) loom_decoder_init_params(vm->d, seed);
}

void loom_vmod_params_loaded(loom_vmod *vm) {
  if (vm->mesh.member) loom_grad_sync_params_loaded(vm->gs);
}

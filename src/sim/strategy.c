/* Parallel strategies: from a train config and back (vision.parallel.* mapped to the vision
 * encoder's mode), the layout checks (the trainer's loom_mesh_check_model plus the
 * simulator's: expert parallelism with Megatron's folding, FP8, the imbalance factor), the
 * split of the layers into virtual stages (the executor's loom_exec_stage_split), and a
 * one-line description. */
#include <stdio.h>
#include <string.h>

#include "loom/core.h"
#include "loom/exec.h"
#include "loom/mesh.h"
#include "sim/sim_internal.h"

static const char *const recompute_names[] = {"none", "selective", "full"};

const char *loom_recompute_name(loom_recompute r) {
  return r <= LOOM_RECOMPUTE_FULL ? recompute_names[r] : "?";
}

int loom_recompute_parse(const char *s, loom_recompute *out) {
  for (int i = 0; i < 3; i++)
    if (!strcmp(s, recompute_names[i])) return *out = (loom_recompute)i, 0;
  return loom_err("unknown recompute '%s' (expected none, selective or full)", s);
}

int loom_sim_world(const loom_sim_strategy *st) {
  return st->dp * st->tp * st->pp * sim_cp(st) * st->sp;
}

static void to_parallel(const loom_sim_strategy *st, loom_config_parallel *p) {
  memset(p, 0, sizeof *p);
  p->dp = st->dp, p->tp = st->tp, p->pp = st->pp, p->sp = st->sp, p->cp = sim_cp(st);
  snprintf(p->sp_mode, sizeof p->sp_mode, "%s", st->seq_par ? "megatron" : "ulysses");
  p->zero = st->zero;
  p->vpp = st->vpp;
  snprintf(p->schedule, sizeof p->schedule, "%s",
           st->vpp > 1 ? "interleaved" : (!strcmp(st->schedule, "gpipe") ? "gpipe" : "1f1b"));
  snprintf(p->stage_layers, sizeof p->stage_layers, "%s", st->stage_layers);
  p->bucket_mb = st->bucket_mb;
  /* the trainer's layout check sees no expert parallelism: the simulator checks ep and etp
   * itself (moe_check), with Megatron's folding, which may fold tp and cp ranks in */
  p->ep = 1;
}

/* vision.parallel.* -> the encoder's mode over the text's tensor-parallel ranks, with the
 * trainer's reading of the keys (src/exec/vision_module.c: tp = sp = 0 follow the text's tp
 * and sp; one of them given, the other 0 means 1):
 *   sp = parallel.tp > 1, tp = 1     sp (the patches split over the tp ranks, Ulysses)
 *   tp = parallel.tp > 1, sp = 1     tp (Megatron tensor parallelism)
 *   tp = sp = 1                      replicate
 * Anything else is an error naming the keys: the cost model splits the encoder over the
 * text's tensor-parallel ranks only (not over Ulysses parallel.sp ranks, not over a part of
 * them), and has one data-parallel size and one placement for both modules. The encoder's
 * ZeRO stage (vision.parallel.zero) is its own. */
static int vision_mode(const loom_config *cfg, char *mode, size_t cap) {
  const loom_config_vision_parallel *v = &cfg->vision_parallel;
  const loom_config_parallel *p = &cfg->parallel;
  if (strcmp(v->placement, "collocated"))
    return loom_err("vision.parallel.placement=%s (the encoder on ranks of its own) is not "
                    "modelled by the simulator; use vision.parallel.placement=collocated",
                    v->placement);
  if (v->dp != 0 && v->dp != p->dp)
    return loom_err("vision.parallel.dp=%ld differs from parallel.dp=%ld; the simulator models "
                    "the encoder on the text's data-parallel replicas: set vision.parallel.dp=0 "
                    "or %ld", v->dp, p->dp, p->dp);
  bool follow = v->tp == 0 && v->sp == 0;
  long tp = follow ? p->tp : v->tp ? v->tp : 1, sp = follow ? p->sp : v->sp ? v->sp : 1;
  const char *m = NULL;
  if (tp == 1 && sp == 1) m = "replicate";
  else if (tp == 1 && sp == p->tp) m = "sp";
  else if (sp == 1 && tp == p->tp) m = "tp";
  if (m) {
    snprintf(mode, cap, "%s", m);
    return 0;
  }
  char hint[256];
  if (p->tp > 1)
    snprintf(hint, sizeof hint, "set vision.parallel.sp=%ld (sequence parallel) or "
             "vision.parallel.tp=%ld (tensor parallel) with the other 1, or both 1 (replicated)",
             p->tp, p->tp);
  else
    snprintf(hint, sizeof hint, "with parallel.tp=1 it can only replicate the encoder: set "
             "vision.parallel.tp=1 vision.parallel.sp=1");
  return loom_err("vision.parallel.tp=%ld vision.parallel.sp=%ld%s with parallel.tp=%ld "
                  "parallel.sp=%ld: the simulator splits the vision encoder over the text's "
                  "tensor-parallel ranks only; %s", v->tp, v->sp,
                  follow ? " (follow the text)" : "", p->tp, p->sp, hint);
}

/* training.param_dtype / optim_dtype / reduce_dtype and the vision module's overrides ("" =
 * the text module's), as the config validated them */
static int precision(const loom_config *cfg, loom_sim_strategy *st) {
  const loom_config_training *t = &cfg->training;
  const struct {
    const char *key, *value;
    loom_hw_dtype *out;
  } keys[] = {{"training.param_dtype", t->param_dtype, &st->param_dtype},
              {"training.optim_dtype", t->optim_dtype, &st->optim_dtype},
              {"training.reduce_dtype", t->reduce_dtype, &st->reduce_dtype},
              {"vision.param_dtype", cfg->vision.param_dtype, &st->vision_param_dtype},
              {"vision.optim_dtype", cfg->vision.optim_dtype, &st->vision_optim_dtype}};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const char *v = keys[i].value;
    if (!v[0] && i >= 3) { /* the vision module follows the text module */
      *keys[i].out = i == 3 ? st->param_dtype : st->optim_dtype;
      continue;
    }
    if (loom_hw_dtype_parse(v[0] ? v : "fp32", keys[i].out) || *keys[i].out == LOOM_DT_FP16)
      return loom_err("%s=%s: expected fp32 or bf16", keys[i].key, v);
  }
  return 0;
}

int loom_sim_strategy_from_config(loom_sim_strategy *st, const loom_config *cfg, int world) {
  const loom_config_parallel *p = &cfg->parallel;
  const loom_config_training *t = &cfg->training;
  memset(st, 0, sizeof *st);
  st->dp = (int)p->dp, st->tp = (int)p->tp, st->pp = (int)p->pp, st->sp = (int)p->sp;
  st->cp = (int)p->cp;
  st->seq_par = !strcmp(p->sp_mode, "megatron") && p->tp > 1;
  st->zero = (int)p->zero;
  st->vpp = (int)p->vpp;
  snprintf(st->schedule, sizeof st->schedule, "%s",
           p->pp == 1 && p->vpp == 1 ? "none" : p->schedule);
  if (strlen(p->stage_layers) >= sizeof st->stage_layers)
    return loom_err("parallel.stage_layers is too long for the simulator (%zu characters)",
                    strlen(p->stage_layers));
  snprintf(st->stage_layers, sizeof st->stage_layers, "%.*s", (int)sizeof st->stage_layers - 1,
           p->stage_layers); /* the length was checked above */
  st->micro_batch = (int)t->micro_batch_size;
  st->seq = (int)t->seq_len;
  st->recompute = t->activation_checkpointing ? LOOM_RECOMPUTE_FULL : LOOM_RECOMPUTE_NONE;
  if (loom_hw_dtype_parse(t->dtype, &st->dtype)) return loom_err_prefix("training.dtype: ");
  st->bucket_mb = p->bucket_mb > 0 ? p->bucket_mb : 25;
  st->ep = p->ep > 0 ? (int)p->ep : 1;
  st->etp = p->etp > 0 ? (int)p->etp : st->tp;
  st->moe_imbalance = 1;
  st->ep_overlap = -1;
  if (precision(cfg, st)) return -1;
  snprintf(st->vision_mode, sizeof st->vision_mode, "replicate");
  st->freeze_vision = t->freeze_vision;
  if (!strcmp(cfg->data.format, "vqa") || cfg->model.preset[0]) { /* the images' patches */
    loom_model_spec spec;
    if (loom_model_spec_from_config(&spec, &cfg->model) == 0 && spec.vision.arch != LOOM_VISION_NONE) {
      int unit = spec.vision.merge * spec.vision.merge, px = spec.vision.patch * spec.vision.patch;
      st->vision_patches = spec.vision.arch == LOOM_VISION_LLAVA
                               ? (spec.vision.image_size / spec.vision.patch) * (spec.vision.image_size / spec.vision.patch)
                               : (int)(cfg->data.image_max_pixels / px) / unit * unit;
      if (p->cp > 1 || cfg->vision_parallel.cp > 1) /* docs/SIMULATOR.md, "Not modelled" */
        return loom_err("parallel.cp = %ld, vision.parallel.cp = %ld: the simulator does not "
                        "model context parallelism in a vision-language model (the text's cp "
                        "ranks share an encoder that is not split over them, or the encoder's "
                        "own ring); simulate it with parallel.cp=1 and vision.parallel.cp=1",
                        p->cp,
                        cfg->vision_parallel.cp);
      if (vision_mode(cfg, st->vision_mode, sizeof st->vision_mode)) return -1; /* patches set */
      st->vision_zero_own = cfg->vision_parallel.zero >= 0;
      st->vision_zero = st->vision_zero_own ? (int)cfg->vision_parallel.zero : st->zero;
    }
    loom_err_clear();
  }
  if (world > 0 && world != loom_sim_world(st)) {
    int rest = st->tp * st->pp * sim_cp(st) * st->sp;
    if (st->dp == 1 && world % rest == 0) {
      st->dp = world / rest;
    } else {
      return loom_err("the config's mesh is dp*tp*pp*cp*sp = %ld*%ld*%ld*%d*%ld = %d ranks but "
                      "the cluster has %d; set parallel.dp=1 to let dp fill the cluster, or "
                      "change --nodes/--gpus", p->dp, p->tp, p->pp, sim_cp(st), p->sp,
                      loom_sim_world(st), world);
    }
  }
  st->microbatches = (int)t->grad_accum;
  if (t->global_batch_size > 0) {
    long per = (long)st->micro_batch * st->dp;
    if (t->global_batch_size % per)
      return loom_err("training.global_batch_size (%ld) must be a multiple of "
                      "micro_batch_size*dp = %ld*%d", t->global_batch_size, t->micro_batch_size,
                      st->dp);
    st->microbatches = (int)(t->global_batch_size / per);
  }
  return 0;
}

/* Expert parallelism: what the model has and how the experts tile a stage's ranks. */
static int moe_check(const loom_sim_strategy *st, const loom_model_spec *spec) {
  const loom_moe_spec *m = &spec->moe;
  int S = st->tp * sim_cp(st) * st->sp * st->dp, ep = sim_ep(st), etp = sim_etp(st);
  if (st->ep < 0 || st->etp < 0)
    return loom_err("parallel.ep = %d, parallel.etp = %d: both must be >= 1 (etp 0 in a config "
                    "means parallel.tp)", st->ep, st->etp);
  if (st->moe_imbalance != 0 && !(st->moe_imbalance >= 1))
    return loom_err("the MoE load-imbalance factor is %g: it must be >= 1 (1 = every expert gets "
                    "its balanced share of the tokens; 1.3 = the busiest rank's experts get 30%% "
                    "more)", st->moe_imbalance);
  if (m->experts <= 0) {
    if (ep > 1 || etp != st->tp)
      return loom_err("parallel.ep = %d, parallel.etp = %d, but the model has no experts "
                      "(model.moe.experts = 0): set parallel.ep=1 parallel.etp=0", ep, etp);
    return 0;
  }
  if (m->experts % ep)
    return loom_err("parallel.ep = %d does not divide model.moe.experts = %d: every ep rank holds "
                    "the same number of experts (E/ep); use a divisor of %d", ep, m->experts,
                    m->experts);
  if (m->intermediate % etp)
    return loom_err("parallel.etp = %d does not divide model.moe.intermediate = %d (each "
                    "expert's SwiGLU is split over the etp ranks)", etp, m->intermediate);
  if (S % (ep * etp))
    return loom_err("parallel.ep x parallel.etp = %d x %d = %d ranks do not fit the %d ranks of a "
                    "pipeline stage (tp x cp x sp x dp = %d x %d x %d x %d): the experts are laid "
                    "on the same ranks as etp x ep x edp (Megatron's parallel folding), so "
                    "ep x etp must divide %d", ep, etp, ep * etp, S, st->tp, sim_cp(st), st->sp,
                    st->dp, S);
  return 0;
}

int loom_sim_strategy_check(const loom_sim_strategy *st, const loom_model_spec *spec) {
  if (st->dp < 1 || st->tp < 1 || st->pp < 1 || st->sp < 1 || st->vpp < 1)
    return loom_err("every mesh axis and vpp must be >= 1 (dp=%d tp=%d pp=%d sp=%d vpp=%d)",
                    st->dp, st->tp, st->pp, st->sp, st->vpp);
  if (st->micro_batch < 1 || st->seq < 1 || st->microbatches < 1)
    return loom_err("micro-batch size, sequence length and micro-batches must be >= 1");
  if (st->zero < 0 || st->zero > 3) return loom_err("ZeRO stage %d is not 0..3", st->zero);
  if (st->dtype == LOOM_DT_FP8)
    return loom_err("fp8 is not a training dtype: a run with FP8 GEMMs is a bf16 run with "
                    "--fp8 (Transformer Engine's recipe; the activations stay bf16)");
  if (moe_check(st, spec)) return -1;
  loom_config_parallel p;
  to_parallel(st, &p);
  if (strcmp(st->schedule, "none") && strcmp(st->schedule, "gpipe") &&
      strcmp(st->schedule, "1f1b") && strcmp(st->schedule, "interleaved"))
    snprintf(p.schedule_file, sizeof p.schedule_file, "%s", st->schedule); /* a file's */
  if (loom_mesh_check_model(&p, spec, st->micro_batch, st->seq, loom_sim_world(st))) return -1;
  if (st->seq > spec->max_seq)
    return loom_err("training.seq_len (%d) exceeds model.max_seq (%d)", st->seq, spec->max_seq);
  return 0;
}

int loom_sim_strategy_to_config(const loom_sim_strategy *st, loom_config *cfg) {
  if (st->recompute == LOOM_RECOMPUTE_SELECTIVE)
    return loom_err("selective recomputation cannot be written as a train config: loom train "
                    "has full activation checkpointing only (training.activation_checkpointing)");
  if (st->dtype == LOOM_DT_FP16)
    return loom_err("fp16 cannot be written as a train config: loom train runs fp32 or bf16");
  if (st->fp8)
    return loom_err("FP8 GEMMs cannot be written as a train config: loom train runs fp32 or bf16 "
                    "(plan without --fp8)");
  to_parallel(st, &cfg->parallel);
  cfg->parallel.timeout_s = cfg->parallel.timeout_s > 0 ? cfg->parallel.timeout_s : 300;
  if (st->vision_patches > 0) { /* the encoder's mode as vision.parallel.* (the trainer's keys) */
    loom_config_vision_parallel *v = &cfg->vision_parallel;
    bool split = st->tp > 1 && strcmp(st->vision_mode, "replicate");
    v->dp = 0;
    v->tp = split && !strcmp(st->vision_mode, "tp") ? st->tp : 1;
    v->sp = split && !strcmp(st->vision_mode, "sp") ? st->tp : 1;
    v->zero = st->vision_zero_own ? st->vision_zero : -1;
    snprintf(v->placement, sizeof v->placement, "collocated");
  }
  cfg->parallel.ep = sim_ep(st);
  cfg->parallel.etp = sim_etp(st) == st->tp ? 0 : sim_etp(st);
  cfg->training.micro_batch_size = st->micro_batch;
  cfg->training.seq_len = st->seq;
  cfg->training.grad_accum = st->microbatches;
  cfg->training.global_batch_size = 0;
  cfg->training.activation_checkpointing = st->recompute == LOOM_RECOMPUTE_FULL;
  snprintf(cfg->training.dtype, sizeof cfg->training.dtype, "%s", loom_hw_dtype_name(st->dtype));
  return 0;
}

const char *loom_sim_strategy_str(const loom_sim_strategy *st) {
  static char s[256];
  int n = snprintf(s, sizeof s, "dp=%d tp=%d%s pp=%d vpp=%d sp=%d zero=%d mbs=%d m=%d %s recompute=%s",
                   st->dp, st->tp, st->seq_par ? "+sp" : "", st->pp, st->vpp, st->sp, st->zero,
                   st->micro_batch, st->microbatches, st->schedule, loom_recompute_name(st->recompute));
  if (sim_cp(st) > 1 && n > 0 && (size_t)n < sizeof s)
    n += snprintf(s + n, sizeof s - (size_t)n, " cp=%d", st->cp);
  if ((sim_ep(st) > 1 || sim_etp(st) != st->tp) && n > 0 && (size_t)n < sizeof s)
    n += snprintf(s + n, sizeof s - (size_t)n, " ep=%d etp=%d", sim_ep(st), sim_etp(st));
  if (st->fp8 && n > 0 && (size_t)n < sizeof s) n += snprintf(s + n, sizeof s - (size_t)n, " fp8");
  if (st->vision_patches > 0 && n > 0 && (size_t)n < sizeof s)
    snprintf(s + n, sizeof s - (size_t)n, " vision=%s", st->vision_mode);
  return s;
}

int sim_stage_split(const loom_sim_strategy *st, int layers, int *first) {
  loom_config_parallel p;
  to_parallel(st, &p);
  return loom_exec_stage_split(&p, layers, first);
}

/* Everything a training run does before its first step, in order: the model spec, the meshes
 * (the text decoder's and the job's) with the layout checks, the executor, the data and the
 * validation data; the starting weights and position (run_start.c); then, once every check
 * that can fail on bad input has passed, the run directory (created, or taken over to
 * resume), train.log and metrics.jsonl, the progress line, and the opening lines of
 * train.log (command, model, layout, data, MFU peak, memory per rank). Every rank runs it. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loom/hw.h"
#include "loom/sim.h"
#include "loom/registry.h"
#include "loom/vision_module.h"
#include "loom/run_dir.h"
#include "train/run_internal.h"

/* The text decoder's mesh (all ranks, or the first ones when the vision encoder has ranks of
 * its own) and the job's. */
static int create_meshes(loom_run *run) {
  const loom_config *cfg = run->cfg;
  const loom_config_parallel *p = &cfg->parallel;
  const loom_config_vision_parallel *v = &cfg->vision_parallel;
  bool vlm = run->spec.vision.arch != LOOM_VISION_NONE;
  if (!vlm && (v->dp || v->tp || v->sp || v->zero != -1 || strcmp(v->placement, "collocated")))
    return loom_err("vision.parallel.* is set but model '%s' has no vision encoder; remove the "
                    "vision.parallel keys or pick a vision-language preset",
                    cfg->model.preset[0] ? cfg->model.preset : cfg->model.arch);
  int world = loom_dist_world();
  if (loom_mesh_check_job(loom_config_hash(cfg))) return LOOM_ERR; /* one launch, loom, config */
  if (loom_mesh_create_on(&run->ranks.job, 1, world, 1, 1, 1, p->timeout_s, 0)) return LOOM_ERR;
  run->ranks.job_ready = true;
  run->ranks.lead = run->ranks.job.rank == 0;
  if (!vlm || strcmp(v->placement, "separate"))
    return loom_mesh_create(&run->ranks.mesh, p, p->timeout_s);
  loom_vmod_plan plan;
  if (loom_vmod_resolve(cfg, &run->spec, world, &plan)) return LOOM_ERR;
  return loom_mesh_create_on(&run->ranks.mesh, (int)p->pp, (int)p->dp, (int)p->cp, (int)p->sp,
                             (int)p->tp, p->timeout_s, 0);
}

/* The training data of this rank's data-parallel group and the step's batch buffers. */
static int open_data(loom_run *run) {
  const loom_config_training *t = &run->cfg->training;
  const loom_mesh *m = &run->ranks.mesh;
  /* ranks of the encoder only read the samples of their vision data-parallel group */
  loom_vmod *vm = loom_exec_vision(run->exec);
  int dp_rank = m->member ? m->dp_rank : loom_vmod_mesh(vm)->dp_rank;
  if (loom_data_open(&run->batch.source, run->cfg, &run->spec, dp_rank, m->dp)) return LOOM_ERR;
  loom_decoder *d = loom_exec_decoder(run->exec); /* packed documents: segments per document */
  if (d) loom_decoder_set_doc_eod(d, loom_data_doc_eod(run->batch.source));
  size_t n = (size_t)t->grad_accum * t->micro_batch_size * t->seq_len;
  run->batch.tokens = loom_calloc_for(n, sizeof(int32_t), "the step's input tokens");
  run->batch.targets = loom_calloc_for(n, sizeof(int32_t), "the step's target tokens");
  run->batch.vqa = loom_calloc((size_t)t->grad_accum, sizeof *run->batch.vqa);
  return 0;
}

/* What every rank builds before anything is read or written: the spec, the meshes (with the
 * layout checks), the executor and the data. */
static int setup_local(loom_run *run) {
  const loom_config *cfg = run->cfg;
  const loom_config_training *t = &cfg->training;
  if (loom_model_spec_from_config(&run->spec, &cfg->model)) return LOOM_ERR;
  if (loom_skip_steps_parse(t->skip_steps, &run->skip.steps)) return LOOM_ERR;
  if (create_meshes(run)) return LOOM_ERR;
  if (loom_mesh_check_model(&cfg->parallel, &run->spec, (int)t->micro_batch_size, (int)t->seq_len,
                            run->ranks.mesh.world))
    return LOOM_ERR;
  if (loom_exec_create(&run->exec, cfg, &run->spec, &run->ranks.mesh)) return LOOM_ERR;
  if (open_data(run)) return LOOM_ERR;
  return loom_eval_track_open(&run->eval.loss, cfg, &run->spec, run->exec, &run->ranks.mesh);
}

/* Lead: create the run directory (or take over the resumed one), write config.yaml, and tell
 * the supervisor where the run is. */
static int open_run_dir_lead(loom_run *run, const loom_train_opts *o) {
  if (loom_run_dir_open(run->cfg, o->resume_run, &run->out.dir, &run->out.lock_fd,
                        &run->out.cleaned))
    return LOOM_ERR;
  /* a continued run is running again: an earlier end's summary.json (stopped, failed) goes */
  char *summary = loom_sprintf("%s/summary.json", run->out.dir);
  int gone = o->resume_run && unlink(summary) && errno != ENOENT
                 ? loom_err("cannot remove '%s': %s", summary, strerror(errno))
                 : 0;
  free(summary);
  if (gone) return LOOM_ERR;
  /* the run's config as given (it loads back to the same config: resume and lineage compare
   * with it), the values the preset fills in said in comments ("hidden: 0  # 768: from ...") */
  loom_config *resolved = loom_malloc(sizeof *resolved);
  char origin[128];
  loom_train_config_resolved(run->cfg, &run->spec, resolved, origin, sizeof origin);
  char *cfg_path = loom_sprintf("%s/config.yaml", run->out.dir);
  char *yaml = loom_config_to_yaml_resolved(run->cfg, resolved, origin, false);
  int rc = loom_write_file_atomic(cfg_path, yaml, strlen(yaml))
               ? loom_err_prefix("saving the config: ")
               : 0;
  free(yaml), free(cfg_path), free(resolved);
  char *line = loom_sprintf("run %s", run->out.dir);
  loom_run_report_supervisor(line);
  free(line);
  return rc;
}

/* Every rank: the lead opens the run directory; every rank learns its path. */
static int open_run_dir(loom_run *run, const loom_train_opts *o) {
  bool lead = run->ranks.lead;
  int rc = lead ? open_run_dir_lead(run, o) : 0;
  if (loom_comm_any_failed(&run->ranks.job.world_comm, rc))
    return rc ? rc : loom_err("rank 0 failed to create the run directory");
  char path[LOOM_STR_MAX * 2];
  memset(path, 0, sizeof path);
  if (lead) snprintf(path, sizeof path, "%s", run->out.dir);
  loom_comm_bcast_bytes(&run->ranks.job.world_comm, path, sizeof path, 0);
  if (!lead) run->out.dir = loom_strdup(path);
  return 0;
}

/* Lead: train.log and metrics.jsonl, new or (resuming) appended to after the metrics of the
 * steps beyond the checkpoint are cut. */
static int open_outputs(loom_run *run, const loom_train_opts *o) {
  const char *mode = o->resume_run ? "a" : "w";
  int rc = 0;
  char *log_path = loom_sprintf("%s/train.log", run->out.dir);
  loom_progress *p = &run->out.progress;
  snprintf(p->log_path, sizeof p->log_path, "%s", log_path);
  p->log = fopen(log_path, mode);
  if (!p->log) rc = loom_err("cannot open '%s': %s", log_path, strerror(errno));
  free(log_path);
  char *mpath = loom_sprintf("%s/metrics.jsonl", run->out.dir);
  run->out.metrics_path = mpath;
  if (!rc && o->resume_run) rc = loom_run_dir_truncate_metrics(mpath, run->state.step);
  if (!rc && o->resume_run) rc = loom_eval_track_resume(&run->eval.loss, mpath);
  loom_registry_metrics kept = {.min_loss = NAN};
  double last_write;
  if (!rc && o->resume_run && loom_registry_read_progress(run->out.dir, &kept, &last_write) == 0)
    run->clock.min_loss = kept.min_loss; /* the run's lowest loss so far */
  if (!rc) run->out.metrics = fopen(mpath, mode);
  if (!rc && !run->out.metrics) rc = loom_err("cannot open '%s': %s", mpath, strerror(errno));
  return rc;
}

/* The progress line: where it goes, how often, and the FLOPs and peak its MFU needs. */
static void configure_progress(loom_run *run, const loom_train_opts *o) {
  const loom_config_training *t = &run->cfg->training;
  loom_progress *p = &run->out.progress;
  /* under the supervisor stderr is a pipe to it; it says whether its own is a terminal */
  const char *sup_tty = getenv("LOOM_SUPERVISOR_TTY");
  p->tty = sup_tty ? !strcmp(sup_tty, "1") : isatty(STDERR_FILENO);
  p->quiet = o->quiet || !run->ranks.lead;
  p->total_steps = t->steps;
  p->log_every = t->log_every;
  p->flops_per_token = /* MoE layers: the experts a token uses (a dense model: the same) */
      loom_sim_flops_per_token(&run->spec, (int)t->seq_len) / run->ranks.job.world;
  p->peak_flops =
      run->ranks.lead ? loom_mfu_source_get(t->dtype, omp_get_max_threads(), &run->mfu) : 0;
  snprintf(p->peak_name, sizeof p->peak_name, "%s", run->mfu.name);
}

/* The lines on the model, the batch and the parallel layout of both modules. */
static void note_layout(loom_run *run) {
  const loom_config *cfg = run->cfg;
  const loom_config_training *t = &cfg->training;
  const loom_model_spec *s = &run->spec;
  const loom_mesh *m = &run->ranks.mesh;
  loom_progress *p = &run->out.progress;
  loom_progress_note(
      p,
      "model: %s, %zu parameters (%zu with vocab padding), vocab %d padded to "
      "%d; %s%s; B=%ld T=%ld grad_accum=%ld, global batch %ld sequences%s",
      s->arch == LOOM_ARCH_GPT2 ? "gpt2" : "llama", loom_model_count_params(s, false),
      loom_model_count_params(s, true), s->vocab_size, s->padded_vocab, t->dtype,
      t->activation_checkpointing ? ", activation checkpointing" : "", t->micro_batch_size,
      t->seq_len, t->grad_accum, t->micro_batch_size * t->grad_accum * m->dp,
      t->global_batch_size > 0 ? " (training.global_batch_size)" : "");
  if (m->world > 1)
    loom_progress_note(p,
                       "mesh: %d ranks = pp %d x dp %d x cp %d x sp %d x tp %d%s, zero %ld, "
                       "schedule %s",
                       m->world, m->pp, m->dp, m->cp, m->sp, m->tp,
                       m->tp > 1 && !strcmp(cfg->parallel.sp_mode, "megatron")
                           ? " (megatron sequence parallel)"
                           : "",
                       cfg->parallel.zero, loom_exec_schedule(run->exec)->name);
  if (cfg->parallel.ep > 1 && s->moe.experts > 0 && cfg->parallel.etp == 1 && m->tp > 1)
    loom_progress_note(p,
                       "experts: folded on the tp ranks (etp 1, ep %ld): %d whole experts of "
                       "the %d of each MoE layer per rank, routed on every tp rank",
                       cfg->parallel.ep, s->moe.experts / m->tp, s->moe.experts);
  else if (cfg->parallel.ep > 1 && s->moe.experts > 0)
    loom_progress_note(p,
                       "experts: ep %ld (groups of %ld consecutive dp ranks), %d of the %d "
                       "experts of each MoE layer per rank, reduced over %ld rank(s) holding "
                       "the same experts",
                       cfg->parallel.ep, cfg->parallel.ep, s->moe.experts / (int)cfg->parallel.ep,
                       s->moe.experts, m->dp / cfg->parallel.ep * m->sp * m->cp);
  char *warnings, *nodes = loom_mesh_placement(m, &warnings); /* NULL on one node */
  if (nodes) loom_progress_note(p, "%s", nodes);
  if (warnings) loom_progress_note(p, "%s", warnings);
  free(nodes), free(warnings);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0 && loom_dist_machine_ranks() > cores)
    loom_progress_note(p,
                       "cores: %d ranks share this machine's %ld cores and time-share them; a "
                       "waiting rank polls every %ld us",
                       loom_dist_machine_ranks(), cores, loom_dist_poll_nap_us());
  loom_vmod *vm = loom_exec_vision(run->exec);
  if (!vm) return;
  const loom_vmod_plan *vp = loom_vmod_get_plan(vm);
  loom_progress_note(p,
                     "vision encoder: ranks %d-%d (%s) = dp %d x cp %d x sp %d x tp %d, "
                     "zero %d; text decoder: ranks 0-%d = pp %d x dp %d x cp %d x sp %d x tp %d, "
                     "zero %ld",
                     vp->first, vp->first + vp->dp * vp->g_v - 1,
                     vp->separate ? "separate" : "collocated", vp->dp, vp->cp, vp->sp, vp->tp,
                     vp->zero, m->world - 1, m->pp, m->dp, m->cp, m->sp, m->tp, cfg->parallel.zero);
}

/* The opening lines of train.log, up to the memory per rank. */
static void note_opening(loom_run *run, const loom_train_opts *o) {
  loom_progress *p = &run->out.progress;
  if (o->command_line) loom_progress_note(p, "command: %s", o->command_line);
  loom_progress_note(p, "run directory: %s", run->out.dir);
  if (run->out.cleaned) loom_progress_note(p, "%s", run->out.cleaned);
  note_layout(run);
  loom_progress_note(p, "data: %s", loom_data_describe(run->batch.source));
  const loom_skip_steps *skip = &run->skip.steps;
  if (skip->n)
    loom_progress_note(p, "training.skip_steps %s: %ld step%s read, not trained on (the "
                       "learning rate follows the steps trained)", run->cfg->training.skip_steps,
                       loom_skip_steps_count(skip, run->cfg->training.steps),
                       loom_skip_steps_count(skip, run->cfg->training.steps) == 1 ? "" : "s");
  if (run->ranks.lead) loom_progress_note(p, "%s", run->mfu.why);
  loom_eval_track_note(&run->eval.loss, p);
  loom_run_report_memory(run);
}

int loom_run_setup(loom_run *run, const loom_train_opts *o) {
  /* the model, the meshes, the executor and the data, on every rank */
  if (loom_run_agree(run, setup_local(run))) return LOOM_ERR;
  /* the starting weights and position: checkpoint.init_from or --resume's checkpoint */
  char init_desc[LOOM_STR_MAX * 2 + 256] = "";
  if (loom_run_start_load(run, o, init_desc, sizeof init_desc)) return LOOM_ERR;
  /* every check that can fail on bad input is done: only now create (or change) the run */
  if (loom_run_agree(run, open_run_dir(run, o))) return LOOM_ERR;
  if (loom_run_agree(run, run->ranks.lead ? open_outputs(run, o) : 0)) return LOOM_ERR;
  /* the progress line and the opening lines of train.log */
  configure_progress(run, o);
  note_opening(run, o);
  /* where the run starts from (and fresh weights when from nowhere) */
  loom_run_start_note(run, o, init_desc);
  return loom_run_agree(run, 0); /* a failed write to train.log above stops here */
}

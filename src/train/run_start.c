/* Where a training run starts from: the weights of checkpoint.init_from, a checkpoint to
 * resume (validated, loaded in any layout, the data positioned; a final checkpoint of a run
 * that did not finish is redone from the newest periodic one), or a fresh initialization
 * from run.seed; and the train.log lines that say which. Every rank runs this, alike. */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "loom/checkpoint.h"
#include "loom/vision_module.h"
#include "train/init_from.h"
#include "loom/run_dir.h"
#include "train/run_internal.h"

/* Resume: validate the checkpoint (marker, trainer state, tensor shapes) on the lead, then
 * load it everywhere and position the data. Nothing of the run is written here. */
static int load_resume(loom_run *run, const char *ckpt) {
  const loom_config_training *t = &run->cfg->training;
  int rc = run->ranks.lead ? loom_ckpt_validate(ckpt, &run->spec) : 0;
  if (loom_run_agree(run, rc)) return loom_err_prefix("--resume: ");
  rc = loom_ckpt_load(ckpt, run->exec, &run->ranks.mesh, &run->state);
  if (loom_run_agree(run, rc)) return loom_err_prefix("--resume: ");
  long now = t->micro_batch_size * run->ranks.mesh.dp, then = run->state.loader_batch_windows;
  if (then > 0 && then != now) { /* another data-parallel layout: same position in windows */
    uint64_t windows = run->state.loader.index * (uint64_t)then;
    if (windows % (uint64_t)now)
      rc = loom_err("--resume: the checkpoint consumed %" PRIu64 " windows of this epoch, not "
                    "a multiple of micro_batch_size*dp = %ld; pick a layout that divides it",
                    windows, now);
    else run->state.loader.index = windows / (uint64_t)now;
  }
  if (!rc) rc = loom_data_set_state(run->batch.source, &run->state.loader);
  return loom_run_agree(run, rc);
}


/* training.skip_steps across a resume: the checkpoint's run skipped what its config.yaml
 * says; this config must skip the same steps up to the checkpoint (the optimizer's step count
 * is derived from it), then the steps it names after are honoured. Every rank alike. */
static int check_skip_history(loom_run *run, const char *ckpt) {
  char *path = loom_sprintf("%s/config.yaml", ckpt);
  loom_config *then = loom_malloc(sizeof *then);
  loom_config_defaults(then);
  loom_skip_steps was = {0};
  int rc = 0;
  if (loom_config_load(then, path) || loom_skip_steps_parse(then->training.skip_steps, &was))
    loom_err_clear(); /* a checkpoint from elsewhere (no config.yaml): nothing to compare */
  else if (!loom_skip_steps_same_upto(&was, &run->skip.steps, run->state.step))
    rc = loom_err("--resume: training.skip_steps is '%s', but the run of %s skipped '%s' (its "
                  "config.yaml) and the steps up to %ld must stay as they were: keep its ranges "
                  "up to step %ld and add new ones after it",
                  run->cfg->training.skip_steps, ckpt, then->training.skip_steps,
                  run->state.step, run->state.step);
  loom_skip_steps_free(&was);
  free(then);
  free(path);
  if (rc) loom_run_failed_everywhere(run);
  return rc;
}

/* Load the checkpoint to resume from. A final_checkpoint of a run that did not complete (the
 * job was killed after saving it, before summary.json): nothing is left to train from it,
 * so the last steps are redone from the newest periodic checkpoint (same results). Every
 * rank decides alike from the same files. */
static int resume_from(loom_run *run, const loom_train_opts *o) {
  const loom_config_training *t = &run->cfg->training;
  if (load_resume(run, o->resume)) return LOOM_ERR;
  run->resumed_from = loom_strdup(o->resume);
  char *redo = NULL;
  long step = -1;
  if (run->state.step >= t->steps && o->resume_run && !loom_run_dir_finished(o->resume_run) &&
      loom_run_dir_newest_periodic(o->resume_run, t->steps, &redo, &step) == 0 && redo) {
    free(run->resumed_from);
    run->resumed_from = redo;
    if (load_resume(run, redo)) return LOOM_ERR;
  }
  if (check_skip_history(run, run->resumed_from)) return LOOM_ERR;
  loom_run_skip_set_optimizer(run); /* the learning rate follows the steps trained */
  if (run->state.step < t->steps) {
    if (run->ranks.mesh.member && run->ranks.mesh.rank == 0) /* counted once in the sum over dp */
      loom_data_add_skipped(run->batch.source, (uint64_t)run->state.skipped_bad);
    return 0;
  }
  loom_run_failed_everywhere(run); /* the same on every rank */
  return loom_err("--resume: '%s' is at step %ld and training.steps is %ld: nothing left to "
                  "train (raise training.steps: that starts a new run forked from this "
                  "checkpoint)",
                  o->resume, run->state.step, t->steps);
}

int loom_run_start_load(loom_run *run, const loom_train_opts *o, char *desc, size_t cap) {
  const loom_config *cfg = run->cfg;
  /* checkpoint.init_from: loaded and checked against the model before the run directory
   * exists (with --resume, the resumed weights win) */
  if (loom_run_agree(run, loom_init_from_setup(cfg, o->resume, &run->spec, run->exec,
                                               &run->ranks.job.world_comm, desc, cap)))
    return LOOM_ERR;
  memset(&run->state, 0, sizeof run->state);
  run->state.config_hash = loom_config_hash(cfg);
  loom_rng_seed(&run->state.rng, (uint64_t)cfg->run.seed);
  return o->resume ? resume_from(run, o) : 0;
}

/* The lines of a resumed run: a changed config, a redone end, the checkpoint, lineage. */
static void note_resumed(loom_run *run, const loom_train_opts *o) {
  const loom_config *cfg = run->cfg;
  loom_progress *p = &run->out.progress;
  if (run->state.config_hash != loom_config_hash(cfg))
    loom_progress_note(p, "note: the config differs from the one the checkpoint was written "
                          "with");
  run->state.config_hash = loom_config_hash(cfg);
  if (strcmp(run->resumed_from, o->resume))
    loom_progress_note(p,
                       "%s is complete but the run did not finish (no summary.json): "
                       "redoing the last steps",
                       o->resume);
  loom_progress_note(p, "resumed from %s at step %ld", run->resumed_from, run->state.step);
  if (o->lineage_note && o->lineage_note[0]) loom_progress_note(p, "%s", o->lineage_note);
  if (cfg->checkpoint.init_from[0])
    loom_progress_note(p, "(the run started from checkpoint.init_from %s; not loaded again)",
                       cfg->checkpoint.init_from);
}

void loom_run_start_note(loom_run *run, const loom_train_opts *o, const char *desc) {
  loom_progress *p = &run->out.progress;
  loom_decoder *d = loom_exec_decoder(run->exec);
  loom_vmod *vm = loom_exec_vision(run->exec);
  bool lineage = o->lineage_note && o->lineage_note[0];
  if (o->resume) {
    note_resumed(run, o);
  } else if (desc[0]) { /* checkpoint.init_from's weights */
    loom_progress_note(p, "%s", desc);
    if (lineage) loom_progress_note(p, "%s", o->lineage_note);
  } else { /* fresh weights from run.seed */
    if (o->resume_run)
      loom_progress_note(p, "no complete checkpoint yet: starting again from step 0");
    if (lineage) loom_progress_note(p, "%s", o->lineage_note);
    if (d) loom_decoder_init_params(d, (uint64_t)run->cfg->run.seed);
    if (vm) loom_vmod_init_params(vm, (uint64_t)run->cfg->run.seed);
  }
  if (d) loom_grad_sync_params_loaded(loom_exec_grad_sync(run->exec));
  if (vm) loom_vmod_params_loaded(vm);
}

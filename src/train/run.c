/* The training run driver: set the run up (run_setup.c: meshes, executor, data, the starting
 * weights and position, the run directory), take the steps (run_step.c: batches, the step,
 * its records, the ranks' agreement, periodic validation and checkpoints), then finish it:
 * final validation, final checkpoint, answer accuracy and summary.json (run_report.c), or
 * stop it early (run_stop.c: a signal, with a checkpoint; --stop-after), or give one report
 * of the failure. The status (finished, stopped, failed) is the same in summary.json and the
 * registry. Resuming from a checkpoint gives bitwise-identical results in
 * the same layout, and continues in any other; continuing the run in its directory, or as a
 * new run forked from the checkpoint (lineage.c decides; a fork never writes into the
 * parent's directory). Every rank runs this; only rank 0 writes the run's files and prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loom/trace.h"
#include "train/eval_final.h"
#include "train/run_internal.h"

int loom_run_agree(loom_run *run, int rc) {
  if (run->ranks.lead && !rc && run->out.progress.log_error[0])
    rc = loom_err("%s", run->out.progress.log_error);
  /* before the job's communicator: a config error, the same on every rank */
  if (!run->ranks.job_ready) {
    if (rc) loom_run_failed_everywhere(run);
    return rc;
  }
  loom_failure f;
  if (!loom_comm_agree(&run->ranks.job.world_comm, rc, &f)) return 0;
  run->failure.agreed = true;
  run->failure.fail = f;
  loom_err("%s", f.msg);
  return LOOM_ERR;
}

void loom_run_failed_everywhere(loom_run *run) {
  run->failure.agreed = true;
  run->failure.fail.rank = -1;
  run->failure.fail.all_same = true;
}

/* --trace: every instruction of the executor, as a span of the Chrome trace */
static void trace_instr(void *ctx, const loom_instr *in, double t0, double t1) {
  (void)ctx;
  char text[96];
  loom_instr_format(in, text, sizeof text);
  loom_trace_record(LOOM_TRACE_COMPUTE, text, "", t0, t1, -1);
}

static void barrier_world(void *ctx) {
  loom_comm_barrier(&((loom_run *)ctx)->ranks.job.world_comm);
}

/* Start counting the steps' time and traffic, and tracing them when asked. */
static void begin_training(loom_run *run, const loom_train_opts *o) {
  loom_run_clock_start(run);
  loom_comm_stats_reset();
  if (!o->trace) return;
  loom_trace_enable(true);
  loom_exec_set_trace(run->exec, trace_instr, run);
}

/* Whether the run stops after this step, before training.steps: a stop signal any rank
 * received (every rank agrees; run_stop.c), or --stop-after's step. The last step goes on to
 * the end of the run. */
static bool stop_requested(loom_run *run, const loom_train_opts *o) {
  if (run->state.step >= run->cfg->training.steps) return false;
  run->stop.signal = loom_run_stop_agree(run);
  run->stop.asked = o->stop_after > 0 && run->state.step >= o->stop_after;
  return run->stop.signal || run->stop.asked;
}

/* The step loop: until training.steps, or a stop asked for. */
static int train(loom_run *run, const loom_train_opts *o) {
  const loom_config_training *t = &run->cfg->training;
  begin_training(run, o);
  while (run->state.step < t->steps) {
    /* a fault the failure tests inject before a step (LOOM_FAULT) */
    if (loom_run_inject_fault(run)) return LOOM_ERR;
    /* fetch the batches of the step: every micro-batch (and a VLM's images) */
    double t0 = loom_now();
    if (loom_run_next_batches(run)) return LOOM_ERR;
    /* one training step on them: forward, backward, gradient sync, optimizer update; none
     * on a step of training.skip_steps (read, not trained on) */
    loom_step_result res;
    if (!loom_run_skip_step(run, &res))
      loom_exec_step(run->exec, run->batch.tokens, run->batch.targets, &res);
    double dt = loom_now() - t0;
    /* count it, and record it: metrics.jsonl, the registry's heartbeat, the progress line */
    loom_run_count_step(run, &res, dt);
    int rc = loom_run_record_step(run, &res, dt);
    /* every rank agrees that the step went well (its writes, the last pruning, the loss) */
    if (loom_run_agree_step(run, &res, rc)) return LOOM_ERR;
    /* once in a while estimate the validation loss */
    if (loom_eval_track_due(&run->eval.loss, run->state.step, t->steps) && loom_run_evaluate(run))
      return LOOM_ERR;
    /* once in a while save a checkpoint, and prune the oldest beyond checkpoint.keep_last */
    if (loom_run_checkpoint_due(run) && loom_run_checkpoint_periodic(run)) return LOOM_ERR;
    /* stop here when asked to */
    if (stop_requested(run, o)) break;
  }
  loom_progress_finish(&run->out.progress);
  return 0;
}

/* comm.json, and the trace when asked: the steps of this process are over. */
static int end_training(loom_run *run, const loom_train_opts *o) {
  int rc = loom_run_report_comm(run, run->state.step - run->clock.first_step);
  if (!rc && o->trace) {
    loom_exec_set_trace(run->exec, NULL, NULL);
    rc = loom_trace_write(o->trace, run->ranks.job.rank, run->ranks.job.world, barrier_world, run);
    loom_trace_enable(false);
    if (!rc) loom_progress_note(&run->out.progress, "trace written to %s", o->trace);
  }
  return rc;
}

/* After the last step: the final validation (unless the last step's was the final one, or
 * no step ran), the final checkpoint, a VLM's answer accuracy and summary.json. */
static int finish(loom_run *run) {
  const loom_config *cfg = run->cfg;
  loom_eval_track *val = &run->eval.loss;
  /* the final validation loss */
  if (val->ev && val->last_step != run->state.step && loom_run_evaluate(run)) return LOOM_ERR;
  /* the final checkpoint */
  if (cfg->checkpoint.save_final && loom_run_checkpoint(run, "final_checkpoint")) return LOOM_ERR;
  /* a vision-language run's answer accuracy on the val split */
  if (loom_data_is_vqa(run->batch.source))
    loom_eval_vqa_final_note(run->exec, cfg, &run->spec, &run->ranks.mesh,
                             &run->ranks.job.world_comm, run->out.dir, &run->out.progress,
                             &run->eval.vqa);
  /* a Mixture-of-Experts model's expert load at the last step */
  loom_run_note_moe_load(run);
  /* summary.json */
  return loom_run_agree(run, loom_run_report_summary(run, "finished", NULL, NULL));
}

/* The run after its setup: the steps, then the end of the run (or of this process's part). */
static int run_training(loom_run *run, const loom_train_opts *o) {
  /* train */
  if (train(run, o)) return LOOM_ERR;
  /* stopped on a signal: the checkpoint to continue from (unless this step saved one) */
  if (run->stop.signal && !loom_run_checkpoint_due(run) && loom_run_checkpoint_periodic(run))
    return LOOM_ERR;
  /* a failed pruning after the last step stops every rank too */
  char *deferred = run->failure.deferred;
  if (loom_run_agree(run, deferred ? loom_err("%s", deferred) : 0)) return LOOM_ERR;
  /* what the steps sent, and the trace */
  if (loom_run_agree(run, end_training(run, o))) return LOOM_ERR;
  /* stopped before training.steps (--stop-after: without a checkpoint, as a kill would) */
  if (run->state.step < run->cfg->training.steps) return loom_run_stopped(run, o);
  /* the end of the run */
  return finish(run);
}

/* Everything a rank holds, once the run is reported. */
static void free_run(loom_run *run) {
  if (run->out.metrics) fclose(run->out.metrics);
  if (run->out.progress.log) fclose(run->out.progress.log);
  loom_data_close(run->batch.source);
  loom_eval_track_free(&run->eval.loss);
  free(run->batch.vqa);
  loom_exec_free(run->exec);
  loom_mesh_free(&run->ranks.mesh);
  loom_mesh_free(&run->ranks.job);
  free(run->batch.tokens);
  free(run->batch.targets);
  free(run->out.dir);
  free(run->out.metrics_path);
  free(run->failure.deferred);
  free(run->out.cleaned);
  free(run->resumed_from);
  loom_skip_steps_free(&run->skip.steps);
  if (run->out.lock_fd >= 0) close(run->out.lock_fd); /* after the last write of the run */
}

int loom_train_run(const loom_config *cfg, const loom_train_opts *o) {
  loom_run run;
  memset(&run, 0, sizeof run);
  run.cfg = cfg;
  run.out.lock_fd = -1;
  run.clock.min_loss = NAN;
  /* set up: meshes, executor, data, starting point, run directory */
  int rc = loom_run_setup(&run, o);
  /* the run's row in the registry (runs/registry.db), once its directory exists */
  char *setup_error = rc ? loom_strdup(loom_errmsg()) : NULL; /* the registry may reset it */
  if (run.ranks.lead && run.out.dir && loom_is_dir(run.out.dir))
    run.out.registry = loom_registry_run_start(cfg, run.out.dir, o->command_line);
  if (setup_error) {
    loom_err("%s", setup_error);
    free(setup_error);
  }
  /* train, and finish the run (or stop it early) */
  loom_run_stop_announce(run.ranks.lead && !o->quiet && !getenv("LOOM_STOP_FILE"));
  if (!rc) rc = run_training(&run, o);
  bool stopped = !rc && run.state.step < cfg->training.steps;
  if (!rc && !stopped)
    loom_progress_note(&run.out.progress, "done: %ld steps; the run is in %s", run.state.step,
                       run.out.dir);
  if (!rc && run.ranks.lead) { /* the run directory, for scripts (a closed stdout: EPIPE) */
    printf("%s\n", run.out.dir);
    fflush(stdout);
  }
  if (o->stop_signal) *o->stop_signal = stopped ? run.stop.signal : 0;
  /* one report of a failure: train.log, summary.json, the registry, the caller */
  char *error = rc ? loom_run_report_failure(&run, o) : NULL;
  loom_registry_run_finish(run.out.registry, rc ? "failed" : stopped ? "stopped" : "finished",
                           error);
  if (error) { /* keep the run's error for the caller, whatever the registry did */
    loom_err("%s", error);
    free(error);
  }
  free_run(&run);
  return rc;
}

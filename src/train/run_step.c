/* The concerns of one training step, as the driver's loop (run.c) calls them: a fault the
 * failure tests inject, the next batches, whether the step is one of training.skip_steps
 * (read, not trained on), counting the step (tokens, time, the timed
 * average), recording it (metrics.jsonl, the registry's heartbeat, the progress line), the
 * ranks' agreement that it went well, the periodic validation, and the periodic checkpoint
 * with the pruning of older ones. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom/checkpoint.h"
#include "loom/fault.h"
#include "loom/vision_module.h"
#include "loom/run_dir.h"
#include "train/run_internal.h"

/* Training time starts (again) here: a resumed run's earlier time counts. */
void loom_run_clock_start(loom_run *run) {
  run->clock.start = loom_now() - run->state.elapsed;
  run->clock.first_step = run->state.step;
  run->clock.timed = 0;
  run->clock.timed_steps = 0;
  run->clock.last_loss = NAN; /* min_loss: from the metrics.jsonl lines a resume kept */
}

/* Fault injection for the failure tests: LOOM_FAULT=exit:RANK:STEP makes that rank die (as a
 * crash would) before that step, LOOM_FAULT=hang:RANK:STEP makes it stop answering,
 * LOOM_FAULT=kill:RANK:STEP makes it SIGKILL itself, LOOM_FAULT=error:RANK:STEP makes it fail
 * alone with an error (as a read error of its data would: the error returned),
 * LOOM_FAULT=slow:RANK:STEP makes that rank sleep 100 ms before that step and every one after
 * (a slow machine: the signal tests' window to stop a short run); kill-<point>:RANK:STEP is
 * fault.c's. */
int loom_run_inject_fault(const loom_run *run) {
  const char *f = getenv("LOOM_FAULT");
  char kind[8];
  int rank;
  long step;
  if (!f || sscanf(f, "%7[a-z]:%d:%ld", kind, &rank, &step) != 3) return 0;
  if (!strcmp(kind, "slow")) {
    if (rank == run->ranks.job.rank && run->state.step + 1 >= step)
      nanosleep(&(struct timespec){.tv_nsec = 100000000L}, NULL);
    return 0;
  }
  if (rank != run->ranks.job.rank || step != run->state.step + 1 || !loom_fault_fire_once())
    return 0;
  if (!strcmp(kind, "error"))
    return loom_err("LOOM_FAULT: an error of this rank alone before step %ld (injected)", step);
  fprintf(stderr, "loom: LOOM_FAULT: rank %d %s before step %ld\n", rank, kind, step);
  fflush(stderr);
  if (!strcmp(kind, "exit")) _exit(3);
  if (!strcmp(kind, "kill")) kill(getpid(), SIGKILL);
  if (!strcmp(kind, "hang"))
    for (;;) pause();
  return 0;
}

/* The batches of every micro-step into batch.tokens/targets (and a vision-language run's
 * samples to the executor), with a note when more bad samples were skipped. */
int loom_run_next_batches(loom_run *run) {
  loom_data_source *data = run->batch.source;
  if (loom_data_next(data, run->batch.tokens, run->batch.targets, run->batch.vqa)) return LOOM_ERR;
  if (!loom_data_is_vqa(data)) return 0;
  loom_exec_set_vision_batches(run->exec, run->batch.vqa);
  if (!run->cfg->data.skip_bad_samples) return 0;
  /* bad samples skipped so far over the data-parallel ranks (the ranks of a data-parallel
   * group read the same samples, so one sum over dp counts each once) */
  const char *last;
  double n[1] = {(double)loom_data_skipped(data, &last)};
  loom_comm_allreduce_f64(&run->ranks.mesh.dp_comm, n, 1, LOOM_OP_SUM);
  if ((long)n[0] > run->state.skipped_bad)
    loom_progress_note(&run->out.progress,
                       "skipped %ld bad sample%s in all (data.skip_bad_samples)%s%s", (long)n[0],
                       n[0] == 1 ? "" : "s", last[0] ? "; latest here: " : "", last);
  run->state.skipped_bad = (long)n[0];
  return 0;
}

/* A step of training.skip_steps (Megatron-LM's --skip-train-iteration-range): its batches
 * have been read, so every later step reads what it would have read, but nothing is trained
 * on them: no forward, backward or optimizer step. As in Megatron the learning-rate schedule
 * does not advance (it follows the optimizer's own step count, the steps trained), and no
 * tokens count as trained. Every rank decides alike from the config and the step. */
bool loom_run_skip_step(loom_run *run, loom_step_result *res) {
  long step = run->state.step + 1;
  run->skip.now = loom_skip_steps_has(&run->skip.steps, step);
  if (!run->skip.now) return false;
  long trained = run->state.step - loom_skip_steps_count(&run->skip.steps, run->state.step);
  *res = (loom_step_result){.loss = NAN, .grad_norm = NAN,
                            .lr = loom_lr_at(&run->cfg->training, trained)};
  return true;
}

void loom_run_skip_set_optimizer(loom_run *run) {
  long trained = run->state.step - loom_skip_steps_count(&run->skip.steps, run->state.step);
  loom_exec_optimizer(run->exec)->step = trained;
  loom_vmod *vm = loom_exec_vision(run->exec);
  if (vm) loom_vmod_optimizer(vm)->step = trained;
}

/* The step taken (dt seconds): the trainer state's step, tokens and elapsed time, the timed
 * average (the first step of a process warms caches: not timed), the losses. A skipped step
 * counts as a step, with neither tokens, time nor loss. */
void loom_run_count_step(loom_run *run, const loom_step_result *res, double dt) {
  run->state.step++;
  run->state.tokens_seen += res->tokens;
  run->state.elapsed = loom_now() - run->clock.start;
  if (run->skip.now) return;
  if (run->state.step > run->clock.first_step + 1) {
    run->clock.timed += dt;
    run->clock.timed_steps++;
  }
  double *min = &run->clock.min_loss;
  if (res->loss < *min || *min != *min) *min = res->loss;
  run->clock.last_loss = res->loss;
}

/* a JSON number, or null for NaN/inf (JSON has no NaN) */
static const char *json_num(char *buf, size_t n, double x) {
  if (isfinite(x)) snprintf(buf, n, "%.17g", x);
  else snprintf(buf, n, "null");
  return buf;
}

/* The ranks the routed experts are split over: ep, or tp when they are folded on it (each
 * holding E / groups consecutive experts); 1: every rank runs every expert */
static int expert_groups(const loom_decoder *d) {
  if (d->shard.experts_over_tp && d->shard.tp > 1) return d->shard.tp;
  return d->shard.ep > 1 ? d->shard.ep : 1;
}

/* Mixture-of-Experts models: the step's router figures, for metrics.jsonl (json) or train.log
 * (a short line), malloc'd; NULL for a dense model. Loads are max/mean (token, slot) pairs per
 * expert of each MoE layer (1 = balanced), summed over the step's micro-batches and ranks; with
 * the experts split over ranks also per rank: the busiest rank's pairs over the mean rank's
 * (what its expert GEMMs and all-to-alls wait on; loom sim's --moe-imbalance). */
static char *moe_figures(loom_run *run, bool json) {
  loom_decoder *d = loom_exec_decoder(run->exec);
  const loom_moe_step_stats *m = d ? loom_decoder_moe_stats(d) : NULL;
  if (!m || !m->layers) return NULL;
  const int groups = expert_groups(d);
  size_t cap = 200 + (size_t)m->layers * 96, n = 0;
  char *out = loom_malloc(cap);
  n += (size_t)snprintf(out + n, cap - n, json ? ", \"aux_loss\": %.9g" : "moe: aux %.4f",
                        m->aux_loss);
  if (d->spec.moe.z_loss_coef > 0)
    n += (size_t)snprintf(out + n, cap - n, json ? ", \"z_loss\": %.9g" : " | z %.4f",
                          m->z_loss);
  n += (size_t)snprintf(out + n, cap - n, json ? ", \"moe_load\": [" : " | load max/mean");
  int64_t dropped = 0;
  for (int i = 0; i < m->layers; i++) {
    const int64_t *load = m->load + (size_t)i * m->experts;
    int64_t total = 0, max = 0;
    for (int e = 0; e < m->experts; e++) total += load[e], max = load[e] > max ? load[e] : max;
    double ratio = total ? (double)max * m->experts / (double)total : 0;
    n += (size_t)snprintf(out + n, cap - n, json ? "%s%.6g" : "%s %.2f", i && json ? ", " : "",
                          ratio);
    dropped += m->dropped[i];
  }
  if (groups > 1 && m->experts % groups == 0) {
    n += (size_t)snprintf(out + n, cap - n, json ? "], \"moe_ep_load\": [" : " | ep load");
    for (int i = 0; i < m->layers; i++) {
      const int64_t *load = m->load + (size_t)i * m->experts; // (E)
      const int per = m->experts / groups;
      int64_t total = 0, max = 0;
      for (int g = 0; g < groups; g++) {
        int64_t sum = 0;
        for (int e = g * per; e < (g + 1) * per; e++) sum += load[e];
        total += sum, max = sum > max ? sum : max;
      }
      double ratio = total ? (double)max * groups / (double)total : 0;
      n += (size_t)snprintf(out + n, cap - n, json ? "%s%.6g" : "%s %.2f", i && json ? ", " : "",
                            ratio);
    }
  }
  if (json) {
    n += (size_t)snprintf(out + n, cap - n, "], \"moe_dropped\": [");
    for (int i = 0; i < m->layers; i++)
      n += (size_t)snprintf(out + n, cap - n, "%s%lld", i ? ", " : "", (long long)m->dropped[i]);
    snprintf(out + n, cap - n, "]");
  } else if (d->spec.moe.capacity_factor > 0) {
    snprintf(out + n, cap - n, " | dropped %lld pairs", (long long)dropped);
  }
  return out;
}

/* Mixture-of-Experts models, at the end of the run (lead): the last step's expert load of
 * each MoE layer, from the router's counts (summed over the step's micro-batches and data-
 * parallel ranks, as metrics.jsonl's moe_load): the most, mean and fewest tokens an expert
 * received, max/mean (1 = balanced) and the tokens the capacity dropped. Nothing for a dense
 * model. */
void loom_run_note_moe_load(loom_run *run) {
  loom_decoder *d = loom_exec_decoder(run->exec);
  const loom_moe_step_stats *m = d ? loom_decoder_moe_stats(d) : NULL;
  if (!run->ranks.lead || !m || !m->layers || m->experts <= 0) return;
  loom_progress_note(&run->out.progress,
                     "expert load at step %ld (tokens routed to each of %d experts, top %d; "
                     "max/mean 1.00 = balanced):",
                     run->state.step, m->experts, d->spec.moe.top_k);
  for (int i = 0; i < m->layers; i++) {
    const int64_t *load = m->load + (size_t)i * m->experts; // (E)
    int64_t total = 0, max = load[0], min = load[0];
    for (int e = 0; e < m->experts; e++) {
      total += load[e];
      max = load[e] > max ? load[e] : max;
      min = load[e] < min ? load[e] : min;
    }
    double mean = (double)total / m->experts;
    loom_progress_note(&run->out.progress,
                       "  layer %d: max %lld, mean %.1f, min %lld tokens (max/mean %.2f); "
                       "dropped %lld",
                       m->layer[i], (long long)max, mean, (long long)min,
                       mean > 0 ? (double)max / mean : 0.0, (long long)m->dropped[i]);
  }
}

/* Lead: the step's line of metrics.jsonl (a checked append: an error when the disk is full). */
static int write_metrics(loom_run *run, const loom_step_result *r, double dt) {
  if (!run->ranks.lead) return 0;
  char loss[32], norm[32], skipped[48] = "", line[512];
  if (run->skip.now) { /* training.skip_steps: the step, its learning rate, nothing trained */
    int n = snprintf(line, sizeof line,
                     "{\"step\": %ld, \"skipped\": true, \"lr\": %.17g, \"step_time\": %.6f, "
                     "\"time\": %.3f, \"tokens\": %ld}\n",
                     run->state.step, r->lr, dt, run->state.elapsed, run->state.tokens_seen);
    return loom_append_checked(run->out.metrics, run->out.metrics_path, line, (size_t)n);
  }
  if (run->cfg->data.skip_bad_samples && loom_data_is_vqa(run->batch.source))
    snprintf(skipped, sizeof skipped, ", \"skipped_bad\": %ld", run->state.skipped_bad);
  int n = snprintf(line, sizeof line,
                   "{\"step\": %ld, \"loss\": %s, \"lr\": %.17g, \"grad_norm\": %s, "
                   "\"tokens_per_s\": %.1f, \"step_time\": %.6f, \"time\": %.3f, "
                   "\"tokens\": %ld%s",
                   run->state.step, json_num(loss, sizeof loss, r->loss), r->lr,
                   json_num(norm, sizeof norm, r->grad_norm), dt > 0 ? (double)r->tokens / dt : 0.0,
                   dt, run->state.elapsed, run->state.tokens_seen, skipped);
  char *moe = moe_figures(run, true); /* MoE: the router losses and loads */
  char *text = loom_sprintf("%.*s%s}\n", n, line, moe ? moe : "");
  int rc = loom_append_checked(run->out.metrics, run->out.metrics_path, text, strlen(text));
  free(text);
  free(moe);
  return rc;
}

/* The step's records: metrics.jsonl, the registry's heartbeat (rate-limited) and the progress
 * line with its ETA. Returns the metrics write's status. */
int loom_run_record_step(loom_run *run, const loom_step_result *res, double dt) {
  int rc = write_metrics(run, res, dt);
  if (run->skip.now) {
    loom_progress_note(&run->out.progress, "step %ld skipped (training.skip_steps): its batches "
                       "read, nothing trained on them; lr stays %.3e", run->state.step, res->lr);
    return rc;
  }
  loom_registry_run_heartbeat(run->out.registry, run->state.step, res->loss);
  long timed_steps = run->clock.timed_steps;
  double avg = timed_steps ? run->clock.timed / timed_steps : dt;
  loom_progress_step(&run->out.progress, run->state.step, res, dt, run->state.elapsed,
                     avg * (double)(run->cfg->training.steps - run->state.step));
  long step = run->state.step, every = run->cfg->training.log_every;
  if (every > 0 && (step % every == 0 || step == 1 || step == run->cfg->training.steps)) {
    char *moe = moe_figures(run, false); /* MoE: the expert load, briefly, in train.log */
    if (moe) loom_progress_log_line(&run->out.progress, moe);
    free(moe);
  }
  return rc;
}

/* Every rank agrees that the step went well: no failed write (rc, train.log), no failed
 * pruning of the step before, a loss that is a number. A failed write (full disk) stops every
 * rank here, before the next checkpoint could be attempted: the newest complete checkpoint
 * stays as it is. */
int loom_run_agree_step(loom_run *run, const loom_step_result *res, int rc) {
  if (!rc && run->failure.deferred) rc = loom_err("%s", run->failure.deferred);
  if (!rc && !run->skip.now && res->loss != res->loss)
    rc = loom_err("loss became NaN at step %ld; lower training.lr or enable "
                  "training.grad_clip",
                  run->state.step);
  if (!loom_run_agree(run, rc)) return 0;
  loom_progress_finish(&run->out.progress);
  return LOOM_ERR;
}

/* Every rank: the validation loss now, recorded by the lead; agreed on. */
int loom_run_evaluate(loom_run *run) {
  return loom_run_agree(run, loom_eval_track_run(&run->eval.loss, &run->ranks.job.world_comm,
                                                 run->state.step, run->out.metrics,
                                                 run->out.metrics_path, &run->out.progress));
}

/* Whether a periodic checkpoint follows this step (checkpoint.every; the last step's is the
 * final checkpoint). */
bool loom_run_checkpoint_due(const loom_run *run) {
  long every = run->cfg->checkpoint.every, step = run->state.step;
  return every > 0 && step % every == 0 && step < run->cfg->training.steps;
}

/* Every rank: save the checkpoint <run dir>/<name> with the data position. loom_ckpt_save
 * fails on every rank together. */
int loom_run_checkpoint(loom_run *run, const char *name) {
  loom_data_get_state(run->batch.source, &run->state.loader);
  run->state.loader_batch_windows = run->cfg->training.micro_batch_size * run->ranks.mesh.dp;
  char *dir = loom_sprintf("%s/%s", run->out.dir, name);
  int rc = loom_ckpt_save(dir, run->exec, &run->ranks.mesh, &run->ranks.job.world_comm, &run->state,
                          run->cfg);
  if (!rc) loom_progress_note(&run->out.progress, "saved %s", dir);
  free(dir);
  if (rc) loom_run_failed_everywhere(run);
  return rc;
}

/* Lead: every complete checkpoint_<N> beyond checkpoint.keep_last goes (rename, then
 * delete); a failure is reported at the next agreement of the ranks. */
static void prune(loom_run *run) {
  long keep_last = run->cfg->checkpoint.keep_last;
  if (!run->ranks.lead || keep_last <= 0) return;
  if (loom_run_dir_prune(run->out.dir, keep_last) && !run->failure.deferred)
    run->failure.deferred = loom_strdup(loom_errmsg());
}

/* Every rank: checkpoint_<step>, then the pruning of the oldest. */
int loom_run_checkpoint_periodic(loom_run *run) {
  char name[64];
  snprintf(name, sizeof name, "checkpoint_%ld", run->state.step);
  if (loom_run_checkpoint(run, name)) return LOOM_ERR;
  prune(run);
  return 0;
}

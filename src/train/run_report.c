/* What a training run reports about itself: summary.json of a finished or stopped run
 * (losses, timing, peak memory, validation and answer accuracy, MFU against the hardware
 * profile's peak, the lineage of a fork; a stop's signal and the command to continue) or of a
 * failed one (the error, the failing rank; run_record.c), comm.json (bytes per
 * step by collective), the memory of each rank at the start, and the lines for the
 * `loom train --nproc` supervisor. Only world rank 0 writes; every rank takes part in the
 * collectives that gather the figures. */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "loom/hw.h"
#include "loom/sim.h"
#include "loom/kernels.h"
#include "loom/vision_module.h"
#include "train/run_internal.h"

/* LOOM_REPORT_FILE (set by the `loom train --nproc/--max-restarts` supervisor): rank 0 writes
 * "run <dir>" once the run directory exists and "failed" when loom itself reported a
 * failure, so that the supervisor knows where the run is and whether it ended unreported. */
void loom_run_report_supervisor(const char *line) {
  const char *path = getenv("LOOM_REPORT_FILE");
  if (!path || !*path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s\n", line);
  fclose(f);
}

/* ",\n  \"key\": \"text\"" with the text JSON-quoted, appended at out[*len]. */
static void put_text(char *out, size_t n, size_t *len, const char *key, const char *text) {
  json_t *s = json_string(text);
  char *q = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
  if (q && *len < n) *len += (size_t)snprintf(out + *len, n - *len, ",\n  \"%s\": %s", key, q);
  free(q);
  json_decref(s);
}

/* summary.json's peak_flops and peak_source: what MFU is measured against. */
static void put_peak(const loom_run *run, double peak, char *out, size_t n, size_t *len) {
  const loom_config_training *t = &run->cfg->training;
  *len += (size_t)snprintf(out + *len, n - *len, ",\n  \"peak_flops\": %.17g", peak);
  const loom_mfu_source *m = &run->mfu;
  json_t *src = json_pack("{s:s, s:s, s:s, s:i, s:s, s:i}", "profile", m->profile, "dtype",
                          t->dtype, "backend", loom_gemm_backend_name(loom_gemm_get_backend()),
                          "threads_per_rank", omp_get_max_threads(), "peak", m->kind ? m->kind : "",
                          "peak_threads", m->threads);
  if (src && m->instruction) /* the unit, and the library's figure beside it where measured */
    json_object_set_new(src, "unit", json_string(loom_hw_unit_name(m->unit)));
  if (src && m->library_peak > 0 && m->instruction)
    json_object_set_new(src, "library_peak_flops", json_real(m->library_peak));
  char *obj = src ? json_dumps(src, JSON_PRESERVE_ORDER | JSON_COMPACT) : NULL;
  if (obj && *len < n)
    *len += (size_t)snprintf(out + *len, n - *len, ",\n  \"peak_source\": %s", obj);
  free(obj);
  json_decref(src);
}

/* Why summary.json has no "mfu": the figure exceeds the peak, no step was timed, or there is
 * no peak. flops_per_s: the model FLOP/s per rank over the run. */
static void mfu_note(const loom_run *run, double mfu, double flops_per_s, double peak, char *note,
                     size_t cap) {
  if (isfinite(mfu))
    snprintf(note, cap,
             "MFU not recorded: %.3g GFLOP/s per rank over the run exceed the "
             "profile's peak of %.3g (%s, %s): the peak is not what this run can reach; run "
             "'loom bench' again as training runs",
             flops_per_s / 1e9, peak / 1e9, run->out.progress.peak_name, run->mfu.profile);
  else if (peak > 0) snprintf(note, cap, "MFU not recorded: no training step timed");
  else snprintf(note, cap, "%s", run->mfu.why);
}

/* summary.json's training time, MFU (loom_mfu over the whole run: tokens of the
 * trajectory / duration_s, against the profile's peak; absent with mfu_note when there is no
 * peak or the figure would exceed 100%) and lineage. */
static void summary_time_mfu_lineage(const loom_run *run, char *out, size_t n) {
  const loom_config *cfg = run->cfg;
  int world = run->ranks.job.world;
  size_t len = 0;
  double fpt = loom_sim_flops_per_token(&run->spec, (int)cfg->training.seq_len); /* MoE too */
  double secs = run->state.elapsed, peak = run->out.progress.peak_flops;
  double tokens = (double)run->state.tokens_seen, mfu = loom_mfu(tokens, secs, fpt / world, peak);
  len += (size_t)snprintf(out + len, n - len,
                          ",\n  \"duration_s\": %.17g,\n  \"tokens\": %ld,"
                          "\n  \"ranks\": %d,\n  \"flops_per_token\": %.17g",
                          secs, run->state.tokens_seen, world, fpt);
  if (peak > 0 && len < n) put_peak(run, peak, out, n, &len);
  if (isfinite(mfu) && mfu <= 1) {
    if (len < n) len += (size_t)snprintf(out + len, n - len, ",\n  \"mfu\": %.17g", mfu);
  } else {
    char note[1400];
    mfu_note(run, mfu, fpt / world * tokens / secs, peak, note, sizeof note);
    put_text(out, n, &len, "mfu_note", note);
  }
  if (cfg->run.parent[0]) {
    put_text(out, n, &len, "parent_run", cfg->run.parent);
    put_text(out, n, &len, "parent_checkpoint", cfg->run.parent_checkpoint);
  }
}

/* summary.json's skipped samples, answer accuracy (overall, the majority baseline, then per
 * question type) and validation loss (final_valid_loss, ...). */
static void summary_eval(const loom_run *run, char *out, size_t cap) {
  const loom_eval_vqa_result *v = &run->eval.vqa;
  if (run->cfg->data.skip_bad_samples && loom_data_is_vqa(run->batch.source))
    snprintf(out, cap, ",\n  \"skipped_bad_samples\": %ld", run->state.skipped_bad);
  if (v->samples > 0) {
    size_t n = strlen(out);
    n += (size_t)snprintf(out + n, cap - n, ",\n  \"val_accuracy\": %.6f,\n  \"val_samples\": %ld",
                          v->accuracy, v->samples);
    if (v->baseline >= 0 && n < cap)
      n += (size_t)snprintf(out + n, cap - n, ",\n  \"val_baseline\": %.6f", v->baseline);
    for (int k = 0; k < v->n_kinds && n < cap; k++)
      if (v->kind_samples[k] > 0)
        n += (size_t)snprintf(out + n, cap - n, ",\n  \"val_accuracy_%s\": %.6f", v->kind[k],
                              (double)v->kind_correct[k] / (double)v->kind_samples[k]);
  }
  size_t used = strlen(out);
  loom_eval_track_summary(&run->eval.loss, out + used, cap - used);
}

/* summary.json's losses (none when no step was taken: steps=0) and the weights the run
 * started from (checkpoint.init_from). */
static void summary_losses(const loom_run *run, bool stepped, char *head, size_t cap) {
  if (stepped)
    snprintf(head, cap, "\n  \"final_loss\": %.17g,\n  \"min_loss\": %.17g,", run->clock.last_loss,
             run->clock.min_loss);
  if (run->cfg->checkpoint.init_from[0]) {
    json_t *s = json_string(run->cfg->checkpoint.init_from);
    char *quoted = json_dumps(s, JSON_ENCODE_ANY);
    size_t n = strlen(head);
    snprintf(head + n, cap - n, "\n  \"init_from\": %s,", quoted);
    free(quoted);
    json_decref(s);
  }
}

/* summary.json's step time and speed over the timed steps (none when no step was taken). */
static void summary_timing(const loom_run *run, bool stepped, char *out, size_t cap) {
  long timed_steps = run->clock.timed_steps;
  double avg_step = timed_steps ? run->clock.timed / timed_steps : 0;
  const loom_config_training *t = &run->cfg->training;
  double tokens_per_step =
      (double)t->grad_accum * t->micro_batch_size * t->seq_len * run->ranks.mesh.dp;
  snprintf(out, cap, "  \"timed_steps\": 0,");
  if (stepped)
    snprintf(out, cap,
             "  \"avg_step_time\": %.6f,\n  \"timed_steps\": %ld,\n  \"tokens_per_s\": %.1f,",
             avg_step, timed_steps, avg_step > 0 ? tokens_per_step / avg_step : 0.0);
}

/* Every rank: the largest peak resident memory over the ranks, in KiB. */
static long peak_rss_kib(loom_run *run) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double rss[1] = {(double)ru.ru_maxrss};
  loom_comm_allreduce_f64(&run->ranks.job.world_comm, rss, 1, LOOM_OP_MAX);
  return (long)rss[0];
}

/* Every rank: summary.json of a run that finished or stopped (written by the lead) and its
 * peak memory line. */
int loom_run_report_summary(loom_run *run, const char *status, const char *stopped_by,
                            const char *resume) {
  long rss_kib = peak_rss_kib(run);
  if (!run->ranks.lead) return 0;
  bool stepped = run->state.step > run->clock.first_step;
  char head[LOOM_STR_MAX * 2 + 128] = "", timing[160], fields[1024] = "", extra[4096] = "";
  char by[128] = "";
  summary_losses(run, stepped, head, sizeof head);
  summary_timing(run, stepped, timing, sizeof timing);
  summary_eval(run, fields, sizeof fields);
  summary_time_mfu_lineage(run, extra, sizeof extra);
  if (stopped_by) snprintf(by, sizeof by, "\n  \"stopped_by\": \"%s\",", stopped_by);
  if (resume) {
    size_t len = strlen(extra);
    put_text(extra, sizeof extra, &len, "resume", resume);
  }
  char *text = loom_sprintf("{\n  \"status\": \"%s\",%s\n  \"steps\": %ld,%s\n%s\n  "
                            "\"peak_rss_mb\": %.1f%s%s\n}\n",
                            status, by, run->state.step, head, timing, (double)rss_kib / 1024.0,
                            fields, extra);
  char *path = loom_sprintf("%s/summary.json", run->out.dir);
  int rc = loom_write_file_atomic(path, text, strlen(text));
  loom_progress_note(&run->out.progress, "peak resident memory %.1f MB", (double)rss_kib / 1024.0);
  free(path);
  free(text);
  return rc;
}

/* fp32 words a parameter takes: the master value and, once something read it, the rounded
 * copy */
static size_t fp32_copies(const loom_decoder *d) {
  return d->params_lp && d->params_lp != d->params ? 2 : 1;
}

static const double MiB = 1048576.0;

/* This rank's MiB of the text decoder: params, grads, optimizer, activations+scratch. */
static void decoder_share(const loom_run *run, float mine[4]) {
  loom_decoder *d = loom_exec_decoder(run->exec);
  if (!d) return;
  bool zero3 = run->cfg->parallel.zero == 3;
  /* ZeRO-3 keeps the owned shard (and this rank's experts: resident) plus the layers gathered
   * at a time (not counted here) */
  size_t b, e, xb, xe;
  loom_grad_sync_owned(loom_exec_grad_sync(run->exec), &b, &e);
  loom_grad_sync_experts(loom_exec_grad_sync(run->exec), &xb, &xe);
  size_t resident = zero3 ? (e - b) + (xe - xb) : d->layout.total;
  /* allocated bytes: the fp32 words, the rounded copy (not with bf16 parameters) and the
   * native GEMMs' bf16 weights; the moments in training.optim_dtype */
  mine[0] =
      (float)((zero3 ? resident * sizeof(float) * fp32_copies(d) : loom_decoder_param_bytes(d)) /
              MiB);
  mine[1] = (float)(d->layout.total * sizeof(float) / MiB);
  mine[2] = (float)(loom_adamw_state_bytes(loom_exec_optimizer(run->exec)) / MiB);
  mine[3] = (float)(d->arena_bytes / MiB);
}

/* The vision encoder's share on this rank (its buffers: on every rank of a VLM). */
static void encoder_share(const loom_run *run, float mine[4]) {
  loom_vmod *vm = loom_exec_vision(run->exec);
  if (vm && loom_vmod_mesh(vm)->member) {
    loom_decoder *vd = loom_vmod_decoder(vm);
    size_t vb, ve;
    loom_grad_sync_owned(loom_vmod_grad_sync(vm), &vb, &ve);
    bool zero3 = loom_vmod_get_plan(vm)->zero == 3;
    size_t vres = zero3 ? ve - vb : vd->layout.total;
    mine[0] +=
        (float)((zero3 ? vres * sizeof(float) * fp32_copies(vd) : loom_decoder_param_bytes(vd)) /
                MiB);
    mine[1] += (float)(vd->layout.total * sizeof(float) / MiB);
    mine[2] += (float)(loom_adamw_state_bytes(loom_vmod_optimizer(vm)) / MiB);
  }
  if (vm) mine[3] += (float)(loom_vmod_buffer_bytes(vm) / MiB); /* encoder, hand-off buffers */
}

/* Every rank: the memory of the step per rank (parameters with their copies, gradients,
 * optimizer moments, activations and scratch, in MiB); the lead notes one line per rank. */
void loom_run_report_memory(loom_run *run) {
  float mine[4] = {0, 0, 0, 0};
  decoder_share(run, mine);
  encoder_share(run, mine);
  int W = run->ranks.job.world;
  float *all = loom_calloc((size_t)W * 4, sizeof(float));
  loom_comm_allgather_f32(&run->ranks.job.world_comm, mine, all, 4);
  loom_comm_stats_reset(); /* start-up traffic is not part of any step */
  if (run->ranks.lead) {
    const loom_config_training *t = &run->cfg->training;
    loom_progress_note(&run->out.progress,
                       "memory per rank (MiB; dtype %s, param_dtype %s, "
                       "optim_dtype %s): rank  params  grads  optimizer  activations+scratch",
                       t->dtype, t->param_dtype, t->optim_dtype);
    for (int r = 0; r < W; r++)
      loom_progress_note(&run->out.progress, "  %4d %8.1f %6.1f %10.1f %12.1f", r, all[4 * r],
                         all[4 * r + 1], all[4 * r + 2], all[4 * r + 3]);
  }
  free(all);
}

/* Every rank: comm.json (ring accounting: by kind, by communicator intra-/inter-node) over
 * this process's steps, written by the lead. */
int loom_run_report_comm(loom_run *run, long steps) {
  size_t n = 0;
  char *text = loom_comm_report_json(&run->ranks.job.world_comm, steps, &n);
  int rc = 0;
  if (run->ranks.lead) {
    char *path = loom_sprintf("%s/comm.json", run->out.dir);
    rc = loom_write_file_atomic(path, text, n);
    free(path);
  }
  free(text);
  return rc;
}

/* One report of a failure: the text names the failing rank unless every rank failed alike;
 * the lead writes it to train.log and summary.json (status failed) and tells the supervisor.
 * Returns the text (malloc'd) for the registry and the caller. */
char *loom_run_report_failure(loom_run *run, const loom_train_opts *o) {
  bool ready = run->ranks.job_ready, agreed = run->failure.agreed;
  int world = ready ? run->ranks.job.world : loom_dist_world();
  int rank = agreed ? run->failure.fail.rank : (ready ? run->ranks.job.rank : loom_dist_rank());
  bool everywhere = agreed && (run->failure.fail.all_same || rank < 0);
  char *text = world > 1 && !everywhere ? loom_sprintf("rank %d: %s", rank, loom_errmsg())
                                        : loom_strdup(loom_errmsg());
  if (o->failure) *o->failure = (loom_train_failure){agreed, everywhere, everywhere ? -1 : rank};
  if (run->ranks.lead && run->out.dir && loom_is_dir(run->out.dir)) {
    char *line = loom_sprintf("error: %s", text);
    loom_progress_log_line(&run->out.progress, line);
    free(line);
    if (loom_train_write_end_summary(run->out.dir, "failed", NULL, text)) /* best effort: */
      loom_log("warning: %s", loom_errmsg());                               /* a full disk */
    loom_run_report_supervisor("failed");
  }
  return text;
}

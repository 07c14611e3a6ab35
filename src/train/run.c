/* The training run driver: mesh, run directory (rank 0), data (sharded by data-parallel
 * rank), the executor, the step loop, metrics, progress, periodic/final sharded checkpoints,
 * and resume from a checkpoint — in the same layout with bitwise-identical results, or in
 * another layout; continuing the run in its directory, or as a new run forked from the
 * checkpoint (lineage.c decides; a fork never writes into the parent's directory). Every
 * rank runs this; only rank 0 writes the run's files and prints. */
#include <errno.h>
#include <omp.h>
#include <jansson.h>
#include <math.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "loom/vision_module.h"
#include "loom/checkpoint.h"
#include "loom/eval.h"
#include "loom/exec.h"
#include "loom/hw.h"
#include "loom/kernels.h"
#include "loom/data_source.h"
#include "loom/loader.h"
#include "loom/mesh.h"
#include "loom/trace.h"
#include "loom/registry.h"
#include "loom/train.h"
#include "train/eval_final.h"
#include "train/init_from.h"
#include "train/eval_track.h"
#include "loom/fault.h"
#include "train/progress.h"
#include "train/run_dir.h"

typedef struct {
  const loom_config *cfg;
  loom_model_spec spec;
  loom_mesh mesh;      /* the text decoder's (and, collocated, the vision encoder's) ranks */
  loom_mesh job;       /* every rank of the job (with placement separate: both modules') */
  bool lead;           /* world rank 0: writes files, prints */
  char *run_dir;
  loom_data_source *data;
  const void **vqa;      /* (A) this step's vision-language batches (vqa data) */
  loom_eval_vqa_result val; /* vision-language: answer accuracy on the val split */
  loom_eval_track evals;     /* validation loss (data.val_shards / val_fraction / val split) */
  loom_executor *exec;
  loom_train_state state;
  FILE *metrics;
  loom_progress progress;
  loom_registry_run *registry; /* this run's registry row (lead only; NULL if unavailable) */
  char *metrics_path;
  bool job_ready;      /* the job's communicator exists (failures can be agreed on) */
  bool agreed;         /* the failure is known to every rank (fail holds it) */
  loom_failure fail;
  char *deferred;      /* lead: an error of a write after the step's agreement (pruning) */
  char *cleaned;       /* lead: what the resume removed from the run directory, for the log */
  char *resumed_from;  /* the checkpoint loaded (--resume's, or an earlier one: resume_from) */
  int lock_fd;         /* lead: holds the run directory's lock (-1: none) */
  char peak_profile[512]; /* lead: the hardware profile MFU's peak comes from ("": none) */
  char mfu_why[512];      /* lead: where the peak comes from, or why there is no MFU */
  int32_t *tokens, *targets; /* (A, B, T) */
} run_ctx;

static char *new_run_dir(const loom_config *cfg) {
  const char *name = cfg->run.name[0] ? cfg->run.name
                     : cfg->model.preset[0] ? cfg->model.preset : cfg->model.arch;
  char stamp[32];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  unsigned tag = (unsigned)(loom_hash64(&now, sizeof now, (uint64_t)getpid()) & 0xffff);
  for (int k = 0;; k++) {
    char *dir = loom_sprintf("%s/%s_%s_%04x%s%.0d", cfg->run.output_dir, name, stamp, tag,
                             k ? "_" : "", k);
    if (!loom_path_exists(dir)) return dir;
    free(dir);
  }
}

static int open_run_dir_lead(run_ctx *c, const loom_train_opts *o);

/* Keep the metrics lines of steps <= step (a resumed run rewrites what follows); a last line
 * cut by a crash or a full disk (no newline) is dropped. */
static int truncate_metrics(const char *path, long step) {
  char *data;
  size_t len;
  if (!loom_path_exists(path)) return 0;
  if (loom_read_file(path, &data, &len)) return LOOM_ERR;
  size_t keep = 0;
  for (char *line = data; line < data + len;) {
    char *nl = memchr(line, '\n', (size_t)(data + len - line));
    if (!nl) break; /* a cut last line */
    size_t n = (size_t)(nl - line + 1);
    long s = -1;
    if (sscanf(line, "{\"step\": %ld", &s) != 1 || s > step) break;
    keep += n;
    line += n;
  }
  int rc = loom_write_file_atomic(path, data, keep);
  free(data);
  return rc;
}

static int open_run_dir(run_ctx *c, const loom_train_opts *o) {
  int rc = 0;
  if (c->lead) rc = open_run_dir_lead(c, o);
  if (loom_comm_any_failed(&c->job.world_comm, rc)) return rc ? rc : loom_err("rank 0 failed to create the run directory");
  char path[LOOM_STR_MAX * 2];
  memset(path, 0, sizeof path);
  if (c->lead) snprintf(path, sizeof path, "%s", c->run_dir);
  loom_comm_bcast_bytes(&c->job.world_comm, path, sizeof path, 0);
  if (!c->lead) c->run_dir = loom_strdup(path);
  return 0;
}

/* LOOM_REPORT_FILE (set by the `loom train --nproc/--max-restarts` supervisor): rank 0 writes
 * "run <dir>" once the run directory exists and "failed" when loom itself reported a
 * failure, so that the supervisor knows where the run is and whether it ended unreported. */
static void report_to_supervisor(const char *line) {
  const char *path = getenv("LOOM_REPORT_FILE");
  if (!path || !*path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s\n", line);
  fclose(f);
}

static int open_run_dir_lead(run_ctx *c, const loom_train_opts *o) {
  char *removed = NULL;
  if (o->resume_run) { /* the checkpoint is validated and loaded: now the run may change */
    c->run_dir = loom_strdup(o->resume_run);
    if (loom_run_dir_lock(c->run_dir, &c->lock_fd)) return LOOM_ERR; /* before cleaning up */
    if (loom_run_dir_clean(c->run_dir, &removed)) return LOOM_ERR;
    /* a prune interrupted after the last save: keep_last holds from the start */
    if (loom_run_dir_prune(c->run_dir, c->cfg->checkpoint.keep_last)) {
      free(removed);
      return LOOM_ERR;
    }
  } else {
    c->run_dir = new_run_dir(c->cfg);
    if (loom_mkdir_p(c->run_dir) || loom_run_dir_lock(c->run_dir, &c->lock_fd)) return LOOM_ERR;
  }
  char *cfg_path = loom_sprintf("%s/config.yaml", c->run_dir);
  int rc = loom_config_save(c->cfg, cfg_path);
  free(cfg_path);
  char *line = loom_sprintf("run %s", c->run_dir);
  report_to_supervisor(line);
  free(line);
  if (removed && *removed) c->cleaned = loom_sprintf("removed what an interrupted job left: %s", removed);
  free(removed);
  return rc;
}

static int open_data(run_ctx *c) {
  const loom_config_training *t = &c->cfg->training;
  /* ranks of the encoder only read the samples of their vision data-parallel group */
  loom_vmod *vm = loom_exec_vision(c->exec);
  int dp_rank = c->mesh.member ? c->mesh.dp_rank : loom_vmod_mesh(vm)->dp_rank;
  if (loom_data_open(&c->data, c->cfg, &c->spec, dp_rank, c->mesh.dp)) return LOOM_ERR;
  loom_decoder *d = loom_exec_decoder(c->exec); /* packed documents: segments per document */
  if (d) loom_decoder_set_doc_eod(d, loom_data_doc_eod(c->data));
  size_t n = (size_t)t->grad_accum * t->micro_batch_size * t->seq_len;
  c->tokens = malloc(n * sizeof(int32_t));
  c->targets = malloc(n * sizeof(int32_t));
  c->vqa = calloc((size_t)t->grad_accum, sizeof *c->vqa);
  LOOM_ASSERT(c->tokens && c->targets && c->vqa);
  return 0;
}

static int next_batches(run_ctx *c) {
  if (loom_data_next(c->data, c->tokens, c->targets, c->vqa)) return LOOM_ERR;
  if (!loom_data_is_vqa(c->data)) return 0;
  loom_exec_set_vision_batches(c->exec, c->vqa);
  if (!c->cfg->data.skip_bad_samples) return 0;
  /* bad samples skipped so far over the data-parallel ranks (the ranks of a data-parallel
   * group read the same samples, so one sum over dp counts each once) */
  const char *last;
  double n[1] = {(double)loom_data_skipped(c->data, &last)};
  loom_comm_allreduce_f64(&c->mesh.dp_comm, n, 1, LOOM_OP_SUM);
  if ((long)n[0] > c->state.skipped_bad)
    loom_progress_note(&c->progress, "skipped %ld bad sample%s in all (data.skip_bad_samples)%s%s",
                       (long)n[0], n[0] == 1 ? "" : "s", last[0] ? "; latest here: " : "", last);
  c->state.skipped_bad = (long)n[0];
  return 0;
}

static int save_checkpoint(run_ctx *c, const char *name) {
  loom_data_get_state(c->data, &c->state.loader);
  c->state.loader_batch_windows = c->cfg->training.micro_batch_size * c->mesh.dp;
  char *dir = loom_sprintf("%s/%s", c->run_dir, name);
  int rc = loom_ckpt_save(dir, c->exec, &c->mesh, &c->job.world_comm, &c->state, c->cfg);
  if (!rc) loom_progress_note(&c->progress, "saved %s", dir);
  free(dir);
  return rc;
}

/* Lead: every complete checkpoint_<N> beyond checkpoint.keep_last goes (rename, then
 * delete); a failure is reported at the next agreement of the ranks. */
static void prune_checkpoints(run_ctx *c) {
  if (!c->lead || c->cfg->checkpoint.keep_last <= 0) return;
  if (loom_run_dir_prune(c->run_dir, c->cfg->checkpoint.keep_last) && !c->deferred)
    c->deferred = loom_strdup(loom_errmsg());
}

/* Every rank: did any rank fail (rc, and the lead's failed writes)? Then every rank returns
 * the first failing rank's error. */
static int agree(run_ctx *c, int rc) {
  if (c->lead && !rc && c->progress.log_error[0]) rc = loom_err("%s", c->progress.log_error);
  if (!c->job_ready) { /* before the job's communicator: a config error, the same everywhere */
    if (rc) {
      c->agreed = true;
      c->fail.rank = -1;
      c->fail.all_same = true;
    }
    return rc;
  }
  loom_failure f;
  if (!loom_comm_agree(&c->job.world_comm, rc, &f)) return 0;
  c->agreed = true;
  c->fail = f;
  loom_err("%s", f.msg);
  return LOOM_ERR;
}

/* a JSON number, or null for NaN/inf (JSON has no NaN) */
static const char *json_num(char *buf, size_t n, double x) {
  if (isfinite(x)) snprintf(buf, n, "%.17g", x);
  else snprintf(buf, n, "null");
  return buf;
}

static int write_metrics(run_ctx *c, const loom_step_result *r, double dt, double elapsed) {
  if (!c->lead) return 0;
  char loss[32], norm[32], skipped[48] = "", line[512];
  if (c->cfg->data.skip_bad_samples && loom_data_is_vqa(c->data))
    snprintf(skipped, sizeof skipped, ", \"skipped_bad\": %ld", c->state.skipped_bad);
  int n = snprintf(line, sizeof line,
          "{\"step\": %ld, \"loss\": %s, \"lr\": %.17g, \"grad_norm\": %s, "
          "\"tokens_per_s\": %.1f, \"step_time\": %.6f, \"time\": %.3f, \"tokens\": %ld%s}\n",
          c->state.step, json_num(loss, sizeof loss, r->loss), r->lr,
          json_num(norm, sizeof norm, r->grad_norm), dt > 0 ? (double)r->tokens / dt : 0.0, dt,
          elapsed, c->state.tokens_seen, skipped);
  return loom_append_checked(c->metrics, c->metrics_path, line, (size_t)n);
}

/* ",\n  \"key\": \"text\"" with the text JSON-quoted, appended at out[*len]. */
static void put_text(char *out, size_t n, size_t *len, const char *key, const char *text) {
  json_t *s = json_string(text);
  char *q = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
  if (q && *len < n) *len += (size_t)snprintf(out + *len, n - *len, ",\n  \"%s\": %s", key, q);
  free(q);
  json_decref(s);
}

/* summary.json's training time, MFU (loom_mfu over the whole run: tokens of the
 * trajectory / duration_s, against the profile's peak; absent with mfu_note when there is no
 * peak or the figure would exceed 100%) and lineage. */
static void summary_time_mfu_lineage(const run_ctx *c, char *out, size_t n) {
  const loom_config_training *t = &c->cfg->training;
  size_t len = 0;
  double fpt = loom_decoder_flops_per_token(&c->spec, (int)t->seq_len); /* the whole model's */
  double secs = c->state.elapsed, peak = c->progress.peak_flops;
  double mfu = loom_mfu((double)c->state.tokens_seen, secs, fpt / c->job.world, peak);
  len += (size_t)snprintf(out + len, n - len, ",\n  \"duration_s\": %.17g,\n  \"tokens\": %ld,"
                          "\n  \"ranks\": %d,\n  \"flops_per_token\": %.17g", secs,
                          c->state.tokens_seen, c->job.world, fpt);
  if (peak > 0 && len < n) {
    len += (size_t)snprintf(out + len, n - len, ",\n  \"peak_flops\": %.17g", peak);
    json_t *src = json_pack("{s:s, s:s, s:s, s:i}", "profile", c->peak_profile, "dtype", t->dtype,
                            "backend", loom_gemm_backend_name(loom_gemm_get_backend()),
                            "threads_per_rank", omp_get_max_threads());
    char *obj = src ? json_dumps(src, JSON_PRESERVE_ORDER | JSON_COMPACT) : NULL;
    if (obj && len < n) len += (size_t)snprintf(out + len, n - len, ",\n  \"peak_source\": %s", obj);
    free(obj);
    json_decref(src);
  }
  if (isfinite(mfu) && mfu <= 1) {
    if (len < n) len += (size_t)snprintf(out + len, n - len, ",\n  \"mfu\": %.17g", mfu);
  } else {
    char note[1400];
    if (isfinite(mfu))
      snprintf(note, sizeof note, "MFU not recorded: %.3g GFLOP/s per rank over the run exceed "
               "the profile's peak of %.3g (%s): the peak is not what this run can reach; run "
               "'loom bench' again as training runs", fpt / c->job.world *
               (double)c->state.tokens_seen / secs / 1e9, peak / 1e9, c->peak_profile);
    else if (peak > 0)
      snprintf(note, sizeof note, "MFU not recorded: no training step timed");
    else
      snprintf(note, sizeof note, "%s", c->mfu_why);
    put_text(out, n, &len, "mfu_note", note);
  }
  if (c->cfg->run.parent[0]) {
    put_text(out, n, &len, "parent_run", c->cfg->run.parent);
    put_text(out, n, &len, "parent_checkpoint", c->cfg->run.parent_checkpoint);
  }
}

static int write_summary(run_ctx *c, bool stepped, double final_loss, double min_loss,
                         double avg_step, long timed_steps) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double rss[1] = {(double)ru.ru_maxrss};
  loom_comm_allreduce_f64(&c->job.world_comm, rss, 1, LOOM_OP_MAX); /* the largest rank */
  ru.ru_maxrss = (long)rss[0];
  if (!c->lead) return 0;
  const loom_config_training *t = &c->cfg->training;
  double tokens_per_step = (double)t->grad_accum * t->micro_batch_size * t->seq_len * c->mesh.dp;
  char accuracy[1024] = "";
  const loom_eval_vqa_result *v = &c->val;
  if (c->cfg->data.skip_bad_samples && loom_data_is_vqa(c->data))
    snprintf(accuracy, sizeof accuracy, ",\n  \"skipped_bad_samples\": %ld", c->state.skipped_bad);
  if (v->samples > 0) { /* overall, the majority baseline, then per question type */
    size_t n = strlen(accuracy);
    n += (size_t)snprintf(accuracy + n, sizeof accuracy - n,
                          ",\n  \"val_accuracy\": %.6f,\n  \"val_samples\": %ld", v->accuracy,
                          v->samples);
    if (v->baseline >= 0 && n < sizeof accuracy)
      n += (size_t)snprintf(accuracy + n, sizeof accuracy - n, ",\n  \"val_baseline\": %.6f",
                            v->baseline);
    for (int k = 0; k < v->n_kinds && n < sizeof accuracy; k++)
      if (v->kind_samples[k] > 0)
        n += (size_t)snprintf(accuracy + n, sizeof accuracy - n,
                              ",\n  \"val_accuracy_%s\": %.6f", v->kind[k],
                              (double)v->kind_correct[k] / (double)v->kind_samples[k]);
  }
  char head[LOOM_STR_MAX * 2 + 128] = ""; /* no losses when no step was taken (steps=0) */
  if (stepped)
    snprintf(head, sizeof head, "\n  \"final_loss\": %.17g,\n  \"min_loss\": %.17g,",
             final_loss, min_loss);
  if (c->cfg->checkpoint.init_from[0]) { /* the weights the run started from */
    json_t *s = json_string(c->cfg->checkpoint.init_from);
    char *quoted = json_dumps(s, JSON_ENCODE_ANY);
    size_t n = strlen(head);
    snprintf(head + n, sizeof head - n, "\n  \"init_from\": %s,", quoted);
    free(quoted);
    json_decref(s);
  }
  char timing[160] = "  \"timed_steps\": 0,"; /* no step: no step time or speed either */
  if (stepped)
    snprintf(timing, sizeof timing,
             "  \"avg_step_time\": %.6f,\n  \"timed_steps\": %ld,\n  \"tokens_per_s\": %.1f,",
             avg_step, timed_steps, avg_step > 0 ? tokens_per_step / avg_step : 0.0);
  size_t used = strlen(accuracy); /* validation loss: final_valid_loss, ... */
  loom_eval_track_summary(&c->evals, accuracy + used, sizeof accuracy - used);
  char extra[4096];
  summary_time_mfu_lineage(c, extra, sizeof extra);
  char *text = loom_sprintf("{\n  \"status\": \"completed\",\n  \"steps\": %ld,%s\n%s\n  \"peak_rss_mb\": %.1f%s%s\n}\n",
                            c->state.step, head, timing, (double)ru.ru_maxrss / 1024.0, accuracy,
                            extra);
  char *path = loom_sprintf("%s/summary.json", c->run_dir);
  int rc = loom_write_file_atomic(path, text, strlen(text));
  loom_progress_note(&c->progress, "peak resident memory %.1f MB", (double)ru.ru_maxrss / 1024.0);
  free(path);
  free(text);
  return rc;
}

/* fp32 words a parameter takes: the master value and, once something read it, the rounded
 * copy */
static size_t fp32_copies(const loom_decoder *d) {
  return d->params_lp && d->params_lp != d->params ? 2 : 1;
}

/* Per-rank memory of the step: parameters (+ bf16 copy), gradients, optimizer moments,
 * activations and scratch, in MiB; rank 0 prints one line per rank. */
static void report_memory(run_ctx *c) {
  loom_decoder *d = loom_exec_decoder(c->exec);
  const double MiB = 1048576.0;
  float mine[4] = {0, 0, 0, 0};
  if (d) {
    size_t b, e;
    loom_grad_sync_owned(loom_exec_grad_sync(c->exec), &b, &e);
    /* ZeRO-3 keeps the owned shard plus the layers gathered at a time (not counted here) */
    size_t resident = c->cfg->parallel.zero == 3 ? e - b : d->layout.total;
    /* allocated bytes: the fp32 words, the rounded copy (not with bf16 parameters) and the
     * native GEMMs' bf16 weights; the moments in training.optim_dtype */
    mine[0] = (float)((c->cfg->parallel.zero == 3
                           ? resident * sizeof(float) * fp32_copies(d)
                           : loom_decoder_param_bytes(d)) / MiB);
    mine[1] = (float)(d->layout.total * sizeof(float) / MiB);
    mine[2] = (float)(loom_adamw_state_bytes(loom_exec_optimizer(c->exec)) / MiB);
    mine[3] = (float)(d->arena_bytes / MiB);
  }
  loom_vmod *vm = loom_exec_vision(c->exec);
  if (vm && loom_vmod_mesh(vm)->member) { /* the encoder's share on this rank */
    loom_decoder *vd = loom_vmod_decoder(vm);
    size_t vb, ve;
    loom_grad_sync_owned(loom_vmod_grad_sync(vm), &vb, &ve);
    size_t vres = loom_vmod_get_plan(vm)->zero == 3 ? ve - vb : vd->layout.total;
    mine[0] += (float)((loom_vmod_get_plan(vm)->zero == 3
                            ? vres * sizeof(float) * fp32_copies(vd)
                            : loom_decoder_param_bytes(vd)) / MiB);
    mine[1] += (float)(vd->layout.total * sizeof(float) / MiB);
    mine[2] += (float)(loom_adamw_state_bytes(loom_vmod_optimizer(vm)) / MiB);
  }
  if (vm) mine[3] += (float)(loom_vmod_buffer_bytes(vm) / MiB); /* encoder, hand-off buffers */
  int W = c->job.world;
  float *all = calloc((size_t)W * 4, sizeof(float));
  loom_comm_allgather_f32(&c->job.world_comm, mine, all, 4);
  loom_comm_stats_reset(); /* start-up traffic is not part of any step */
  if (c->lead) {
    const loom_config_training *t = &c->cfg->training;
    loom_progress_note(&c->progress, "memory per rank (MiB; dtype %s, param_dtype %s, "
                       "optim_dtype %s): rank  params  grads  optimizer  activations+scratch",
                       t->dtype, t->param_dtype, t->optim_dtype);
    for (int r = 0; r < W; r++)
      loom_progress_note(&c->progress, "  %4d %8.1f %6.1f %10.1f %12.1f", r, all[4 * r],
                         all[4 * r + 1], all[4 * r + 2], all[4 * r + 3]);
  }
  free(all);
}

/* The text decoder's mesh (all ranks, or the first ones when the vision encoder has ranks of
 * its own) and the job's. */
static int create_meshes(run_ctx *c) {
  const loom_config *cfg = c->cfg;
  const loom_config_parallel *p = &cfg->parallel;
  const loom_config_vision_parallel *v = &cfg->vision_parallel;
  bool vlm = c->spec.vision.arch != LOOM_VISION_NONE;
  if (!vlm && (v->dp || v->tp || v->sp || v->zero != -1 || strcmp(v->placement, "collocated")))
    return loom_err("vision.parallel.* is set but model '%s' has no vision encoder; remove the "
                    "vision.parallel keys or pick a vision-language preset",
                    cfg->model.preset[0] ? cfg->model.preset : cfg->model.arch);
  int world = loom_dist_world();
  if (loom_mesh_create_on(&c->job, 1, world, 1, 1, 1, p->timeout_s, 0)) return LOOM_ERR;
  c->job_ready = true;
  c->lead = c->job.rank == 0;
  if (!vlm || strcmp(v->placement, "separate"))
    return loom_mesh_create(&c->mesh, p, p->timeout_s);
  loom_vmod_plan plan;
  if (loom_vmod_resolve(cfg, &c->spec, world, &plan)) return LOOM_ERR;
  return loom_mesh_create_on(&c->mesh, (int)p->pp, (int)p->dp, (int)p->cp, (int)p->sp, (int)p->tp,
                             p->timeout_s, 0);
}

/* What every rank builds before anything is read or written: the spec, the meshes (with the
 * layout checks), the executor and the data. */
static int setup_local(run_ctx *c) {
  const loom_config *cfg = c->cfg;
  const loom_config_training *t = &cfg->training;
  if (loom_model_spec_from_config(&c->spec, &cfg->model)) return LOOM_ERR;
  if (create_meshes(c)) return LOOM_ERR;
  if (loom_mesh_check_model(&cfg->parallel, &c->spec, (int)t->micro_batch_size, (int)t->seq_len,
                            c->mesh.world))
    return LOOM_ERR;
  if (loom_exec_create(&c->exec, cfg, &c->spec, &c->mesh)) return LOOM_ERR;
  if (open_data(c)) return LOOM_ERR;
  return loom_eval_track_open(&c->evals, cfg, &c->spec, c->exec, &c->mesh);
}

/* Resume: validate the checkpoint (marker, trainer state, tensor shapes) on the lead, then
 * load it everywhere and position the data. Nothing of the run is written here. */
static int load_resume(run_ctx *c, const char *ckpt) {
  const loom_config_training *t = &c->cfg->training;
  int rc = c->lead ? loom_ckpt_validate(ckpt, &c->spec) : 0;
  if (agree(c, rc)) return loom_err_prefix("--resume: ");
  rc = loom_ckpt_load(ckpt, c->exec, &c->mesh, &c->state);
  if (agree(c, rc)) return loom_err_prefix("--resume: ");
  long now = t->micro_batch_size * c->mesh.dp, then = c->state.loader_batch_windows;
  if (then > 0 && then != now) { /* another data-parallel layout: same position in windows */
    uint64_t windows = c->state.loader.index * (uint64_t)then;
    if (windows % (uint64_t)now)
      rc = loom_err("--resume: the checkpoint consumed %" PRIu64 " windows of this epoch, not "
                    "a multiple of micro_batch_size*dp = %ld; pick a layout that divides it",
                    windows, now);
    else
      c->state.loader.index = windows / (uint64_t)now;
  }
  if (!rc) rc = loom_data_set_state(c->data, &c->state.loader);
  return agree(c, rc);
}

/* The run's summary.json says it completed. */
static bool run_completed(const char *run_dir) {
  char *path = loom_sprintf("%s/summary.json", run_dir);
  json_t *o = json_load_file(path, 0, NULL);
  free(path);
  bool done = o && json_is_string(json_object_get(o, "status")) &&
              !strcmp(json_string_value(json_object_get(o, "status")), "completed");
  json_decref(o);
  return done;
}

/* Load the checkpoint to resume from. A final_checkpoint of a run that did not complete (the
 * job was killed after saving it, before summary.json): nothing is left to train from it,
 * so the last steps are redone from the newest periodic checkpoint (same results). Every
 * rank decides alike from the same files. */
static int resume_from(run_ctx *c, const loom_train_opts *o) {
  const loom_config_training *t = &c->cfg->training;
  if (load_resume(c, o->resume)) return LOOM_ERR;
  c->resumed_from = loom_strdup(o->resume);
  char *redo = NULL;
  long step = -1;
  if (c->state.step >= t->steps && o->resume_run && !run_completed(o->resume_run) &&
      loom_run_dir_newest_periodic(o->resume_run, t->steps, &redo, &step) == 0 && redo) {
    free(c->resumed_from);
    c->resumed_from = redo;
    if (load_resume(c, redo)) return LOOM_ERR;
  }
  if (c->state.step < t->steps) {
    if (c->mesh.member && c->mesh.rank == 0) /* counted once in the sum over dp */
      loom_data_add_skipped(c->data, (uint64_t)c->state.skipped_bad);
    return 0;
  }
  c->agreed = true; /* the same on every rank */
  c->fail.rank = -1;
  return loom_err("--resume: '%s' is at step %ld and training.steps is %ld: nothing left to "
                  "train (raise training.steps: that starts a new run forked from this "
                  "checkpoint)", o->resume, c->state.step, t->steps);
}

static int setup(run_ctx *c, const loom_train_opts *o) {
  const loom_config *cfg = c->cfg;
  const loom_config_training *t = &cfg->training;
  if (agree(c, setup_local(c))) return LOOM_ERR;
  /* checkpoint.init_from: loaded and checked against the model before the run directory
   * exists (with --resume, the resumed weights win) */
  char init_desc[LOOM_STR_MAX * 2 + 256] = "";
  if (agree(c, loom_init_from_setup(cfg, o->resume, &c->spec, c->exec, &c->job.world_comm,
                                    init_desc, sizeof init_desc)))
    return LOOM_ERR;
  memset(&c->state, 0, sizeof c->state);
  c->state.config_hash = loom_config_hash(cfg);
  loom_rng_seed(&c->state.rng, (uint64_t)cfg->run.seed);
  if (o->resume && resume_from(c, o)) return LOOM_ERR;
  /* every check that can fail on bad input is done: only now create (or change) the run */
  int rc = open_run_dir(c, o);
  if (agree(c, rc)) return LOOM_ERR;
  if (c->lead) {
    char *log_path = loom_sprintf("%s/train.log", c->run_dir);
    snprintf(c->progress.log_path, sizeof c->progress.log_path, "%s", log_path);
    c->progress.log = fopen(log_path, o->resume_run ? "a" : "w");
    if (!c->progress.log) rc = loom_err("cannot open '%s': %s", log_path, strerror(errno));
    free(log_path);
    char *mpath = loom_sprintf("%s/metrics.jsonl", c->run_dir);
    c->metrics_path = mpath;
    if (!rc && o->resume_run) rc = truncate_metrics(mpath, c->state.step);
    if (!rc && o->resume_run) rc = loom_eval_track_resume(&c->evals, mpath);
    if (!rc) c->metrics = fopen(mpath, o->resume_run ? "a" : "w");
    if (!rc && !c->metrics) rc = loom_err("cannot open '%s': %s", mpath, strerror(errno));
  }
  if (agree(c, rc)) return LOOM_ERR;
  /* under the supervisor stderr is a pipe to it; it says whether its own is a terminal */
  const char *sup_tty = getenv("LOOM_SUPERVISOR_TTY");
  c->progress.tty = sup_tty ? !strcmp(sup_tty, "1") : isatty(STDERR_FILENO);
  c->progress.quiet = o->quiet || !c->lead;
  c->progress.total_steps = t->steps;
  c->progress.log_every = t->log_every;
  c->progress.flops_per_token =
      loom_decoder_flops_per_token(&c->spec, (int)t->seq_len) / c->job.world;
  c->progress.peak_flops =
      c->lead ? loom_mfu_peak_from(t->dtype, omp_get_max_threads(), c->peak_profile,
                                                sizeof c->peak_profile, c->mfu_why,
                                                sizeof c->mfu_why)
              : 0;
  if (o->command_line) loom_progress_note(&c->progress, "command: %s", o->command_line);
  loom_progress_note(&c->progress, "run directory: %s", c->run_dir);
  if (c->cleaned) loom_progress_note(&c->progress, "%s", c->cleaned);
  loom_progress_note(&c->progress,
                     "model: %s, %zu parameters (%zu with vocab padding), vocab %d padded to "
                     "%d; %s%s; B=%ld T=%ld grad_accum=%ld, global batch %ld sequences%s",
                     c->spec.arch == LOOM_ARCH_GPT2 ? "gpt2" : "llama",
                     loom_model_count_params(&c->spec, false),
                     loom_model_count_params(&c->spec, true), c->spec.vocab_size,
                     c->spec.padded_vocab, t->dtype,
                     t->activation_checkpointing ? ", activation checkpointing" : "",
                     t->micro_batch_size, t->seq_len, t->grad_accum,
                     t->micro_batch_size * t->grad_accum * c->mesh.dp,
                     t->global_batch_size > 0 ? " (training.global_batch_size)" : "");
  if (c->mesh.world > 1)
    loom_progress_note(&c->progress, "mesh: %d ranks = pp %d x dp %d x cp %d x sp %d x tp %d%s, "
                       "zero %ld, schedule %s", c->mesh.world, c->mesh.pp, c->mesh.dp, c->mesh.cp,
                       c->mesh.sp, c->mesh.tp,
                       c->mesh.tp > 1 && !strcmp(cfg->parallel.sp_mode, "megatron")
                           ? " (megatron sequence parallel)" : "",
                       cfg->parallel.zero, loom_exec_schedule(c->exec)->name);
  loom_vmod *vm = loom_exec_vision(c->exec);
  if (vm) {
    const loom_vmod_plan *vp = loom_vmod_get_plan(vm);
    loom_progress_note(&c->progress, "vision encoder: ranks %d-%d (%s) = dp %d x cp %d x sp %d x "
                       "tp %d, zero %d; text decoder: ranks 0-%d = pp %d x dp %d x cp %d x sp %d "
                       "x tp %d, zero %ld", vp->first, vp->first + vp->dp * vp->g_v - 1,
                       vp->separate ? "separate" : "collocated", vp->dp, vp->cp, vp->sp, vp->tp,
                       vp->zero, c->mesh.world - 1, c->mesh.pp, c->mesh.dp, c->mesh.cp,
                       c->mesh.sp, c->mesh.tp, cfg->parallel.zero);
  }
  loom_progress_note(&c->progress, "data: %s", loom_data_describe(c->data));
  if (c->lead) loom_progress_note(&c->progress, "%s", c->mfu_why);
  loom_eval_track_note(&c->evals, &c->progress);
  report_memory(c);
  loom_decoder *d = loom_exec_decoder(c->exec);
  if (o->resume) {
    if (c->state.config_hash != loom_config_hash(cfg))
      loom_progress_note(&c->progress, "note: the config differs from the one the checkpoint "
                                       "was written with");
    c->state.config_hash = loom_config_hash(cfg);
    if (strcmp(c->resumed_from, o->resume))
      loom_progress_note(&c->progress, "%s is complete but the run did not finish (no "
                         "summary.json): redoing the last steps", o->resume);
    loom_progress_note(&c->progress, "resumed from %s at step %ld", c->resumed_from, c->state.step);
    if (o->lineage_note && o->lineage_note[0])
      loom_progress_note(&c->progress, "%s", o->lineage_note);
    if (cfg->checkpoint.init_from[0])
      loom_progress_note(&c->progress, "(the run started from checkpoint.init_from %s; not "
                                       "loaded again)", cfg->checkpoint.init_from);
  } else if (init_desc[0]) {
    loom_progress_note(&c->progress, "%s", init_desc);
    if (o->lineage_note && o->lineage_note[0])
      loom_progress_note(&c->progress, "%s", o->lineage_note);
  } else {
    if (o->resume_run)
      loom_progress_note(&c->progress, "no complete checkpoint yet: starting again from step 0");
    if (o->lineage_note && o->lineage_note[0])
      loom_progress_note(&c->progress, "%s", o->lineage_note);
    if (d) loom_decoder_init_params(d, (uint64_t)cfg->run.seed);
    if (loom_exec_vision(c->exec)) loom_vmod_init_params(loom_exec_vision(c->exec), (uint64_t)cfg->run.seed);
  }
  if (d) loom_grad_sync_params_loaded(loom_exec_grad_sync(c->exec));
  if (loom_exec_vision(c->exec)) loom_vmod_params_loaded(loom_exec_vision(c->exec));
  return agree(c, 0); /* a failed write to train.log above stops here */
}

/* Fault injection for the failure tests: LOOM_FAULT=exit:RANK:STEP makes that rank die (as a
 * crash would) before that step, LOOM_FAULT=hang:RANK:STEP makes it stop answering,
 * LOOM_FAULT=kill:RANK:STEP makes it SIGKILL itself; kill-<point>:RANK:STEP is fault.c's. */
static void inject_fault(const run_ctx *c) {
  const char *f = getenv("LOOM_FAULT");
  char kind[8];
  int rank;
  long step;
  if (!f || sscanf(f, "%7[a-z]:%d:%ld", kind, &rank, &step) != 3) return;
  if (rank != c->job.rank || step != c->state.step + 1 || !loom_fault_fire_once()) return;
  fprintf(stderr, "loom: LOOM_FAULT: rank %d %s before step %ld\n", rank, kind, step);
  fflush(stderr);
  if (!strcmp(kind, "exit")) _exit(3);
  if (!strcmp(kind, "kill")) kill(getpid(), SIGKILL);
  if (!strcmp(kind, "hang"))
    for (;;) pause();
}

static void trace_instr(void *ctx, const loom_instr *in, double t0, double t1) {
  (void)ctx;
  char text[96];
  loom_instr_format(in, text, sizeof text);
  loom_trace_record(LOOM_TRACE_COMPUTE, text, "", t0, t1, -1);
}

static void barrier_world(void *ctx) { loom_comm_barrier(&((run_ctx *)ctx)->job.world_comm); }

/* comm.json: bytes each rank sent per step, by kind of collective (ring accounting). */
static int write_comm_stats(run_ctx *c, long steps) {
  int W = c->job.world, K = LOOM_COLL_COUNT;
  double *all = calloc((size_t)W * K, sizeof(double));
  for (int k = 0; k < K; k++)
    all[c->job.rank * K + k] = steps > 0 ? loom_comm_counters.bytes[k] / (double)steps : 0;
  loom_comm_allreduce_f64(&c->job.world_comm, all, (size_t)W * K, LOOM_OP_SUM);
  int rc = 0;
  if (c->lead) {
    size_t cap = 256 + (size_t)W * K * 48, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text + n, cap - n, "{\n  \"steps\": %ld,\n  \"bytes_per_step\": [\n", steps);
    for (int r = 0; r < W; r++) {
      n += (size_t)snprintf(text + n, cap - n, "    {\"rank\": %d", r);
      for (int k = 0; k < K; k++)
        n += (size_t)snprintf(text + n, cap - n, ", \"%s\": %.1f", loom_coll_name(k), all[r * K + k]);
      n += (size_t)snprintf(text + n, cap - n, "}%s\n", r + 1 < W ? "," : "");
    }
    n += (size_t)snprintf(text + n, cap - n, "  ]\n}\n");
    char *path = loom_sprintf("%s/comm.json", c->run_dir);
    rc = loom_write_file_atomic(path, text, n);
    free(path);
    free(text);
  }
  free(all);
  return rc;
}

static int loop(run_ctx *c, const loom_train_opts *o) {
  const loom_config *cfg = c->cfg;
  const loom_config_training *t = &cfg->training;
  double run_start = loom_now() - c->state.elapsed, timed = 0, min_loss = NAN, last = NAN;
  long timed_steps = 0;
  long first = c->state.step;
  loom_comm_stats_reset();
  if (o->trace) {
    loom_trace_enable(true);
    loom_exec_set_trace(c->exec, trace_instr, c);
  }
  while (c->state.step < t->steps) {
    inject_fault(c);
    double t0 = loom_now();
    if (next_batches(c)) return LOOM_ERR;
    loom_step_result r;
    loom_exec_step(c->exec, c->tokens, c->targets, &r);
    double dt = loom_now() - t0;
    c->state.step++;
    c->state.tokens_seen += r.tokens;
    c->state.elapsed = loom_now() - run_start;
    if (c->state.step > first + 1) { /* the first step of a process warms caches: not timed */
      timed += dt;
      timed_steps++;
    }
    if (r.loss < min_loss || min_loss != min_loss) min_loss = r.loss;
    last = r.loss;
    int wrc = write_metrics(c, &r, dt, c->state.elapsed);
    loom_registry_run_heartbeat(c->registry, c->state.step, r.loss); /* rate-limited */
    double avg = timed_steps ? timed / timed_steps : dt;
    loom_progress_step(&c->progress, c->state.step, &r, dt, c->state.elapsed,
                       avg * (double)(t->steps - c->state.step));
    if (!wrc && c->deferred) wrc = loom_err("%s", c->deferred); /* the last pruning failed */
    if (!wrc && r.loss != r.loss)
      wrc = loom_err("loss became NaN at step %ld; lower training.lr or enable "
                     "training.grad_clip", c->state.step);
    /* a failed write (full disk) stops every rank here, before the next checkpoint could
     * be attempted: the newest complete checkpoint stays as it is */
    if (agree(c, wrc)) {
      loom_progress_finish(&c->progress);
      return LOOM_ERR;
    }
    if (loom_eval_track_due(&c->evals, c->state.step, t->steps) &&
        agree(c, loom_eval_track_run(&c->evals, &c->job.world_comm, c->state.step, c->metrics,
                                     c->metrics_path, &c->progress)))
      return LOOM_ERR;
    bool stop = o->stop_after > 0 && c->state.step >= o->stop_after;
    if (cfg->checkpoint.every > 0 && c->state.step % cfg->checkpoint.every == 0 &&
        c->state.step < t->steps) {
      char name[64];
      snprintf(name, sizeof name, "checkpoint_%ld", c->state.step);
      if (save_checkpoint(c, name)) {
        c->agreed = true; /* loom_ckpt_save fails on every rank together */
        c->fail.rank = -1;
        return LOOM_ERR;
      }
      prune_checkpoints(c);
    }
    if (stop) break;
  }
  loom_progress_finish(&c->progress);
  if (agree(c, c->deferred ? loom_err("%s", c->deferred) : 0)) return LOOM_ERR;
  long steps = c->state.step - first;
  int rc = write_comm_stats(c, steps);
  if (!rc && o->trace) {
    loom_exec_set_trace(c->exec, NULL, NULL);
    rc = loom_trace_write(o->trace, c->job.rank, c->job.world, barrier_world, c);
    loom_trace_enable(false);
    if (!rc) loom_progress_note(&c->progress, "trace written to %s", o->trace);
  }
  if (agree(c, rc)) return LOOM_ERR;
  if (c->state.step < t->steps) {
    loom_progress_note(&c->progress, "stopping after step %ld as asked", c->state.step);
    return 0;
  }
  if (c->evals.ev && c->evals.last_step != c->state.step && /* no step ran (steps = 0) */
      agree(c, loom_eval_track_run(&c->evals, &c->job.world_comm, c->state.step, c->metrics,
                                   c->metrics_path, &c->progress)))
    return LOOM_ERR;
  if (cfg->checkpoint.save_final && save_checkpoint(c, "final_checkpoint")) {
    c->agreed = true; /* loom_ckpt_save fails on every rank together */
    c->fail.rank = -1;
    return LOOM_ERR;
  }
  if (loom_data_is_vqa(c->data)) {
    char *final = cfg->checkpoint.save_final ? loom_sprintf("%s/final_checkpoint", c->run_dir) : NULL;
    int erc = loom_eval_vqa_final(c->exec, cfg, &c->spec, &c->mesh, &c->job.world_comm, final,
                                  &c->val);
    free(final);
    if (erc) {
      loom_progress_note(&c->progress, "no answer accuracy: %s", loom_errmsg());
    } else {
      char line[512];
      loom_eval_vqa_kinds_line(&c->val, line, sizeof line);
      if (line[0]) loom_progress_note(&c->progress, "%s", line);
      char base[64] = "";
      if (c->val.baseline >= 0)
        snprintf(base, sizeof base, " (majority-answer baseline %.1f%%)", 100 * c->val.baseline);
      loom_progress_note(&c->progress, "answer accuracy on the val split: %.1f%% of %ld samples%s",
                         100 * c->val.accuracy, c->val.samples, base);
    }
  }
  return agree(c, write_summary(c, steps > 0, last, min_loss, timed_steps ? timed / timed_steps : 0, timed_steps));
}

/* summary.json of a failed run: the status, the error and the last step reached (and a
 * fork's parent). */
static void write_failure_summary(run_ctx *c, const char *error) {
  json_t *o = json_pack("{s:s, s:s, s:I}", "status", "failed", "error", error, "steps",
                        (json_int_t)c->state.step);
  if (o && c->cfg->run.parent[0]) { /* a fork says whose, also when it failed */
    json_object_set_new(o, "parent_run", json_string(c->cfg->run.parent));
    json_object_set_new(o, "parent_checkpoint", json_string(c->cfg->run.parent_checkpoint));
  }
  char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(o);
  if (!text) return;
  char *path = loom_sprintf("%s/summary.json", c->run_dir);
  size_t n = strlen(text);
  text = realloc(text, n + 2);
  text[n] = '\n';
  text[n + 1] = 0;
  if (loom_write_file_atomic(path, text, n + 1)) /* best effort: the disk may be full */
    loom_log("warning: %s", loom_errmsg());
  free(path);
  free(text);
}

/* One report of a failure: the text names the failing rank unless every rank failed alike;
 * the lead writes it to train.log and summary.json (status failed) and the registry. */
static char *report_failure(run_ctx *c, const loom_train_opts *o) {
  int world = c->job_ready ? c->job.world : loom_dist_world();
  int rank = c->agreed ? c->fail.rank : (c->job_ready ? c->job.rank : loom_dist_rank());
  bool everywhere = c->agreed && (c->fail.all_same || rank < 0);
  char *text = world > 1 && !everywhere ? loom_sprintf("rank %d: %s", rank, loom_errmsg())
                                        : loom_strdup(loom_errmsg());
  if (o->failure) *o->failure = (loom_train_failure){c->agreed, everywhere, everywhere ? -1 : rank};
  if (c->lead && c->run_dir && loom_is_dir(c->run_dir)) {
    char *line = loom_sprintf("error: %s", text);
    loom_progress_log_line(&c->progress, line);
    free(line);
    write_failure_summary(c, text);
    report_to_supervisor("failed");
  }
  return text;
}

int loom_train_run(const loom_config *cfg, const loom_train_opts *o) {
  run_ctx c;
  memset(&c, 0, sizeof c);
  c.cfg = cfg;
  c.lock_fd = -1;
  int rc = setup(&c, o);
  char *setup_error = rc ? loom_strdup(loom_errmsg()) : NULL; /* the registry may reset it */
  if (c.lead && c.run_dir && loom_is_dir(c.run_dir)) /* run registry: runs/registry.db */
    c.registry = loom_registry_run_start(cfg, c.run_dir, o->command_line);
  if (setup_error) {
    loom_err("%s", setup_error);
    free(setup_error);
  }
  if (!rc) rc = loop(&c, o);
  if (!rc) {
    loom_progress_note(&c.progress, "done: %ld steps; the run is in %s", c.state.step, c.run_dir);
    if (c.lead) printf("%s\n", c.run_dir);
  }
  char *error = rc ? report_failure(&c, o) : NULL;
  loom_registry_run_finish(c.registry, rc == 0, error);
  if (error) { /* keep the run's error for the caller, whatever the registry did */
    loom_err("%s", error);
    free(error);
  }
  if (c.metrics) fclose(c.metrics);
  if (c.progress.log) fclose(c.progress.log);
  loom_data_close(c.data);
  loom_eval_track_free(&c.evals);
  free(c.vqa);
  loom_exec_free(c.exec);
  loom_mesh_free(&c.mesh);
  loom_mesh_free(&c.job);
  free(c.tokens);
  free(c.targets);
  free(c.run_dir);
  free(c.metrics_path);
  free(c.deferred);
  free(c.cleaned);
  free(c.resumed_from);
  if (c.lock_fd >= 0) close(c.lock_fd); /* after the last write of the run */
  return rc;
}

/* The training run driver's private context, shared by its files: run.c (the step loop and
 * the end of the run), run_setup.c (meshes, executor, data, run directory, outputs),
 * run_start.c (the weights and position the run starts from), run_step.c (the concerns of
 * one step) and run_report.c (summary.json, comm.json, memory, failures). What one rank holds
 * from setup to the end of the run, grouped by concern. Private to src/train/. */
#ifndef LOOM_TRAIN_RUN_INTERNAL_H
#define LOOM_TRAIN_RUN_INTERNAL_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "loom/checkpoint.h"
#include "loom/comm.h"
#include "loom/data_source.h"
#include "loom/eval.h"
#include "loom/exec.h"
#include "loom/hw.h"
#include "loom/mesh.h"
#include "loom/registry.h"
#include "loom/train.h"
#include "train/eval_track.h"
#include "train/progress.h"

typedef struct {
  const loom_config *cfg; /* the run's configuration */
  loom_model_spec spec;   /* the model it describes */
  struct {
    loom_mesh mesh; /* the text decoder's (and, collocated, the vision encoder's) ranks */
    loom_mesh job;  /* every rank of the job (with placement separate: both modules') */
    bool job_ready; /* the job's communicator exists (failures can be agreed on) */
    bool lead;      /* world rank 0: writes the run's files, prints */
  } ranks;
  loom_executor *exec;    /* the model(s) and optimizer(s) of this rank; runs one step */
  loom_train_state state; /* step, tokens seen, elapsed time, rng, data position: checkpointed */
  char *resumed_from;     /* the checkpoint loaded (--resume's, or an earlier one; run_start.c) */
  struct {
    loom_data_source *source;  /* token shards or VQA samples, read by data-parallel rank */
    int32_t *tokens, *targets; /* (A, B, T): A = training.grad_accum micro-batches */
    const void **vqa;          /* (A) this step's vision-language batches (vqa data) */
  } batch;
  struct {
    loom_eval_track loss;     /* validation loss (data.val_shards / val_fraction / val split) */
    loom_eval_vqa_result vqa; /* vision-language: answer accuracy on the val split, at the end */
  } eval;
  struct {
    char *dir;                   /* the run directory (every rank, once it is open) */
    int lock_fd;                 /* lead: holds the run directory's lock (-1: none) */
    char *cleaned;               /* lead: what the resume removed from the directory, for the log */
    FILE *metrics;               /* lead: metrics.jsonl */
    char *metrics_path;          /* lead: its path, for errors */
    loom_progress progress;      /* the progress line and train.log (lead; quiet elsewhere) */
    loom_registry_run *registry; /* lead: this run's registry row (NULL if unavailable) */
  } out;
  /* lead: where MFU's peak comes from: mfu.profile, the hardware profile ("": none); mfu.why,
   * the peak (instruction peak or library GEMM figure) and its source, or why there is no MFU */
  loom_mfu_source mfu;
  struct {
    bool agreed;       /* the failure is known to every rank (fail holds it) */
    loom_failure fail; /* the agreed failure: first failing rank, whether all failed alike */
    char *deferred;    /* lead: an error of a write after the step's agreement (pruning) */
  } failure;
  struct {
    loom_skip_steps steps; /* training.skip_steps: steps read but not trained on */
    bool now;              /* the step being taken is one of them */
  } skip;
  struct {
    int signal; /* every rank agreed to stop after this step on this signal (0: none) */
    bool asked; /* --stop-after's step was reached */
  } stop;
  struct {
    long first_step;  /* state.step when this process began training (after a resume) */
    double start;     /* loom_now() at the run's start, earlier processes' time included */
    double timed;     /* seconds of the timed steps: all but this process's first */
    long timed_steps; /* how many */
    double min_loss;  /* the lowest training loss of the run's steps in metrics.jsonl (NAN:
                         none yet; a resumed run starts from the lines it keeps) */
    double last_loss; /* the latest (NAN: none yet) */
  } clock;
} loom_run;

/* run.c: every rank: did any rank fail (rc, and the lead's failed writes to train.log)? Then
 * every rank returns the first failing rank's error. */
int loom_run_agree(loom_run *run, int rc);
/* run.c: a failure that every rank meets alike (no agreement needed to report it). */
void loom_run_failed_everywhere(loom_run *run);

/* run_setup.c: everything before the first step: meshes, executor, data, the starting
 * weights and position, the run directory and its files, the opening lines of train.log. */
int loom_run_setup(loom_run *run, const loom_train_opts *o);

/* run_start.c: before the run directory exists: checkpoint.init_from's weights (desc, cap
 * bytes: the line for train.log), the initial trainer state, and --resume's checkpoint. */
int loom_run_start_load(loom_run *run, const loom_train_opts *o, char *desc, size_t cap);
/* run_start.c: once train.log is open: say where the run starts from, and initialize the
 * weights of a run that starts afresh. */
void loom_run_start_note(loom_run *run, const loom_train_opts *o, const char *desc);

/* run_step.c: the concerns of one step, in the order the loop calls them. */
/* the clock of this process's steps (a resumed run's earlier time counts) */
void loom_run_clock_start(loom_run *run);
/* LOOM_FAULT: the failure tests' crash, hang, kill or lone error of a rank before a step */
int loom_run_inject_fault(const loom_run *run);
/* the step's batches into batch (and a VLM's samples to the executor) */
int loom_run_next_batches(loom_run *run);
/* training.skip_steps: whether the step being taken is skipped (its batches read, nothing
 * trained on them); then res says so: no loss, the learning rate of the next trained step */
bool loom_run_skip_step(loom_run *run, loom_step_result *res);
/* the optimizers' step counters after a resume: the steps trained, skipped ones left out */
void loom_run_skip_set_optimizer(loom_run *run);
/* the step taken: state.step, tokens, elapsed; clock's timed steps and losses */
void loom_run_count_step(loom_run *run, const loom_step_result *res, double dt);
/* metrics.jsonl, the registry's heartbeat, the progress line; the metrics write's status */
int loom_run_record_step(loom_run *run, const loom_step_result *res, double dt);
/* MoE models, at the end of the run (lead): each MoE layer's expert load of the last step */
void loom_run_note_moe_load(loom_run *run);
/* every rank agrees the step went well (rc, the last pruning, a finite loss) */
int loom_run_agree_step(loom_run *run, const loom_step_result *res, int rc);
/* every rank: the validation loss now, recorded and agreed on */
int loom_run_evaluate(loom_run *run);
/* a periodic checkpoint follows this step (checkpoint.every) */
bool loom_run_checkpoint_due(const loom_run *run);
/* every rank: checkpoint_<step>, then the pruning beyond checkpoint.keep_last */
int loom_run_checkpoint_periodic(loom_run *run);
/* every rank: the checkpoint <run dir>/<name>; a failure is every rank's alike */
int loom_run_checkpoint(loom_run *run, const char *name);

/* run_stop.c: stopping early on a signal (or LOOM_STOP_FILE), or at --stop-after. */
/* say on stderr when a stop signal arrives (the lead, unless quiet) */
void loom_run_stop_announce(bool on);
/* every rank, at the end of a step: the stop signal any rank received (0: none), agreed */
int loom_run_stop_agree(loom_run *run);
/* "loom train --resume <run dir> [--nproc N]", malloc'd */
char *loom_run_resume_command(const loom_run *run);
/* every rank: the run stopped before training.steps (stop.signal or --stop-after): the
 * summary, train.log's line with the command to continue, the supervisor's "stopped N" */
int loom_run_stopped(loom_run *run, const loom_train_opts *o);
/* "SIGINT", "SIGTERM", "SIGUSR1", "SIGHUP" */
const char *loom_signal_name(int sig);

/* run_report.c: what the run reports, to its files and to whoever started it. */
/* a line for the `loom train --nproc` supervisor (LOOM_REPORT_FILE) */
void loom_run_report_supervisor(const char *line);
/* every rank: train.log's memory per rank (params, grads, optimizer, activations) */
void loom_run_report_memory(loom_run *run);
/* every rank: comm.json, bytes per step by collective over this process's steps */
int loom_run_report_comm(loom_run *run, long steps);
/* every rank: summary.json of a run that finished or stopped (status "finished" or
 * "stopped"; stopped_by: the signal's name or "--stop-after N", resume: the command to
 * continue, both NULL when finished) and the peak memory line */
int loom_run_report_summary(loom_run *run, const char *status, const char *stopped_by,
                            const char *resume);
/* the one report of a failure (train.log, summary.json, supervisor); the text, malloc'd */
char *loom_run_report_failure(loom_run *run, const loom_train_opts *o);
#endif

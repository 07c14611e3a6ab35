/* Training: the run driver that owns the run directory (config.yaml, metrics.jsonl, train.log,
 * checkpoints) and resume. The optimizer and the single-process step are loom/optim.h. */
#ifndef LOOM_TRAIN_H
#define LOOM_TRAIN_H
#include <stdbool.h>
#include <stdint.h>

#include "loom/config.h"
#include "loom/optim.h"

/* How a failed run ended, for the caller's report (one report per failure). */
typedef struct {
  bool agreed;      /* every rank knows of the failure: exit cleanly, no MPI_Abort */
  bool everywhere;  /* every rank failed with the same message (e.g. a layout check) */
  int rank;         /* the (first) failing rank, -1 if unknown */
} loom_train_failure;

typedef struct {
  const char *resume;        /* checkpoint directory to continue from, or NULL */
  const char *resume_run;    /* the run directory to continue in (set with resume; alone:
                                a restart before the first checkpoint, from step 0) */
  loom_train_failure *failure; /* out, may be NULL: filled when the run fails */
  const char *command_line;  /* recorded in train.log */
  bool quiet;                /* no progress output */
  long stop_after;           /* stop after this step (no checkpoint there: as if killed; the
                                run is "stopped"), 0 = run to the end */
  const char *trace;         /* write a Chrome trace of the run here (NULL: none) */
  const char *lineage_note;  /* continue/fork decision for train.log (NULL or "": none) */
  int *stop_signal;          /* out, may be NULL: the signal the run stopped on (0: none) */
} loom_train_opts;

/* Run a whole training job. Returns 0 (finished, or stopped early: *opts->stop_signal says
 * on which signal) or -1 with loom_errmsg() set. */
int loom_train_run(const loom_config *cfg, const loom_train_opts *opts);

/* *out = cfg with the model keys a preset fills in (0, "", -1 in the config) set to the values
 * spec (built from cfg->model) has, and origin = "from model.preset X" (or "the llama
 * default" without a preset): for loom_config_to_yaml_resolved (src/train/config_resolved.c). */
void loom_train_config_resolved(const loom_config *cfg, const loom_model_spec *spec,
                                loom_config *out, char *origin, size_t n);

/* Stop signals (src/train/run_stop.c): SIGINT, SIGTERM and SIGUSR1 make loom_train_run finish
 * the step it is in, agree with the other ranks, save a checkpoint and return stopped; a
 * second signal ends the process at once. SIGPIPE is ignored (a closed stdout or stderr stops
 * the printing only). Call before anything long (MPI start-up, loading) begins. */
void loom_train_signals_install(void);
/* Ask a run to stop as that signal would, from outside its processes: write the signal's
 * number to the file its LOOM_STOP_FILE names (the `--nproc` supervisor and the sweep runner
 * do, from their signal handlers: async-signal-safe, open/write/close only). */
void loom_train_request_stop(const char *stop_file, int sig);

/* A run's summary.json at an end the trainer could not report with its figures (status
 * "failed" or "stopped"; stopped_by and error may be NULL): steps, final and lowest loss and
 * training time from its metrics.jsonl, a fork's parent from its config.yaml. */
int loom_train_write_end_summary(const char *run_dir, const char *status, const char *stopped_by,
                                 const char *error);
/* The same, and the run's registry row under output_dir (or $LOOM_REGISTRY): for the
 * `loom train --nproc` supervisor when a job ends without loom's report. */
int loom_train_record_end(const char *run_dir, const char *output_dir, const char *status,
                          const char *stopped_by, const char *error);

#endif

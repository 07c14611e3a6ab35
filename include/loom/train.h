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
  long stop_after;           /* stop (as if killed) after this step, 0 = run to the end */
  const char *trace;         /* write a Chrome trace of the run here (NULL: none) */
  const char *lineage_note;  /* continue/fork decision for train.log (NULL or "": none) */
} loom_train_opts;

/* Run a whole training job. Returns 0 or -1 with loom_errmsg() set. */
int loom_train_run(const loom_config *cfg, const loom_train_opts *opts);

#endif

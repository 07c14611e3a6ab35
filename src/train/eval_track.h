/* Periodic validation of a training run (eval_track.c): when to evaluate, and where the
 * figures go — a progress/train.log line, a metrics.jsonl line, summary.json fields. */
#ifndef LOOM_TRAIN_EVAL_TRACK_H
#define LOOM_TRAIN_EVAL_TRACK_H
#include <stdio.h>

#include "loom/eval_loss.h"
#include "train/progress.h"

typedef struct {
  loom_evaluator *ev;  /* NULL: the run has no validation data */
  long every;          /* training.eval_every */
  long evals;
  long last_step;      /* step of the latest evaluation, -1: none yet */
  loom_eval_loss_result last;
  double min_loss;
} loom_eval_track;

/* Every rank: open the validation data (nothing when there is none); notes what it is. */
int loom_eval_track_open(loom_eval_track *t, const loom_config *cfg, const loom_model_spec *spec,
                         loom_executor *ex, const loom_mesh *m);
/* A resumed run (rank 0): the evaluations already in its metrics.jsonl count towards
 * min_valid_loss. */
int loom_eval_track_resume(loom_eval_track *t, const char *metrics_path);
/* "validation: <data>; every N steps and at the end" (nothing without validation data). */
void loom_eval_track_note(const loom_eval_track *t, loom_progress *p);
/* Whether the run evaluates after `step`: every training.eval_every steps and at the last. */
bool loom_eval_track_due(const loom_eval_track *t, long step, long total_steps);
/* Every rank: evaluate; rank 0 (metrics != NULL or progress not quiet) records
 * {"step": N, "val_loss": ..., "val_perplexity": ..., "val_tokens": ...} (a checked append
 * to metrics_path: an error when the disk is full) and a note. */
int loom_eval_track_run(loom_eval_track *t, const loom_comm *job, long step, FILE *metrics,
                        const char *metrics_path, loom_progress *p);
/* ",\n  \"final_valid_loss\": ..." fields for summary.json ("" when nothing was evaluated). */
void loom_eval_track_summary(const loom_eval_track *t, char *buf, size_t cap);
void loom_eval_track_free(loom_eval_track *t);
#endif

/* Progress reporting of a training run: a live line on a terminal (step/total, loss,
 * tokens/s, MFU, ETA), plain lines otherwise, and the same plain lines in train.log. Writes
 * to train.log are checked: the first failure is kept (log_error) and the log closed; the
 * run driver stops on it. */
#ifndef LOOM_TRAIN_PROGRESS_H
#define LOOM_TRAIN_PROGRESS_H
#include <stdbool.h>
#include <stdio.h>

#include "loom/train.h"

typedef struct {
  bool tty;             /* stderr is a terminal: redraw one line */
  bool quiet;
  FILE *log;            /* train.log */
  char log_path[4200];  /* its path, for errors */
  char log_error[4400]; /* the first failed write ("cannot write '...': ..."), "" if none */
  long total_steps;
  long log_every;
  double flops_per_token;
  double peak_flops;    /* measured sgemm FLOP/s of this machine (for the MFU estimate) */
  bool has_val;         /* a validation loss was measured: the step line shows the latest */
  double val_loss;
} loom_progress;

/* Measure this machine's fp32 GEMM throughput quickly (~0.1 s) for MFU estimates. */
double loom_progress_measure_peak(void);
void loom_progress_step(loom_progress *p, long step, const loom_step_result *r,
                        double step_seconds, double elapsed, double remaining_seconds);
void loom_progress_finish(loom_progress *p);
/* Append one timestamped line to train.log only (checked; no terminal output). */
void loom_progress_log_line(loom_progress *p, const char *line);
/* A line to train.log (and stderr unless quiet), with a timestamp. */
void loom_progress_note(loom_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif

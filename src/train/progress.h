/* Progress reporting of a training run: a live line on a terminal (step/total, loss,
 * tokens/s averaged since the last logged line, MFU, ETA), plain lines otherwise, and the
 * same plain lines in train.log. MFU (loom_mfu, include/loom/hw.h) = achieved model FLOP/s per
 * rank / the peak of the run's dtype in this machine's hardware profile (`loom bench`);
 * without a profile it is not shown,
 * and a figure above 100% (the profile's peak is not what this run can reach, e.g. measured
 * with fewer threads) is never shown: a note says why instead. Writes
 * to train.log are checked: the first failure is kept (log_error) and the log closed; the
 * run driver stops on it. */
#ifndef LOOM_TRAIN_PROGRESS_H
#define LOOM_TRAIN_PROGRESS_H
#include <stdbool.h>
#include <stdio.h>

#include "loom/optim.h"

typedef struct {
  bool tty;             /* stderr is a terminal: redraw one line */
  bool quiet;
  FILE *log;            /* train.log */
  char log_path[4200];  /* its path, for errors */
  char log_error[4400]; /* the first failed write ("cannot write '...': ..."), "" if none */
  long total_steps;
  long log_every;
  double flops_per_token;
  double peak_flops;    /* per rank, the run's dtype, from this machine's profile; 0: no MFU */
  char peak_name[64];   /* what peak_flops is: "AMX tdpbf16ps instruction peak", "fp32 GEMM
                           peak (onednn backend)", ... (loom_mfu_source's name; "" without one) */
  bool mfu_refused;     /* an MFU above 100% was computed: the peak is wrong, MFU not shown */
  double win_tokens, win_seconds; /* since the last logged line: the tok/s shown */
  bool has_val;         /* a validation loss was measured: the step line shows the latest */
  double val_loss;
} loom_progress;

void loom_progress_step(loom_progress *p, long step, const loom_step_result *r,
                        double step_seconds, double elapsed, double remaining_seconds);
void loom_progress_finish(loom_progress *p);
/* Append one timestamped line to train.log only (checked; no terminal output). */
void loom_progress_log_line(loom_progress *p, const char *line);
/* A line to train.log (and stderr unless quiet), with a timestamp. */
void loom_progress_note(loom_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif

/* `loom runs diff A B`: one metric of two runs' metrics.jsonl aligned by step, the per-step
 * differences, the numpy.allclose criterion |a - b| <= atol + rtol * |b| (b = run B, the
 * reference) at every step both runs logged, and the steps only one of them logged. */
#ifndef LOOM_RUNS_DIFF_H
#define LOOM_RUNS_DIFF_H
#include <stdbool.h>
#include <stdio.h>

#include "loom/runs.h"

typedef struct {
  double rtol, atol;    /* defaults: 1e-5 and 0 (LOOM_RUNS_DIFF_RTOL / _ATOL) */
} loom_runs_diff_tol;
#define LOOM_RUNS_DIFF_RTOL 1e-5
#define LOOM_RUNS_DIFF_ATOL 0.0

typedef struct {
  int n;                /* steps both runs logged, ascending */
  double *step, *a, *b; /* (n) */
  double *only_a, *only_b; /* steps one run logged and the other did not */
  int n_only_a, n_only_b;
  int dup_a, dup_b;     /* steps logged more than once (the last value is used) */
  double max_abs, max_rel;  /* over the common steps; max_rel = |a-b|/|b| (inf when b = 0 != a) */
  int at_max_abs, at_max_rel; /* indices into step, -1 when n = 0 */
  int first_beyond;     /* first index beyond tolerance, -1 when none */
  int n_beyond;
} loom_runs_diff;

/* Align two series (x = step) and compare them. */
void loom_runs_diff_compute(const loom_series *a, const loom_series *b,
                            const loom_runs_diff_tol *tol, loom_runs_diff *d);
/* Within tolerance at every common step, and (unless common_only) the same steps logged. */
bool loom_runs_diff_ok(const loom_runs_diff *d, bool common_only);
/* The report: step counts, steps logged by one run only, max abs / rel with their steps, the
 * criterion and tolerances, the first step beyond them, and the `worst` largest |a-b| steps. */
void loom_runs_diff_print(FILE *out, const loom_runs_diff *d, const char *metric,
                          const char *name_a, const char *name_b, const loom_runs_diff_tol *tol,
                          bool common_only, int worst);
/* Plot (SVG, or PNG when path ends in .png) in two panels on one step axis: A's and B's
 * curves, and below them |B - A| per step on a log scale (a note when it is 0 everywhere). */
int loom_runs_diff_plot(const char *path, const loom_runs_diff *d, const char *metric,
                        const char *name_a, const char *name_b);
void loom_runs_diff_free(loom_runs_diff *d);
#endif

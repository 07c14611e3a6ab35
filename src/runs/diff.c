/* `loom runs diff`: two runs' curves of one metric aligned by step and compared with
 * numpy.allclose's criterion (loom/runs_diff.h); the report and the overlay plot. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "loom/core.h"
#include "loom/plot.h"
#include "loom/runs_diff.h"

typedef struct {
  double step, value;
  int order; /* position in the file: among equal steps the last one wins */
} point;

static int by_step(const void *x, const void *y) {
  const point *p = x, *q = y;
  if (p->step != q->step) return p->step < q->step ? -1 : 1;
  return p->order - q->order;
}

/* Sorted by step, one point per step (the last logged); returns the count, *dups the
 * number of steps that were logged more than once. */
static int sorted_unique(const loom_series *s, point **out, int *dups) {
  point *p = loom_malloc(sizeof *p * (size_t)(s->n + 1));
  for (int i = 0; i < s->n; i++) p[i] = (point){s->x[i], s->y[i], i};
  qsort(p, (size_t)s->n, sizeof *p, by_step);
  int n = 0;
  *dups = 0;
  for (int i = 0; i < s->n; i++) {
    if (n > 0 && p[n - 1].step == p[i].step) {
      if (i + 1 == s->n || p[i + 1].step != p[i].step) (*dups)++;
      p[n - 1] = p[i];
    } else {
      p[n++] = p[i];
    }
  }
  *out = p;
  return n;
}

static void push(double **v, int *n, double x) {
  *v = loom_realloc(*v, (size_t)(*n + 1), sizeof(double));
  (*v)[(*n)++] = x;
}

void loom_runs_diff_compute(const loom_series *sa, const loom_series *sb,
                            const loom_runs_diff_tol *tol, loom_runs_diff *d) {
  memset(d, 0, sizeof *d);
  point *a, *b;
  int na = sorted_unique(sa, &a, &d->dup_a), nb = sorted_unique(sb, &b, &d->dup_b);
  int cap = na < nb ? na : nb;
  d->step = loom_malloc(sizeof(double) * (size_t)(cap + 1));
  d->a = loom_malloc(sizeof(double) * (size_t)(cap + 1));
  d->b = loom_malloc(sizeof(double) * (size_t)(cap + 1));
  d->at_max_abs = d->at_max_rel = d->first_beyond = -1;
  int i = 0, j = 0;
  while (i < na || j < nb) {
    if (j == nb || (i < na && a[i].step < b[j].step)) {
      push(&d->only_a, &d->n_only_a, a[i++].step);
    } else if (i == na || b[j].step < a[i].step) {
      push(&d->only_b, &d->n_only_b, b[j++].step);
    } else {
      int k = d->n++;
      d->step[k] = a[i].step, d->a[k] = a[i++].value, d->b[k] = b[j++].value;
      double diff = fabs(d->a[k] - d->b[k]), ref = fabs(d->b[k]);
      double rel = diff == 0 ? 0 : ref > 0 ? diff / ref : INFINITY;
      if (d->at_max_abs < 0 || diff > d->max_abs) d->max_abs = diff, d->at_max_abs = k;
      if (d->at_max_rel < 0 || rel > d->max_rel) d->max_rel = rel, d->at_max_rel = k;
      if (!(diff <= tol->atol + tol->rtol * ref)) { /* NaN compares false: beyond */
        if (d->first_beyond < 0) d->first_beyond = k;
        d->n_beyond++;
      }
    }
  }
  free(a);
  free(b);
}

bool loom_runs_diff_ok(const loom_runs_diff *d, bool common_only) {
  return d->n > 0 && d->n_beyond == 0 && (common_only || (d->n_only_a == 0 && d->n_only_b == 0));
}

/* "3, 4, 5, ... (12 steps)" */
static void print_steps(FILE *out, const double *s, int n) {
  for (int i = 0; i < n && i < 8; i++) fprintf(out, "%s%.17g", i ? ", " : "", s[i]);
  if (n > 8) fprintf(out, ", ... %.17g", s[n - 1]);
  fprintf(out, " (%d step%s)", n, n == 1 ? "" : "s");
}

static const loom_runs_diff *sort_ctx;
static int by_diff_desc(const void *x, const void *y) {
  int i = *(const int *)x, j = *(const int *)y;
  double di = fabs(sort_ctx->a[i] - sort_ctx->b[i]), dj = fabs(sort_ctx->a[j] - sort_ctx->b[j]);
  if (isnan(di) != isnan(dj)) return isnan(di) ? -1 : 1; /* NaN first: the worst */
  if (di != dj) return di > dj ? -1 : 1;
  return i - j;
}

void loom_runs_diff_print(FILE *out, const loom_runs_diff *d, const char *metric,
                          const char *name_a, const char *name_b, const loom_runs_diff_tol *tol,
                          bool common_only, int worst) {
  fprintf(out, "%s per step: A = %s\n%*s  B = %s\n", metric, name_a, (int)strlen(metric) + 9, "",
          name_b);
  fprintf(out, "steps: %d in both, %d only in A, %d only in B\n", d->n, d->n_only_a, d->n_only_b);
  if (d->n_only_a) fprintf(out, "  only in A: "), print_steps(out, d->only_a, d->n_only_a), fputc('\n', out);
  if (d->n_only_b) fprintf(out, "  only in B: "), print_steps(out, d->only_b, d->n_only_b), fputc('\n', out);
  if (d->dup_a || d->dup_b)
    fprintf(out, "  logged more than once (the last value is compared): %d step%s in A, %d in B\n",
            d->dup_a, d->dup_a == 1 ? "" : "s", d->dup_b);
  fprintf(out, "criterion: |a - b| <= atol + rtol * |b| at every step (numpy.allclose; a = A, "
               "b = B), rtol %g, atol %g\n", tol->rtol, tol->atol);
  if (d->n == 0) {
    fprintf(out, "result: DIFFERENT: no step in common\n");
    return;
  }
  fprintf(out, "max |a - b|:       %.6e at step %.17g\n", d->max_abs, d->step[d->at_max_abs]);
  fprintf(out, "max |a - b| / |b|: %.6e at step %.17g\n", d->max_rel, d->step[d->at_max_rel]);
  if (d->first_beyond >= 0) {
    int k = d->first_beyond;
    fprintf(out, "first step beyond tolerance: %.17g (a %.9g, b %.9g, |a - b| %.3e > %.3e "
                 "allowed); %d of %d steps beyond\n", d->step[k], d->a[k], d->b[k],
            fabs(d->a[k] - d->b[k]), tol->atol + tol->rtol * fabs(d->b[k]), d->n_beyond, d->n);
  }
  if (worst > 0) {
    int *idx = loom_malloc(sizeof(int) * (size_t)d->n);
    for (int k = 0; k < d->n; k++) idx[k] = k;
    sort_ctx = d;
    qsort(idx, (size_t)d->n, sizeof *idx, by_diff_desc);
    int shown = worst < d->n ? worst : d->n;
    fprintf(out, "worst %d step%s:\n  %10s  %16s  %16s  %12s  %12s\n", shown, shown == 1 ? "" : "s",
            "step", "A", "B", "|a - b|", "|a - b|/|b|");
    for (int r = 0; r < shown; r++) {
      int k = idx[r];
      double diff = fabs(d->a[k] - d->b[k]);
      double rel = diff == 0 ? 0 : d->b[k] != 0 ? diff / fabs(d->b[k]) : INFINITY;
      bool beyond = !(diff <= tol->atol + tol->rtol * fabs(d->b[k]));
      fprintf(out, "  %10.17g  %16.9g  %16.9g  %12.3e  %12.3e%s\n", d->step[k], d->a[k], d->b[k],
              diff, rel, beyond ? "  beyond" : "");
    }
    free(idx);
  }
  if (loom_runs_diff_ok(d, common_only))
    fprintf(out, "result: SAME within tolerance at all %d common steps%s\n", d->n,
            d->n_only_a || d->n_only_b ? " (--common-steps: the steps logged by one run only "
                                         "are not compared)" : "");
  else if (d->n_beyond)
    fprintf(out, "result: DIFFERENT: %d of %d steps beyond tolerance, the first at step %.17g\n",
            d->n_beyond, d->n, d->step[d->first_beyond]);
  else
    fprintf(out, "result: DIFFERENT: the runs logged different steps (values agree at the %d "
                 "common ones; --common-steps compares only those)\n", d->n);
}

int loom_runs_diff_plot(const char *path, const loom_runs_diff *d, const char *metric,
                        const char *name_a, const char *name_b) {
  /* the difference in a panel of its own on a log scale: on the curves' axis two runs that
   * agree to 1e-7 draw a flat line at 0; log |B - A| shows where and how they drift apart */
  double *delta = loom_malloc(sizeof(double) * (size_t)(d->n + 1));
  for (int k = 0; k < d->n; k++) delta[k] = fabs(d->b[k] - d->a[k]);
  char *la = loom_sprintf("A: %s", name_a), *lb = loom_sprintf("B: %s", name_b);
  char *dy = loom_sprintf("|B - A| of %s", metric);
  loom_plot_curve curves[2] = {{la, d->step, d->a, d->n}, {lb, d->step, d->b, d->n}};
  loom_plot_curve diff = {"|B - A|", d->step, delta, d->n};
  loom_plot_panel panels[2] = {
      {curves, 2, metric, false, NULL, 1.6},
      {&diff, 1, dy, true, "|B - A| = 0 at every step: A and B are equal", 1}};
  char *title = loom_sprintf("%s per step: A and B; below, |B - A| (log scale)", metric);
  loom_plot_opts o = {.title = title, .x_label = "step"};
  size_t len = strlen(path);
  bool png = len > 4 && !strcasecmp(path + len - 4, ".png");
  int rc = png ? loom_plot_png_panels(path, panels, 2, &o)
               : loom_plot_svg_panels(path, panels, 2, &o);
  free(delta), free(la), free(lb), free(dy), free(title);
  return rc;
}

void loom_runs_diff_free(loom_runs_diff *d) {
  free(d->step), free(d->a), free(d->b), free(d->only_a), free(d->only_b);
  memset(d, 0, sizeof *d);
}

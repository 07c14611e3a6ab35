/* Line plots as SVG, written by hand (no plotting library): several named curves in one
 * picture with axes, "nice" ticks and grid lines, axis labels, a title and a legend — the
 * loss-curve figure a user would otherwise make with matplotlib. */
#ifndef LOOM_PLOT_H
#define LOOM_PLOT_H
#include <stdbool.h>

typedef struct {
  const char *name;      /* legend text */
  const double *x, *y;
  int n;
} loom_plot_curve;

typedef struct {
  const char *title, *x_label, *y_label;
  bool log_y;            /* logarithmic y axis (points <= 0 are dropped) */
  int width, height;     /* pixels (0 = 900 x 540) */
} loom_plot_opts;

/* Write the SVG to path atomically. */
int loom_plot_svg(const char *path, const loom_plot_curve *curves, int n,
                  const loom_plot_opts *o);
/* The same picture as a PNG (the SVG rendered by librsvg + cairo), written atomically. */
int loom_plot_png(const char *path, const loom_plot_curve *curves, int n,
                  const loom_plot_opts *o);
/* Tick positions: "nice" steps (1, 2, 5 x 10^k) covering [lo, hi], at most max_ticks + 2.
 * Returns the count written to ticks (capacity 32) and the step through *step. */
int loom_plot_ticks(double lo, double hi, int max_ticks, double *ticks, double *step);
#endif

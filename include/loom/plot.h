/* Line plots as SVG (and PNG from it), written by hand (no plotting library): several named
 * curves in one picture with axes, "nice" ticks and grid lines, axis labels, a title and a
 * legend — the loss-curve figure a user would otherwise make with matplotlib — or several such
 * panels stacked on one x axis. */
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

/* One panel of a plot with several stacked on a shared x axis (o->x_label under the last). */
typedef struct {
  const loom_plot_curve *curves;
  int n;
  const char *y_label;
  bool log_y;             /* logarithmic y axis (points <= 0 are dropped) */
  const char *empty_note; /* shown in the panel when it has nothing to draw (NULL: an error) */
  double weight;          /* share of the height (0 = 1) */
} loom_plot_panel;

/* Write the SVG to path atomically. */
int loom_plot_svg(const char *path, const loom_plot_curve *curves, int n,
                  const loom_plot_opts *o);
/* Panels stacked under o->title (height 540 + 220 per extra panel unless o->height), each
 * with its own y axis and legend; o->log_y and o->y_label are the panels'. */
int loom_plot_svg_panels(const char *path, const loom_plot_panel *p, int np,
                         const loom_plot_opts *o);
/* The same pictures as a PNG (the SVG rendered by librsvg + cairo), written atomically. */
int loom_plot_png(const char *path, const loom_plot_curve *curves, int n,
                  const loom_plot_opts *o);
int loom_plot_png_panels(const char *path, const loom_plot_panel *p, int np,
                         const loom_plot_opts *o);
/* Tick positions: "nice" steps (1, 2, 5 x 10^k) covering [lo, hi], at most max_ticks + 2.
 * Returns the count written to ticks (capacity 32) and the step through *step. */
int loom_plot_ticks(double lo, double hi, int max_ticks, double *ticks, double *step);
#endif

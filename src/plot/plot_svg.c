/* SVG line plots written by hand: frame, grid lines and tick labels from loom_plot_ticks,
 * axis labels, title, one polyline per curve in the tab10 palette, and a legend with the
 * curve names to the right of the plot area. Log y axes get ticks at powers of ten. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/plot.h"

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

typedef struct {
  char *data;
  size_t len, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (b->len + (size_t)n + 1 > b->cap) {
    b->cap = (b->len + (size_t)n + 1) * 2;
    b->data = loom_realloc(b->data, b->cap, 1);
  }
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

static void put_escaped(buf *b, const char *s) {
  for (; *s; s++) {
    switch (*s) {
      case '&': put(b, "&amp;"); break;
      case '<': put(b, "&lt;"); break;
      case '>': put(b, "&gt;"); break;
      case '"': put(b, "&quot;"); break;
      default: put(b, "%c", *s);
    }
  }
}

typedef struct {
  double x0, x1, y0, y1;      /* data range shown */
  double left, top, w, h;     /* plot area in pixels */
  bool log_y;
} frame;

static double fy(const frame *f, double y) {
  if (f->log_y) y = log10(y);
  return f->top + f->h * (1 - (y - f->y0) / (f->y1 - f->y0));
}
static double fx(const frame *f, double x) { return f->left + f->w * (x - f->x0) / (f->x1 - f->x0); }

static void tick_label(double v, double step, char *out, size_t n) {
  if (fabs(v) >= 1e5 || (fabs(v) < 1e-3 && v != 0)) snprintf(out, n, "%.3g", v);
  else if (step >= 1) snprintf(out, n, "%.0f", v);
  else snprintf(out, n, "%.*f", (int)ceil(-log10(step) - 1e-9), v);
}

static bool usable(const frame *f, double y) { return isfinite(y) && (!f->log_y || y > 0); }

/* Data range over all curves; false when there is nothing to draw. */
static bool data_range(const loom_plot_curve *c, int n, frame *f) {
  f->x0 = f->y0 = INFINITY, f->x1 = f->y1 = -INFINITY;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < c[i].n; k++) {
      double x = c[i].x[k], y = c[i].y[k];
      if (!isfinite(x) || !usable(f, y)) continue;
      if (f->log_y) y = log10(y);
      f->x0 = fmin(f->x0, x), f->x1 = fmax(f->x1, x);
      f->y0 = fmin(f->y0, y), f->y1 = fmax(f->y1, y);
    }
  if (!isfinite(f->x0)) return false;
  if (f->x1 == f->x0) f->x0 -= 0.5, f->x1 += 0.5;
  if (f->y1 == f->y0) f->y0 -= 0.5, f->y1 += 0.5;
  double pad = 0.05 * (f->y1 - f->y0);
  f->y0 -= pad, f->y1 += pad;
  return true;
}

static void draw_axes(buf *b, const frame *f, const loom_plot_opts *o) {
  double ticks[32], step;
  char label[64];
  int n = loom_plot_ticks(f->x0, f->x1, 8, ticks, &step);
  for (int i = 0; i < n; i++) {
    double x = fx(f, ticks[i]);
    if (x < f->left - 0.5 || x > f->left + f->w + 0.5) continue;
    tick_label(ticks[i], step, label, sizeof label);
    put(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", x, f->top,
        x, f->top + f->h);
    put(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>\n", x,
        f->top + f->h, x, f->top + f->h + 5);
    put(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x,
        f->top + f->h + 20, label);
  }
  n = loom_plot_ticks(f->y0, f->y1, 8, ticks, &step);
  if (f->log_y && step < 1) { /* at most one decade: keep linear-spaced labels of 10^t */
  } else if (f->log_y) {
    n = 0;
    for (double e = ceil(f->y0); e <= f->y1 && n < 32; e += 1) ticks[n++] = e;
  }
  for (int i = 0; i < n; i++) {
    double yv = f->log_y ? pow(10, ticks[i]) : ticks[i];
    double y = fy(f, yv);
    if (y < f->top - 0.5 || y > f->top + f->h + 0.5) continue;
    if (f->log_y) snprintf(label, sizeof label, "%.3g", yv);
    else tick_label(yv, step, label, sizeof label);
    put(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", f->left, y,
        f->left + f->w, y);
    put(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>\n",
        f->left - 5, y, f->left, y);
    put(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", f->left - 8, y + 4,
        label);
  }
  put(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n",
      f->left, f->top, f->w, f->h);
  put(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"label\">", f->left + f->w / 2,
      f->top + f->h + 45);
  put_escaped(b, o->x_label ? o->x_label : "");
  put(b, "</text>\n<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" "
         "class=\"label\">", f->left - 58, f->top + f->h / 2);
  put_escaped(b, o->y_label ? o->y_label : "");
  put(b, "%s</text>\n<text x=\"%.1f\" y=\"28\" text-anchor=\"middle\" class=\"title\">",
      f->log_y ? " (log scale)" : "", f->left + f->w / 2);
  put_escaped(b, o->title ? o->title : "");
  put(b, "</text>\n");
}

static void draw_curves(buf *b, const frame *f, const loom_plot_curve *c, int n) {
  for (int i = 0; i < n; i++) {
    const char *color = palette[i % 10];
    put(b, "<polyline class=\"curve\" stroke=\"%s\" points=\"", color);
    int drawn = 0;
    for (int k = 0; k < c[i].n; k++) {
      if (!isfinite(c[i].x[k]) || !usable(f, c[i].y[k])) continue;
      put(b, "%s%.2f,%.2f", drawn++ ? " " : "", fx(f, c[i].x[k]), fy(f, c[i].y[k]));
    }
    put(b, "\"/>\n");
    if (drawn == 1) /* a single point would be invisible as a line */
      for (int k = 0; k < c[i].n; k++)
        if (isfinite(c[i].x[k]) && usable(f, c[i].y[k]))
          put(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n", fx(f, c[i].x[k]),
              fy(f, c[i].y[k]), color);
    /* legend entry */
    double ly = f->top + 10 + 22 * i, lx = f->left + f->w + 20;
    put(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
           "stroke-width=\"3\"/>\n<text x=\"%.1f\" y=\"%.1f\">", lx, ly, lx + 24, ly, color,
        lx + 30, ly + 4);
    put_escaped(b, c[i].name ? c[i].name : "");
    put(b, "</text>\n");
  }
}

int loom_plot_svg(const char *path, const loom_plot_curve *curves, int n,
                  const loom_plot_opts *o) {
  int W = o->width > 0 ? o->width : 900, H = o->height > 0 ? o->height : 540;
  size_t longest = 0;
  for (int i = 0; i < n; i++)
    if (curves[i].name && strlen(curves[i].name) > longest) longest = strlen(curves[i].name);
  double legend_w = 60 + 7.0 * (double)(longest > 60 ? 60 : longest);
  frame f = {.left = 85, .top = 45, .log_y = o->log_y};
  f.w = W - f.left - legend_w - 20;
  f.h = H - f.top - 70;
  if (f.w < 200) f.w = 200, W = (int)(f.left + f.w + legend_w + 20);
  if (!data_range(curves, n, &f))
    return loom_err("nothing to plot: no finite%s values in the curves",
                    o->log_y ? " positive" : "");
  buf b = {0};
  put(&b,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
      "%d\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n"
      "<style>.grid{stroke:#e5e5e5;stroke-width:1}.axis{stroke:#333;stroke-width:1}"
      ".frame{fill:none;stroke:#333;stroke-width:1}.curve{fill:none;stroke-width:1.6;"
      "stroke-linejoin:round}.label{font-size:14px}.title{font-size:16px;font-weight:bold}"
      "</style>\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      W, H, W, H);
  draw_axes(&b, &f, o);
  draw_curves(&b, &f, curves, n);
  put(&b, "</svg>\n");
  int rc = loom_write_file_atomic(path, b.data, b.len);
  free(b.data);
  return rc;
}

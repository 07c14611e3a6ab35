/* SVG line plots written by hand: frame, grid lines and tick labels from loom_plot_ticks,
 * axis labels, title, one polyline per curve in the tab10 palette, and a legend with the
 * curve names to the right of the plot area. Log y axes get ticks at powers of ten. Several
 * panels stack under one title on a shared x axis (`runs diff`: the curves, then log |B - A|);
 * a panel with nothing to draw shows its note instead. */
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

/* Data range over all curves (x through x0 and x1, widened; y of the panel's frame); false when
 * there is nothing to draw. */
static bool data_range(const loom_plot_curve *c, int n, frame *f, double *x0, double *x1) {
  f->y0 = INFINITY, f->y1 = -INFINITY;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < c[i].n; k++) {
      double x = c[i].x[k], y = c[i].y[k];
      if (!isfinite(x) || !usable(f, y)) continue;
      if (f->log_y) y = log10(y);
      *x0 = fmin(*x0, x), *x1 = fmax(*x1, x);
      f->y0 = fmin(f->y0, y), f->y1 = fmax(f->y1, y);
    }
  if (!isfinite(f->y0)) return false;
  if (f->y1 == f->y0) f->y0 -= 0.5, f->y1 += 0.5;
  double pad = 0.05 * (f->y1 - f->y0);
  f->y0 -= pad, f->y1 += pad;
  return true;
}

/* A panel's frame, grid, ticks and y label; the x label under the last panel only. */
static void draw_axes(buf *b, const frame *f, const char *x_label, const char *y_label) {
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
  if (f->log_y && step < 1) { /* a decade or less: 1, 2, 5 (else 1..9) x 10^k inside, or 10^t */
    for (int pass = 0; pass < 2; pass++) {
      static const int m125[] = {1, 2, 5}, m19[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
      const int *m = pass ? m19 : m125;
      int nm = pass ? 9 : 3;
      n = 0;
      for (double e = floor(f->y0); e <= ceil(f->y1) && n < 32; e += 1)
        for (int i = 0; i < nm && n < 32; i++) {
          double t = log10(m[i]) + e;
          if (t >= f->y0 && t <= f->y1) ticks[n++] = t;
        }
      if (n >= 2) break;
    }
    if (n < 2) n = loom_plot_ticks(f->y0, f->y1, 8, ticks, &step); /* within 1..10: 10^t */
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
  if (x_label) {
    put(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"label\">",
        f->left + f->w / 2, f->top + f->h + 45);
    put_escaped(b, x_label);
    put(b, "</text>\n");
  }
  put(b, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" "
         "class=\"label\">", f->left - 58, f->top + f->h / 2);
  put_escaped(b, y_label ? y_label : "");
  put(b, "%s</text>\n", f->log_y ? " (log scale)" : "");
}

/* A panel without data: its frame and the note in the middle. */
static void draw_note(buf *b, const frame *f, const char *note, const char *y_label,
                      const char *x_label) {
  put(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n"
         "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"note\">",
      f->left, f->top, f->w, f->h, f->left + f->w / 2, f->top + f->h / 2 + 5);
  put_escaped(b, note ? note : "nothing to plot");
  put(b, "</text>\n<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" "
         "class=\"label\">", f->left - 58, f->top + f->h / 2);
  put_escaped(b, y_label ? y_label : "");
  put(b, "</text>\n");
  if (x_label) {
    put(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"label\">",
        f->left + f->w / 2, f->top + f->h + 45);
    put_escaped(b, x_label);
    put(b, "</text>\n");
  }
}

static void draw_curves(buf *b, const frame *f, const loom_plot_curve *c, int n, int color0) {
  for (int i = 0; i < n; i++) {
    const char *color = palette[(color0 + i) % 10];
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
  loom_plot_panel one = {curves, n, o->y_label, o->log_y, NULL, 1};
  return loom_plot_svg_panels(path, &one, 1, o);
}

int loom_plot_svg_panels(const char *path, const loom_plot_panel *p, int np,
                         const loom_plot_opts *o) {
  if (np < 1 || np > 8) return loom_err("a plot has 1 to 8 panels, not %d", np);
  int W = o->width > 0 ? o->width : 900;
  int H = o->height > 0 ? o->height : np == 1 ? 540 : 540 + 220 * (np - 1);
  size_t longest = 0;
  double weight = 0;
  for (int k = 0; k < np; k++) {
    weight += p[k].weight > 0 ? p[k].weight : 1;
    for (int i = 0; i < p[k].n; i++)
      if (p[k].curves[i].name && strlen(p[k].curves[i].name) > longest)
        longest = strlen(p[k].curves[i].name);
  }
  double legend_w = 60 + 7.0 * (double)(longest > 60 ? 60 : longest);
  const double gap = 40; /* between panels: the upper one's x tick labels */
  frame f[8];
  bool has[8];
  double x0 = INFINITY, x1 = -INFINITY, top = 45, plot_h = H - top - 70 - gap * (np - 1);
  for (int k = 0; k < np; k++) {
    f[k] = (frame){.left = 85, .top = top, .log_y = p[k].log_y};
    f[k].w = W - f[k].left - legend_w - 20;
    f[k].h = plot_h * (p[k].weight > 0 ? p[k].weight : 1) / weight;
    if (f[k].w < 200) f[k].w = 200, W = (int)(f[k].left + f[k].w + legend_w + 20);
    top += f[k].h + gap;
    has[k] = data_range(p[k].curves, p[k].n, &f[k], &x0, &x1);
    if (!has[k] && !p[k].empty_note)
      return loom_err("nothing to plot: no finite%s values in the curves",
                      p[k].log_y ? " positive" : "");
  }
  if (!isfinite(x0)) return loom_err("nothing to plot: no finite values in the curves");
  if (x1 == x0) x0 -= 0.5, x1 += 0.5;
  for (int k = 0; k < np; k++) f[k].x0 = x0, f[k].x1 = x1;
  buf b = {0};
  put(&b,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
      "%d\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n"
      "<style>.grid{stroke:#e5e5e5;stroke-width:1}.axis{stroke:#333;stroke-width:1}"
      ".frame{fill:none;stroke:#333;stroke-width:1}.curve{fill:none;stroke-width:1.6;"
      "stroke-linejoin:round}.label{font-size:14px}.title{font-size:16px;font-weight:bold}"
      ".note{font-size:14px;fill:#555}</style>\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n<text x=\"%.1f\" y=\"28\" text-anchor=\"middle\" class=\"title\">",
      W, H, W, H, f[0].left + f[0].w / 2);
  put_escaped(&b, o->title ? o->title : "");
  put(&b, "</text>\n");
  for (int k = 0, color = 0; k < np; k++) {
    const char *x_label = k == np - 1 ? (o->x_label ? o->x_label : "") : NULL;
    if (!has[k]) {
      draw_note(&b, &f[k], p[k].empty_note, p[k].y_label, x_label);
      continue;
    }
    draw_axes(&b, &f[k], x_label, p[k].y_label);
    draw_curves(&b, &f[k], p[k].curves, p[k].n, color);
    color += p[k].n; /* a curve keeps its colour whatever panel it is in */
  }
  put(&b, "</svg>\n");
  int rc = loom_write_file_atomic(path, b.data, b.len);
  free(b.data);
  return rc;
}

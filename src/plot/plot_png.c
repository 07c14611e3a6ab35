/* PNG plots: the SVG of plot_svg.c rendered by librsvg onto a cairo image surface, so the PNG
 * and the SVG show the same picture. Written to a temporary name and renamed. */
#include <cairo.h>
#include <librsvg/rsvg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/plot.h"

int loom_plot_png(const char *path, const loom_plot_curve *curves, int n, const loom_plot_opts *o) {
  loom_plot_panel one = {curves, n, o->y_label, o->log_y, NULL, 1};
  return loom_plot_png_panels(path, &one, 1, o);
}

int loom_plot_png_panels(const char *path, const loom_plot_panel *p, int np,
                         const loom_plot_opts *o) {
  int w = o->width > 0 ? o->width : 900;
  int h = o->height > 0 ? o->height : np == 1 ? 540 : 540 + 220 * (np - 1);
  char *svg = loom_sprintf("%s.tmp.%ld.svg", path, (long)getpid());
  char *tmp = loom_tmp_path(path);
  int rc = loom_plot_svg_panels(svg, p, np, o);
  GError *err = NULL;
  RsvgHandle *handle = rc ? NULL : rsvg_handle_new_from_file(svg, &err);
  if (!rc && !handle) rc = loom_err("rendering the plot: %s", err ? err->message : "librsvg failed");
  cairo_surface_t *surface = NULL;
  if (!rc) {
    surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, w, h);
    cairo_t *cr = cairo_create(surface);
    cairo_set_source_rgb(cr, 1, 1, 1); /* opaque white page under the drawing */
    cairo_paint(cr);
    RsvgRectangle viewport = {0, 0, w, h};
    if (!rsvg_handle_render_document(handle, cr, &viewport, &err))
      rc = loom_err("rendering the plot: %s", err ? err->message : "librsvg failed");
    cairo_destroy(cr);
  }
  if (!rc && cairo_surface_write_to_png(surface, tmp) != CAIRO_STATUS_SUCCESS)
    rc = loom_err("cannot write '%s' (is the directory writable?)", path);
  if (!rc && rename(tmp, path) != 0) rc = loom_err("cannot write '%s'", path);
  if (rc) unlink(tmp);
  unlink(svg);
  if (surface) cairo_surface_destroy(surface);
  if (handle) g_object_unref(handle);
  if (err) g_error_free(err);
  free(svg);
  free(tmp);
  return rc;
}

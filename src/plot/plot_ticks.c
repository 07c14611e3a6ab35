/* Axis ticks for plots: steps of 1, 2 or 5 times a power of ten, as matplotlib's default
 * locator picks them, so labels read 0, 50, 100 rather than 0, 37.3, 74.6. */
#include <math.h>

#include "loom/plot.h"

int loom_plot_ticks(double lo, double hi, int max_ticks, double *ticks, double *step_out) {
  if (!(hi > lo)) {
    double pad = lo != 0 ? fabs(lo) * 0.5 : 1.0;
    lo -= pad, hi += pad;
  }
  if (max_ticks < 2) max_ticks = 2;
  double raw = (hi - lo) / max_ticks;
  double mag = pow(10, floor(log10(raw)));
  static const double mults[] = {1, 2, 2.5, 5, 10};
  double step = 10 * mag;
  for (int i = 0; i < 5; i++)
    if (mults[i] * mag >= raw) {
      step = mults[i] * mag;
      break;
    }
  int n = 0;
  for (double t = ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9 && n < 32; t += step)
    ticks[n++] = fabs(t) < step * 1e-9 ? 0.0 : t;
  *step_out = step;
  return n;
}

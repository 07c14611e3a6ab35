/* Learning-rate schedules: linear warmup, then constant, linear or cosine decay to a floor
 * (formulas in include/loom/optim.h). */
#include <math.h>
#include <string.h>

#include "loom/optim.h"

long loom_lr_warmup_steps(const loom_config_training *t) {
  if (t->warmup_steps > 0) return t->warmup_steps;
  return lround(t->warmup_ratio * (double)t->steps);
}

double loom_lr_at(const loom_config_training *t, long s) {
  long W = loom_lr_warmup_steps(t);
  if (s < W) return t->lr * (double)(s + 1) / (double)W;
  long span = t->steps - W > 1 ? t->steps - W : 1;
  double p = (double)(s - W) / (double)span;
  if (p > 1) p = 1;
  double m = t->min_lr_ratio;
  if (!strcmp(t->lr_schedule, "linear")) return t->lr * (m + (1 - m) * (1 - p));
  if (!strcmp(t->lr_schedule, "cosine")) return t->lr * (m + (1 - m) * 0.5 * (1 + cos(M_PI * p)));
  return t->lr;
}

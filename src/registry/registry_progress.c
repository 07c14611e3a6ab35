/* Progress of a run read from its metrics.jsonl, the record the registry takes steps and
 * losses from whatever the run's end (finished, stopped, failed, crashed): steps done (a step
 * skipped by training.skip_steps counts), last and lowest loss, and when the file was last
 * written (the run's last sign of progress). A line cut by a crash (or any line that is not
 * a JSON object with a step) is skipped. */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "loom/core.h"
#include "loom/registry.h"

int loom_registry_read_progress(const char *run_dir, loom_registry_metrics *m, double *last_write) {
  *last_write = NAN;
  char *path = loom_sprintf("%s/metrics.jsonl", run_dir);
  FILE *f = fopen(path, "r");
  free(path);
  if (!f) return -1;
  char *line = NULL;
  size_t cap = 0;
  long steps = -1;
  double last = NAN, min = NAN, time = NAN;
  while (getline(&line, &cap, f) > 0) {
    json_t *o = json_loads(line, 0, NULL);
    json_t *step = json_object_get(o, "step"), *loss = json_object_get(o, "loss");
    json_t *t = json_object_get(o, "time"); /* training seconds so far (the step loops) */
    bool skipped = json_is_true(json_object_get(o, "skipped")); /* training.skip_steps */
    if (json_is_integer(step) && (loss || skipped)) {
      time = json_is_number(t) ? json_number_value(t) : NAN;
      steps = (long)json_integer_value(step);
    }
    if (json_is_integer(step) && loss) {
      last = json_is_number(loss) ? json_number_value(loss) : NAN; /* "loss": null when NaN */
      if (isfinite(last) && !(min <= last)) min = last;
    }
    json_decref(o);
  }
  free(line);
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0)
    *last_write = (double)sb.st_mtim.tv_sec + (double)sb.st_mtim.tv_nsec * 1e-9;
  fclose(f);
  if (steps < 0) return -1;
  m->steps = steps;
  m->final_loss = last;
  m->min_loss = min;
  m->duration_s = time;
  return 0;
}

/* Reading one metric of a run's metrics.jsonl (one JSON object per step) as (x, y) points
 * for plots; x is any numeric field, normally step, time or tokens. Lines that are not JSON
 * (the step whose loss became NaN is written with a bare nan) are skipped. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/runs.h"

static void push(loom_series *s, int *cap, double x, double y) {
  if (s->n == *cap) {
    *cap = *cap ? 2 * *cap : 256;
    s->x = loom_realloc(s->x, (size_t)*cap, sizeof(double));
    s->y = loom_realloc(s->y, (size_t)*cap, sizeof(double));
  }
  s->x[s->n] = x;
  s->y[s->n++] = y;
}

int loom_series_read(const char *path, const char *metric, const char *x_key, loom_series *s) {
  memset(s, 0, sizeof *s);
  FILE *f = fopen(path, "r");
  if (!f) return loom_err("cannot read '%s' (the run wrote no metrics yet?)", path);
  char *line = NULL, keys[512] = "";
  size_t cap_line = 0;
  int cap = 0, lineno = 0;
  while (getline(&line, &cap_line, f) > 0) {
    lineno++;
    json_t *o = json_loads(line, 0, NULL);
    if (!o) continue;
    if (!keys[0]) { /* remember what the file has, for the error below */
      const char *k;
      json_t *v;
      json_object_foreach(o, k, v) if (json_is_number(v) && strlen(keys) + strlen(k) + 3 < sizeof keys)
          snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%s", keys[0] ? ", " : "", k);
    }
    json_t *x = json_object_get(o, x_key), *y = json_object_get(o, metric);
    if (json_is_number(x) && json_is_number(y))
      push(s, &cap, json_number_value(x), json_number_value(y));
    json_decref(o);
  }
  free(line);
  fclose(f);
  if (s->n == 0 && lineno > 0) {
    loom_series_free(s);
    return loom_err("'%s' has no numeric '%s' against '%s' (its fields: %s)", path, metric,
                    x_key, keys);
  }
  return 0;
}

void loom_series_free(loom_series *s) {
  free(s->x);
  free(s->y);
  memset(s, 0, sizeof *s);
}

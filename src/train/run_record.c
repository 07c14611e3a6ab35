/* The record of a run that ended without the trainer's own figures: a failure (reported by
 * the run itself, or by the `loom train --nproc` supervisor when the job died without a
 * report) or a stop at once. summary.json gets the status (the registry's words: failed,
 * stopped), why, the steps and losses metrics.jsonl records and a fork's parent; the registry
 * row the same status with metrics.jsonl's steps and losses, so the two never disagree. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/registry.h"
#include "loom/train.h"
#include "loom/lineage.h"

/* "key": number, or nothing when x is not a number (no step yet, a NaN loss) */
static void set_real(json_t *o, const char *key, double x) {
  if (isfinite(x)) json_object_set_new(o, key, json_real(x));
}

int loom_train_write_end_summary(const char *run_dir, const char *status, const char *stopped_by,
                                 const char *error) {
  loom_registry_metrics m = {.steps = 0, .final_loss = NAN, .min_loss = NAN, .duration_s = NAN};
  double last_write;
  if (loom_registry_read_progress(run_dir, &m, &last_write)) m.steps = 0;
  json_t *o = json_object();
  json_object_set_new(o, "status", json_string(status));
  if (stopped_by) json_object_set_new(o, "stopped_by", json_string(stopped_by));
  if (error) json_object_set_new(o, "error", json_string(error));
  json_object_set_new(o, "steps", json_integer((json_int_t)m.steps));
  set_real(o, "final_loss", m.final_loss);
  set_real(o, "min_loss", m.min_loss);
  set_real(o, "duration_s", m.duration_s);
  loom_config *cfg = loom_malloc(sizeof *cfg); /* a fork says whose, also when it failed */
  if (loom_lineage_load_run_config(run_dir, NULL, cfg) == 0 && cfg->run.parent[0]) {
    json_object_set_new(o, "parent_run", json_string(cfg->run.parent));
    json_object_set_new(o, "parent_checkpoint", json_string(cfg->run.parent_checkpoint));
  }
  free(cfg);
  loom_err_clear();
  char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  json_decref(o);
  char *body = loom_sprintf("%s\n", text), *path = loom_sprintf("%s/summary.json", run_dir);
  int rc = loom_write_file_atomic(path, body, strlen(body));
  free(path);
  free(body);
  free(text);
  return rc;
}

int loom_train_record_end(const char *run_dir, const char *output_dir, const char *status,
                          const char *stopped_by, const char *error) {
  char *err = error ? loom_strdup(error) : NULL; /* error may be loom_errmsg()'s buffer */
  int rc = loom_train_write_end_summary(run_dir, status, stopped_by, err);
  const char *env = getenv("LOOM_REGISTRY");
  if (env && !strcmp(env, "off")) {
    free(err);
    return rc;
  }
  char *db = loom_registry_path(output_dir);
  loom_registry *reg = NULL;
  if (loom_registry_open(&reg, db) == 0) {
    char *copy = loom_strdup(run_dir);
    size_t n = strlen(copy);
    while (n > 1 && copy[n - 1] == '/') copy[--n] = 0;
    const char *id = strrchr(copy, '/') ? strrchr(copy, '/') + 1 : copy;
    if (loom_registry_record_end(reg, id, run_dir, status, err))
      loom_log("warning: run registry: %s", loom_errmsg());
    free(copy);
    loom_registry_close(reg);
  } else {
    loom_log("warning: run registry: %s", loom_errmsg());
  }
  free(db);
  free(err);
  return rc;
}

/* The trainer's side of the run registry: register at start, heartbeat from the step loop
 * (rate-limited), record the outcome at the end (its status as summary.json says it; steps and
 * losses from metrics.jsonl, the rest from summary.json). Best effort: a registry that cannot be
 * opened or written costs a warning, never the run, and the caller's current error message
 * (loom_errmsg) is left as it was. Only MPI rank 0 registers. */
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/registry.h"

struct loom_registry_run {
  loom_registry *reg;
  char *run_id, *run_dir;
  double last_beat;  /* loom_now() of the last heartbeat written */
  double interval;
};

/* Rank of this process under mpirun/srun (0 when not launched by one). */
static long launcher_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                     "SLURM_PROCID", NULL};
  for (int i = 0; vars[i]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return atol(v);
  }
  return 0;
}

/* The caller's error message, kept across the registry calls. */
typedef struct {
  char msg[4096];
  bool set;
} saved_err;

static void save_err(saved_err *s) {
  const char *m = loom_errmsg();
  s->set = strcmp(m, "unknown error") != 0; /* loom_errmsg's text when nothing is set */
  snprintf(s->msg, sizeof s->msg, "%s", s->set ? m : "");
}

static void restore_err(const saved_err *s) {
  if (s->set) loom_err("%s", s->msg);
  else loom_err_clear();
}

static void warn(const char *what) {
  loom_log("warning: run registry: %s: %s (training continues)", what, loom_errmsg());
  loom_err_clear();
}

loom_registry_run *loom_registry_run_start(const loom_config *cfg, const char *run_dir,
                                           const char *command_line) {
  const char *env = getenv("LOOM_REGISTRY");
  if ((env && !strcmp(env, "off")) || launcher_rank() != 0 || !run_dir) return NULL;
  saved_err saved;
  save_err(&saved);
  char *path = loom_registry_path(cfg->run.output_dir);
  loom_registry *reg = NULL;
  int rc = loom_registry_open(&reg, path);
  free(path);
  if (rc) {
    warn("cannot open the database");
    restore_err(&saved);
    return NULL;
  }
  char *copy = loom_strdup(run_dir);
  size_t n = strlen(copy);
  while (n > 1 && copy[n - 1] == '/') copy[--n] = 0;
  loom_registry_start_info info = {.run_id = basename(copy), .run_dir = run_dir,
                                   .command = command_line};
  loom_registry_run *h = NULL;
  if (loom_registry_insert(reg, cfg, &info)) {
    warn("cannot register the run");
    loom_registry_close(reg);
  } else {
    h = loom_calloc(1, sizeof *h);
    h->reg = reg;
    h->run_id = loom_strdup(info.run_id);
    h->run_dir = loom_strdup(run_dir);
    h->last_beat = loom_now();
    h->interval = loom_registry_heartbeat_interval();
  }
  free(copy);
  restore_err(&saved);
  return h;
}

void loom_registry_run_heartbeat(loom_registry_run *h, long step, double loss) {
  if (!h) return;
  double now = loom_now();
  if (now - h->last_beat < h->interval) return;
  h->last_beat = now;
  saved_err saved;
  save_err(&saved);
  if (loom_registry_touch(h->reg, h->run_id, step, loss)) warn("heartbeat");
  restore_err(&saved);
}

int loom_registry_record_end(loom_registry *r, const char *run_id, const char *run_dir,
                             const char *status, const char *error) {
  char *err = error ? loom_strdup(error) : NULL; /* error may be loom_errmsg()'s buffer */
  loom_registry_metrics m; /* timing, validation, MFU: summary.json (NAN where it has none) */
  if (loom_registry_read_summary(run_dir, &m)) loom_err_clear();
  loom_registry_metrics progress = m;
  double last_write;
  if (loom_registry_read_progress(run_dir, &progress, &last_write) == 0) {
    m.steps = progress.steps; /* steps and losses: metrics.jsonl, whatever the end */
    m.final_loss = progress.final_loss;
    m.min_loss = progress.min_loss;
    if (isnan(m.duration_s)) m.duration_s = progress.duration_s;
  } else {
    loom_err_clear();
  }
  int rc = loom_registry_finish(r, run_id, status, &m, err);
  free(err);
  return rc;
}

void loom_registry_run_finish(loom_registry_run *h, const char *status, const char *error) {
  if (!h) return;
  saved_err saved;
  save_err(&saved);
  if (loom_registry_record_end(h->reg, h->run_id, h->run_dir, status, error))
    warn("recording the end of the run");
  loom_registry_close(h->reg);
  free(h->run_id);
  free(h->run_dir);
  free(h);
  restore_err(&saved);
}

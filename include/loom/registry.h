/* The run registry: one SQLite database (<run.output_dir>/registry.db by default) that every
 * training run — single or part of a sweep — registers itself in. WAL mode, a busy timeout
 * and IMMEDIATE transactions make it safe under many concurrent writers.
 *
 * Table `runs`: one row per run with fixed columns (run_id, name, sweep, status, times, host,
 * pid, command, git commit, run_dir, ranks, error, parent_id and parent_checkpoint of a
 * forked run), summary metrics (steps, final_loss, min_loss, avg_step_time, tokens_per_s,
 * peak_rss_mb, validation losses, duration_s, mfu) and one column per config key, named
 * by its dotted key ("training.lr"). Table `custom_metrics` holds (run_id, key, value) rows
 * added with loom_registry_set_metric. Status is running, finished, failed, stopped (ended
 * early on request: a signal or --stop-after; resumable) or crashed; a
 * running row whose heartbeat is older than the timeout, or whose process is gone (same
 * host), is marked crashed when the registry is read.
 *
 * The trainer's hooks (loom_registry_run_*) never fail the run: when the database cannot be
 * used they log a warning and do nothing. */
#ifndef LOOM_REGISTRY_H
#define LOOM_REGISTRY_H
#include <stdbool.h>
#include <stddef.h>

#include "loom/config.h"

typedef struct loom_registry loom_registry;

/* Seconds between trainer heartbeats (LOOM_HEARTBEAT_INTERVAL overrides; default 15) and
 * after which a silent running run counts as crashed (LOOM_HEARTBEAT_TIMEOUT; default 600). */
double loom_registry_heartbeat_interval(void);
double loom_registry_heartbeat_timeout(void);

/* Database path for runs under output_dir: $LOOM_REGISTRY when set, else
 * <output_dir>/registry.db (malloc'd). */
char *loom_registry_path(const char *output_dir);

/* Open (creating the file, tables and any missing config-key columns). */
int loom_registry_open(loom_registry **r, const char *db_path);
void loom_registry_close(loom_registry *r);
const char *loom_registry_db_path(const loom_registry *r);

/* ---- writing ------------------------------------------------------------------------------ */
typedef struct {
  const char *run_id;        /* unique id (the run directory's basename) */
  const char *run_dir;
  const char *command;       /* command line, or NULL */
  const char *sweep;         /* sweep name or NULL ($LOOM_SWEEP when NULL) */
  const char *sweep_id;      /* sweep instance (logs/sweep_<ts>) or NULL ($LOOM_SWEEP_ID) */
  const char *host;          /* NULL = this host */
  long pid;                  /* 0 = this process */
  int ranks;                 /* MPI ranks (0 = dp*tp*pp*sp of the config) */
} loom_registry_start_info;

/* Insert (or, for a resumed run, reset to running) the row of a run with every config key. */
int loom_registry_insert(loom_registry *r, const loom_config *cfg,
                         const loom_registry_start_info *info);
/* Heartbeat: now, latest step and loss; a row wrongly marked crashed returns to running. */
int loom_registry_touch(loom_registry *r, const char *run_id, long step, double loss);

typedef struct {
  long steps;
  double final_loss, min_loss, avg_step_time, tokens_per_s, peak_rss_mb; /* NAN = unknown */
  double final_valid_loss, final_valid_perplexity, min_valid_loss;       /* NAN: no eval */
  double duration_s;  /* training time (summary.json; metrics.jsonl's last "time"); NAN/0: unknown */
  double mfu;         /* fraction, summary.json's; NAN/0: absent */
} loom_registry_metrics;

/* Read summary.json of a run directory (missing keys stay NAN / -1). 0, or -1 if unreadable. */
int loom_registry_read_summary(const char *run_dir, loom_registry_metrics *m);
/* Progress from run_dir/metrics.jsonl (steps, final_loss, min_loss, duration_s: the last
 * line's "time"; a cut last line is
 * skipped) and the file's modification time (*last_write, seconds since the epoch). Other
 * fields of m are untouched. 0, or -1 when the file is missing or holds no step. */
int loom_registry_read_progress(const char *run_dir, loom_registry_metrics *m,
                                double *last_write);
/* Final status (finished, stopped, failed), end time, summary metrics and error text. */
int loom_registry_finish(loom_registry *r, const char *run_id, const char *status,
                         const loom_registry_metrics *m, const char *error);
/* Add or replace a custom metric; value text that parses as a number is stored as one. Key:
 * letters, digits, '_' and '.', not the name of a built-in or config column. */
int loom_registry_set_metric(loom_registry *r, const char *run_id, const char *key,
                             const char *value);
/* Mark running rows crashed when their heartbeat is older than timeout_s or (same host) their
 * process is gone. Returns how many were marked, or -1. */
int loom_registry_detect_crashed(loom_registry *r, double timeout_s);
/* Resolve an id given by a user: exact run_id, else a unique run name, else a unique prefix of
 * a run_id (an exact id or name wins over a prefix of a longer one).
 * Writes the full id (malloc'd) to *out. */
int loom_registry_resolve(loom_registry *r, const char *given, char **out);
/* Remove a run's row and custom metrics; with files, also its run directory (its path in
 * *removed_dir, malloc'd, NULL when there was none). A running run is refused. */
int loom_registry_delete(loom_registry *r, const char *run_id, bool files, char **removed_dir);
/* Drop the rows of finished/failed/crashed runs whose run directory is gone, calling each()
 * for every one (dry_run: only call each, change nothing). Returns how many, or -1. */
int loom_registry_gc(loom_registry *r, bool dry_run,
                     void (*each)(const char *id, const char *dir, void *ctx), void *ctx);
/* run_dir and status of the newest run named `name` registered by sweep execution sweep_id
 * (malloc'd; NULL when there is none). */
int loom_registry_find_sweep_run(loom_registry *r, const char *sweep_id, const char *name,
                                 char **run_dir, char **status);
/* True for the names of the fixed, metric and config columns (not usable as custom metrics). */
bool loom_registry_is_builtin_column(const char *name);

/* ---- the trainer's hooks (best effort: warnings, never errors) ------------------------------ */
typedef struct loom_registry_run loom_registry_run;
/* Register a run that has just created run_dir. NULL when the registry is unavailable or
 * disabled (LOOM_REGISTRY=off). */
loom_registry_run *loom_registry_run_start(const loom_config *cfg, const char *run_dir,
                                           const char *command_line);
/* Cheap to call every step: writes only when the heartbeat interval has passed. */
void loom_registry_run_heartbeat(loom_registry_run *h, long step, double loss);
/* The end of a run, as its summary.json records it: status "finished", "stopped" or "failed"
 * (error: why, or NULL). Frees h. */
void loom_registry_run_finish(loom_registry_run *h, const char *status, const char *error);
/* The end of the run in run_dir in its row: status and error, steps and final/min loss from
 * its metrics.jsonl (the record of every step, whatever the end), the other metrics from its
 * summary.json when there is one. Used by the trainer and by the `loom train --nproc`
 * supervisor when a job ends without loom's report. */
int loom_registry_record_end(loom_registry *r, const char *run_id, const char *run_dir,
                             const char *status, const char *error);

/* Commit of the git checkout holding dir (or an ancestor), read from .git without running git:
 * 40 hex chars in out (size >= 41), or "" when there is none. */
void loom_git_head(const char *dir, char *out, size_t n);

#endif

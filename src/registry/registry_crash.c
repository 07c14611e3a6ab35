/* Reading-side upkeep of the run registry: marking runs crashed (no heartbeat within the
 * timeout, or their process gone on this host) and resolving the run ids users type. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry_internal.h"
#include "loom/core.h"

static bool process_gone(long pid) {
  if (pid <= 0) return false;
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static void bind_real_or_null(sqlite3_stmt *st, int i, double v) {
  if (isfinite(v)) sqlite3_bind_double(st, i, v);
  else sqlite3_bind_null(st, i);
}

/* The run keeps the progress its metrics.jsonl records (the heartbeat may be older than its
 * last steps, or absent for a short run): steps, final and lowest loss, and the end time is
 * the later of the heartbeat and the file's last write. */
static int mark_crashed(loom_registry *r, const char *run_id, const char *run_dir,
                        double heartbeat, const char *why) {
  loom_registry_metrics m = {.steps = -1, .final_loss = NAN, .min_loss = NAN,
                             .duration_s = NAN};
  double last_write = NAN;
  if (run_dir && loom_registry_read_progress(run_dir, &m, &last_write)) loom_err_clear();
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db,
                         "UPDATE runs SET status='crashed', end_time=MAX(heartbeat, "
                         "COALESCE(?4, heartbeat)), steps=COALESCE(?5, steps), "
                         "final_loss=COALESCE(?6, final_loss), min_loss=COALESCE(?7, min_loss), "
                         "duration_s=COALESCE(?8, duration_s), error=?1 WHERE run_id=?2 AND status='running' AND heartbeat=?3",
                         -1, &st, NULL))
    return loom_registry_sql_err(r, "preparing the crash update");
  sqlite3_bind_text(st, 1, why, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, run_id, -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(st, 3, heartbeat);
  bind_real_or_null(st, 4, last_write);
  if (m.steps >= 0) sqlite3_bind_int64(st, 5, m.steps);
  else sqlite3_bind_null(st, 5);
  bind_real_or_null(st, 6, m.final_loss);
  bind_real_or_null(st, 7, m.min_loss);
  bind_real_or_null(st, 8, m.duration_s);
  int rc = loom_registry_step(r, st) == SQLITE_DONE ? 0 : loom_registry_sql_err(r, "marking a crash");
  sqlite3_finalize(st);
  return rc ? -1 : sqlite3_changes(r->db);
}

int loom_registry_detect_crashed(loom_registry *r, double timeout_s) {
  char host[256];
  loom_registry_hostname(host, sizeof host);
  double now = loom_registry_now();
  if (loom_registry_exec(r, "BEGIN IMMEDIATE")) return -1;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db,
                         "SELECT run_id, host, pid, heartbeat, run_dir FROM runs WHERE status='running'",
                         -1, &st, NULL)) {
    loom_registry_sql_err(r, "looking for crashed runs");
    sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
  }
  /* collect first, then update: no writes while the SELECT is being stepped */
  typedef struct {
    char *id, *dir;
    double beat;
    char why[400];
  } stale;
  stale *list = NULL;
  int n = 0, marked = 0, rc = 0;
  for (int s_ = loom_registry_step(r, st); s_ == SQLITE_ROW; s_ = sqlite3_step(st)) {
    const char *id = (const char *)sqlite3_column_text(st, 0);
    const char *h = (const char *)sqlite3_column_text(st, 1);
    long pid = (long)sqlite3_column_int64(st, 2);
    double beat = sqlite3_column_double(st, 3);
    char why[400] = "";
    if (now - beat > timeout_s)
      snprintf(why, sizeof why, "no heartbeat for %.0f s (timeout %g s)", now - beat,
               timeout_s);
    else if (h && !strcmp(h, host) && process_gone(pid))
      snprintf(why, sizeof why, "process %ld on %s is gone", pid, host);
    if (!why[0] || !id) continue;
    list = loom_realloc(list, (size_t)(n + 1), sizeof *list);
    list[n].id = loom_strdup(id);
    const char *dir = (const char *)sqlite3_column_text(st, 4);
    list[n].dir = dir ? loom_strdup(dir) : NULL;
    list[n].beat = beat;
    memcpy(list[n].why, why, sizeof why);
    n++;
  }
  sqlite3_finalize(st);
  for (int i = 0; i < n; i++) {
    if (rc >= 0) rc = mark_crashed(r, list[i].id, list[i].dir, list[i].beat, list[i].why);
    if (rc > 0) marked += rc;
    free(list[i].id);
    free(list[i].dir);
  }
  free(list);
  if (rc < 0) {
    sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
  }
  if (loom_registry_exec(r, "COMMIT")) return -1;
  return marked;
}

/* All run_ids matching `sql` with one text parameter. */
static int matches(loom_registry *r, const char *sql, const char *arg, char ***ids, int *n) {
  sqlite3_stmt *st;
  *ids = NULL;
  *n = 0;
  if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL)) return loom_registry_sql_err(r, "lookup");
  sqlite3_bind_text(st, 1, arg, -1, SQLITE_TRANSIENT);
  for (int s_ = loom_registry_step(r, st); s_ == SQLITE_ROW; s_ = sqlite3_step(st)) {
    *ids = loom_realloc(*ids, (size_t)(*n + 1), sizeof **ids);
    (*ids)[(*n)++] = loom_strdup((const char *)sqlite3_column_text(st, 0));
  }
  sqlite3_finalize(st);
  return 0;
}

static void free_ids(char **ids, int n) {
  for (int i = 0; i < n; i++) free(ids[i]);
  free(ids);
}

int loom_registry_resolve(loom_registry *r, const char *given, char **out) {
  if (!given || !*given) return loom_err("empty run id; 'loom runs' lists run ids");
  static const char *const queries[] = {
      "SELECT run_id FROM runs WHERE run_id=?", /* exact matches win over prefixes */
      "SELECT run_id FROM runs WHERE name=? ORDER BY start_time",
      "SELECT run_id FROM runs WHERE substr(run_id, 1, length(?1))=?1 ORDER BY start_time",
  };
  for (int q = 0; q < 3; q++) {
    char **ids;
    int n;
    if (matches(r, queries[q], given, &ids, &n)) return -1;
    if (n == 1) {
      *out = loom_strdup(ids[0]);
      free_ids(ids, n);
      return 0;
    }
    if (n > 1) {
      char list[1024] = "";
      for (int i = 0; i < n && strlen(list) < 900; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 ids[i]);
      free_ids(ids, n);
      return loom_err("'%s' matches %d runs (%s); give more of the run id", given, n, list);
    }
    free_ids(ids, n);
  }
  return loom_err("no run '%s' in the registry '%s'; 'loom runs' lists run ids", given, r->path);
}

int loom_registry_find_sweep_run(loom_registry *r, const char *sweep_id, const char *name,
                                 char **run_dir, char **status) {
  *run_dir = *status = NULL;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db,
                         "SELECT run_dir, status FROM runs WHERE sweep_id=? AND name=? "
                         "ORDER BY start_time DESC LIMIT 1", -1, &st, NULL))
    return loom_registry_sql_err(r, "looking up a sweep run");
  sqlite3_bind_text(st, 1, sweep_id, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
  if (loom_registry_step(r, st) == SQLITE_ROW) {
    const char *d = (const char *)sqlite3_column_text(st, 0);
    const char *s = (const char *)sqlite3_column_text(st, 1);
    *run_dir = d ? loom_strdup(d) : NULL;
    *status = s ? loom_strdup(s) : NULL;
  }
  sqlite3_finalize(st);
  return 0;
}

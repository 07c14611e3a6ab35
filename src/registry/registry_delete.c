/* Removing runs from the registry: `loom runs delete` (one row and its custom metrics, the
 * run directory on request; never a running run) and `loom runs gc` (rows whose run
 * directory is gone). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry_internal.h"
#include "loom/core.h"

static int delete_rows(loom_registry *r, const char *run_id) {
  static const char *const sql[] = {"DELETE FROM custom_metrics WHERE run_id=?",
                                    "DELETE FROM runs WHERE run_id=?"};
  for (int k = 0; k < 2; k++) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(r->db, sql[k], -1, &st, NULL))
      return loom_registry_sql_err(r, "preparing the delete");
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
    int rc = loom_registry_step(r, st) == SQLITE_DONE ? 0 : loom_registry_sql_err(r, "deleting a run");
    sqlite3_finalize(st);
    if (rc) return -1;
  }
  return 0;
}

int loom_registry_delete(loom_registry *r, const char *run_id, bool files, char **removed_dir) {
  *removed_dir = NULL;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db, "SELECT status, run_dir FROM runs WHERE run_id=?", -1, &st, NULL))
    return loom_registry_sql_err(r, "looking up the run to delete");
  sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
  char *status = NULL, *dir = NULL;
  if (loom_registry_step(r, st) == SQLITE_ROW) {
    const char *s = (const char *)sqlite3_column_text(st, 0);
    const char *d = (const char *)sqlite3_column_text(st, 1);
    status = loom_strdup(s ? s : "");
    dir = d ? loom_strdup(d) : NULL;
  }
  sqlite3_finalize(st);
  int rc = 0;
  if (!status)
    rc = loom_err("no run '%s' in the registry '%s'", run_id, r->path);
  else if (!strcmp(status, "running"))
    rc = loom_err("run '%s' is running; stop it first (or wait: a run without heartbeat is "
                  "marked crashed after the heartbeat timeout)", run_id);
  if (!rc && files && dir && loom_path_exists(dir)) {
    if (loom_rm_rf(dir)) rc = loom_err_prefix("removing the run directory: ");
    else *removed_dir = loom_strdup(dir);
  }
  if (!rc) rc = delete_rows(r, run_id);
  free(status);
  free(dir);
  return rc;
}

int loom_registry_gc(loom_registry *r, bool dry_run, void (*each)(const char *id,
                     const char *dir, void *ctx), void *ctx) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db, "SELECT run_id, run_dir FROM runs WHERE status != 'running' "
                         "ORDER BY start_time, run_id", -1, &st, NULL))
    return loom_registry_sql_err(r, "listing runs");
  char **ids = NULL, **dirs = NULL;
  int n = 0;
  for (int s_ = loom_registry_step(r, st); s_ == SQLITE_ROW; s_ = sqlite3_step(st)) {
    const char *id = (const char *)sqlite3_column_text(st, 0);
    const char *d = (const char *)sqlite3_column_text(st, 1);
    if (!id || !d || loom_is_dir(d)) continue; /* no run_dir recorded: nothing to check */
    ids = loom_realloc(ids, (size_t)(n + 1), sizeof *ids);
    dirs = loom_realloc(dirs, (size_t)(n + 1), sizeof *dirs);
    ids[n] = loom_strdup(id);
    dirs[n++] = loom_strdup(d);
  }
  sqlite3_finalize(st);
  int rc = dry_run ? 0 : loom_registry_exec(r, "BEGIN IMMEDIATE");
  for (int i = 0; i < n && !rc; i++) {
    if (!dry_run) rc = delete_rows(r, ids[i]);
    if (!rc && each) each(ids[i], dirs[i], ctx);
  }
  if (!dry_run && !rc) rc = loom_registry_exec(r, "COMMIT");
  else if (!dry_run) sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
  for (int i = 0; i < n; i++) free(ids[i]), free(dirs[i]);
  free(ids), free(dirs);
  return rc ? -1 : n;
}

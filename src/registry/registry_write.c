/* Writing the run registry: a run's row with every config key (insert, or reset to running
 * for a resumed run), heartbeats, the final status with summary metrics, and custom metrics.
 * Each write is one statement (autocommit), so SQLite's busy timeout serialises writers. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loom/config_schema.h"
#include "registry/registry_internal.h"
#include "loom/core.h"

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *s) {
  if (s && *s) sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_null(st, i);
}

static void bind_real_or_null(sqlite3_stmt *st, int i, double v) {
  if (isfinite(v)) sqlite3_bind_double(st, i, v);
  else sqlite3_bind_null(st, i);
}

/* Bind config key k's value: integers and reals as numbers, the rest as text. */
static void bind_key(sqlite3_stmt *st, int i, const loom_config *c, const loom_config_key *k) {
  const char *f = (const char *)c + k->offset;
  switch (k->type) {
    case LOOM_KEY_INT: sqlite3_bind_int64(st, i, *(const long *)f); break;
    case LOOM_KEY_FLOAT: sqlite3_bind_double(st, i, *(const double *)f); break;
    case LOOM_KEY_BOOL: sqlite3_bind_text(st, i, *(const bool *)f ? "true" : "false", -1,
                                          SQLITE_STATIC); break;
    default: sqlite3_bind_text(st, i, f, (int)strnlen(f, k->size), SQLITE_TRANSIENT);
  }
}

static int step_done(loom_registry *r, sqlite3_stmt *st, const char *what) {
  int rc = loom_registry_step(r, st) == SQLITE_DONE ? 0 : loom_registry_sql_err(r, what);
  sqlite3_finalize(st);
  return rc;
}

/* INSERT ... ON CONFLICT(run_id) DO UPDATE: every column but run_id and start_time. */
static char *insert_sql(void) {
  static const char *const fixed[] = {"run_id", "name", "sweep", "sweep_id", "status",
                                      "start_time", "heartbeat", "host", "pid", "ranks",
                                      "command", "git_commit", "run_dir", "parent_id",
                                      "parent_checkpoint"};
  size_t nf = sizeof fixed / sizeof fixed[0], n = nf + loom_config_nkeys;
  size_t cap = 256 + n * 96;
  char *cols = loom_calloc(1, cap), *vals = loom_calloc(1, cap), *upd = loom_calloc(1, cap);
  for (size_t i = 0; i < n; i++) {
    char *q = loom_registry_quote_ident(i < nf ? fixed[i] : loom_config_keys[i - nf].name);
    snprintf(cols + strlen(cols), cap - strlen(cols), "%s%s", i ? "," : "", q);
    snprintf(vals + strlen(vals), cap - strlen(vals), "%s?", i ? "," : "");
    if (i && strcmp(q, "\"start_time\""))
      snprintf(upd + strlen(upd), cap - strlen(upd), "%s%s=excluded.%s", *upd ? "," : "", q, q);
    free(q);
  }
  char *sql = loom_sprintf("INSERT INTO runs (%s) VALUES (%s) ON CONFLICT(run_id) DO UPDATE "
                           "SET %s, end_time=NULL, error=NULL", cols, vals, upd);
  free(cols), free(vals), free(upd);
  return sql;
}

int loom_registry_insert(loom_registry *r, const loom_config *cfg,
                         const loom_registry_start_info *in) {
  char host[256], commit[64];
  if (in->host) snprintf(host, sizeof host, "%s", in->host);
  else loom_registry_hostname(host, sizeof host);
  loom_git_head(".", commit, sizeof commit);
  if (!commit[0]) loom_git_head(LOOM_SOURCE_DIR, commit, sizeof commit);
  const char *sweep = in->sweep ? in->sweep : getenv("LOOM_SWEEP");
  const char *sweep_id = in->sweep_id ? in->sweep_id : getenv("LOOM_SWEEP_ID");
  long ranks = in->ranks > 0 ? in->ranks
                             : cfg->parallel.dp * cfg->parallel.tp * cfg->parallel.pp *
                                   cfg->parallel.sp * cfg->parallel.cp;
  char *sql = insert_sql();
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(r->db, sql, -1, &st, NULL);
  free(sql);
  if (rc) return loom_registry_sql_err(r, "preparing the run insert");
  double now = loom_registry_now();
  int i = 1;
  sqlite3_bind_text(st, i++, in->run_id, -1, SQLITE_TRANSIENT);
  bind_text_or_null(st, i++, cfg->run.name[0] ? cfg->run.name /* as the run directory names it */
                              : cfg->model.preset[0] ? cfg->model.preset : cfg->model.arch);
  bind_text_or_null(st, i++, sweep);
  bind_text_or_null(st, i++, sweep_id);
  sqlite3_bind_text(st, i++, "running", -1, SQLITE_STATIC);
  sqlite3_bind_double(st, i++, now);
  sqlite3_bind_double(st, i++, now);
  sqlite3_bind_text(st, i++, host, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, i++, in->pid ? in->pid : (long)getpid());
  sqlite3_bind_int64(st, i++, ranks);
  bind_text_or_null(st, i++, in->command);
  bind_text_or_null(st, i++, commit);
  bind_text_or_null(st, i++, in->run_dir);
  bind_text_or_null(st, i++, cfg->run.parent); /* lineage: a fork's parent, else NULL */
  bind_text_or_null(st, i++, cfg->run.parent_checkpoint);
  for (size_t k = 0; k < loom_config_nkeys; k++) bind_key(st, i++, cfg, &loom_config_keys[k]);
  if (step_done(r, st, "registering the run")) return -1;
  for (int u = 0; u < cfg->nuser; u++) /* user keys (+key=value): custom columns */
    if (loom_registry_set_metric(r, in->run_id, cfg->user[u].name, cfg->user[u].value))
      return loom_err_prefix("recording user key %s: ", cfg->user[u].name);
  return 0;
}

int loom_registry_touch(loom_registry *r, const char *run_id, long step, double loss) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db,
                         "UPDATE runs SET heartbeat=?, steps=?, final_loss=?, status='running', "
                         "end_time=NULL, error=NULL WHERE run_id=? AND status IN "
                         "('running','crashed')", -1, &st, NULL))
    return loom_registry_sql_err(r, "preparing the heartbeat");
  sqlite3_bind_double(st, 1, loom_registry_now());
  sqlite3_bind_int64(st, 2, step);
  bind_real_or_null(st, 3, loss);
  sqlite3_bind_text(st, 4, run_id, -1, SQLITE_TRANSIENT);
  return step_done(r, st, "writing a heartbeat");
}

int loom_registry_finish(loom_registry *r, const char *run_id, const char *status,
                         const loom_registry_metrics *m, const char *error) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db,
                         "UPDATE runs SET status=?, end_time=?, heartbeat=?, "
                         "steps=COALESCE(?, steps), final_loss=COALESCE(?, final_loss), "
                         "min_loss=?, avg_step_time=?, tokens_per_s=?, peak_rss_mb=?, error=?, "
                         "final_valid_loss=?, final_valid_perplexity=?, min_valid_loss=?, "
                         "duration_s=COALESCE(?, duration_s), mfu=? WHERE run_id=?", -1, &st,
                         NULL))
    return loom_registry_sql_err(r, "preparing the final update");
  double now = loom_registry_now();
  sqlite3_bind_text(st, 1, status, -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(st, 2, now);
  sqlite3_bind_double(st, 3, now);
  if (m && m->steps >= 0) sqlite3_bind_int64(st, 4, m->steps);
  else sqlite3_bind_null(st, 4);
  bind_real_or_null(st, 5, m ? m->final_loss : NAN);
  bind_real_or_null(st, 6, m ? m->min_loss : NAN);
  bind_real_or_null(st, 7, m ? m->avg_step_time : NAN);
  bind_real_or_null(st, 8, m ? m->tokens_per_s : NAN);
  bind_real_or_null(st, 9, m ? m->peak_rss_mb : NAN);
  bind_text_or_null(st, 10, error);
  bind_real_or_null(st, 11, m ? m->final_valid_loss : NAN);
  bind_real_or_null(st, 12, m ? m->final_valid_perplexity : NAN);
  bind_real_or_null(st, 13, m ? m->min_valid_loss : NAN);
  /* 0 is no training time or MFU: callers that fill only some fields leave them 0 */
  bind_real_or_null(st, 14, m && m->duration_s > 0 ? m->duration_s : NAN);
  bind_real_or_null(st, 15, m && m->mfu > 0 ? m->mfu : NAN);
  sqlite3_bind_text(st, 16, run_id, -1, SQLITE_TRANSIENT);
  return step_done(r, st, "recording the end of the run");
}

static double json_num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

int loom_registry_read_summary(const char *run_dir, loom_registry_metrics *m) {
  m->steps = -1;
  m->final_loss = m->min_loss = m->avg_step_time = m->tokens_per_s = m->peak_rss_mb = NAN;
  m->final_valid_loss = m->final_valid_perplexity = m->min_valid_loss = NAN;
  m->duration_s = m->mfu = NAN;
  char *path = loom_sprintf("%s/summary.json", run_dir);
  json_error_t e;
  json_t *o = json_load_file(path, 0, &e);
  int rc = 0;
  if (!o) rc = loom_err("%s: %s (line %d)", path, e.text, e.line);
  free(path);
  if (rc) return rc;
  double steps = json_num(o, "steps");
  m->steps = isfinite(steps) ? (long)steps : -1;
  m->final_loss = json_num(o, "final_loss");
  m->min_loss = json_num(o, "min_loss");
  m->avg_step_time = json_num(o, "avg_step_time");
  m->tokens_per_s = json_num(o, "tokens_per_s");
  m->peak_rss_mb = json_num(o, "peak_rss_mb");
  m->final_valid_loss = json_num(o, "final_valid_loss");
  m->final_valid_perplexity = json_num(o, "final_valid_perplexity");
  m->min_valid_loss = json_num(o, "min_valid_loss");
  m->duration_s = json_num(o, "duration_s");
  m->mfu = json_num(o, "mfu"); /* absent (mfu_note) when there is no trustworthy peak */
  json_decref(o);
  return 0;
}

static bool valid_metric_key(const char *k) {
  if (!(isalpha((unsigned char)k[0]) || k[0] == '_')) return false;
  for (const char *p = k; *p; p++)
    if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '.')) return false;
  return true;
}

int loom_registry_set_metric(loom_registry *r, const char *run_id, const char *key,
                             const char *value) {
  if (!valid_metric_key(key))
    return loom_err("metric name '%s' is not valid: use letters, digits, '_' and '.', starting "
                    "with a letter (e.g. eval.accuracy)", key);
  if (loom_registry_is_builtin_column(key))
    return loom_err("'%s' is a built-in column of the registry; pick another metric name "
                    "(e.g. custom.%s)", key, key);
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db,
                         "INSERT INTO custom_metrics (run_id, key, value) SELECT ?, ?, ? "
                         "WHERE EXISTS (SELECT 1 FROM runs WHERE run_id=?) ON CONFLICT(run_id, "
                         "key) DO UPDATE SET value=excluded.value", -1, &st, NULL))
    return loom_registry_sql_err(r, "preparing the metric update");
  sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
  char *end;
  double d = strtod(value, &end);
  long long iv = strtoll(value, &end, 10);
  if (*value && !*end) sqlite3_bind_int64(st, 3, iv);
  else if (*value && (strtod(value, &end), !*end) && isfinite(d)) sqlite3_bind_double(st, 3, d);
  else sqlite3_bind_text(st, 3, value, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 4, run_id, -1, SQLITE_TRANSIENT);
  if (step_done(r, st, "setting a custom metric")) return -1;
  if (sqlite3_changes(r->db) == 0)
    return loom_err("no run '%s' in the registry '%s' (see loom runs)", run_id, r->path);
  return 0;
}

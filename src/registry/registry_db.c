/* The run registry database: path and heartbeat settings, opening with WAL mode and a busy
 * timeout, creating the tables, and adding a column for every config key the table lacks
 * (so a registry made by an older loom keeps working when keys are added). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "loom/config_schema.h"
#include "registry/registry_internal.h"
#include "loom/core.h"

#define BUSY_TIMEOUT_MS 60000

const loom_registry_column loom_registry_columns[] = {
    {"run_id", "TEXT PRIMARY KEY", LOOM_RCOL_RUN, "unique id: the run directory's name"},
    {"name", "TEXT", LOOM_RCOL_RUN, "run.name (a sweep point's generated name)"},
    {"sweep", "TEXT", LOOM_RCOL_RUN, "sweep name, empty for a single run"},
    {"sweep_id", "TEXT", LOOM_RCOL_RUN, "one execution of a sweep: sweep_<timestamp>"},
    {"status", "TEXT", LOOM_RCOL_RUN, "running, finished, stopped, failed, crashed; missing: run_dir is gone"},
    {"start_time", "REAL", LOOM_RCOL_RUN, "start (local time)"},
    {"end_time", "REAL", LOOM_RCOL_RUN, "end, or last heartbeat of a crashed run"},
    {"heartbeat", "REAL", LOOM_RCOL_RUN, "last sign of life of a running run"},
    {"host", "TEXT", LOOM_RCOL_RUN, "machine of rank 0"},
    {"pid", "INTEGER", LOOM_RCOL_RUN, "process id of rank 0"},
    {"ranks", "INTEGER", LOOM_RCOL_RUN, "MPI ranks (parallel.dp*tp*pp*sp)"},
    {"command", "TEXT", LOOM_RCOL_RUN, "command line"},
    {"git_commit", "TEXT", LOOM_RCOL_RUN, "commit of the git checkout it ran from"},
    {"run_dir", "TEXT", LOOM_RCOL_RUN, "run directory"},
    {"error", "TEXT", LOOM_RCOL_RUN, "why a run failed or crashed"},
    {"parent_id", "TEXT", LOOM_RCOL_RUN, "run it was forked from (a resume with another config)"},
    {"parent_checkpoint", "TEXT", LOOM_RCOL_RUN, "checkpoint of parent_id it started from"},
    {"steps", "INTEGER", LOOM_RCOL_METRIC, "optimizer steps done"},
    {"final_loss", "REAL", LOOM_RCOL_METRIC, "loss of the last step (latest while running)"},
    {"min_loss", "REAL", LOOM_RCOL_METRIC, "lowest step loss"},
    {"avg_step_time", "REAL", LOOM_RCOL_METRIC, "mean seconds per step, first step excluded"},
    {"tokens_per_s", "REAL", LOOM_RCOL_METRIC, "training throughput"},
    {"peak_rss_mb", "REAL", LOOM_RCOL_METRIC, "peak resident memory of rank 0 (MB)"},
    {"final_valid_loss", "REAL", LOOM_RCOL_METRIC,
     "validation loss (token mean) after the last step; NULL without validation data"},
    {"final_valid_perplexity", "REAL", LOOM_RCOL_METRIC, "exp(final_valid_loss)"},
    {"min_valid_loss", "REAL", LOOM_RCOL_METRIC, "lowest validation loss of the run's evaluations"},
    {"duration_s", "REAL", LOOM_RCOL_METRIC,
     "training time: the step loops of the run's sessions, not start-up or gaps before resumes"},
    {"mfu", "REAL", LOOM_RCOL_METRIC,
     "model FLOPs utilization (fraction) over duration_s against the profile's peak; NULL: "
     "no profile, or the peak is not this run's (summary.json's mfu_note says which)"},
};
const int loom_registry_ncolumns = sizeof loom_registry_columns / sizeof loom_registry_columns[0];

static double env_seconds(const char *name, double def) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end;
  double d = strtod(v, &end);
  return (*end || d <= 0) ? def : d;
}

double loom_registry_heartbeat_interval(void) {
  return env_seconds("LOOM_HEARTBEAT_INTERVAL", 15.0);
}
double loom_registry_heartbeat_timeout(void) { return env_seconds("LOOM_HEARTBEAT_TIMEOUT", 600.0); }

char *loom_registry_path(const char *output_dir) {
  const char *env = getenv("LOOM_REGISTRY");
  if (env && *env && strcmp(env, "off")) return loom_strdup(env);
  return loom_sprintf("%s/registry.db", output_dir && *output_dir ? output_dir : ".");
}

double loom_registry_now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

void loom_registry_hostname(char *out, size_t n) {
  if (gethostname(out, n) != 0) snprintf(out, n, "unknown");
  out[n - 1] = 0;
}

bool loom_registry_is_builtin_column(const char *name) {
  for (int i = 0; i < loom_registry_ncolumns; i++)
    if (!strcmp(loom_registry_columns[i].name, name)) return true;
  return loom_config_key_find(name) != NULL;
}

int loom_registry_sql_err(const loom_registry *r, const char *what) {
  return loom_err("run registry '%s': %s: %s", r->path, what, sqlite3_errmsg(r->db));
}

static bool busy(int rc) {
  return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
}

/* Sleep a little (growing, jittered by pid) before trying again; false past the deadline. */
static bool wait_again(double deadline, int attempt) {
  if (loom_now() > deadline) return false;
  int ms = 1 + (attempt < 20 ? attempt : 20) + (int)(getpid() % 5);
  usleep((useconds_t)ms * 1000);
  return true;
}

int loom_registry_exec(loom_registry *r, const char *sql) {
  double deadline = loom_now() + BUSY_TIMEOUT_MS / 1000.0;
  for (int attempt = 0;; attempt++) {
    char *msg = NULL;
    int rc = sqlite3_exec(r->db, sql, NULL, NULL, &msg);
    if (rc == SQLITE_OK) return 0;
    if (busy(rc) && wait_again(deadline, attempt)) {
      sqlite3_free(msg);
      continue;
    }
    int e = loom_err("run registry '%s': %s (in: %.80s)", r->path, msg ? msg : "error", sql);
    sqlite3_free(msg);
    return e;
  }
}

int loom_registry_step(loom_registry *r, sqlite3_stmt *st) {
  (void)r;
  double deadline = loom_now() + BUSY_TIMEOUT_MS / 1000.0;
  for (int attempt = 0;; attempt++) {
    int rc = sqlite3_step(st);
    if (!busy(rc) || !wait_again(deadline, attempt)) return rc;
    sqlite3_reset(st);
  }
}

char *loom_registry_quote_ident(const char *name) {
  size_t n = strlen(name);
  char *o = loom_malloc(2 * n + 3), *p = o;
  *p++ = '"';
  for (const char *s = name; *s; s++) {
    if (*s == '"') *p++ = '"';
    *p++ = *s;
  }
  *p++ = '"';
  *p = 0;
  return o;
}

static const char *config_sql_type(const loom_config_key *k) {
  return k->type == LOOM_KEY_INT ? "INTEGER" : k->type == LOOM_KEY_FLOAT ? "REAL" : "TEXT";
}

/* How many fixed and config columns `runs` lacks (all of them when it does not exist). */
static int missing_columns(loom_registry *r, char ***names, const char ***types) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db, "SELECT name FROM pragma_table_info('runs')", -1, &st, NULL))
    return loom_registry_sql_err(r, "reading the table layout");
  int total = loom_registry_ncolumns + (int)loom_config_nkeys;
  bool *have = loom_calloc((size_t)total, 1);
  for (int s_ = loom_registry_step(r, st); s_ == SQLITE_ROW; s_ = sqlite3_step(st)) {
    const char *n = (const char *)sqlite3_column_text(st, 0);
    for (int i = 0; i < total && n; i++) {
      const char *want = i < loom_registry_ncolumns
                             ? loom_registry_columns[i].name
                             : loom_config_keys[i - loom_registry_ncolumns].name;
      if (!strcmp(want, n)) have[i] = true;
    }
  }
  sqlite3_finalize(st);
  int count = 0;
  *names = loom_calloc((size_t)total, sizeof **names);
  *types = loom_calloc((size_t)total, sizeof **types);
  for (int i = 0; i < total; i++) {
    if (have[i]) continue;
    if (i < loom_registry_ncolumns) {
      (*names)[count] = loom_strdup(loom_registry_columns[i].name);
      (*types)[count++] = loom_registry_columns[i].sql_type;
    } else {
      const loom_config_key *k = &loom_config_keys[i - loom_registry_ncolumns];
      (*names)[count] = loom_strdup(k->name);
      (*types)[count++] = config_sql_type(k);
    }
  }
  free(have);
  return count;
}

static void free_names(char **names, const char **types, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  free(types);
}

/* Create the tables, or add the columns they lack; in one IMMEDIATE transaction so that many
 * processes opening a new registry at once do not race. */
static int create_schema(loom_registry *r) {
  char **names;
  const char **types;
  int n = missing_columns(r, &names, &types);
  if (n < 0) return -1;
  free_names(names, types, n);
  if (n == 0) return 0;
  if (loom_registry_exec(r, "BEGIN IMMEDIATE")) return -1;
  int rc = loom_registry_exec(r,
                              "CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY);"
                              "CREATE TABLE IF NOT EXISTS custom_metrics (run_id TEXT NOT NULL, "
                              "key TEXT NOT NULL, value, PRIMARY KEY (run_id, key));");
  n = rc ? -1 : missing_columns(r, &names, &types); /* again, now that we hold the lock */
  for (int i = 0; i < n && !rc; i++) {
    char *q = loom_registry_quote_ident(names[i]);
    char *sql = loom_sprintf("ALTER TABLE runs ADD COLUMN %s %s", q, types[i]);
    rc = loom_registry_exec(r, sql);
    free(sql);
    free(q);
  }
  if (n >= 0) free_names(names, types, n);
  if (n < 0) rc = -1;
  if (!rc) rc = loom_registry_exec(r, "COMMIT");
  if (rc) sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
  return rc;
}

int loom_registry_open(loom_registry **out, const char *db_path) {
  *out = NULL;
  loom_registry *r = loom_calloc(1, sizeof *r);
  r->path = loom_strdup(db_path);
  char *dir = loom_strdup(db_path);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) *slash = 0;
  int rc = slash && slash != dir ? loom_mkdir_p(dir) : 0;
  free(dir);
  if (!rc && sqlite3_open_v2(db_path, &r->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL))
    rc = loom_registry_sql_err(r, "cannot open the database (check the directory's permissions)");
  if (!rc) sqlite3_busy_timeout(r->db, BUSY_TIMEOUT_MS);
  if (!rc) rc = loom_registry_exec(r, "PRAGMA journal_mode=WAL");
  if (!rc) rc = loom_registry_exec(r, "PRAGMA synchronous=NORMAL");
  if (!rc) rc = create_schema(r);
  if (rc) {
    loom_registry_close(r);
    return -1;
  }
  *out = r;
  return 0;
}

void loom_registry_close(loom_registry *r) {
  if (!r) return;
  if (r->db) sqlite3_close(r->db);
  free(r->path);
  free(r);
}

const char *loom_registry_db_path(const loom_registry *r) { return r->path; }

/* The run registry (loom/registry.h, loom/runs.h): 8 processes registering, heartbeating,
 * finishing runs and adding custom metrics at once lose nothing; crashed runs are detected
 * by heartbeat timeout (another host) and by a vanished process (this host), and a heartbeat
 * revives a run wrongly marked; every config key is a typed column; the runs table filters,
 * sorts and selects columns; ids resolve by prefix and name. */
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "loom/core.h"
#include "loom/registry.h"
#include "loom/runs.h"

#define PROCS 8
#define RUNS_EACH 12

static char db_path[256];

static const char *status_of(loom_runs_table *t, const char *id) {
  int idc = loom_runs_find_column(t, "run_id"), st = loom_runs_find_column(t, "status");
  for (int i = 0; i < t->nrows; i++)
    if (!strcmp(loom_runs_cell(t, i, idc)->s, id)) return loom_runs_cell(t, i, st)->s;
  return "(missing)";
}

static int row_of(loom_runs_table *t, const char *id) {
  int idc = loom_runs_find_column(t, "run_id");
  for (int i = 0; i < t->nrows; i++)
    if (!strcmp(loom_runs_cell(t, i, idc)->s, id)) return i;
  return -1;
}

static void load(loom_runs_table *t) {
  loom_registry *r;
  LOOM_ASSERT(loom_registry_open(&r, db_path) == 0);
  LOOM_ASSERT(loom_runs_load(r, t) == 0);
  loom_registry_close(r);
}

/* One writer process: register, heartbeat, finish and tag RUNS_EACH runs. */
static int writer(int p) {
  for (int k = 0; k < RUNS_EACH; k++) {
    loom_registry *r;
    if (loom_registry_open(&r, db_path)) return fprintf(stderr, "%s\n", loom_errmsg()), 1;
    loom_config c;
    loom_config_defaults(&c);
    c.training.lr = 1e-4 * (p + 1);
    c.training.steps = 100 * p + k;
    snprintf(c.run.name, sizeof c.run.name, "p%d_k%d", p, k);
    char id[64], metric[32];
    snprintf(id, sizeof id, "run_p%d_k%d", p, k);
    /* run_dir must exist: a row whose directory is gone shows status "missing" */
    loom_registry_start_info info = {.run_id = id, .run_dir = "/tmp", .sweep = "conc"};
    loom_registry_metrics m = {.steps = k, .final_loss = p + k / 100.0, .min_loss = p,
                               .avg_step_time = 0.5, .tokens_per_s = 1000.0 * p,
                               .peak_rss_mb = 64};
    snprintf(metric, sizeof metric, "%d", p * 1000 + k);
    int rc = loom_registry_insert(r, &c, &info);
    for (int s = 1; s <= 3 && !rc; s++) rc = loom_registry_touch(r, id, s, 5.0 - s);
    if (!rc) rc = loom_registry_finish(r, id, k % 3 ? "finished" : "failed", &m, k % 3 ? NULL : "boom");
    if (!rc) rc = loom_registry_set_metric(r, id, "eval.score", metric);
    if (rc) fprintf(stderr, "writer %d: %s\n", p, loom_errmsg());
    loom_registry_close(r);
    if (rc) return 1;
  }
  return 0;
}

static void concurrency(void) {
  pid_t pids[PROCS];
  for (int p = 0; p < PROCS; p++) {
    fflush(NULL);
    pids[p] = fork();
    if (pids[p] == 0) _exit(writer(p));
  }
  int failures = 0;
  for (int p = 0; p < PROCS; p++) {
    int st;
    waitpid(pids[p], &st, 0);
    failures += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  CHECK(failures == 0, "%d writer processes failed", failures);
  loom_runs_table t;
  load(&t);
  CHECK(t.nrows == PROCS * RUNS_EACH, "rows %d, want %d", t.nrows, PROCS * RUNS_EACH);
  int lr = loom_runs_find_column(&t, "training.lr"), steps = loom_runs_find_column(&t, "training.steps");
  int score = loom_runs_find_column(&t, "eval.score"), loss = loom_runs_find_column(&t, "final_loss");
  int sweep = loom_runs_find_column(&t, "sweep"), nsteps = loom_runs_find_column(&t, "steps");
  int err = loom_runs_find_column(&t, "error");
  CHECK(lr >= 0 && steps >= 0 && score >= 0 && loss >= 0 && sweep >= 0, "columns exist");
  int bad = 0;
  for (int p = 0; p < PROCS && score >= 0; p++)
    for (int k = 0; k < RUNS_EACH; k++) {
      char id[64];
      snprintf(id, sizeof id, "run_p%d_k%d", p, k);
      int row = row_of(&t, id);
      if (row < 0) {
        bad++;
        continue;
      }
      const loom_value *v_lr = loom_runs_cell(&t, row, lr), *v_steps = loom_runs_cell(&t, row, steps);
      const loom_value *v_score = loom_runs_cell(&t, row, score), *v_loss = loom_runs_cell(&t, row, loss);
      bad += !(v_lr->type == LOOM_VAL_REAL && v_lr->r == 1e-4 * (p + 1));
      bad += !(v_steps->type == LOOM_VAL_INT && v_steps->i == 100 * p + k);
      bad += !(v_score->type == LOOM_VAL_INT && v_score->i == p * 1000 + k);
      bad += !(v_loss->type == LOOM_VAL_REAL && v_loss->r == p + k / 100.0);
      bad += strcmp(status_of(&t, id), k % 3 ? "finished" : "failed") != 0;
      bad += strcmp(loom_runs_cell(&t, row, sweep)->s, "conc") != 0;
      bad += loom_runs_cell(&t, row, nsteps)->i != k;
      bad += (k % 3 == 0) != (loom_runs_cell(&t, row, err)->type == LOOM_VAL_TEXT);
    }
  CHECK(bad == 0, "%d wrong or missing values after concurrent writes", bad);
  loom_runs_free(&t);
}

/* ---- crash detection ------------------------------------------------------------------------ */

static void insert(loom_registry *r, const char *id, const char *host, long pid) {
  loom_config c;
  loom_config_defaults(&c);
  loom_registry_start_info info = {.run_id = id, .run_dir = "/tmp", .host = host, .pid = pid};
  CHECK(loom_registry_insert(r, &c, &info) == 0, "insert %s: %s", id, loom_errmsg());
}

static void crashes(void) {
  loom_registry *r;
  LOOM_ASSERT(loom_registry_open(&r, db_path) == 0);
  char host[256];
  gethostname(host, sizeof host);
  /* a process that has exited: its pid is gone */
  fflush(NULL);
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  insert(r, "remote", "some-other-host", 1);  /* only the heartbeat can tell */
  insert(r, "local_dead", host, dead);
  insert(r, "local_alive", host, getpid());
  CHECK(loom_registry_detect_crashed(r, 3600) == 1, "only the vanished process is crashed at once");
  loom_runs_table t;
  loom_runs_load(r, &t);
  CHECK(!strcmp(status_of(&t, "local_dead"), "crashed"), "dead pid -> crashed: %s", status_of(&t, "local_dead"));
  CHECK(!strcmp(status_of(&t, "remote"), "running"), "fresh heartbeat -> running");
  CHECK(!strcmp(status_of(&t, "local_alive"), "running"), "live pid -> running");
  loom_runs_free(&t);
  usleep(1300 * 1000);
  loom_registry_touch(r, "local_alive", 1, 1.0); /* a heartbeat keeps it alive */
  CHECK(loom_registry_detect_crashed(r, 1.0) == 1, "stale heartbeat of the remote run detected");
  loom_runs_load(r, &t);
  CHECK(!strcmp(status_of(&t, "remote"), "crashed"), "no heartbeat for 1.3 s > 1 s -> crashed");
  CHECK(!strcmp(status_of(&t, "local_alive"), "running"), "heartbeating run stays running");
  int err = loom_runs_find_column(&t, "error");
  CHECK(strstr(loom_runs_cell(&t, row_of(&t, "remote"), err)->s, "no heartbeat"),
        "crash reason recorded");
  loom_runs_free(&t);
  CHECK(loom_registry_touch(r, "remote", 5, 2.0) == 0, "late heartbeat");
  loom_runs_load(r, &t);
  CHECK(!strcmp(status_of(&t, "remote"), "running"), "a late heartbeat revives a wrongly crashed run");
  loom_runs_free(&t);
  /* a finished run is never touched by detection */
  loom_registry_finish(r, "remote", "finished", NULL, NULL);
  usleep(300 * 1000);
  CHECK(loom_registry_detect_crashed(r, 0.1) == 1, "only local_alive is stale now");
  loom_runs_load(r, &t);
  CHECK(!strcmp(status_of(&t, "remote"), "finished"), "finished stays finished");
  loom_runs_free(&t);
  loom_registry_close(r);
}

/* ---- metrics, columns, ids ------------------------------------------------------------------- */

static void misc(void) {
  loom_registry *r;
  LOOM_ASSERT(loom_registry_open(&r, db_path) == 0);
  CHECK(loom_registry_set_metric(r, "run_p0_k1", "status", "1") != 0 &&
            strstr(loom_errmsg(), "built-in column"), "built-in name rejected");
  CHECK(loom_registry_set_metric(r, "run_p0_k1", "training.lr", "1") != 0, "config key rejected");
  CHECK(loom_registry_set_metric(r, "run_p0_k1", "1bad", "1") != 0, "bad name rejected");
  CHECK(loom_registry_set_metric(r, "no_such_run", "x", "1") != 0 &&
            strstr(loom_errmsg(), "no run 'no_such_run'"), "unknown run rejected");
  CHECK(loom_registry_set_metric(r, "run_p0_k1", "note", "looks good") == 0, "text metric");
  char *id = NULL;
  CHECK(loom_registry_resolve(r, "run_p3_k1", &id) == 0 && !strcmp(id, "run_p3_k1"), "exact id");
  free(id);
  CHECK(loom_registry_resolve(r, "run_p3_k1", &id) == 0, "exact id beats prefix (run_p3_k10)");
  free(id);
  CHECK(loom_registry_resolve(r, "run_p3_k", &id) != 0 && strstr(loom_errmsg(), "matches"),
        "ambiguous prefix: %s", loom_errmsg());
  CHECK(loom_registry_resolve(r, "p5_k7", &id) == 0 && !strcmp(id, "run_p5_k7"), "by run name");
  free(id);
  CHECK(loom_registry_resolve(r, "", &id) != 0, "empty id rejected");
  loom_runs_table t;
  loom_runs_load(r, &t);
  /* query: filter + sort + limit + columns */
  char *show[] = {"run_id", "lr", "eval.score"};
  loom_runs_query q = {.filter = "sweep = 'conc' AND training.lr >= 5e-4 AND status = 'finished'",
                       .sort_by = "eval.score", .descending = true, .limit = 3, .show = show,
                       .nshow = 3};
  loom_runs_view v;
  CHECK(loom_runs_select(&t, &q, &v) == 0, "select: %s", loom_errmsg());
  CHECK(v.nrows == 3 && v.ncols == 3, "3 x 3, got %d x %d", v.nrows, v.ncols);
  if (v.nrows == 3) {
    CHECK(!strcmp(loom_runs_cell(&t, v.rows[0], v.cols[0])->s, "run_p7_k11"), "highest score first");
    CHECK(!strcmp(t.cols[v.cols[1]].name, "training.lr"), "'lr' resolves to training.lr");
  }
  loom_runs_view_free(&v);
  loom_runs_query bad = {.sort_by = "final_los"};
  CHECK(loom_runs_select(&t, &bad, &v) != 0 && strstr(loom_errmsg(), "did you mean 'final_loss'"),
        "unknown sort column: %s", loom_errmsg());
  char *hide[] = {"nope"};
  loom_runs_query bad2 = {.hide = hide, .nhide = 1};
  CHECK(loom_runs_select(&t, &bad2, &v) != 0, "unknown --hide column");
  /* every config key is a column, typed like the schema */
  loom_config d;
  loom_config_defaults(&d);
  int c_dtype = loom_runs_find_column(&t, "training.dtype"), c_ac = loom_runs_find_column(&t, "training.activation_checkpointing");
  int c_sg = loom_runs_find_column(&t, "checkpoint.save_gradients"), c_bs = loom_runs_find_column(&t, "training.micro_batch_size");
  CHECK(c_dtype >= 0 && c_ac >= 0 && c_sg >= 0 && c_bs >= 0, "config columns exist");
  if (c_dtype >= 0 && c_ac >= 0 && c_bs >= 0) {
    CHECK(!strcmp(loom_runs_cell(&t, 0, c_dtype)->s, "fp32"), "enum as text");
    CHECK(!strcmp(loom_runs_cell(&t, 0, c_ac)->s, "false"), "bool as text");
    CHECK(loom_runs_cell(&t, 0, c_bs)->type == LOOM_VAL_INT && loom_runs_cell(&t, 0, c_bs)->i == d.training.micro_batch_size, "int as int");
  }
  loom_runs_free(&t);
  loom_registry_close(r);
}

/* A registry made before a config key existed gains the column when opened. */
static void migration(void) {
  char path[300];
  snprintf(path, sizeof path, "%s.old", db_path);
  sqlite3 *db;
  sqlite3_open(path, &db);
  sqlite3_exec(db, "CREATE TABLE runs (run_id TEXT PRIMARY KEY, status TEXT, \"training.lr\" REAL);"
                   "INSERT INTO runs (run_id, status, \"training.lr\") VALUES ('old', 'finished', 0.1);",
               NULL, NULL, NULL);
  sqlite3_close(db);
  loom_registry *r;
  CHECK(loom_registry_open(&r, path) == 0, "open an old registry: %s", loom_errmsg());
  loom_runs_table t;
  CHECK(loom_runs_load(r, &t) == 0 && t.nrows == 1, "old row kept");
  CHECK(loom_runs_find_column(&t, "checkpoint.save_gradients") >= 0, "missing column added");
  CHECK(loom_runs_find_column(&t, "final_loss") >= 0, "missing metric column added");
  loom_runs_free(&t);
  loom_registry_close(r);
}

int main(void) {
  char dir[] = "/tmp/loom-registry-test.XXXXXX";
  LOOM_ASSERT(mkdtemp(dir));
  snprintf(db_path, sizeof db_path, "%s/runs/registry.db", dir);
  concurrency();
  crashes();
  misc();
  migration();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return harness_finish("test_registry");
}

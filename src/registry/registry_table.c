/* Loading the runs table from the registry: every column of `runs` (times shown as local
 * date-time text), derived metrics (iters_per_s; duration_s of rows without a recorded one)
 * and one column per custom metric; plus column lookup by exact name or unique dotted suffix. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/config_schema.h"
#include "registry/registry_internal.h"
#include "loom/core.h"
#include "loom/registry_table.h"

typedef struct {
  char **names;
  loom_col_kind *kinds;
  int n, cap;
} col_list;

static void add_col(col_list *c, const char *name, loom_col_kind kind) {
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 64;
    c->names = loom_realloc(c->names, (size_t)c->cap, sizeof *c->names);
    c->kinds = loom_realloc(c->kinds, (size_t)c->cap, sizeof *c->kinds);
  }
  c->names[c->n] = loom_strdup(name);
  c->kinds[c->n++] = kind;
}

static const loom_registry_column *fixed_col(const char *name) {
  for (int i = 0; i < loom_registry_ncolumns; i++)
    if (!strcmp(loom_registry_columns[i].name, name)) return &loom_registry_columns[i];
  return NULL;
}

static bool is_time_col(const char *name) {
  return !strcmp(name, "start_time") || !strcmp(name, "end_time") || !strcmp(name, "heartbeat");
}

static char *time_text(double t) {
  time_t s = (time_t)t;
  struct tm tm;
  localtime_r(&s, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return loom_strdup(buf);
}

static loom_value cell_from_sql(sqlite3_stmt *st, int i, bool time_col) {
  loom_value v = {.type = LOOM_VAL_NULL};
  switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
      v.type = LOOM_VAL_INT;
      v.i = sqlite3_column_int64(st, i);
      break;
    case SQLITE_FLOAT:
      v.type = LOOM_VAL_REAL;
      v.r = sqlite3_column_double(st, i);
      break;
    case SQLITE_TEXT:
      v.type = LOOM_VAL_TEXT;
      v.s = loom_strdup((const char *)sqlite3_column_text(st, i));
      break;
    default: break;
  }
  if (time_col && (v.type == LOOM_VAL_REAL || v.type == LOOM_VAL_INT)) {
    double t = v.type == LOOM_VAL_REAL ? v.r : (double)v.i;
    v = (loom_value){.type = LOOM_VAL_TEXT, .s = time_text(t)};
  }
  return v;
}

/* Column order: run fields, metrics, derived metrics, config keys (schema order, then any
 * others the database has), custom metrics (by name). Returns the db column of each. */
static void plan_columns(sqlite3_stmt *st, col_list *cols, int **db_index) {
  int n = sqlite3_column_count(st);
  *db_index = loom_malloc(sizeof(int) * (size_t)(n + 2));
  for (int pass = 0; pass < 3; pass++) {
    if (pass == 2) { /* duration_s: a column of newer registries (training time) */
      bool stored = false;
      for (int i = 0; i < n; i++) stored |= !strcmp(sqlite3_column_name(st, i), "duration_s");
      if (!stored) add_col(cols, "duration_s", LOOM_COL_METRIC);
      add_col(cols, "iters_per_s", LOOM_COL_METRIC);
      if (!stored) (*db_index)[cols->n - 2] = -1;
      (*db_index)[cols->n - 1] = -1;
    }
    for (int i = 0; i < n; i++) {
      const char *name = sqlite3_column_name(st, i);
      const loom_registry_column *f = fixed_col(name);
      bool want = pass == 0 ? f && f->group == LOOM_RCOL_RUN
                : pass == 1 ? f && f->group == LOOM_RCOL_METRIC
                            : !f;
      if (!want) continue;
      (*db_index)[cols->n] = i;
      add_col(cols, name, f ? (f->group == LOOM_RCOL_RUN ? LOOM_COL_RUN : LOOM_COL_METRIC)
                            : LOOM_COL_CONFIG);
    }
  }
}

static int load_custom(loom_registry *r, loom_runs_table *t, int first_custom) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db, "SELECT run_id, key, value FROM custom_metrics", -1, &st, NULL))
    return loom_registry_sql_err(r, "reading custom metrics");
  int id_col = loom_runs_find_column(t, "run_id");
  for (int s_ = loom_registry_step(r, st); s_ == SQLITE_ROW; s_ = sqlite3_step(st)) {
    const char *id = (const char *)sqlite3_column_text(st, 0);
    const char *key = (const char *)sqlite3_column_text(st, 1);
    int c = -1;
    for (int j = first_custom; j < t->ncols; j++)
      if (!strcmp(t->cols[j].name, key)) c = j;
    for (int row = 0; row < t->nrows && c >= 0 && id; row++) {
      const loom_value *v = loom_runs_cell(t, row, id_col);
      if (v->type == LOOM_VAL_TEXT && !strcmp(v->s, id))
        t->cells[(size_t)row * t->ncols + c] = cell_from_sql(st, 2, false);
    }
  }
  sqlite3_finalize(st);
  return 0;
}

static int custom_names(loom_registry *r, col_list *cols) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db, "SELECT DISTINCT key FROM custom_metrics ORDER BY key", -1, &st,
                         NULL))
    return loom_registry_sql_err(r, "reading custom metric names");
  for (int s_ = loom_registry_step(r, st); s_ == SQLITE_ROW; s_ = sqlite3_step(st))
    add_col(cols, (const char *)sqlite3_column_text(st, 0), LOOM_COL_CUSTOM);
  sqlite3_finalize(st);
  return 0;
}

static void derive(loom_runs_table *t, int row, const double *times) {
  loom_value *cells = t->cells + (size_t)row * t->ncols;
  int dur = loom_runs_find_column(t, "duration_s"), ips = loom_runs_find_column(t, "iters_per_s");
  int avg = loom_runs_find_column(t, "avg_step_time");
  double start = times[0], end = times[1] > 0 ? times[1] : times[2];
  /* the training time the trainer recorded; else (running, older rows) the wall time */
  if (start > 0 && end > 0 && cells[dur].type == LOOM_VAL_NULL)
    cells[dur] = (loom_value){.type = LOOM_VAL_REAL, .r = end - start};
  double a;
  if (avg >= 0 && loom_value_number(&cells[avg], &a) && a > 0)
    cells[ips] = (loom_value){.type = LOOM_VAL_REAL, .r = 1.0 / a};
  /* a run whose directory is gone (deleted, moved) shows status 'missing', not what it
   * ended as: 'loom runs gc' drops such rows, 'loom runs delete' one of them */
  int status = loom_runs_find_column(t, "status"), dir = loom_runs_find_column(t, "run_dir");
  if (status >= 0 && dir >= 0 && cells[dir].type == LOOM_VAL_TEXT && !loom_is_dir(cells[dir].s)) {
    if (cells[status].type == LOOM_VAL_TEXT) free((char *)cells[status].s);
    cells[status] = (loom_value){.type = LOOM_VAL_TEXT, .s = loom_strdup("missing")};
  }
}

int loom_runs_load(loom_registry *r, loom_runs_table *t) {
  memset(t, 0, sizeof *t);
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(r->db, "SELECT * FROM runs ORDER BY start_time, run_id", -1, &st, NULL))
    return loom_registry_sql_err(r, "reading runs");
  col_list cols = {0};
  int *db_index = NULL;
  plan_columns(st, &cols, &db_index);
  int first_custom = cols.n;
  if (custom_names(r, &cols)) {
    sqlite3_finalize(st);
    return -1;
  }
  t->ncols = cols.n;
  t->cols = loom_calloc((size_t)cols.n, sizeof *t->cols);
  for (int j = 0; j < cols.n; j++) t->cols[j] = (loom_runs_column){cols.names[j], cols.kinds[j]};
  free(cols.names);
  free(cols.kinds);
  int cap = 0;
  for (int s_ = loom_registry_step(r, st); s_ == SQLITE_ROW; s_ = sqlite3_step(st)) {
    if (t->nrows == cap) {
      cap = cap ? 2 * cap : 64;
      t->cells = loom_realloc(t->cells, (size_t)cap * t->ncols, sizeof *t->cells);
    }
    loom_value *row = t->cells + (size_t)t->nrows * t->ncols;
    double times[3] = {0, 0, 0}; /* start, end, heartbeat as numbers */
    for (int j = 0; j < t->ncols; j++) {
      row[j] = (loom_value){.type = LOOM_VAL_NULL};
      if (j >= first_custom || db_index[j] < 0) continue;
      const char *name = t->cols[j].name;
      int ti = !strcmp(name, "start_time") ? 0 : !strcmp(name, "end_time") ? 1
             : !strcmp(name, "heartbeat") ? 2 : -1;
      if (ti >= 0) times[ti] = sqlite3_column_double(st, db_index[j]);
      row[j] = cell_from_sql(st, db_index[j], is_time_col(name));
    }
    t->nrows++;
    derive(t, t->nrows - 1, times);
  }
  sqlite3_finalize(st);
  free(db_index);
  return load_custom(r, t, first_custom);
}

void loom_runs_free(loom_runs_table *t) {
  for (size_t i = 0; i < (size_t)t->nrows * t->ncols; i++)
    if (t->cells[i].type == LOOM_VAL_TEXT) free((char *)t->cells[i].s);
  for (int j = 0; j < t->ncols; j++) free(t->cols[j].name);
  free(t->cols);
  free(t->cells);
  memset(t, 0, sizeof *t);
}

const loom_value *loom_runs_cell(const loom_runs_table *t, int row, int col) {
  return &t->cells[(size_t)row * t->ncols + col];
}

const char *loom_runs_nearest_column(const loom_runs_table *t, const char *name) {
  const char *key = loom_config_nearest_key(name);
  if (key) return key;
  const char **names = loom_malloc(sizeof(char *) * (size_t)(t->ncols + 1));
  for (int j = 0; j < t->ncols; j++) names[j] = t->cols[j].name;
  names[t->ncols] = NULL;
  const char *best = loom_config_nearest_of(name, names);
  free(names);
  return best;
}

int loom_runs_find_column(const loom_runs_table *t, const char *name) {
  for (int j = 0; j < t->ncols; j++)
    if (!strcmp(t->cols[j].name, name)) return j;
  int found = -1, count = 0;
  size_t n = strlen(name);
  for (int j = 0; j < t->ncols; j++) {
    size_t m = strlen(t->cols[j].name);
    if (m > n && t->cols[j].name[m - n - 1] == '.' && !strcmp(t->cols[j].name + m - n, name))
      found = j, count++;
  }
  if (count == 1) return found;
  if (count > 1)
    return loom_err("column '%s' is ambiguous (%d columns end in .%s); give the full name",
                    name, count, name);
  const char *near = loom_runs_nearest_column(t, name);
  if (near) return loom_err("unknown column '%s'; did you mean '%s'?", name, near);
  return loom_err("unknown column '%s'; 'loom runs --list-columns' lists them", name);
}

/* The registry's rows as one in-memory table (src/registry/registry_table.c): every column
 * of `runs` (run fields, summary metrics, derived columns, every config key, custom metrics),
 * what `loom runs` (loom/runs.h) filters, sorts and prints and `loom runs serve` sends. It
 * lives in the registry because it reads the registry's SQLite tables directly. */
#ifndef LOOM_REGISTRY_TABLE_H
#define LOOM_REGISTRY_TABLE_H
#include "loom/filter.h"
#include "loom/registry.h"

typedef enum {
  LOOM_COL_RUN,     /* run_id, name, status, times, host, ... */
  LOOM_COL_METRIC,  /* summary metrics and derived ones (duration_s, iters_per_s) */
  LOOM_COL_CONFIG,  /* a config key, e.g. training.lr */
  LOOM_COL_CUSTOM,  /* added with `loom runs set-metric` */
} loom_col_kind;

typedef struct {
  char *name;
  loom_col_kind kind;
} loom_runs_column;

typedef struct {
  int ncols, nrows;
  loom_runs_column *cols;
  loom_value *cells;   /* (nrows, ncols); text is owned by the table */
} loom_runs_table;

/* Load every run (call loom_registry_detect_crashed first to refresh statuses). */
int loom_runs_load(loom_registry *r, loom_runs_table *t);
void loom_runs_free(loom_runs_table *t);
/* Index of a column: exact name, else a unique dotted suffix ("lr" -> training.lr); -1 and
 * an error naming the nearest column otherwise. */
int loom_runs_find_column(const loom_runs_table *t, const char *name);
/* Nearest column name to a misspelt one, or NULL. */
const char *loom_runs_nearest_column(const loom_runs_table *t, const char *name);
const loom_value *loom_runs_cell(const loom_runs_table *t, int row, int col);
#endif

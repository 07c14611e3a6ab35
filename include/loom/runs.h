/* The runs table behind `loom runs`: every row of the registry loaded into memory with its
 * columns (run fields, summary metrics, derived columns, every config key, custom metrics),
 * then filtered (loom/filter.h), sorted, narrowed to the wanted columns and printed as a
 * table, CSV or JSON. Also the per-run views: show, compare, and metric curves for plots. */
#ifndef LOOM_RUNS_H
#define LOOM_RUNS_H
#include <stdbool.h>
#include <stdio.h>

#include "loom/filter.h"
#include "loom/registry.h"
#include "loom/registry_table.h"

typedef struct {
  const char *filter;      /* filter expression or NULL */
  const char *sweep;       /* only runs of this sweep, or NULL */
  const char *sort_by;     /* column, or NULL for start time */
  bool descending;
  long limit;              /* 0 = all */
  char **show;             /* exactly these columns (NULL = the default set) */
  int nshow;
  char **hide;             /* minus these */
  int nhide;
  bool all_columns;        /* every column instead of the default set */
} loom_runs_query;

/* Rows and columns selected by a query, in order. */
typedef struct {
  int *rows, nrows;
  int *cols, ncols;
} loom_runs_view;

/* The default column set is: run fields and metrics that are not empty in every selected row,
 * every custom metric, and the config keys whose values differ between the selected rows. */
int loom_runs_select(const loom_runs_table *t, const loom_runs_query *q, loom_runs_view *v);
void loom_runs_view_free(loom_runs_view *v);

typedef enum { LOOM_FMT_TABLE, LOOM_FMT_CSV, LOOM_FMT_JSON } loom_runs_format;
int loom_runs_format_parse(const char *s, loom_runs_format *f);
void loom_runs_print(FILE *out, const loom_runs_table *t, const loom_runs_view *v,
                     loom_runs_format f);
/* Width in characters of column c of the view in the text table (run_id and name are never
 * cut; other text is cut at 48 characters). */
int loom_runs_column_width(const loom_runs_table *t, const loom_runs_view *v, int c);
/* Fit the text table into width characters (0: no limit) by dropping from v the columns that
 * say least about the listed rows: first those with one value in every row, last the config
 * keys and results that differ between them; never run_id or q's --sort-by column (q may be
 * NULL), nor name unless the ids start with it, nor status while it differs. note gets the
 * values of the dropped same-in-every-row columns and the names of the others, wrapped to
 * width ("" when none). Returns how many were dropped. */
int loom_runs_fit(const loom_runs_table *t, loom_runs_view *v, int width,
                  const loom_runs_query *q, char *note, size_t note_size);
/* Every column with its kind, for --list-columns. */
void loom_runs_list_columns(FILE *out, const loom_runs_table *t);

/* `loom runs show`: run fields, metrics, custom metrics, config, checkpoints, files. */
void loom_runs_show(FILE *out, const loom_runs_table *t, int row);
/* `loom runs compare`: config keys that differ, then a metrics table. */
void loom_runs_compare(FILE *out, const loom_runs_table *t, const int *rows, int n);

/* One metric of metrics.jsonl as (x, y) points; x is step, time or tokens. */
typedef struct {
  double *x, *y;
  int n;
} loom_series;
int loom_series_read(const char *metrics_path, const char *metric, const char *x_key,
                     loom_series *s);
void loom_series_free(loom_series *s);

#endif

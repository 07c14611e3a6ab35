/* Selecting from the runs table: --sweep and --filter pick rows, --sort-by/--descending order
 * them (stable; NULLs last), --limit cuts; --show/--hide/--all-columns pick the columns,
 * else the default set (non-empty run fields and metrics, custom metrics, varying config). */
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/runs.h"

static int resolve_col(void *ctx, const char *name, const char **suggestion) {
  const loom_runs_table *t = ctx;
  int j = loom_runs_find_column(t, name);
  if (j < 0) {
    *suggestion = loom_runs_nearest_column(t, name);
    loom_err_clear();
  }
  return j;
}

typedef struct {
  const loom_runs_table *t;
  int row;
} row_ctx;

static loom_value row_value(void *ctx, int col) {
  const row_ctx *r = ctx;
  return *loom_runs_cell(r->t, r->row, col);
}

static int pick_rows(const loom_runs_table *t, const loom_runs_query *q, loom_runs_view *v) {
  loom_expr *e = NULL;
  if (q->filter && loom_expr_parse(&e, q->filter, "--filter", resolve_col, (void *)t,
                                   "'loom runs --list-columns' lists the columns"))
    return -1;
  int sweep_col = loom_runs_find_column(t, "sweep");
  v->rows = loom_malloc(sizeof(int) * (size_t)(t->nrows + 1));
  v->nrows = 0;
  for (int i = 0; i < t->nrows; i++) {
    if (q->sweep) {
      const loom_value *s = loom_runs_cell(t, i, sweep_col);
      if (s->type != LOOM_VAL_TEXT || strcmp(s->s, q->sweep)) continue;
    }
    bool keep = true;
    row_ctx rc = {t, i};
    if (e && loom_expr_eval(e, row_value, &rc, &keep)) {
      loom_expr_free(e);
      return -1;
    }
    if (keep) v->rows[v->nrows++] = i;
  }
  loom_expr_free(e);
  return 0;
}

/* Stable merge sort of row indices by one column. */
static void sort_rows(const loom_runs_table *t, int *rows, int n, int col, bool desc) {
  if (n < 2) return;
  int *tmp = loom_malloc(sizeof(int) * (size_t)n);
  for (int width = 1; width < n; width *= 2) {
    for (int lo = 0; lo < n; lo += 2 * width) {
      int mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      int a = lo, b = mid, k = lo;
      while (a < mid && b < hi) {
        const loom_value *x = loom_runs_cell(t, rows[a], col), *y = loom_runs_cell(t, rows[b], col);
        int c = loom_value_cmp(x, y);
        bool nulls = x->type == LOOM_VAL_NULL || y->type == LOOM_VAL_NULL; /* always last */
        if (desc && !nulls) c = -c;
        tmp[k++] = c <= 0 ? rows[a++] : rows[b++];
      }
      while (a < mid) tmp[k++] = rows[a++];
      while (b < hi) tmp[k++] = rows[b++];
    }
    memcpy(rows, tmp, sizeof(int) * (size_t)n);
  }
  free(tmp);
}

static bool all_null(const loom_runs_table *t, const loom_runs_view *v, int col) {
  for (int i = 0; i < v->nrows; i++)
    if (loom_runs_cell(t, v->rows[i], col)->type != LOOM_VAL_NULL) return false;
  return true;
}

static bool varies(const loom_runs_table *t, const loom_runs_view *v, int col) {
  for (int i = 1; i < v->nrows; i++)
    if (loom_value_cmp(loom_runs_cell(t, v->rows[0], col), loom_runs_cell(t, v->rows[i], col)))
      return true;
  return false;
}

/* Columns shown when no --show is given. */
static bool default_col(const loom_runs_table *t, const loom_runs_view *v, int j) {
  static const char *const hidden[] = {"sweep_id", "end_time", "heartbeat", "host", "pid",
                                       "command",  "git_commit", "run_dir", "error",
                                       "parent_checkpoint", NULL};
  const loom_runs_column *c = &t->cols[j];
  if (c->kind == LOOM_COL_CUSTOM) return true;
  if (c->kind == LOOM_COL_CONFIG) /* run.parent*: the same as parent_id, parent_checkpoint */
    return varies(t, v, j) && strcmp(c->name, "run.name") && strncmp(c->name, "run.parent", 10);
  for (int i = 0; hidden[i]; i++)
    if (!strcmp(c->name, hidden[i])) return false;
  return !all_null(t, v, j);
}

static void add_col(loom_runs_view *v, int j) {
  for (int i = 0; i < v->ncols; i++)
    if (v->cols[i] == j) return;
  v->cols[v->ncols++] = j;
}

/* Each argument may hold several names separated by commas. */
static int for_each_name(const loom_runs_table *t, char **args, int n, loom_runs_view *v,
                         bool add) {
  for (int a = 0; a < n; a++) {
    char *copy = loom_strdup(args[a]), *save = NULL;
    for (char *name = strtok_r(copy, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
      int j = loom_runs_find_column(t, name);
      if (j < 0) {
        free(copy);
        return loom_err_prefix("%s: ", add ? "--show" : "--hide");
      }
      if (add) {
        add_col(v, j);
      } else {
        int k = 0;
        for (int i = 0; i < v->ncols; i++)
          if (v->cols[i] != j) v->cols[k++] = v->cols[i];
        v->ncols = k;
      }
    }
    free(copy);
  }
  return 0;
}

static int pick_cols(const loom_runs_table *t, const loom_runs_query *q, loom_runs_view *v) {
  v->cols = loom_malloc(sizeof(int) * (size_t)(t->ncols + 1));
  v->ncols = 0;
  if (q->nshow) {
    if (for_each_name(t, q->show, q->nshow, v, true)) return -1;
  } else {
    for (int j = 0; j < t->ncols; j++)
      if (q->all_columns || default_col(t, v, j)) add_col(v, j);
  }
  return for_each_name(t, q->hide, q->nhide, v, false);
}

int loom_runs_select(const loom_runs_table *t, const loom_runs_query *q, loom_runs_view *v) {
  memset(v, 0, sizeof *v);
  int rc = pick_rows(t, q, v);
  if (!rc && q->sort_by) {
    int col = loom_runs_find_column(t, q->sort_by);
    if (col < 0) rc = loom_err_prefix("--sort-by: ");
    else sort_rows(t, v->rows, v->nrows, col, q->descending);
  } else if (!rc && q->descending) {
    for (int i = 0; i < v->nrows / 2; i++) {
      int tmp = v->rows[i];
      v->rows[i] = v->rows[v->nrows - 1 - i];
      v->rows[v->nrows - 1 - i] = tmp;
    }
  }
  if (!rc && q->limit > 0 && v->nrows > q->limit) v->nrows = (int)q->limit;
  if (!rc) rc = pick_cols(t, q, v);
  if (rc) loom_runs_view_free(v);
  return rc;
}

void loom_runs_view_free(loom_runs_view *v) {
  free(v->rows);
  free(v->cols);
  memset(v, 0, sizeof *v);
}

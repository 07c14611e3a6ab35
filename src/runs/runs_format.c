/* Printing a selection of the runs table: an aligned text table (numbers right-aligned,
 * 6 significant digits, long text cut except run ids and names, which are copied), CSV (RFC 4180 quoting, exact numbers: what pandas
 * reads back) or JSON (an array of objects, numbers as numbers); and --list-columns. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/runs.h"

#define MAX_CELL 48

int loom_runs_format_parse(const char *s, loom_runs_format *f) {
  if (!strcmp(s, "table")) *f = LOOM_FMT_TABLE;
  else if (!strcmp(s, "csv")) *f = LOOM_FMT_CSV;
  else if (!strcmp(s, "json")) *f = LOOM_FMT_JSON;
  else return loom_err("--format '%s' is not one of table, csv, json", s);
  return 0;
}

/* Columns whose text is never cut: what users copy into the next command. */
static bool never_cut(const char *column) {
  return !strcmp(column, "run_id") || !strcmp(column, "name");
}

/* Display text of a cell in the text table (buf holds any cell of a never_cut column). */
static void table_text(const loom_value *v, bool cut, char *buf, size_t n) {
  switch (v->type) {
    case LOOM_VAL_NULL: snprintf(buf, n, "-"); break;
    case LOOM_VAL_INT: snprintf(buf, n, "%lld", v->i); break;
    case LOOM_VAL_REAL: snprintf(buf, n, "%.6g", v->r); break;
    case LOOM_VAL_TEXT:
      if (cut && strlen(v->s) > MAX_CELL) snprintf(buf, n, "%.*s...", MAX_CELL - 3, v->s);
      else snprintf(buf, n, "%s", v->s);
      break;
  }
}

static bool numeric(const loom_value *v) {
  return v->type == LOOM_VAL_INT || v->type == LOOM_VAL_REAL;
}

#define CELL_BUF 4096

int loom_runs_column_width(const loom_runs_table *t, const loom_runs_view *v, int c) {
  const char *name = t->cols[v->cols[c]].name;
  int w = (int)strlen(name);
  char buf[CELL_BUF];
  for (int r = 0; r < v->nrows; r++) {
    table_text(loom_runs_cell(t, v->rows[r], v->cols[c]), !never_cut(name), buf, sizeof buf);
    if ((int)strlen(buf) > w) w = (int)strlen(buf);
  }
  return w;
}

static void print_table(FILE *out, const loom_runs_table *t, const loom_runs_view *v) {
  int *w = loom_calloc((size_t)v->ncols + 1, sizeof *w);
  char buf[CELL_BUF];
  for (int c = 0; c < v->ncols; c++) w[c] = loom_runs_column_width(t, v, c);
  for (int c = 0; c < v->ncols; c++)
    fprintf(out, "%s%-*s", c ? "  " : "", c + 1 < v->ncols ? w[c] : 0, t->cols[v->cols[c]].name);
  fprintf(out, "\n");
  for (int c = 0; c < v->ncols; c++) {
    fprintf(out, "%s", c ? "  " : "");
    for (int k = 0; k < w[c]; k++) fputc('-', out);
  }
  fprintf(out, "\n");
  for (int r = 0; r < v->nrows; r++) {
    for (int c = 0; c < v->ncols; c++) {
      const loom_value *x = loom_runs_cell(t, v->rows[r], v->cols[c]);
      table_text(x, !never_cut(t->cols[v->cols[c]].name), buf, sizeof buf);
      bool last = c + 1 == v->ncols;
      if (numeric(x)) fprintf(out, "%s%*s", c ? "  " : "", w[c], buf);
      else fprintf(out, "%s%-*s", c ? "  " : "", last ? 0 : w[c], buf);
    }
    fprintf(out, "\n");
  }
  fprintf(out, "(%d run%s)\n", v->nrows, v->nrows == 1 ? "" : "s");
  free(w);
}

static void csv_field(FILE *out, const char *s) {
  if (!strpbrk(s, ",\"\n\r")) {
    fputs(s, out);
    return;
  }
  fputc('"', out);
  for (; *s; s++) {
    if (*s == '"') fputc('"', out);
    fputc(*s, out);
  }
  fputc('"', out);
}

static void print_csv(FILE *out, const loom_runs_table *t, const loom_runs_view *v) {
  char buf[64];
  for (int c = 0; c < v->ncols; c++) {
    if (c) fputc(',', out);
    csv_field(out, t->cols[v->cols[c]].name);
  }
  fputc('\n', out);
  for (int r = 0; r < v->nrows; r++) {
    for (int c = 0; c < v->ncols; c++) {
      if (c) fputc(',', out);
      csv_field(out, loom_value_text(loom_runs_cell(t, v->rows[r], v->cols[c]), buf, sizeof buf));
    }
    fputc('\n', out);
  }
}

static json_t *json_value(const loom_value *x) {
  switch (x->type) {
    case LOOM_VAL_INT: return json_integer(x->i);
    case LOOM_VAL_REAL: return isfinite(x->r) ? json_real(x->r) : json_null();
    case LOOM_VAL_TEXT: return json_string(x->s);
    default: return json_null();
  }
}

static void print_json(FILE *out, const loom_runs_table *t, const loom_runs_view *v) {
  json_t *arr = json_array();
  for (int r = 0; r < v->nrows; r++) {
    json_t *o = json_object();
    for (int c = 0; c < v->ncols; c++)
      json_object_set_new(o, t->cols[v->cols[c]].name,
                          json_value(loom_runs_cell(t, v->rows[r], v->cols[c])));
    json_array_append_new(arr, o);
  }
  json_dumpf(arr, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  fputc('\n', out);
  json_decref(arr);
}

void loom_runs_print(FILE *out, const loom_runs_table *t, const loom_runs_view *v,
                     loom_runs_format f) {
  if (f == LOOM_FMT_CSV) print_csv(out, t, v);
  else if (f == LOOM_FMT_JSON) print_json(out, t, v);
  else print_table(out, t, v);
}

void loom_runs_list_columns(FILE *out, const loom_runs_table *t) {
  static const char *const kinds[] = {"run", "metric", "config", "custom"};
  for (int j = 0; j < t->ncols; j++) fprintf(out, "%-40s %s\n", t->cols[j].name, kinds[t->cols[j].kind]);
}

/* Fitting the default `loom runs` table to the terminal: while the table is wider than the
 * terminal, drop the lowest-priority column (the rightmost of its rank) and name the hidden
 * columns in a note. run_id and status are always kept, and name unless every run id
 * starts with its name (then it goes first); --show columns are printed as asked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/runs.h"

/* Larger: kept longer. Identity, then the result of the run, then what differs between
 * the runs (config keys, custom metrics), then the other metrics, then other run fields. */
static int priority(const loom_runs_column *c, bool name_in_id) {
  if (!strcmp(c->name, "name") && name_in_id) return 0; /* the id already says it */
  static const char *const keep[] = {"run_id", "name", "status", NULL};
  static const char *const results[] = {"steps", "final_loss", "final_valid_loss", NULL};
  for (int i = 0; keep[i]; i++)
    if (!strcmp(c->name, keep[i])) return 100;
  for (int i = 0; results[i]; i++)
    if (!strcmp(c->name, results[i])) return 50;
  if (c->kind == LOOM_COL_CONFIG || c->kind == LOOM_COL_CUSTOM) return 40;
  if (!strcmp(c->name, "sweep") || !strcmp(c->name, "duration_s")) return 30;
  if (c->kind == LOOM_COL_METRIC) return 20;
  return 10; /* start_time, ranks, ... */
}

/* Every listed run's id is its name followed by '_' (the run directory's name): a name
 * column repeats what the id column shows. */
static bool names_in_ids(const loom_runs_table *t, const loom_runs_view *v) {
  int id = loom_runs_find_column(t, "run_id"), name = loom_runs_find_column(t, "name");
  if (id < 0 || name < 0) return loom_err_clear(), false;
  for (int r = 0; r < v->nrows; r++) {
    const loom_value *i = loom_runs_cell(t, v->rows[r], id), *n = loom_runs_cell(t, v->rows[r], name);
    if (i->type != LOOM_VAL_TEXT || n->type != LOOM_VAL_TEXT) return false;
    size_t len = strlen(n->s);
    if (strncmp(i->s, n->s, len) || i->s[len] != '_') return false;
  }
  return true;
}

int loom_runs_fit(const loom_runs_table *t, loom_runs_view *v, int width, char *note,
                  size_t note_size) {
  note[0] = 0;
  if (width <= 0 || v->ncols == 0) return 0;
  int *w = loom_malloc(sizeof(int) * (size_t)v->ncols), total = 0, hidden = 0;
  for (int c = 0; c < v->ncols; c++) total += (w[c] = loom_runs_column_width(t, v, c)) + (c ? 2 : 0);
  char names[1024] = "";
  bool name_in_id = names_in_ids(t, v);
  while (total > width) {
    int drop = -1;
    for (int c = 0; c < v->ncols; c++) {
      int p = priority(&t->cols[v->cols[c]], name_in_id);
      if (p < 100 && (drop < 0 || p <= priority(&t->cols[v->cols[drop]], name_in_id))) drop = c;
    }
    if (drop < 0) break; /* only what is always kept is left */
    size_t len = strlen(names);
    snprintf(names + len, sizeof names - len, "%s%s", hidden ? ", " : "",
             t->cols[v->cols[drop]].name);
    total -= w[drop] + 2;
    memmove(w + drop, w + drop + 1, sizeof(int) * (size_t)(v->ncols - drop - 1));
    memmove(v->cols + drop, v->cols + drop + 1, sizeof(int) * (size_t)(v->ncols - drop - 1));
    v->ncols--;
    hidden++;
  }
  free(w);
  if (!hidden) return 0;
  snprintf(note, note_size,
           "(%d column%s hidden to fit %d characters: %s; show them with --show COL,... or "
           "--all-columns, or set COLUMNS wider)", hidden, hidden == 1 ? "" : "s", width, names);
  /* wrapped at spaces to the same width */
  int col = 0;
  char *last_space = NULL;
  for (char *p = note; *p; p++, col++) {
    if (*p == ' ') last_space = p;
    if (col >= width && last_space) {
      *last_space = '\n';
      col = (int)(p - last_space);
      last_space = NULL;
    }
  }
  return hidden;
}

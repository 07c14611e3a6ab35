/* Fitting the default `loom runs` table to the terminal: while the table is wider than the
 * terminal, drop the column that says least and name the dropped columns in a note. What a
 * column says depends on the rows listed, not on its position: a column whose value is the
 * same in every row (status "finished" everywhere, the same step count) says nothing a
 * one-line note cannot ("same in every row: status finished, steps 40"), so it goes first;
 * the main result (final_valid_loss when the runs have one, else final_loss) and the config
 * keys and custom metrics that differ between the rows (a sweep's swept keys) stay longest.
 * run_id and the --sort-by column are always kept, name too unless every run id starts with
 * it, and status while it differs; a column named in --filter outranks the swept keys.
 * --show columns are printed as asked (this is not called). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/filter.h"
#include "loom/runs.h"

enum { KEEP = 100 }; /* never dropped */

/* Every listed run's id is its name followed by '_' (the run directory's name): a name
 * column repeats what the id column shows. */
static bool names_in_ids(const loom_runs_table *t, const loom_runs_view *v) {
  int id = loom_runs_find_column(t, "run_id"), name = loom_runs_find_column(t, "name");
  if (id < 0 || name < 0) return loom_err_clear(), false;
  for (int r = 0; r < v->nrows; r++) {
    const loom_value *i = loom_runs_cell(t, v->rows[r], id);
    const loom_value *n = loom_runs_cell(t, v->rows[r], name);
    if (i->type != LOOM_VAL_TEXT || n->type != LOOM_VAL_TEXT) return false;
    size_t len = strlen(n->s);
    if (strncmp(i->s, n->s, len) || i->s[len] != '_') return false;
  }
  return true;
}

/* Column c of the view holds the same value in every listed row (and there are two or more:
 * one row is compared with nothing). */
static bool same_everywhere(const loom_runs_table *t, const loom_runs_view *v, int c) {
  if (v->nrows < 2) return false;
  const loom_value *first = loom_runs_cell(t, v->rows[0], v->cols[c]);
  for (int r = 1; r < v->nrows; r++)
    if (loom_value_cmp(first, loom_runs_cell(t, v->rows[r], v->cols[c]))) return false;
  return true;
}

/* The filter expression names this column (as a whole word: "training.lr" is not found in
 * "training.lr_schedule"). */
static bool in_filter(const char *filter, const char *name) {
  size_t n = strlen(name);
  for (const char *p = filter ? strstr(filter, name) : NULL; p; p = strstr(p + 1, name)) {
    bool start = p == filter || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '.');
    char e = p[n];
    if (start && !(isalnum((unsigned char)e) || e == '_' || e == '.')) return true;
  }
  return false;
}

/* Larger: kept longer; KEEP: never dropped. */
static int priority(const loom_runs_table *t, const loom_runs_view *v, int c,
                    const loom_runs_query *q, bool name_in_id, const char *main_result) {
  const loom_runs_column *col = &t->cols[v->cols[c]];
  const char *n = col->name;
  if (!strcmp(n, "run_id") || (q && q->sort_by && !strcmp(n, q->sort_by))) return KEEP;
  if (!strcmp(n, "name")) return name_in_id ? 0 : KEEP; /* the id already says it */
  bool same = same_everywhere(t, v, c);
  if (!strcmp(n, "status")) return same ? 16 : KEEP;
  if (q && in_filter(q->filter, n)) return 70;
  if (col->kind == LOOM_COL_CONFIG || col->kind == LOOM_COL_CUSTOM) return same ? 15 : 60;
  /* the main result (the validation loss when the runs have one, else the training loss)
   * before the keys that differ, the other results after them */
  static const char *const results[] = {"final_valid_loss", "final_loss", "steps", NULL};
  for (int i = 0; results[i]; i++)
    if (!strcmp(n, results[i]))
      return same                   ? 14
             : !strcmp(n, main_result) ? 62
                                    : 58 - i;
  if (same) return 5;
  if (!strcmp(n, "sweep") || !strcmp(n, "duration_s")) return 30;
  if (col->kind == LOOM_COL_METRIC) return 20;
  return 10; /* start_time, ranks, ... */
}

/* Append ", text" (or text) to list. */
static void add(char *list, size_t size, const char *text) {
  size_t len = strlen(list);
  snprintf(list + len, size - len, "%s%s", len ? ", " : "", text);
}

/* Wrap text at spaces to width columns, in place. */
static void wrap(char *text, int width) {
  int col = 0;
  char *last_space = NULL;
  for (char *p = text; *p; p++, col++) {
    if (*p == '\n') col = -1, last_space = NULL;
    else if (*p == ' ') last_space = p;
    if (col >= width && last_space) {
      *last_space = '\n';
      col = (int)(p - last_space);
      last_space = NULL;
    }
  }
}

int loom_runs_fit(const loom_runs_table *t, loom_runs_view *v, int width,
                  const loom_runs_query *q, char *note, size_t note_size) {
  note[0] = 0;
  if (width <= 0 || v->ncols == 0) return 0;
  int *w = loom_malloc(sizeof(int) * (size_t)v->ncols), total = 0, hidden = 0, nsame = 0;
  int *prio = loom_malloc(sizeof(int) * (size_t)v->ncols);
  bool name_in_id = names_in_ids(t, v);
  const char *main_result = "final_loss";
  for (int c = 0; c < v->ncols; c++)
    if (!strcmp(t->cols[v->cols[c]].name, "final_valid_loss")) main_result = "final_valid_loss";
  for (int c = 0; c < v->ncols; c++) {
    total += (w[c] = loom_runs_column_width(t, v, c)) + (c ? 2 : 0);
    prio[c] = priority(t, v, c, q, name_in_id, main_result);
  }
  char names[1024] = "", same[1024] = "";
  while (total > width) {
    int drop = -1; /* the lowest priority; of equals, the rightmost */
    for (int c = 0; c < v->ncols; c++)
      if (prio[c] < KEEP && (drop < 0 || prio[c] <= prio[drop])) drop = c;
    if (drop < 0) break; /* only what is always kept is left */
    const char *n = t->cols[v->cols[drop]].name;
    if (same_everywhere(t, v, drop) && strcmp(n, "name")) {
      char buf[64];
      const loom_value *val = loom_runs_cell(t, v->rows[0], v->cols[drop]);
      char *text = loom_sprintf("%s %s", n, loom_value_text(val, buf, sizeof buf));
      add(same, sizeof same, text);
      free(text);
      nsame++;
    } else {
      add(names, sizeof names, n);
      hidden++;
    }
    total -= w[drop] + 2;
    int after = v->ncols - drop - 1;
    memmove(w + drop, w + drop + 1, sizeof(int) * (size_t)after);
    memmove(prio + drop, prio + drop + 1, sizeof(int) * (size_t)after);
    memmove(v->cols + drop, v->cols + drop + 1, sizeof(int) * (size_t)after);
    v->ncols--;
  }
  free(w), free(prio);
  if (!hidden && !nsame) return 0;
  char *hid = hidden ? loom_sprintf("(%d column%s hidden to fit %d characters: %s; show them with "
                                    "--show COL,... or --all-columns, or set COLUMNS wider)",
                                    hidden, hidden == 1 ? "" : "s", width, names)
                     : loom_strdup("");
  snprintf(note, note_size, "%s%s%s%s%s", nsame ? "(same in every row: " : "", same,
           nsame ? ")" : "", nsame && hidden ? "\n" : "", hid);
  free(hid);
  wrap(note, width);
  return hidden + nsame;
}

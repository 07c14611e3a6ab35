/* `loom runs show` and `loom runs compare`: one run's fields, metrics, custom metrics, config
 * (keys that differ from the defaults), files and checkpoints; or several runs side by side
 * (config keys that differ between them, then a metrics table). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "loom/config_schema.h"
#include "loom/core.h"
#include "loom/runs.h"

static const char *cell_text(const loom_runs_table *t, int row, const char *col, char *buf,
                             size_t n) {
  int j = loom_runs_find_column(t, col);
  if (j < 0) {
    loom_err_clear();
    return "";
  }
  return loom_value_text(loom_runs_cell(t, row, j), buf, n);
}

static void print_group(FILE *out, const loom_runs_table *t, int row, loom_col_kind kind,
                        const char *title) {
  bool any = false;
  char buf[64];
  for (int j = 0; j < t->ncols; j++) {
    if (t->cols[j].kind != kind) continue;
    const loom_value *v = loom_runs_cell(t, row, j);
    if (v->type == LOOM_VAL_NULL) continue;
    if (!any) fprintf(out, "%s\n", title);
    any = true;
    fprintf(out, "  %-22s %s\n", t->cols[j].name, loom_value_text(v, buf, sizeof buf));
  }
}

static void print_config(FILE *out, const loom_runs_table *t, int row, const char *run_dir) {
  loom_config d;
  loom_config_defaults(&d);
  int same = 0;
  char a[64], b[64];
  fprintf(out, "config (keys that differ from the defaults):\n");
  for (int j = 0; j < t->ncols; j++) {
    if (t->cols[j].kind != LOOM_COL_CONFIG) continue;
    const loom_config_key *k = loom_config_key_find(t->cols[j].name);
    const loom_value *v = loom_runs_cell(t, row, j);
    loom_value def = k ? loom_config_cell(&d, k) : (loom_value){.type = LOOM_VAL_NULL};
    if (k && !loom_value_cmp(v, &def)) {
      same++;
      continue;
    }
    /* an empty default (data.tokenizer, run.notes) is said in words, not as "(default )" */
    const char *dt = k ? loom_value_text(&def, b, sizeof b) : NULL;
    char *note = !k     ? loom_strdup("(a user key)")
                 : dt[0] ? loom_sprintf("(default %s)", dt)
                         : loom_strdup("(default: empty)");
    fprintf(out, "  %-36s %-20s %s\n", t->cols[j].name, loom_value_text(v, a, sizeof a), note);
    free(note);
  }
  fprintf(out, "  (%d more keys at their defaults; the whole config: %s/config.yaml)\n", same,
          run_dir);
}

static int by_step(const void *x, const void *y) {
  const char *a = *(char *const *)x, *b = *(char *const *)y;
  bool fa = !strncmp(a, "final", 5), fb = !strncmp(b, "final", 5);
  if (fa != fb) return fa ? 1 : -1;
  long sa = atol(a + strcspn(a, "0123456789")), sb = atol(b + strcspn(b, "0123456789"));
  return sa < sb ? -1 : sa > sb;
}

static void print_checkpoints(FILE *out, const char *run_dir) {
  DIR *d = opendir(run_dir);
  char **names = NULL;
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    bool ckpt = !strncmp(e->d_name, "checkpoint_", 11) || !strcmp(e->d_name, "final_checkpoint");
    if (!ckpt || strstr(e->d_name, ".tmp") || strstr(e->d_name, ".old.")) continue; /* in flight */
    names = loom_realloc(names, (size_t)(n + 1), sizeof(char *));
    names[n++] = loom_strdup(e->d_name);
  }
  if (d) closedir(d);
  qsort(names, (size_t)n, sizeof *names, by_step);
  fprintf(out, "checkpoints:%s\n", n ? "" : " (none)");
  for (int i = 0; i < n; i++) {
    fprintf(out, "  %s/%s:", run_dir, names[i]);
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors",
                                        "gradients.safetensors", NULL};
    for (int f = 0; files[f]; f++) {
      char *p = loom_sprintf("%s/%s/%s", run_dir, names[i], files[f]);
      struct stat st;
      if (!stat(p, &st)) fprintf(out, " %s (%.1f MiB)", files[f], (double)st.st_size / 1048576.0);
      free(p);
    }
    fprintf(out, "\n");
    free(names[i]);
  }
  free(names);
}

void loom_runs_show(FILE *out, const loom_runs_table *t, int row) {
  char buf[64], dir[4096];
  snprintf(dir, sizeof dir, "%s", cell_text(t, row, "run_dir", buf, sizeof buf));
  print_group(out, t, row, LOOM_COL_RUN, "run:");
  print_group(out, t, row, LOOM_COL_METRIC, "metrics:");
  print_group(out, t, row, LOOM_COL_CUSTOM, "custom metrics:");
  print_config(out, t, row, dir);
  fprintf(out, "files:\n");
  static const char *const files[] = {"train.log", "metrics.jsonl", "summary.json",
                                      "config.yaml", NULL};
  for (int f = 0; files[f]; f++) {
    char *p = loom_sprintf("%s/%s", dir, files[f]);
    fprintf(out, "  %-14s %s%s\n", files[f], p, loom_path_exists(p) ? "" : " (missing)");
    free(p);
  }
  print_checkpoints(out, dir);
}

/* Label of a run in compare's headers: its name when that is unique, else its id. */
static const char *label(const loom_runs_table *t, const int *rows, int n, int i, char *buf,
                         size_t cap) {
  char tmp[64], tmp2[64];
  const char *name = cell_text(t, rows[i], "name", tmp, sizeof tmp);
  bool unique = *name;
  for (int k = 0; k < n && unique; k++)
    if (k != i && !strcmp(name, cell_text(t, rows[k], "name", tmp2, sizeof tmp2))) unique = false;
  snprintf(buf, cap, "%s", unique ? name : cell_text(t, rows[i], "run_id", tmp2, sizeof tmp2));
  return buf;
}

static void print_row(FILE *out, const char *head, int hw, char cells[][64], int n, int cw) {
  fprintf(out, "%-*s", hw, head);
  for (int i = 0; i < n; i++) fprintf(out, "  %*s", cw, cells[i]);
  fprintf(out, "\n");
}

void loom_runs_compare(FILE *out, const loom_runs_table *t, const int *rows, int n) {
  char (*cells)[64] = loom_calloc((size_t)n, 64), (*vals)[64] = loom_calloc((size_t)n, 64);
  int cw = 12, hw = 24;
  for (int i = 0; i < n; i++) {
    label(t, rows, n, i, cells[i], 64);
    if ((int)strlen(cells[i]) > cw) cw = (int)strlen(cells[i]);
  }
  for (int i = 0; i < n; i++) fprintf(out, "run %d: %s\n", i + 1, cells[i]);
  fprintf(out, "\n");
  for (int pass = 0; pass < 2; pass++) {
    bool header = false;
    for (int j = 0; j < t->ncols; j++) {
      loom_col_kind k = t->cols[j].kind;
      bool want = pass == 0 ? k == LOOM_COL_CONFIG
                            : (k == LOOM_COL_METRIC || k == LOOM_COL_CUSTOM ||
                               !strcmp(t->cols[j].name, "status"));
      if (!want) continue;
      bool differs = false, any = false;
      for (int i = 0; i < n; i++) {
        const loom_value *v = loom_runs_cell(t, rows[i], j);
        any |= v->type != LOOM_VAL_NULL;
        differs |= loom_value_cmp(v, loom_runs_cell(t, rows[0], j)) != 0;
      }
      if ((pass == 0 && !differs) || (pass == 1 && !any)) continue;
      if (!header) {
        for (int i = 0; i < n; i++) snprintf(vals[i], 64, "run %d", i + 1);
        fprintf(out, "%s\n", pass == 0 ? "config differences:" : "metrics:");
        print_row(out, pass == 0 ? "key" : "metric", hw + 12 * (pass == 0), vals, n, cw);
        header = true;
      }
      for (int i = 0; i < n; i++) {
        const loom_value *v = loom_runs_cell(t, rows[i], j);
        char tmp[64];
        if (v->type == LOOM_VAL_REAL) snprintf(vals[i], 64, "%.6g", v->r);
        else if (v->type == LOOM_VAL_NULL) snprintf(vals[i], 64, "-");
        else snprintf(vals[i], 64, "%.63s", loom_value_text(v, tmp, sizeof tmp));
      }
      print_row(out, t->cols[j].name, hw + 12 * (pass == 0), vals, n, cw);
    }
    if (pass == 0 && !header) fprintf(out, "config differences: none\n");
    fprintf(out, "\n");
  }
  free(cells);
  free(vals);
}

/* `loom runs`: the run registry from the command line. Lists runs with filter/sort/column
 * selection (table, CSV or JSON), shows one run, compares runs, adds custom metrics,
 * exports CSV and plots metric curves. The work is in src/runs/ and src/registry/;
 * this file parses arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/core.h"
#include "loom/plot.h"
#include "loom/registry.h"
#include "loom/runs.h"
#include "loom/serve.h"
#include "loom/runs_diff.h"

/* The options every subcommand but diff takes, and the list options (list, export, serve). */
static const char registry_help[] =
    "registry (default runs/registry.db, or $LOOM_REGISTRY):\n"
    "  --runs-dir DIR          use DIR/registry.db (the runs' run.output_dir)\n"
    "  --db FILE               use this database file\n"
    "  --heartbeat-timeout S   running runs silent for S seconds count as crashed\n"
    "                          (default 600, or $LOOM_HEARTBEAT_TIMEOUT)\n";
static const char list_help[] =
    "list options:\n"
    "  --filter EXPR           e.g. \"training.lr > 1e-4 AND status = 'finished'\"; given\n"
    "                          several times, a run must match all of them (AND)\n"
    "                          (=, !=, <, <=, >, >=, LIKE, AND, OR, NOT, IS NULL,\n"
    "                          + - * /, 'text', dotted config keys)\n"
    "  --sweep NAME            only runs of this sweep\n"
    "  --sort-by COL           sort (numbers numerically, empty last); --descending\n"
    "  --show COL...           exactly these columns (also comma-separated)\n"
    "  --hide COL...           drop these columns\n"
    "  --all-columns           every column (all config keys)\n"
    "  --limit N               at most N rows (after sorting)\n"
    "  --format table|csv|json output format (default table)\n"
    "  --list-columns          every column name and its kind\n";
static const char columns_help[] =
    "Default columns: run fields and metrics that are set, custom metrics, and the\n"
    "config keys whose values differ between the listed runs; the table fits the\n"
    "terminal ($COLUMNS, else its width, else 100 characters): columns with the same value\n"
    "in every row go first (their value said in a note), the keys and results that differ\n"
    "last; run_id and the --sort-by column always stay. Run ids and names are never cut.\n";
static const char id_help[] = "ID: a run id, a unique prefix of one, or a unique run name.\n\n";

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom runs [list] [options]      list runs of the registry\n"
          "       loom runs show ID               config, metrics, checkpoints, log path\n"
          "       loom runs compare ID ID...      config differences and a metrics table\n"
          "       loom runs set-metric ID KEY=VALUE...  add custom metrics to a run\n"
          "       loom runs delete ID... [--files]  remove runs from the registry (--files: and\n"
          "                        their run directories); running runs are refused\n"
          "       loom runs gc [--dry-run]  drop the rows of runs whose run directory is gone\n"
          "                        (shown with status 'missing'); --dry-run: only list them\n"
          "       loom runs export --csv FILE [list options]   the table for pandas\n"
          "       loom runs plot ID... [--metric loss] [--x step|time|tokens] [--out F.svg|.png]\n"
          "                        [--log-y] [--title TEXT]   curves of several runs (SVG or PNG)\n"
          "       loom runs serve [--port 8765] [--host 127.0.0.1] [--sweeps-dir DIR] [list options]\n"
          "                        live web dashboard of the registry (--port 0: any free port;\n"
          "                        list options: the view the printed link opens)\n\n"
          "       loom runs diff A B [--metric loss] [--rtol 1e-5] [--atol 0] [--out F.svg|F.png]\n"
          "                        [--worst 5] [--common-steps]   per-step differences of one\n"
          "                        metric; exit 0 same, 1 different, 2 error (see --help there)\n\n"
          "Options go before or after the subcommand; 'loom runs <subcommand> --help' names the\n"
          "ones each takes.\n%s%s%s%s",
          id_help, registry_help, list_help, columns_help);
}

static void usage_list(FILE *out) {
  fprintf(out, "usage: loom runs [list] [options]\n\nList the runs of the registry as a table, CSV "
          "or JSON.\n\n%s%s%s", registry_help, list_help, columns_help);
}
static void usage_show(FILE *out) {
  fprintf(out, "usage: loom runs show ID [--runs-dir DIR | --db FILE]\n\nOne run: its fields, "
          "metrics, custom metrics, config, checkpoints and files.\n%s%s", id_help,
          registry_help);
}
static void usage_compare(FILE *out) {
  fprintf(out, "usage: loom runs compare ID ID... [--runs-dir DIR | --db FILE]\n\nThe config "
          "keys that differ between the runs, then a table of their metrics.\n%s%s", id_help,
          registry_help);
}
static void usage_set_metric(FILE *out) {
  fprintf(out, "usage: loom runs set-metric ID KEY=VALUE... [--runs-dir DIR | --db FILE]\n\nAdd "
          "custom metrics to a run: registry columns that list, --filter and --sort-by\n"
          "take; the name of a built-in column is refused.\n%s%s", id_help, registry_help);
}
static void usage_export(FILE *out) {
  fprintf(out, "usage: loom runs export --csv FILE [list options]\n\nWrite the runs table (the "
          "rows and columns the list options select) as CSV,\nfor pandas.\n\n"
          "  --csv FILE              where to write (required)\n%s%s", registry_help, list_help);
}
static void usage_plot(FILE *out) {
  fprintf(out,
          "usage: loom runs plot ID... [--metric loss] [--x step|time|tokens]\n"
          "                      [--out F.svg|F.png] [--log-y] [--title TEXT]\n\n"
          "Curves of one metric of several runs (their metrics.jsonl) in one plot.\n\n"
          "  --metric NAME           the metric (default loss; e.g. val_loss, grad_norm, lr)\n"
          "  --x step|time|tokens    the x axis (default step)\n"
          "  --out, --output, -o FILE  SVG, or PNG for a .png name (default <metric>.svg)\n"
          "  --log-y                 logarithmic y axis\n"
          "  --title TEXT            the title (default '<metric> per <x>')\n%s%s",
          id_help, registry_help);
}
static void usage_serve(FILE *out) {
  fprintf(out,
          "usage: loom runs serve [--port 8765] [--host 127.0.0.1] [--sweeps-dir DIR]\n"
          "                       [list options]\n\n"
          "A live web dashboard of the registry, until interrupted (Ctrl-C): the runs table,\n"
          "metric curves, config differences and sweeps. The link it prints opens the view\n"
          "the list options select.\n\n"
          "  --port N                the port (default 8765; 0: any free port, printed)\n"
          "  --host ADDR             the address to bind (default 127.0.0.1)\n"
          "  --sweeps-dir DIR        another directory holding sweep_<time>/ directories\n"
          "                          (default: ./logs, where 'loom sweep run' writes)\n%s%s",
          registry_help, list_help);
}
static void usage_delete(FILE *out) {
  fprintf(out, "usage: loom runs delete ID... [--files]\n\nRemove runs from the registry (every "
          "ID is resolved before anything is deleted);\nrunning runs are refused.\n\n"
          "  --files                 also remove their run directories\n%s%s", id_help,
          registry_help);
}
static void usage_gc(FILE *out) {
  fprintf(out, "usage: loom runs gc [--dry-run]\n\nDrop the rows of runs whose run directory is "
          "gone (listed with status 'missing').\n\n"
          "  --dry-run               only list them\n%s", registry_help);
}

typedef struct {
  const char *db, *runs_dir;
  double timeout;
  loom_runs_query q;
  loom_runs_format format;
  bool list_columns, files, dry_run;
  char *filters; /* every --filter, joined with AND */
  int nfilters;
  const char *csv_out;
  /* plot */
  const char *metric, *x, *output, *title;
  bool log_y;
  char **ids;
  int nids;
  /* serve */
  const char *host, *sweeps_dir;
  long port;
  /* diff */
  loom_runs_diff_tol tol;
  int worst;
  bool common_steps;
} runs_args;

static int bad(const char *fmt, const char *a) {
  fprintf(stderr, "loom runs: ");
  fprintf(stderr, fmt, a);
  fprintf(stderr, " (see loom runs --help)\n");
  return 2;
}

static void push(char ***list, int *n, char *s) {
  *list = loom_realloc(*list, (size_t)(*n + 1), sizeof(char *));
  (*list)[(*n)++] = s;
}

/* Options with values that need more than storing (the parser calls these per value). */
static int on_filter(const char *v, void *ctx) { /* every --filter, joined with AND */
  runs_args *a = ctx;
  /* one filter stays as given (its error positions and the dashboard link show it) */
  char *all = !a->q.filter   ? loom_strdup(v)
              : a->nfilters == 1 ? loom_sprintf("(%s) AND (%s)", a->q.filter, v)
                                 : loom_sprintf("%s AND (%s)", a->q.filter, v);
  free(a->filters);
  a->q.filter = a->filters = all;
  a->nfilters++;
  return 0;
}
static int on_show(const char *v, void *ctx) {
  runs_args *a = ctx;
  push(&a->q.show, &a->q.nshow, (char *)v);
  return 0;
}
static int on_hide(const char *v, void *ctx) {
  runs_args *a = ctx;
  push(&a->q.hide, &a->q.nhide, (char *)v);
  return 0;
}
static int on_port(const char *v, void *ctx) {
  char *end;
  long port = strtol(v, &end, 10);
  if (*end || !v[0] || port < 0 || port > 65535)
    return loom_err("--port takes a number 0..65535 (0: any free port), not '%s'", v);
  ((runs_args *)ctx)->port = port;
  return 0;
}
static int on_limit(const char *v, void *ctx) {
  char *end;
  long n = strtol(v, &end, 10);
  if (*end || !v[0] || n < 1) return loom_err("--limit takes a whole number >= 1, not '%s'", v);
  ((runs_args *)ctx)->q.limit = n;
  return 0;
}
static int on_timeout(const char *v, void *ctx) {
  char *end;
  double t = strtod(v, &end);
  if (*end || !v[0] || t <= 0) return loom_err("--heartbeat-timeout takes seconds > 0, not '%s'", v);
  ((runs_args *)ctx)->timeout = t;
  return 0;
}
static int on_format(const char *v, void *ctx) {
  return loom_runs_format_parse(v, &((runs_args *)ctx)->format);
}

/* --rtol/--atol X (numbers >= 0), --worst N (a whole number >= 0): runs diff */
static int diff_tol(const char *v, double *dst) {
  char *end;
  double x = strtod(v, &end);
  if (end == v || *end || !(x >= 0)) return loom_err("takes a number >= 0, not '%s'", v);
  *dst = x;
  return 0;
}
static int on_rtol(const char *v, void *ctx) { return diff_tol(v, &((runs_args *)ctx)->tol.rtol); }
static int on_atol(const char *v, void *ctx) { return diff_tol(v, &((runs_args *)ctx)->tol.atol); }
static int on_worst(const char *v, void *ctx) {
  char *end;
  long n = strtol(v, &end, 10);
  if (end == v || *end || n < 0 || n > 1000000)
    return loom_err("takes a whole number >= 0, not '%s'", v);
  ((runs_args *)ctx)->worst = (int)n;
  return 0;
}

/* Option groups: a subcommand's table is --db, --runs-dir and its groups. */
enum {
  G_HEARTBEAT = 1, /* the subcommands that load the registry's table (all but diff) */
  G_LIST = 2,
  G_CSV = 4,
  G_PLOT = 8,
  G_SERVE = 16,
  G_FILES = 32,
  G_DRY_RUN = 64,
  G_DIFF = 128,
  G_ALL = 255
};
enum { MAX_OPTS = 40 };

/* The table of the groups, storing into a; ends with {0}. */
static void runs_table(runs_args *a, unsigned groups, loom_cli_opt *t) {
  const struct {
    unsigned group; /* 0: every subcommand */
    loom_cli_opt opt;
  } all[] = {
      {0, LOOM_OPT_VALUE("--db", &a->db)},
      {0, LOOM_OPT_VALUE("--runs-dir", &a->runs_dir)},
      {G_HEARTBEAT, LOOM_OPT_EACH("--heartbeat-timeout", on_timeout)},
      {G_LIST, LOOM_OPT_EACH("--filter", on_filter)},
      {G_LIST, LOOM_OPT_VALUE("--sweep", &a->q.sweep)},
      {G_LIST, LOOM_OPT_VALUE("--sort-by", &a->q.sort_by)},
      {G_LIST, LOOM_OPT_FLAG("--descending", &a->q.descending)},
      {G_LIST, {.name = "--show", .each = on_show, .greedy = true}},
      {G_LIST, {.name = "--hide", .each = on_hide, .greedy = true}},
      {G_LIST, LOOM_OPT_FLAG("--all-columns", &a->q.all_columns)},
      {G_LIST, LOOM_OPT_EACH("--limit", on_limit)},
      {G_LIST, LOOM_OPT_EACH("--format", on_format)},
      {G_LIST, LOOM_OPT_FLAG("--list-columns", &a->list_columns)},
      {G_CSV, LOOM_OPT_VALUE("--csv", &a->csv_out)},
      {G_PLOT | G_DIFF, LOOM_OPT_VALUE("--metric", &a->metric)},
      {G_PLOT, LOOM_OPT_VALUE("--x", &a->x)},
      /* --output, -o and --out name the plot file of plot and diff alike */
      {G_PLOT | G_DIFF, {.name = "--output", .alias = "-o", .value = &a->output}},
      {G_PLOT | G_DIFF, LOOM_OPT_VALUE("--out", &a->output)},
      {G_PLOT, LOOM_OPT_VALUE("--title", &a->title)},
      {G_PLOT, LOOM_OPT_FLAG("--log-y", &a->log_y)},
      {G_SERVE, LOOM_OPT_EACH("--port", on_port)},
      {G_SERVE, LOOM_OPT_VALUE("--host", &a->host)},
      {G_SERVE, LOOM_OPT_VALUE("--sweeps-dir", &a->sweeps_dir)},
      {G_FILES, LOOM_OPT_FLAG("--files", &a->files)},
      {G_DRY_RUN, LOOM_OPT_FLAG("--dry-run", &a->dry_run)},
      {G_DIFF, LOOM_OPT_EACH("--rtol", on_rtol)},
      {G_DIFF, LOOM_OPT_EACH("--atol", on_atol)},
      {G_DIFF, LOOM_OPT_EACH("--worst", on_worst)},
      {G_DIFF, LOOM_OPT_FLAG("--common-steps", &a->common_steps)},
  };
  int n = 0;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!all[i].group || (all[i].group & groups)) t[n++] = all[i].opt;
  t[n] = (loom_cli_opt){0};
}

static void runs_args_init(runs_args *a) {
  *a = (runs_args){.format = LOOM_FMT_TABLE, .timeout = loom_registry_heartbeat_timeout(),
                   .metric = "loss", .x = "step", .host = "127.0.0.1", .port = 8765,
                   .tol = {LOOM_RUNS_DIFF_RTOL, LOOM_RUNS_DIFF_ATOL}, .worst = 5};
}

static void runs_args_free(runs_args *a) {
  free(a->q.show), free(a->q.hide), free(a->ids), free(a->filters);
}

/* Parse argv[1..argc) (the subcommand's name taken out) with the table of the groups as
 * `loom <command>`; the positional arguments go to a->ids. A LOOM_CLI_ code. */
static int parse(const char *command, unsigned groups, int argc, char **argv, runs_args *a) {
  loom_cli_opt opts[MAX_OPTS];
  runs_table(a, groups, opts);
  loom_cli_parser p = {.command = command, .opts = opts, .ctx = a};
  int rc = loom_cli_parse(&p, argc, argv, 1);
  a->ids = p.pos;
  a->nids = p.npos;
  return rc;
}

/* Where the registry is: --db, --runs-dir, else $LOOM_REGISTRY or runs/registry.db. */
static char *registry_file(const runs_args *a) {
  return a->db         ? loom_strdup(a->db)
         : a->runs_dir ? loom_sprintf("%s/registry.db", a->runs_dir) /* over $LOOM_REGISTRY */
                       : loom_registry_path("runs");
}

static int open_registry(const runs_args *a, loom_registry **r) {
  char *path = registry_file(a);
  int rc = 0;
  if (!loom_path_exists(path))
    rc = loom_err("no run registry at '%s'; runs register there when 'loom train' starts (their "
                  "run.output_dir). Use --runs-dir DIR or --db FILE for another one", path);
  if (!rc) rc = loom_registry_open(r, path);
  free(path);
  return rc;
}

static int load(const runs_args *a, loom_registry **r, loom_runs_table *t) {
  if (open_registry(a, r)) return -1;
  if (loom_registry_detect_crashed(*r, a->timeout) < 0 || loom_runs_load(*r, t)) {
    loom_registry_close(*r);
    *r = NULL;
    return -1;
  }
  return 0;
}

/* `loom runs [list]` before any run registered: says so and where it looked (true), or false
 * when the registry exists. The table format says it on stdout; CSV and JSON print an empty
 * document there and say it on stderr. */
static bool no_registry(const runs_args *a) {
  char *path = registry_file(a);
  bool missing = !loom_path_exists(path);
  if (missing) {
    FILE *say = a->format == LOOM_FMT_TABLE && !a->list_columns ? stdout : stderr;
    if (a->format == LOOM_FMT_JSON && !a->list_columns) printf("[]\n");
    fprintf(say, "no runs yet: no run registry at '%s' (runs register there when 'loom train' "
            "starts; their run.output_dir). --runs-dir DIR or --db FILE: another one\n", path);
  }
  free(path);
  return missing;
}

/* Row of the run a user named. */
static int find_row(loom_registry *r, const loom_runs_table *t, const char *given) {
  char *id;
  if (loom_registry_resolve(r, given, &id)) return -1;
  int col = loom_runs_find_column(t, "run_id"), row = -1;
  for (int i = 0; i < t->nrows && row < 0; i++) {
    const loom_value *v = loom_runs_cell(t, i, col);
    if (v->type == LOOM_VAL_TEXT && !strcmp(v->s, id)) row = i;
  }
  free(id);
  return row >= 0 ? row : loom_err("run '%s' vanished from the registry", given);
}

static int do_list(runs_args *a, loom_registry *r, loom_runs_table *t) {
  (void)r;
  if (a->list_columns) {
    loom_runs_list_columns(stdout, t);
    return 0;
  }
  loom_runs_view v;
  if (loom_runs_select(t, &a->q, &v)) return -1;
  int rc = 0;
  if (a->csv_out) {
    FILE *f = fopen(a->csv_out, "w");
    if (!f) rc = loom_err("cannot write '%s'", a->csv_out);
    else {
      loom_runs_print(f, t, &v, LOOM_FMT_CSV);
      if (fclose(f)) rc = loom_err("cannot write '%s'", a->csv_out);
      else printf("wrote %d runs x %d columns to %s\n", v.nrows, v.ncols, a->csv_out);
    }
  } else {
    char note[1400] = "";
    /* the default columns fit the terminal; --show / --all-columns print what was asked */
    if (a->format == LOOM_FMT_TABLE && !a->q.nshow && !a->q.all_columns)
      loom_runs_fit(t, &v, loom_cli_terminal_width(), &a->q, note, sizeof note);
    loom_runs_print(stdout, t, &v, a->format);
    if (note[0]) printf("%s\n", note);
  }
  loom_runs_view_free(&v);
  return rc;
}

static int do_show(runs_args *a, loom_registry *r, loom_runs_table *t) {
  if (a->nids != 1) return loom_err("show takes one run id");
  int row = find_row(r, t, a->ids[0]);
  if (row < 0) return -1;
  loom_runs_show(stdout, t, row);
  return 0;
}

static int do_compare(runs_args *a, loom_registry *r, loom_runs_table *t) {
  if (a->nids < 2) return loom_err("compare takes two or more run ids");
  int *rows = loom_malloc(sizeof(int) * (size_t)a->nids), rc = 0;
  for (int i = 0; i < a->nids && !rc; i++)
    if ((rows[i] = find_row(r, t, a->ids[i])) < 0) rc = -1;
  if (!rc) loom_runs_compare(stdout, t, rows, a->nids);
  free(rows);
  return rc;
}

static int do_set_metric(runs_args *a, loom_registry *r, loom_runs_table *t) {
  (void)t;
  if (a->nids < 2) return loom_err("usage: loom runs set-metric ID KEY=VALUE...");
  char *id;
  if (loom_registry_resolve(r, a->ids[0], &id)) return -1;
  int rc = 0;
  for (int i = 1; i < a->nids && !rc; i++) {
    char *kv = loom_strdup(a->ids[i]), *eq = strchr(kv, '=');
    if (!eq) rc = loom_err("'%s' is not KEY=VALUE", a->ids[i]);
    else {
      *eq = 0;
      rc = loom_registry_set_metric(r, id, kv, eq + 1);
      if (!rc) printf("%s: %s = %s\n", id, kv, eq + 1);
    }
    free(kv);
  }
  free(id);
  return rc;
}

static int do_plot(runs_args *a, loom_registry *r, loom_runs_table *t) {
  if (a->nids < 1) return loom_err("plot takes one or more run ids");
  loom_plot_curve *curves = loom_calloc((size_t)a->nids, sizeof *curves);
  loom_series *series = loom_calloc((size_t)a->nids, sizeof *series);
  char **names = loom_calloc((size_t)a->nids, sizeof *names);
  int rc = 0, dir_col = loom_runs_find_column(t, "run_dir"), name_col = loom_runs_find_column(t, "name");
  int id_col = loom_runs_find_column(t, "run_id");
  for (int i = 0; i < a->nids && !rc; i++) {
    int row = find_row(r, t, a->ids[i]);
    if (row < 0) {
      rc = -1;
      break;
    }
    const loom_value *dir = loom_runs_cell(t, row, dir_col), *name = loom_runs_cell(t, row, name_col);
    char *path = loom_sprintf("%s/metrics.jsonl", dir->type == LOOM_VAL_TEXT ? dir->s : ".");
    rc = loom_series_read(path, a->metric, a->x, &series[i]);
    free(path);
    bool name_unique = name->type == LOOM_VAL_TEXT;
    for (int k = 0; k < a->nids && name_unique; k++)
      if (k != i && !strcmp(a->ids[k], a->ids[i])) name_unique = false;
    names[i] = loom_strdup(name_unique ? name->s : loom_runs_cell(t, row, id_col)->s);
    curves[i] = (loom_plot_curve){names[i], series[i].x, series[i].y, series[i].n};
  }
  if (!rc) {
    char *out = a->output ? loom_strdup(a->output) : loom_sprintf("%s.svg", a->metric);
    char *title = a->title ? loom_strdup(a->title) : loom_sprintf("%s per %s", a->metric, a->x);
    loom_plot_opts o = {.title = title, .x_label = a->x, .y_label = a->metric, .log_y = a->log_y};
    size_t len = strlen(out);
    bool png = len > 4 && !strcasecmp(out + len - 4, ".png");
    rc = png ? loom_plot_png(out, curves, a->nids, &o) : loom_plot_svg(out, curves, a->nids, &o);
    if (!rc) printf("wrote %s (%d curve%s)\n", out, a->nids, a->nids == 1 ? "" : "s");
    free(out);
    free(title);
  }
  for (int i = 0; i < a->nids; i++) loom_series_free(&series[i]), free(names[i]);
  free(series), free(names), free(curves);
  return rc;
}

static int do_delete(runs_args *a, loom_registry *r, loom_runs_table *t) {
  (void)t;
  if (a->nids < 1) return loom_err("usage: loom runs delete ID... [--files]");
  char **ids = loom_calloc((size_t)a->nids, sizeof *ids);
  int rc = 0;
  for (int i = 0; i < a->nids && !rc; i++) /* every id resolves before anything is deleted */
    rc = loom_registry_resolve(r, a->ids[i], &ids[i]);
  for (int i = 0; i < a->nids && !rc; i++) {
    char *dir;
    rc = loom_registry_delete(r, ids[i], a->files, &dir);
    if (!rc) printf("deleted %s%s%s\n", ids[i], dir ? " and " : "", dir ? dir : "");
    free(dir);
  }
  for (int i = 0; i < a->nids; i++) free(ids[i]);
  free(ids);
  return rc;
}

static void print_gc(const char *id, const char *dir, void *ctx) {
  printf("%s %s (%s is gone)\n", *(bool *)ctx ? "would drop" : "dropped", id, dir);
}

static int do_gc(runs_args *a, loom_registry *r, loom_runs_table *t) {
  (void)t;
  if (a->nids) return loom_err("gc takes no run ids ('%s')", a->ids[0]);
  int n = loom_registry_gc(r, a->dry_run, print_gc, &a->dry_run);
  if (n < 0) return -1;
  printf("%s%d run%s whose run directory is gone\n", a->dry_run ? "would drop " : "dropped ", n,
         n == 1 ? "" : "s");
  return 0;
}

/* The dashboard; runs until SIGINT/SIGTERM. The registry was opened by load(): a missing one
 * is an error before any port is bound, and so is a bad filter, sort or column. */
static int do_serve(runs_args *a, loom_registry *r, loom_runs_table *t) {
  if (a->nids) return loom_err("serve takes no run ids ('%s')", a->ids[0]);
  char *db = loom_strdup(loom_registry_db_path(r));
  char *runs_dir = a->runs_dir ? loom_strdup(a->runs_dir) : loom_strdup(db);
  if (!a->runs_dir) { /* the directory holding the database */
    char *slash = strrchr(runs_dir, '/');
    if (slash) *slash = 0;
    else strcpy(runs_dir, ".");
  }
  if (!a->sweeps_dir && loom_is_dir("logs")) a->sweeps_dir = "logs"; /* where sweep run writes */
  if (a->sweeps_dir && !loom_is_dir(a->sweeps_dir)) {
    free(db), free(runs_dir);
    return loom_err("--sweeps-dir '%s' is not a directory", a->sweeps_dir);
  }
  /* list options open the page on that view; checked here so a bad filter is a CLI error */
  loom_runs_view v;
  if (loom_runs_select(t, &a->q, &v)) {
    free(db), free(runs_dir);
    return -1;
  }
  loom_runs_view_free(&v);
  char *view = loom_serve_view_fragment(&a->q);
  loom_serve_opts o = {a->host, (int)a->port, db, runs_dir, a->sweeps_dir, a->timeout, view};
  int rc = loom_serve_run(&o);
  free(db), free(runs_dir), free(view);
  return rc;
}

/* `loom runs diff A B`: its own options and exit codes (0 same, 1 different, 2 error). */
static void diff_usage(FILE *out) {
  fprintf(out,
          "usage: loom runs diff A B [--metric NAME] [--rtol X] [--atol X] [--out F.svg|F.png]\n"
          "                          [--worst N] [--common-steps] [--runs-dir DIR | --db FILE]\n\n"
          "Per-step differences of one metric (default loss; e.g. val_loss, grad_norm) between\n"
          "two runs' metrics.jsonl, aligned by step. A and B: run ids, unique prefixes or names\n"
          "(as for loom runs show), or run directories (holding metrics.jsonl).\n"
          "Same when |a - b| <= atol + rtol * |b| at every step both logged (numpy.allclose;\n"
          "b = run B) and both logged the same steps. Defaults rtol 1e-5, atol 0: fp32 runs of\n"
          "one config in two parallel layouts differ by rounding only (<= 1e-7 relative\n"
          "measured), a real difference moves the loss by > 1e-3.\n"
          "  --worst N        table of the N steps with the largest |a - b| (default 5, 0: none)\n"
          "  --common-steps   compare only the steps both runs logged (still listed)\n"
          "  --out, --output, -o FILE  plot: A's and B's curves, and below them log10 |B - A|\n"
          "                   per step in a panel of its own (SVG, or PNG for .png)\n"
          "Exit status: 0 same, 1 different, 2 error (unknown run, metric absent, bad option).\n");
}

/* A run directory as given, or the registry's run_dir of a run id / prefix / name. */
static int diff_locate(runs_args *a, loom_registry **r, const char *given, char **dir,
                       char **label) {
  char *metrics = loom_sprintf("%s/metrics.jsonl", given);
  bool is_dir = loom_path_exists(metrics);
  free(metrics);
  if (is_dir) {
    *dir = loom_strdup(given);
    *label = loom_strdup(given);
    return 0;
  }
  if (!*r && open_registry(a, r)) return -1;
  char *id;
  if (loom_registry_resolve(*r, given, &id)) return -1;
  loom_runs_table t = {0};
  int rc = loom_runs_load(*r, &t), row = -1, id_col = 0, dir_col = 0;
  if (!rc) id_col = loom_runs_find_column(&t, "run_id"), dir_col = loom_runs_find_column(&t, "run_dir");
  for (int i = 0; !rc && i < t.nrows && row < 0; i++)
    if (!strcmp(loom_runs_cell(&t, i, id_col)->s, id)) row = i;
  if (!rc && row < 0) rc = loom_err("run '%s' vanished from the registry", given);
  if (!rc && loom_runs_cell(&t, row, dir_col)->type != LOOM_VAL_TEXT)
    rc = loom_err("run %s has no run directory in the registry", id);
  if (!rc) {
    *dir = loom_strdup(loom_runs_cell(&t, row, dir_col)->s);
    *label = strcmp(given, id) ? loom_sprintf("%s (%s)", id, given) : loom_strdup(id);
  }
  free(id);
  loom_runs_free(&t);
  return rc;
}

/* The two runs and the options are in a (parsed as `loom runs diff`); exit status 0 same, 1
 * different, 2 error. */
static int do_diff(runs_args *a) {
  if (a->nids > 2) return bad("diff: takes two runs; '%s' is a third", a->ids[2]);
  if (a->nids != 2) return bad("%s", "diff: takes two runs, A and B");
  const char *ids[2] = {a->ids[0], a->ids[1]}, *out = a->output;
  loom_runs_diff_tol tol = a->tol;
  int worst = a->worst;
  bool common_only = a->common_steps;
  loom_registry *r = NULL;
  char *dir[2] = {NULL, NULL}, *label[2] = {NULL, NULL};
  loom_series s[2] = {{0}};
  int rc = 0;
  for (int k = 0; k < 2 && !rc; k++) {
    rc = diff_locate(a, &r, ids[k], &dir[k], &label[k]);
    if (!rc) {
      char *path = loom_sprintf("%s/metrics.jsonl", dir[k]);
      rc = loom_series_read(path, a->metric, "step", &s[k]);
      if (!rc && s[k].n == 0) rc = loom_err("'%s' has no steps logged", path);
      free(path);
    }
  }
  int status = 2;
  if (!rc) {
    loom_runs_diff d;
    loom_runs_diff_compute(&s[0], &s[1], &tol, &d);
    loom_runs_diff_print(stdout, &d, a->metric, label[0], label[1], &tol, common_only, worst);
    status = loom_runs_diff_ok(&d, common_only) ? 0 : 1;
    if (out && d.n == 0) fprintf(stderr, "loom runs diff: no plot: no step in common\n"), status = 2;
    else if (out && loom_runs_diff_plot(out, &d, a->metric, label[0], label[1])) rc = -1;
    else if (out) printf("wrote %s\n", out);
    loom_runs_diff_free(&d);
  }
  if (rc) fprintf(stderr, "loom runs diff: %s\n", loom_errmsg()), status = 2;
  for (int k = 0; k < 2; k++) loom_series_free(&s[k]), free(dir[k]), free(label[k]);
  loom_registry_close(r);
  return status;
}

int loom_cmd_runs(int argc, char **argv) {
  static const struct {
    const char *name;
    int (*fn)(runs_args *, loom_registry *, loom_runs_table *); /* NULL: diff */
    unsigned groups;
    void (*usage)(FILE *);
  } subs[] = {{"list", do_list, G_HEARTBEAT | G_LIST, usage_list},
              {"show", do_show, G_HEARTBEAT, usage_show},
              {"compare", do_compare, G_HEARTBEAT, usage_compare},
              {"set-metric", do_set_metric, G_HEARTBEAT, usage_set_metric},
              {"export", do_list, G_HEARTBEAT | G_LIST | G_CSV, usage_export},
              {"plot", do_plot, G_HEARTBEAT | G_PLOT, usage_plot},
              {"serve", do_serve, G_HEARTBEAT | G_LIST | G_SERVE, usage_serve},
              {"delete", do_delete, G_HEARTBEAT | G_FILES, usage_delete},
              {"gc", do_gc, G_HEARTBEAT | G_DRY_RUN, usage_gc},
              {"diff", NULL, G_DIFF, diff_usage}};
  enum { NSUB = sizeof subs / sizeof subs[0] };
  runs_args a;
  runs_args_init(&a);
  /* The subcommand is the first positional argument, after options or not ("loom runs --db F
   * show ID"); without one, list. */
  loom_cli_opt any[MAX_OPTS];
  runs_table(&a, G_ALL, any);
  int at = loom_cli_first_positional(any, argc, argv, 1), sub = -1;
  for (int k = 0; at > 0 && k < NSUB && sub < 0; k++)
    if (!strcmp(argv[at], subs[k].name)) sub = k;
  char **args = loom_calloc((size_t)argc + 1, sizeof *args);
  int nargs = 0;
  for (int i = 0; i < argc; i++)
    if (sub < 0 || i != at) args[nargs++] = argv[i];
  char command[32];
  snprintf(command, sizeof command, "runs%s%s", sub >= 0 ? " " : "",
           sub >= 0 ? subs[sub].name : "");
  int rc = parse(command, sub >= 0 ? subs[sub].groups : G_HEARTBEAT | G_LIST, nargs, args, &a);
  if (rc == LOOM_CLI_HELP) {
    if (sub >= 0) subs[sub].usage(stdout);
    else usage(stdout);
    rc = 0;
  } else if (rc) {
    rc = 2;
  } else if (sub >= 0 && !subs[sub].fn) {
    rc = do_diff(&a);
  } else if (sub < 0 && a.nids) {
    const char *names[NSUB + 1] = {0};
    for (int k = 0; k < NSUB; k++) names[k] = subs[k].name;
    fprintf(stderr, "loom runs: unknown subcommand '%s'%s (see loom runs --help)\n", a.ids[0],
            loom_cli_did_you_mean(a.ids[0], names));
    rc = 2;
  } else if (sub >= 0 && !strcmp(subs[sub].name, "export") && !a.csv_out) {
    rc = bad("%s", "export needs --csv FILE");
  } else if ((sub < 0 || !strcmp(subs[sub].name, "list")) && no_registry(&a)) {
    rc = 0; /* nothing trained yet: an empty list, not an error */
  } else {
    loom_registry *r = NULL;
    loom_runs_table t = {0};
    if (load(&a, &r, &t) || subs[sub < 0 ? 0 : sub].fn(&a, r, &t)) {
      fprintf(stderr, "loom %s: %s\n", command, loom_errmsg());
      rc = 1;
    }
    loom_runs_free(&t);
    loom_registry_close(r);
  }
  runs_args_free(&a);
  free(args);
  return rc;
}

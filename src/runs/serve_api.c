/* The dashboard's JSON API over the run registry: the run table (the CLI's loom_runs_select:
 * same filter language, sort, show/hide, default columns; also as the page's boot script), one
 * run's fields and traces, and the config diff of two runs; dispatch of every /api/ path.
 * Each request reloads the registry (and marks silent runs crashed) so the page sees live
 * state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "runs/serve_internal.h"

int serve_runs_load(const loom_serve_opts *o, serve_runs *s) {
  memset(s, 0, sizeof *s);
  if (!loom_path_exists(o->db_path))
    return loom_err("the run registry '%s' is gone (deleted since the server started?)", o->db_path);
  if (loom_registry_open(&s->r, o->db_path)) return -1;
  if (loom_registry_detect_crashed(s->r, o->heartbeat_timeout) < 0 || loom_runs_load(s->r, &s->t)) {
    serve_runs_free(s);
    return -1;
  }
  return 0;
}

void serve_runs_free(serve_runs *s) {
  loom_runs_free(&s->t);
  if (s->r) loom_registry_close(s->r);
  memset(s, 0, sizeof *s);
}

const char *serve_runs_text(const serve_runs *s, int row, const char *col) {
  int j = loom_runs_find_column(&s->t, col);
  if (j < 0) {
    loom_err_clear();
    return NULL;
  }
  const loom_value *v = loom_runs_cell(&s->t, row, j);
  return v->type == LOOM_VAL_TEXT ? v->s : NULL;
}

int serve_runs_find(serve_runs *s, const char *given) {
  char *id;
  if (loom_registry_resolve(s->r, given, &id)) return -1;
  int row = -1;
  for (int i = 0; i < s->t.nrows && row < 0; i++) {
    const char *rid = serve_runs_text(s, i, "run_id");
    if (rid && !strcmp(rid, id)) row = i;
  }
  free(id);
  return row >= 0 ? row : loom_err("run '%s' vanished from the registry", given);
}

int serve_runs_open_row(const loom_serve_opts *o, const char *given, serve_runs *s,
                        loom_serve_reply *out) {
  if (serve_runs_load(o, s)) {
    serve_reply_error(out, 500, loom_errmsg());
    return -1;
  }
  int row = serve_runs_find(s, given);
  if (row < 0) {
    serve_reply_error(out, 404, loom_errmsg());
    serve_runs_free(s);
  }
  return row;
}

json_t *serve_value_json(const loom_value *v) {
  switch (v->type) {
    case LOOM_VAL_INT: return json_integer(v->i);
    case LOOM_VAL_REAL: return isfinite(v->r) ? json_real(v->r) : json_null();
    case LOOM_VAL_TEXT: return json_string(v->s);
    default: return json_null();
  }
}

static const char *const kind_names[] = {"run", "metric", "config", "custom"};

/* GET /api/runs: the table as `loom runs --filter .. --sort-by .. --show .. --hide ..` */
static void api_runs(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                     loom_serve_reply *out) {
  loom_runs_query q = {0};
  char *show = (char *)arg(ctx, "show"), *hide = (char *)arg(ctx, "hide");
  const char *desc = arg(ctx, "desc"), *all = arg(ctx, "all"), *limit = arg(ctx, "limit");
  q.filter = arg(ctx, "filter");
  q.sweep = arg(ctx, "sweep");
  q.sort_by = arg(ctx, "sort");
  if (q.filter && !q.filter[0]) q.filter = NULL; /* an empty box filters nothing */
  if (q.sweep && !q.sweep[0]) q.sweep = NULL;
  if (q.sort_by && !q.sort_by[0]) q.sort_by = NULL;
  q.descending = desc && !strcmp(desc, "1");
  q.all_columns = all && !strcmp(all, "1");
  if (show && show[0]) q.show = &show, q.nshow = 1; /* comma-separated, as --show a,b */
  if (hide && hide[0]) q.hide = &hide, q.nhide = 1;
  if (limit && limit[0]) {
    char *end;
    q.limit = strtol(limit, &end, 10);
    if (*end || q.limit < 1) {
      char *m = loom_sprintf("limit takes a whole number >= 1, not '%s'", limit);
      serve_reply_error(out, 400, m);
      free(m);
      return;
    }
  }
  serve_runs s;
  if (serve_runs_load(o, &s)) {
    serve_reply_error(out, 500, loom_errmsg());
    return;
  }
  loom_runs_view v;
  if (loom_runs_select(&s.t, &q, &v)) { /* a bad filter, sort or column: the user's input */
    serve_reply_error(out, 400, loom_errmsg());
    serve_runs_free(&s);
    return;
  }
  json_t *cols = json_array(), *rows = json_array(), *ids = json_array(), *status = json_array();
  json_t *every = json_array();
  for (int c = 0; c < v.ncols; c++)
    json_array_append_new(cols, json_pack("{s:s,s:s}", "name", s.t.cols[v.cols[c]].name, "kind",
                                          kind_names[s.t.cols[v.cols[c]].kind]));
  for (int j = 0; j < s.t.ncols; j++)
    json_array_append_new(every, json_pack("{s:s,s:s}", "name", s.t.cols[j].name, "kind",
                                           kind_names[s.t.cols[j].kind]));
  for (int r = 0; r < v.nrows; r++) {
    json_t *row = json_array();
    for (int c = 0; c < v.ncols; c++)
      json_array_append_new(row, serve_value_json(loom_runs_cell(&s.t, v.rows[r], v.cols[c])));
    json_array_append_new(rows, row);
    const char *id = serve_runs_text(&s, v.rows[r], "run_id"), *st = serve_runs_text(&s, v.rows[r], "status");
    json_array_append_new(ids, id ? json_string(id) : json_null());
    json_array_append_new(status, st ? json_string(st) : json_null());
  }
  json_t *sweeps = json_array(); /* every sweep name of the registry, for the sweep menu */
  int sc = loom_runs_find_column(&s.t, "sweep");
  for (int i = 0; sc >= 0 && i < s.t.nrows; i++) {
    const loom_value *x = loom_runs_cell(&s.t, i, sc);
    bool seen = x->type != LOOM_VAL_TEXT;
    for (size_t k = 0; !seen && k < json_array_size(sweeps); k++)
      seen = !strcmp(json_string_value(json_array_get(sweeps, k)), x->s);
    if (!seen) json_array_append_new(sweeps, json_string(x->s));
  }
  json_t *j = json_pack("{s:o,s:o,s:o,s:o,s:i,s:o,s:o,s:s}", "columns", cols, "rows", rows, "run_ids",
                        ids, "statuses", status, "count", v.nrows, "all_columns", every, "sweeps",
                        sweeps, "registry", o->db_path);
  loom_runs_view_free(&v);
  serve_runs_free(&s);
  serve_reply_json(out, 200, j);
}

/* GET /api/run?id=ID: every non-empty field of one run, grouped by kind, and its traces. */
static void api_run(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                    loom_serve_reply *out) {
  const char *given = arg(ctx, "id");
  if (!given || !given[0]) {
    serve_reply_error(out, 400, "/api/run needs ?id=RUN (a run id, a unique prefix or name)");
    return;
  }
  serve_runs s;
  int row = serve_runs_open_row(o, given, &s, out);
  if (row < 0) return;
  json_t *groups = json_object();
  for (int k = 0; k < 4; k++) json_object_set_new(groups, kind_names[k], json_object());
  for (int j = 0; j < s.t.ncols; j++) {
    const loom_value *v = loom_runs_cell(&s.t, row, j);
    if (v->type == LOOM_VAL_NULL) continue;
    json_object_set_new(json_object_get(groups, kind_names[s.t.cols[j].kind]), s.t.cols[j].name,
                        serve_value_json(v));
  }
  const char *dir = serve_runs_text(&s, row, "run_dir");
  json_t *traces = dir ? serve_find_traces(dir) : json_array();
  json_t *j = json_pack("{s:s,s:o,s:o}", "run_id", serve_runs_text(&s, row, "run_id"), "fields",
                        groups, "traces", traces);
  serve_runs_free(&s);
  serve_reply_json(out, 200, j);
}

/* GET /api/diff?a=ID&b=ID: config keys whose values differ (as `loom runs compare`). */
static void api_diff(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                     loom_serve_reply *out) {
  const char *a = arg(ctx, "a"), *b = arg(ctx, "b");
  if (!a || !b || !a[0] || !b[0]) {
    serve_reply_error(out, 400, "/api/diff needs ?a=RUN&b=RUN");
    return;
  }
  serve_runs s;
  if (serve_runs_load(o, &s)) {
    serve_reply_error(out, 500, loom_errmsg());
    return;
  }
  int ra = serve_runs_find(&s, a), rb = ra < 0 ? -1 : serve_runs_find(&s, b);
  if (ra < 0 || rb < 0) {
    serve_reply_error(out, 404, loom_errmsg());
    serve_runs_free(&s);
    return;
  }
  json_t *diff = json_array();
  int same = 0;
  for (int j = 0; j < s.t.ncols; j++) {
    if (s.t.cols[j].kind != LOOM_COL_CONFIG) continue;
    const loom_value *x = loom_runs_cell(&s.t, ra, j), *y = loom_runs_cell(&s.t, rb, j);
    if (!loom_value_cmp(x, y)) {
      same++;
      continue;
    }
    json_array_append_new(diff, json_pack("{s:s,s:o,s:o}", "key", s.t.cols[j].name, "a",
                                          serve_value_json(x), "b", serve_value_json(y)));
  }
  json_t *j = json_pack("{s:s,s:s,s:o,s:i}", "a", serve_runs_text(&s, ra, "run_id"), "b",
                        serve_runs_text(&s, rb, "run_id"), "differ", diff, "same", same);
  serve_runs_free(&s);
  serve_reply_json(out, 200, j);
}

/* GET /api/boot.js?<the /api/runs query>: the run table as a script the page loads ahead of its
 * own (window.loomBoot = {"status": S, "reply": <the /api/runs reply>}): scripts hold back the
 * load event, so the table is drawn before it and a screenshot taken at load (chromium
 * --headless --screenshot) shows it. */
static void api_boot(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                     loom_serve_reply *out) {
  loom_serve_reply runs;
  memset(&runs, 0, sizeof runs);
  api_runs(o, arg, ctx, &runs);
  char *js = loom_sprintf("window.loomBoot = {\"status\": %d, \"reply\": %.*s};\n", runs.status,
                          (int)runs.len, runs.body ? runs.body : "null");
  loom_serve_reply_free(&runs);
  out->status = 200;
  out->content_type = "application/javascript; charset=utf-8";
  out->body = js;
  out->len = strlen(js);
}

void loom_serve_api(const loom_serve_opts *o, const char *path, loom_serve_arg_fn arg,
                    void *arg_ctx, loom_serve_reply *out) {
  static const struct {
    const char *path;
    void (*fn)(const loom_serve_opts *, loom_serve_arg_fn, void *, loom_serve_reply *);
  } routes[] = {{"/api/runs", api_runs},         {"/api/run", api_run},
                {"/api/diff", api_diff},         {"/api/metrics", serve_api_metrics},
                {"/api/sweeps", serve_api_sweeps}, {"/api/sweep", serve_api_sweep},
                {"/api/trace", serve_api_trace}, {"/api/boot.js", api_boot}};
  memset(out, 0, sizeof *out);
  for (size_t k = 0; k < sizeof routes / sizeof routes[0]; k++)
    if (!strcmp(path, routes[k].path)) {
      routes[k].fn(o, arg, arg_ctx, out);
      if (!out->body) serve_reply_error(out, 500, "out of memory writing the reply");
      return;
    }
  char *m = loom_sprintf("no API endpoint '%s' (see include/loom/serve.h)", path);
  serve_reply_error(out, 404, m);
  free(m);
}

/* GET /api/metrics?run=ID: a run's metrics.jsonl as columns, one array per numeric field
 * ("step": [...], "loss": [...], "val_loss": [...], ...), one entry per line; a field missing
 * from a line, or null there (a NaN loss), is null. A running run's last line may be cut
 * mid-write: a last line without its newline that is not valid JSON is left out and
 * reported ("partial_last_line"); any other line that is not JSON is counted in "skipped". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "runs/serve_internal.h"

/* Append one parsed line: every known field gets a value (null when absent), new numeric
 * fields get a column padded with nulls for the earlier lines. */
static void add_line(json_t *fields, json_t *line, size_t nlines) {
  const char *k;
  json_t *v;
  json_object_foreach(line, k, v) {
    if (!json_is_number(v) || json_object_get(fields, k)) continue;
    json_t *col = json_array();
    for (size_t i = 0; i < nlines; i++) json_array_append_new(col, json_null());
    json_object_set_new(fields, k, col);
  }
  json_object_foreach(fields, k, v) {
    json_t *x = json_object_get(line, k);
    json_array_append_new(v, json_is_number(x) ? json_real(json_number_value(x)) : json_null());
  }
}

/* Columns of one metrics.jsonl; -1 when it cannot be read. */
static int read_metrics(const char *path, json_t *fields, int *lines, int *skipped, bool *partial) {
  char *data;
  size_t len;
  if (loom_read_file(path, &data, &len)) return -1;
  *lines = *skipped = 0;
  *partial = false;
  for (char *p = data; p < data + len;) {
    char *nl = memchr(p, '\n', (size_t)(data + len - p));
    bool complete = nl != NULL;
    size_t n = complete ? (size_t)(nl - p) : (size_t)(data + len - p);
    json_error_t e;
    json_t *o = n ? json_loadb(p, n, 0, &e) : NULL;
    if (json_is_object(o)) add_line(fields, o, (size_t)(*lines)++);
    else if (!complete) *partial = true;
    else if (n) (*skipped)++;
    json_decref(o);
    p += n + (complete ? 1 : 0);
  }
  free(data);
  return 0;
}

void serve_api_metrics(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                       loom_serve_reply *out) {
  const char *given = arg(ctx, "run");
  if (!given || !given[0]) {
    serve_reply_error(out, 400, "/api/metrics needs ?run=RUN (a run id, a unique prefix or name)");
    return;
  }
  serve_runs s;
  if (serve_runs_load(o, &s)) {
    serve_reply_error(out, 500, loom_errmsg());
    return;
  }
  int row = serve_runs_find(&s, given);
  if (row < 0) {
    serve_reply_error(out, 404, loom_errmsg());
    serve_runs_free(&s);
    return;
  }
  const char *dir = serve_runs_text(&s, row, "run_dir"), *status = serve_runs_text(&s, row, "status");
  char *path = loom_sprintf("%s/metrics.jsonl", dir ? dir : ".");
  json_t *fields = json_object();
  int lines = 0, skipped = 0;
  bool partial = false, missing = read_metrics(path, fields, &lines, &skipped, &partial) != 0;
  if (missing) loom_err_clear(); /* a run that logged nothing yet: no points, not an error */
  json_t *j = json_pack("{s:s,s:s?,s:s,s:b,s:i,s:i,s:b,s:o}", "run_id", serve_runs_text(&s, row, "run_id"),
                        "status", status, "path", path, "missing", missing, "lines", lines,
                        "skipped", skipped, "partial_last_line", partial, "fields", fields);
  free(path);
  serve_runs_free(&s);
  serve_reply_json(out, 200, j);
}

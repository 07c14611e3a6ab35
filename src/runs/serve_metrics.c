/* GET /api/metrics?run=ID[&offset=B]: a run's metrics.jsonl as columns, one array per numeric
 * field ("step": [...], "loss": [...], "val_loss": [...], ...), one entry per line; a field
 * missing from a line, or null there (a NaN loss), is null. A running run's last line may be
 * cut mid-write: its last line without a newline is left out and reported
 * ("partial_last_line"; for other runs it counts when it is valid JSON); any other line that is not JSON is counted in "skipped". "next_offset"
 * is the byte after the last complete line: the page asks for offset=next_offset to get only
 * the lines written since ("offset" in the reply says where it read from: 0 when the file is
 * shorter than the offset asked for, i.e. it was rewritten, and the page starts over). */
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

/* Columns of one metrics.jsonl from byte *offset on (0 when the file is shorter); *next: the
 * byte after the last complete line. -1 when it cannot be read. */
static int read_metrics(const char *path, bool running, long *offset, long *next, json_t *fields,
                        int *lines, int *skipped, bool *partial) {
  char *data;
  size_t len;
  if (loom_read_file(path, &data, &len)) return -1;
  *lines = *skipped = 0;
  *partial = false;
  if (*offset < 0 || (size_t)*offset > len) *offset = 0;
  *next = *offset;
  for (char *p = data + *offset; p < data + len;) {
    char *nl = memchr(p, '\n', (size_t)(data + len - p));
    bool complete = nl != NULL;
    size_t n = complete ? (size_t)(nl - p) : (size_t)(data + len - p);
    json_error_t e;
    json_t *o = n ? json_loadb(p, n, 0, &e) : NULL;
    /* a running run's unterminated line may be half-written even when it parses */
    bool used = complete || (!running && json_is_object(o));
    if (!used) *partial = true;
    else if (json_is_object(o)) add_line(fields, o, (size_t)(*lines)++);
    else if (n) (*skipped)++;
    json_decref(o);
    p += n + (complete ? 1 : 0);
    if (used) *next = (long)(p - data);
  }
  free(data);
  return 0;
}

void serve_api_metrics(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                       loom_serve_reply *out) {
  const char *given = arg(ctx, "run"), *off = arg(ctx, "offset");
  long offset = 0;
  if (off && off[0]) {
    char *end;
    offset = strtol(off, &end, 10);
    if (*end || offset < 0) {
      serve_reply_error(out, 400, "offset takes a byte offset >= 0 (a reply's next_offset)");
      return;
    }
  }
  if (!given || !given[0]) {
    serve_reply_error(out, 400, "/api/metrics needs ?run=RUN (a run id, a unique prefix or name)");
    return;
  }
  serve_runs s;
  int row = serve_runs_open_row(o, given, &s, out);
  if (row < 0) return;
  const char *dir = serve_runs_text(&s, row, "run_dir"), *status = serve_runs_text(&s, row, "status");
  char *path = dir ? loom_sprintf("%s/metrics.jsonl", dir) : loom_strdup("(the run has no run_dir)");
  json_t *fields = json_object();
  int lines = 0, skipped = 0;
  long next = 0;
  bool partial = false;
  bool running = status && !strcmp(status, "running");
  bool missing = !dir || read_metrics(path, running, &offset, &next, fields, &lines, &skipped, &partial) != 0;
  if (missing) loom_err_clear(), offset = 0; /* nothing logged yet: no points, not an error */
  json_t *j = json_pack("{s:s,s:s?,s:s,s:b,s:I,s:I,s:i,s:i,s:b,s:o}", "run_id",
                        serve_runs_text(&s, row, "run_id"), "status", status, "path", path,
                        "missing", missing, "offset", (json_int_t)offset, "next_offset",
                        (json_int_t)next, "lines", lines, "skipped", skipped,
                        "partial_last_line", partial, "fields", fields);
  free(path);
  serve_runs_free(&s);
  serve_reply_json(out, 200, j);
}

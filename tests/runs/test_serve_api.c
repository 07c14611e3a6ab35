/* The dashboard's JSON API (loom_serve_api) without a socket, on a registry and run files
 * written here: the run table equals loom_runs_select for the same query and a bad filter is
 * a 400 carrying the parser's message; metrics.jsonl becomes columns aligned by line (a field
 * only some lines have, such as val_loss, is null elsewhere; a null loss stays null; a line
 * that is not JSON is skipped and counted; a cut last line is left out and reported; a running
 * run is read on from the previous reply's next_offset); the
 * config diff; sweep discovery from state.tsv and summary.csv with RFC 4180 quoting; trace
 * files recognised by content, never by a path the client makes up; the embedded assets are
 * the bytes of src/runs/web. */
#include <jansson.h>
#include <sys/stat.h>

#include "harness.h"
#include "loom/core.h"
#include "loom/registry.h"
#include "loom/runs.h"
#include "loom/serve.h"

#define TRACE "{\"traceEvents\": [{\"name\": \"x\"}]}"

static char dir[256], db[300];
static loom_serve_opts opts;

typedef struct {
  const char *k[8], *v[8];
} args;

static const char *arg(void *ctx, const char *key) {
  args *a = ctx;
  for (int i = 0; i < 8 && a->k[i]; i++)
    if (!strcmp(a->k[i], key)) return a->v[i];
  return NULL;
}

/* GET path with the arguments; the body parsed (NULL when it is not JSON). */
static json_t *get(const char *path, args a, int *status) {
  loom_serve_reply r;
  loom_serve_api(&opts, path, arg, &a, &r);
  *status = r.status;
  json_t *j = json_loadb(r.body, r.len, 0, NULL);
  loom_serve_reply_free(&r);
  return j;
}

static void write_text(const char *path, const char *text) {
  LOOM_ASSERT(loom_write_file_atomic(path, text, strlen(text)) == 0);
}

static void add_run(loom_registry *r, const char *id, double lr, const char *metrics, bool finish) {
  loom_config c;
  loom_config_defaults(&c);
  c.training.lr = lr;
  snprintf(c.run.name, sizeof c.run.name, "n_%s", id);
  char *rd = loom_sprintf("%s/%s", dir, id), *mp = loom_sprintf("%s/metrics.jsonl", rd);
  LOOM_ASSERT(loom_mkdir_p(rd) == 0);
  if (metrics) write_text(mp, metrics);
  loom_registry_start_info info = {.run_id = id, .run_dir = rd, .host = "elsewhere", .pid = 1};
  LOOM_ASSERT(loom_registry_insert(r, &c, &info) == 0);
  loom_registry_metrics m = {.steps = 4, .final_loss = 2.0, .min_loss = 1.5, .avg_step_time = NAN,
                             .tokens_per_s = NAN, .peak_rss_mb = NAN};
  if (finish) LOOM_ASSERT(loom_registry_finish(r, id, "finished", &m, NULL) == 0);
  free(rd), free(mp);
}

static void table_matches_cli(void) {
  int st;
  const char *filter = "training.lr > 1.5e-4 AND status = 'finished'";
  json_t *j = get("/api/runs", (args){{"filter", "sort", "desc"}, {filter, "training.lr", "1"}}, &st);
  CHECK(st == 200 && j, "/api/runs: %d", st);
  /* the same query through the CLI's selection code */
  loom_registry *r;
  loom_runs_table t;
  LOOM_ASSERT(loom_registry_open(&r, db) == 0 && loom_runs_load(r, &t) == 0);
  loom_runs_query q = {.filter = filter, .sort_by = "training.lr", .descending = true};
  loom_runs_view v;
  LOOM_ASSERT(loom_runs_select(&t, &q, &v) == 0);
  json_t *ids = json_object_get(j, "run_ids");
  CHECK((int)json_array_size(ids) == v.nrows && v.nrows == 2, "rows %zu vs %d", json_array_size(ids), v.nrows);
  for (int i = 0; i < v.nrows && i < (int)json_array_size(ids); i++)
    CHECK(!strcmp(json_string_value(json_array_get(ids, (size_t)i)), loom_runs_cell(&t, v.rows[i], loom_runs_find_column(&t, "run_id"))->s),
          "row %d", i);
  CHECK(!strcmp(json_string_value(json_array_get(ids, 0)), "c") && !strcmp(json_string_value(json_array_get(ids, 1)), "b"),
        "lr 1e-3 (c) then 3e-4 (b)");
  CHECK((int)json_array_size(json_object_get(j, "columns")) == v.ncols, "same default columns");
  loom_runs_view_free(&v);
  json_decref(j);

  /* a bad filter: 400 with the message the parser gives the CLI */
  j = get("/api/runs", (args){{"filter"}, {"training.lr >> 1"}}, &st);
  loom_runs_query bad = {.filter = "training.lr >> 1"};
  CHECK(loom_runs_select(&t, &bad, &v) != 0, "the CLI rejects it");
  CHECK(st == 400 && j && !strcmp(json_string_value(json_object_get(j, "error")), loom_errmsg()),
        "400 and the parser's message: %d %s", st, j ? json_string_value(json_object_get(j, "error")) : "-");
  json_decref(j);
  loom_err_clear();
  loom_runs_free(&t);
  loom_registry_close(r);

  j = get("/api/runs", (args){{"show", "hide"}, {"run_id, training.lr,status", "status"}}, &st);
  json_t *cols = json_object_get(j, "columns");
  CHECK(st == 200 && json_array_size(cols) == 2 &&
            !strcmp(json_string_value(json_object_get(json_array_get(cols, 1), "name")), "training.lr"),
        "show run_id,training.lr,status minus status");
  json_decref(j);
  j = get("/api/runs", (args){{"limit"}, {"0"}}, &st);
  CHECK(st == 400, "limit 0 is refused: %d", st);
  json_decref(j);
  j = get("/api/runs", (args){{"sort"}, {"no.such.column"}}, &st);
  CHECK(st == 400, "unknown sort column: %d", st);
  json_decref(j);
}

static double num(json_t *col, size_t i) { return json_number_value(json_array_get(col, i)); }

static void metrics(void) {
  int st;
  json_t *j = get("/api/metrics", (args){{"run"}, {"a"}}, &st);
  CHECK(st == 200 && j, "/api/metrics: %d", st);
  json_t *f = json_object_get(j, "fields"), *loss = json_object_get(f, "loss"), *val = json_object_get(f, "val_loss");
  CHECK(json_integer_value(json_object_get(j, "lines")) == 4, "4 JSON lines");
  CHECK(json_integer_value(json_object_get(j, "skipped")) == 1, "the bare nan line skipped");
  CHECK(json_is_true(json_object_get(j, "partial_last_line")), "cut last line reported");
  CHECK(json_array_size(loss) == 4 && json_array_size(val) == 4, "columns of 4");
  CHECK(num(loss, 0) == 5.25 && json_is_null(json_array_get(loss, 1)) && num(loss, 2) == 0.1 + 0.2 &&
            num(loss, 3) == 4.0000000000000009,
        "loss values exact, null kept");
  CHECK(json_is_null(json_array_get(val, 0)) && num(val, 1) == 6.5 && json_is_null(json_array_get(val, 2)) &&
            num(val, 3) == 6.0,
        "val_loss only where the lines have it");
  CHECK(json_array_size(json_object_get(f, "note")) == 0 && !json_object_get(f, "note"), "text fields are not columns");
  json_decref(j);

  j = get("/api/metrics", (args){{"run"}, {"b"}}, &st);
  CHECK(st == 200 && json_is_true(json_object_get(j, "missing")) && json_integer_value(json_object_get(j, "lines")) == 0,
        "no metrics.jsonl yet: empty, not an error");
  json_decref(j);
  j = get("/api/metrics", (args){{"run"}, {"zzz"}}, &st);
  CHECK(st == 404 && strstr(json_string_value(json_object_get(j, "error")), "zzz"), "unknown run: 404 naming it");
  json_decref(j);
  j = get("/api/metrics", (args){{NULL}, {NULL}}, &st);
  CHECK(st == 400, "no run: 400");
  json_decref(j);
}

/* A running run: an unterminated last line is held back even when it parses; offset=next_offset
 * gives only the lines written since; an offset past the end (file rewritten) starts over. */
static void incremental(void) {
  int st;
  char *path = loom_sprintf("%s/d/metrics.jsonl", dir);
  const char *two = "{\"step\": 1, \"loss\": 3}\n{\"step\": 2, \"loss\": 2.5}\n";
  json_t *j = get("/api/metrics", (args){{"run"}, {"d"}}, &st);
  CHECK(st == 200 && !strcmp(json_string_value(json_object_get(j, "status")), "running"), "d is running");
  CHECK(json_integer_value(json_object_get(j, "lines")) == 2 && json_is_true(json_object_get(j, "partial_last_line")) &&
            json_integer_value(json_object_get(j, "next_offset")) == (json_int_t)strlen(two),
        "2 lines, the unterminated third held back, next_offset after line 2");
  json_decref(j);
  char off[32];
  snprintf(off, sizeof off, "%zu", strlen(two));
  FILE *f = fopen(path, "a");
  fputs("\n{\"step\": 4, \"loss\": 1.25, \"val_loss\": 1.5}\n", f); /* the writer finishes line 3, adds 4 */
  fclose(f);
  j = get("/api/metrics", (args){{"run", "offset"}, {"d", off}}, &st);
  json_t *fl = json_object_get(j, "fields");
  CHECK(st == 200 && json_integer_value(json_object_get(j, "offset")) == (json_int_t)strlen(two) &&
            json_integer_value(json_object_get(j, "lines")) == 2 && !json_is_true(json_object_get(j, "partial_last_line")),
        "from the offset: the 2 new lines");
  CHECK(num(json_object_get(fl, "step"), 0) == 3 && num(json_object_get(fl, "loss"), 1) == 1.25 &&
            json_is_null(json_array_get(json_object_get(fl, "val_loss"), 0)) && num(json_object_get(fl, "val_loss"), 1) == 1.5,
        "steps 3 and 4, val_loss on 4 only");
  json_decref(j);
  j = get("/api/metrics", (args){{"run", "offset"}, {"d", "100000"}}, &st);
  CHECK(st == 200 && json_integer_value(json_object_get(j, "offset")) == 0 && json_integer_value(json_object_get(j, "lines")) == 4,
        "offset past the end: read from 0 again");
  json_decref(j);
  j = get("/api/metrics", (args){{"run", "offset"}, {"d", "-1"}}, &st);
  CHECK(st == 400, "negative offset: 400");
  json_decref(j);
  /* a finished run whose file lacks the final newline: the last line counts */
  j = get("/api/metrics", (args){{"run"}, {"e"}}, &st);
  CHECK(st == 200 && json_integer_value(json_object_get(j, "lines")) == 2 && !json_is_true(json_object_get(j, "partial_last_line")),
        "finished run: unterminated valid last line counted");
  json_decref(j);
  free(path);
}

static void diff(void) {
  int st;
  json_t *j = get("/api/diff", (args){{"a", "b"}, {"a", "n_c"}}, &st); /* id and unique name */
  json_t *d = json_object_get(j, "differ");
  CHECK(st == 200 && json_array_size(d) == 2, "two keys differ: %zu", json_array_size(d));
  json_t *k0 = json_array_get(d, 0), *k1 = json_array_get(d, 1);
  CHECK(!strcmp(json_string_value(json_object_get(k0, "key")), "run.name") &&
            !strcmp(json_string_value(json_object_get(k0, "a")), "n_a") &&
            !strcmp(json_string_value(json_object_get(k0, "b")), "n_c"),
        "run.name");
  CHECK(!strcmp(json_string_value(json_object_get(k1, "key")), "training.lr") &&
            json_real_value(json_object_get(k1, "a")) == 1e-4 && json_real_value(json_object_get(k1, "b")) == 1e-3,
        "training.lr 1e-4 vs 1e-3");
  json_decref(j);
}

static void sweeps_and_traces(void) {
  char *sw = loom_sprintf("%s/logs/sweep_20260101-000000", dir);
  LOOM_ASSERT(loom_mkdir_p(sw) == 0);
  char *p = loom_sprintf("%s/state.tsv", sw);
  write_text(p, "# loom sweep state\n# sweep: g\n# sweep_id: sweep_20260101-000000\n# launcher: local\n"
                "# name\tstatus\texit\n"
                "p1\tSUCCESS\t0\t1.0\t-\tc\tl\t-\n"
                "p2\tFAILED\t1\t1.0\t-\tc\tl\tboom\n"
                "p3\tSUCCESS\t0\t1.0\t-\tc\tl\t-\n");
  free(p);
  p = loom_sprintf("%s/summary.csv", sw);
  write_text(p, "name,status,note\np1,SUCCESS,\np2,FAILED,\"exit 1, \"\"NaN\"\" loss\"\r\np3,SUCCESS,x\n");
  free(p);
  p = loom_sprintf("%s/sim_trace.json", sw);
  write_text(p, TRACE);
  free(p);
  p = loom_sprintf("%s/other.json", sw);
  write_text(p, "{\"not\": \"a trace\"}");
  free(p);
  opts.sweeps_dir = loom_sprintf("%s/logs", dir);

  int st;
  json_t *j = get("/api/sweeps", (args){{NULL}, {NULL}}, &st), *s = json_array_get(json_object_get(j, "sweeps"), 0);
  CHECK(st == 200 && json_array_size(json_object_get(j, "sweeps")) == 1, "one sweep found");
  CHECK(!strcmp(json_string_value(json_object_get(s, "id")), "sweep_20260101-000000") &&
            !strcmp(json_string_value(json_object_get(s, "sweep")), "g") &&
            json_integer_value(json_object_get(s, "points")) == 3 &&
            json_integer_value(json_object_get(json_object_get(s, "by_status"), "SUCCESS")) == 2 &&
            json_integer_value(json_object_get(json_object_get(s, "by_status"), "FAILED")) == 1,
        "id, name, 3 points: 2 SUCCESS, 1 FAILED");
  json_t *tr = json_object_get(s, "traces");
  CHECK(json_array_size(tr) == 1 && !strcmp(json_string_value(json_array_get(tr, 0)), "sim_trace.json"),
        "only the file holding traceEvents is a trace");
  json_decref(j);

  j = get("/api/sweep", (args){{"dir"}, {"sweep_20260101-000000"}}, &st);
  json_t *rows = json_object_get(json_object_get(j, "summary_csv"), "rows");
  CHECK(st == 200 && json_array_size(rows) == 3, "3 summary rows");
  CHECK(!strcmp(json_string_value(json_array_get(json_array_get(rows, 1), 2)), "exit 1, \"NaN\" loss") &&
            !strcmp(json_string_value(json_array_get(json_array_get(rows, 2), 0)), "p3") &&
            !strcmp(json_string_value(json_array_get(json_array_get(rows, 0), 2)), ""),
        "quoted comma, doubled quote, CRLF, empty field");
  json_decref(j);
  j = get("/api/sweep", (args){{"dir"}, {".."}}, &st);
  CHECK(st == 404, "a made-up sweep dir: 404");
  json_decref(j);

  loom_serve_reply r;
  args a = {{"sweep", "file"}, {"sweep_20260101-000000", "sim_trace.json"}};
  loom_serve_api(&opts, "/api/trace", arg, &a, &r);
  CHECK(r.status == 200 && r.filename && !strcmp(r.filename, "sim_trace.json") && r.len == strlen(TRACE) &&
            !memcmp(r.body, TRACE, r.len), "trace sent as a file, its bytes");
  loom_serve_reply_free(&r);
  a = (args){{"sweep", "file"}, {"sweep_20260101-000000", "other.json"}};
  loom_serve_api(&opts, "/api/trace", arg, &a, &r);
  CHECK(r.status == 404, "not a trace: 404");
  loom_serve_reply_free(&r);
  a = (args){{"sweep", "file"}, {"sweep_20260101-000000", "../../registry.db"}};
  loom_serve_api(&opts, "/api/trace", arg, &a, &r);
  CHECK(r.status == 404, "a path out of the directory: 404");
  loom_serve_reply_free(&r);
  free(sw);
}

static void assets(void) {
  const loom_serve_asset *a = loom_serve_find_asset("/");
  CHECK(a && !strcmp(a->path, "/index.html") && strstr(a->content_type, "text/html"), "/ is index.html");
  static const char *const files[] = {"index.html", "app.js", "chart.js", "style.css"};
  for (int i = 0; i < 4; i++) {
    char *url = loom_sprintf("/%s", files[i]), *path = loom_sprintf("%s/src/runs/web/%s", LOOM_SOURCE_DIR, files[i]), *data;
    size_t len;
    const loom_serve_asset *x = loom_serve_find_asset(url);
    LOOM_ASSERT(loom_read_file(path, &data, &len) == 0);
    CHECK(x && x->len == len && !memcmp(x->data, data, len), "%s embedded byte for byte", files[i]);
    free(url), free(path), free(data);
  }
  CHECK(!loom_serve_find_asset("/../CMakeLists.txt") && !loom_serve_find_asset("/api"), "nothing else is an asset");
  loom_serve_reply r;
  args none = {{NULL}, {NULL}};
  loom_serve_api(&opts, "/api/nothing", arg, &none, &r);
  CHECK(r.status == 404, "unknown endpoint: 404");
  loom_serve_reply_free(&r);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/loom-serve-api.XXXXXX");
  LOOM_ASSERT(mkdtemp(dir));
  snprintf(db, sizeof db, "%s/registry.db", dir);
  loom_registry *r;
  LOOM_ASSERT(loom_registry_open(&r, db) == 0);
  /* run a: val_loss on some lines, a null loss, a bare nan line, a cut last line */
  add_run(r, "a", 1e-4,
          "{\"step\": 1, \"loss\": 5.25, \"note\": \"x\"}\n"
          "{\"step\": 2, \"loss\": null, \"val_loss\": 6.5}\n"
          "{\"step\": 3, \"loss\": nan}\n"
          "{\"step\": 3, \"loss\": 0.30000000000000004}\n"
          "{\"step\": 4, \"loss\": 4.0000000000000009, \"val_loss\": 6}\n"
          "{\"step\": 5, \"loss\": 3.9", true);
  add_run(r, "b", 3e-4, NULL, true);
  add_run(r, "c", 1e-3, "{\"step\": 1, \"loss\": 1}\n", true);
  add_run(r, "d", 1e-4, "{\"step\": 1, \"loss\": 3}\n{\"step\": 2, \"loss\": 2.5}\n{\"step\": 3, \"loss\": 2}", false);
  add_run(r, "e", 1e-4, "{\"step\": 1, \"loss\": 3}\n{\"step\": 2, \"loss\": 2.5}", true);
  loom_registry_close(r);
  opts = (loom_serve_opts){.host = "127.0.0.1", .db_path = db, .runs_dir = dir, .heartbeat_timeout = 1e9};
  table_matches_cli();
  metrics();
  incremental();
  diff();
  sweeps_and_traces();
  assets();
  free((char *)opts.sweeps_dir);
  loom_rm_rf(dir);
  return harness_finish("test_serve_api");
}

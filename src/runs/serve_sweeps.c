/* Sweeps and traces for the dashboard. A sweep directory (what `loom sweep run` writes:
 * state.tsv, summary.txt, summary.csv, <name>.log, sim/<name>/) is found under the runs dir
 * and the --sweeps-dir (at depth 1 or 2); its id is the directory name (sweep_<ts>), which is
 * the registry's sweep_id of its runs. GET /api/sweeps lists them with per-status point counts
 * (from state.tsv); GET /api/sweep?dir=ID gives summary.csv as a table, summary.txt and the
 * registered runs; GET /api/trace sends a Chrome trace (a *.json holding "traceEvents") that
 * sits in a run's or a sweep's directory. Only files found by these scans are ever sent. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "runs/serve_internal.h"

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the entries of dir (no . or ..); n = 0 when it cannot be read. */
static char **list_dir(const char *dir, int *n) {
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) return NULL;
  char **names = NULL;
  int cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    if (*n == cap) names = loom_realloc(names, (size_t)(cap = cap ? 2 * cap : 32), sizeof(char *));
    names[(*n)++] = loom_strdup(e->d_name);
  }
  closedir(d);
  if (*n > 1) qsort(names, (size_t)*n, sizeof(char *), by_name);
  return names;
}

static void free_list(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

static bool is_trace(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  char head[4097];
  size_t n = fread(head, 1, sizeof head - 1, f);
  fclose(f);
  head[n] = 0;
  return strstr(head, "\"traceEvents\"") != NULL;
}

json_t *serve_find_traces(const char *dir) {
  json_t *out = json_array();
  int n;
  char **names = list_dir(dir, &n);
  for (int i = 0; i < n; i++) {
    size_t len = strlen(names[i]);
    if (len < 6 || strcmp(names[i] + len - 5, ".json")) continue;
    char *p = loom_sprintf("%s/%s", dir, names[i]);
    if (is_trace(p)) json_array_append_new(out, json_string(names[i]));
    free(p);
  }
  free_list(names, n);
  return out;
}

/* Every sweep directory under the two roots, as (id, path) pairs; the first of an id wins. */
typedef struct {
  char **id, **dir;
  int n;
} sweep_dirs;

static void add_sweep(sweep_dirs *s, const char *name, const char *dir) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->id[i], name)) return;
  s->id = loom_realloc(s->id, (size_t)(s->n + 1), sizeof(char *));
  s->dir = loom_realloc(s->dir, (size_t)(s->n + 1), sizeof(char *));
  s->id[s->n] = loom_strdup(name);
  s->dir[s->n++] = loom_strdup(dir);
}

static void scan(sweep_dirs *s, const char *root, int depth) {
  int n;
  char **names = list_dir(root, &n);
  for (int i = 0; i < n; i++) {
    char *dir = loom_sprintf("%s/%s", root, names[i]), *state = loom_sprintf("%s/state.tsv", dir);
    if (loom_path_exists(state)) add_sweep(s, names[i], dir);
    else if (depth > 1 && loom_is_dir(dir)) scan(s, dir, depth - 1);
    free(dir), free(state);
  }
  free_list(names, n);
}

static void find_sweeps(const loom_serve_opts *o, sweep_dirs *s) {
  memset(s, 0, sizeof *s);
  if (o->runs_dir) scan(s, o->runs_dir, 2);
  if (o->sweeps_dir) scan(s, o->sweeps_dir, 2);
}

static void free_sweeps(sweep_dirs *s) {
  free_list(s->id, s->n);
  free_list(s->dir, s->n);
}

/* Header values and per-status counts of state.tsv. */
static json_t *read_state(const char *dir) {
  char *path = loom_sprintf("%s/state.tsv", dir), *data;
  size_t len;
  json_t *j = json_object(), *counts = json_object();
  int points = 0;
  if (!loom_read_file(path, &data, &len)) {
    char *save = NULL;
    for (char *line = strtok_r(data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
      if (line[0] == '#') {
        static const char *const keys[] = {"sweep", "launcher", "hardware", NULL};
        for (int k = 0; keys[k]; k++) {
          size_t kl = strlen(keys[k]);
          if (!strncmp(line + 2, keys[k], kl) && line[2 + kl] == ':' && line[3 + kl] == ' ')
            json_object_set_new(j, keys[k], json_string(line + 4 + kl));
        }
        continue;
      }
      char *tab = strchr(line, '\t');
      if (!tab) continue;
      size_t sl = strcspn(tab + 1, "\t");
      char status[64];
      snprintf(status, sizeof status, "%.*s", (int)(sl < 63 ? sl : 63), tab + 1);
      json_t *c = json_object_get(counts, status);
      json_object_set_new(counts, status, json_integer(c ? json_integer_value(c) + 1 : 1));
      points++;
    }
    free(data);
  } else {
    loom_err_clear();
  }
  free(path);
  json_object_set_new(j, "points", json_integer(points));
  json_object_set_new(j, "by_status", counts);
  return j;
}

void serve_api_sweeps(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                      loom_serve_reply *out) {
  sweep_dirs s;
  find_sweeps(o, &s);
  json_t *list = json_array();
  for (int i = s.n - 1; i >= 0; i--) { /* newest (largest timestamp) first */
    json_t *e = read_state(s.dir[i]);
    char *txt = loom_sprintf("%s/summary.txt", s.dir[i]);
    json_object_set_new(e, "id", json_string(s.id[i]));
    json_object_set_new(e, "dir", json_string(s.dir[i]));
    json_object_set_new(e, "has_summary", json_boolean(loom_path_exists(txt)));
    json_object_set_new(e, "traces", serve_find_traces(s.dir[i]));
    json_array_append_new(list, e);
    free(txt);
  }
  free_sweeps(&s);
  serve_reply_json(out, 200, json_pack("{s:o}", "sweeps", list));
}

/* One CSV record (RFC 4180 quoting) from *p; NULL at the end of the text. */
static json_t *csv_record(const char **p) {
  if (!**p) return NULL;
  json_t *rec = json_array();
  char *field = loom_malloc(strlen(*p) + 1);
  for (;;) {
    size_t n = 0;
    const char *s = *p;
    if (*s == '"') {
      for (s++; *s; s++) {
        if (*s == '"' && s[1] == '"') field[n++] = '"', s++;
        else if (*s == '"') { s++; break; }
        else field[n++] = *s;
      }
    }
    while (*s && *s != ',' && *s != '\n' && *s != '\r') field[n++] = *s++;
    field[n] = 0;
    json_array_append_new(rec, json_string(field));
    *p = s;
    if (*s == ',') { (*p)++; continue; }
    if (*s == '\r') s++;
    if (*s == '\n') s++;
    *p = s;
    break;
  }
  free(field);
  return rec;
}

static json_t *read_csv(const char *path) {
  char *data;
  size_t len;
  if (loom_read_file(path, &data, &len)) {
    loom_err_clear();
    return json_null();
  }
  json_t *rows = json_array(), *rec;
  const char *p = data;
  json_t *header = csv_record(&p);
  while ((rec = csv_record(&p))) json_array_append_new(rows, rec);
  free(data);
  return json_pack("{s:o,s:o}", "columns", header ? header : json_array(), "rows", rows);
}

static int sweep_index(const sweep_dirs *s, const char *id) {
  for (int i = 0; id && i < s->n; i++)
    if (!strcmp(s->id[i], id)) return i;
  return -1;
}

void serve_api_sweep(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                     loom_serve_reply *out) {
  const char *id = arg(ctx, "dir");
  sweep_dirs s;
  find_sweeps(o, &s);
  int k = sweep_index(&s, id);
  if (k < 0) {
    char *m = loom_sprintf("no sweep directory '%s' under %s%s%s (GET /api/sweeps lists them)",
                           id ? id : "", o->runs_dir ? o->runs_dir : "-",
                           o->sweeps_dir ? " or " : "", o->sweeps_dir ? o->sweeps_dir : "");
    serve_reply_error(out, 404, m);
    free(m);
    free_sweeps(&s);
    return;
  }
  json_t *j = read_state(s.dir[k]);
  char *csv = loom_sprintf("%s/summary.csv", s.dir[k]), *txt = loom_sprintf("%s/summary.txt", s.dir[k]);
  char *text = NULL;
  size_t len;
  if (loom_read_file(txt, &text, &len)) loom_err_clear(), text = NULL;
  json_object_set_new(j, "id", json_string(s.id[k]));
  json_object_set_new(j, "dir", json_string(s.dir[k]));
  json_object_set_new(j, "summary_csv", read_csv(csv));
  json_object_set_new(j, "summary_txt", text ? json_string(text) : json_null());
  json_object_set_new(j, "traces", serve_find_traces(s.dir[k]));
  json_t *runs = json_array(); /* registered runs of this execution (sweep_id = the dir name) */
  serve_runs r;
  if (!serve_runs_load(o, &r)) {
    for (int i = 0; i < r.t.nrows; i++) {
      const char *sid = serve_runs_text(&r, i, "sweep_id");
      if (sid && !strcmp(sid, s.id[k])) json_array_append_new(runs, json_string(serve_runs_text(&r, i, "run_id")));
    }
    serve_runs_free(&r);
  } else {
    loom_err_clear();
  }
  json_object_set_new(j, "run_ids", runs);
  free(csv), free(txt), free(text);
  free_sweeps(&s);
  serve_reply_json(out, 200, j);
}

/* GET /api/trace?run=ID&file=NAME or ?sweep=ID&file=NAME (file: one of the listed traces). */
void serve_api_trace(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                     loom_serve_reply *out) {
  const char *run = arg(ctx, "run"), *sweep = arg(ctx, "sweep"), *file = arg(ctx, "file");
  char *dir = NULL;
  if (run && run[0]) {
    serve_runs r;
    if (serve_runs_load(o, &r)) {
      serve_reply_error(out, 500, loom_errmsg());
      return;
    }
    int row = serve_runs_find(&r, run);
    const char *d = row >= 0 ? serve_runs_text(&r, row, "run_dir") : NULL;
    if (d) dir = loom_strdup(d);
    serve_runs_free(&r);
  } else if (sweep && sweep[0]) {
    sweep_dirs s;
    find_sweeps(o, &s);
    int k = sweep_index(&s, sweep);
    if (k >= 0) dir = loom_strdup(s.dir[k]);
    else loom_err("no sweep directory '%s'", sweep);
    free_sweeps(&s);
  } else {
    serve_reply_error(out, 400, "/api/trace needs ?run=RUN or ?sweep=SWEEP, and &file=NAME");
    return;
  }
  if (!dir) {
    serve_reply_error(out, 404, loom_errmsg());
    return;
  }
  json_t *traces = serve_find_traces(dir);
  bool listed = false;
  size_t i;
  json_t *v;
  json_array_foreach(traces, i, v) if (file && !strcmp(json_string_value(v), file)) listed = true;
  json_decref(traces);
  char *path = listed ? loom_sprintf("%s/%s", dir, file) : NULL;
  if (!listed) {
    char *m = loom_sprintf("'%s' is not a Chrome trace in %s", file ? file : "", dir);
    serve_reply_error(out, 404, m);
    free(m);
  } else if (loom_read_file(path, &out->body, &out->len)) {
    serve_reply_error(out, 500, loom_errmsg());
  } else {
    out->status = 200;
    out->content_type = "application/json";
    out->filename = loom_strdup(file);
  }
  free(path), free(dir);
}

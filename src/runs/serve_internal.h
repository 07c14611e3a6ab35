/* Shared by the dashboard's endpoint files (src/runs/serve_*.c): JSON replies, the runs table
 * loaded per request, and the trace-file scan. */
#ifndef LOOM_SERVE_INTERNAL_H
#define LOOM_SERVE_INTERNAL_H
#include <jansson.h>

#include "loom/registry.h"
#include "loom/runs.h"
#include "loom/serve.h"

/* Reply with a JSON document (steals j) or {"error": msg} with an HTTP status (serve.c). */
void serve_reply_json(loom_serve_reply *out, int status, json_t *j);
void serve_reply_error(loom_serve_reply *out, int status, const char *msg);

/* The registry opened, crashed runs marked, every run loaded (as `loom runs` does). */
typedef struct {
  loom_registry *r;
  loom_runs_table t;
} serve_runs;
int serve_runs_load(const loom_serve_opts *o, serve_runs *s);
void serve_runs_free(serve_runs *s);
/* Row of a run named by id, id prefix or unique name; -1 with the error set. */
int serve_runs_find(serve_runs *s, const char *given);
/* The runs loaded and the row of the run `given` names (a request's parameter); on failure
 * the reply is the error (500: the registry, 404: no such run) and -1 is returned with
 * nothing left to free. */
int serve_runs_open_row(const loom_serve_opts *o, const char *given, serve_runs *s,
                        loom_serve_reply *out);
/* Text of a text cell by column name, or NULL. */
const char *serve_runs_text(const serve_runs *s, int row, const char *col);
json_t *serve_value_json(const loom_value *v);

/* File names (in dir, not recursive) of Chrome traces: *.json holding "traceEvents" near
 * the top. A JSON array of names (sorted). */
json_t *serve_find_traces(const char *dir);

void serve_api_metrics(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                       loom_serve_reply *out);
void serve_api_sweeps(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                      loom_serve_reply *out);
void serve_api_sweep(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                     loom_serve_reply *out);
void serve_api_trace(const loom_serve_opts *o, loom_serve_arg_fn arg, void *ctx,
                     loom_serve_reply *out);

#endif

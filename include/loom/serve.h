/* `loom runs serve`: a local web dashboard over the run registry. A libmicrohttpd server
 * (src/runs/serve.c) hands out the page (src/runs/web/, embedded in the binary at build time)
 * and JSON endpoints (src/runs/serve_api.c) computed by the same code as the `loom runs` CLI:
 *
 *   GET /api/runs?filter=&sweep=&sort=&desc=1&show=a,b&hide=c&all=1&limit=N
 *       the run table after loom_runs_select (400 + the parser's message for a bad filter)
 *   GET /api/metrics?run=ID      every numeric field of metrics.jsonl as columns
 *   GET /api/diff?a=ID&b=ID      config keys whose values differ between two runs
 *   GET /api/sweeps              sweep directories found under the runs dir (and --sweeps-dir)
 *   GET /api/sweep?dir=NAME      one sweep's summary.csv as a table, summary.txt, its runs
 *   GET /api/trace?run=ID | ?sweep=NAME   a Chrome trace file of that run / sweep (download)
 *   GET /api/boot.js?<as /api/runs>  the same table as a script, window.loomBoot = {status,
 *       reply}: loaded ahead of the page's own scripts, it is drawn before the load event
 *
 * The API is a pure function of (path, query) so tests call it without a socket. */
#ifndef LOOM_SERVE_H
#define LOOM_SERVE_H
#include <stdbool.h>
#include <stddef.h>

#include "loom/runs.h"

typedef struct {
  const char *host;        /* address to bind (default 127.0.0.1) */
  int port;                /* 0 = any free port (printed) */
  const char *db_path;     /* the registry database */
  const char *runs_dir;    /* where run and sweep directories are looked for (may be NULL) */
  const char *sweeps_dir;  /* another directory holding sweep_<ts>/ (e.g. logs), or NULL */
  double heartbeat_timeout;
  const char *view;        /* URL fragment of the view to open (loom_serve_view_fragment), or NULL */
} loom_serve_opts;

/* One HTTP answer of the API: status, content type and a malloc'd body. */
typedef struct {
  int status;
  const char *content_type;
  char *body;
  size_t len;
  char *filename;          /* set: send as an attachment with this name (malloc'd) */
} loom_serve_reply;

/* Query string lookup handed to the API (the server wraps libmicrohttpd's). */
typedef const char *(*loom_serve_arg_fn)(void *ctx, const char *key);

/* Answer GET `path` (starting with /api/). Always fills *out (404 for unknown paths). */
void loom_serve_api(const loom_serve_opts *o, const char *path, loom_serve_arg_fn arg,
                    void *arg_ctx, loom_serve_reply *out);
void loom_serve_reply_free(loom_serve_reply *r);

/* An embedded page asset by URL path ("/" = index.html); NULL when there is none. */
typedef struct {
  const char *path, *content_type;
  const unsigned char *data;
  size_t len;
} loom_serve_asset;
const loom_serve_asset *loom_serve_find_asset(const char *path);

/* The list options of a command line (--filter, --sort-by, --show, ...) as the page's URL
 * fragment, percent-encoded (malloc'd); NULL when none is set. */
char *loom_serve_view_fragment(const loom_runs_query *q);

/* Serve until SIGINT/SIGTERM. Returns 0, or -1 with the error (port in use, bad host,
 * registry missing) in loom_errmsg(). */
int loom_serve_run(const loom_serve_opts *o);

#endif

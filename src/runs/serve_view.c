/* The page view a `loom runs serve` command line asks for: its list options (--filter,
 * --sweep, --sort-by, --descending, --show, --hide, --all-columns, --limit) as the page's URL
 * fragment ("filter=...&sort=..."), percent-encoded, which the page reads on load
 * (src/runs/web/app.js loadHash). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/serve.h"

typedef struct {
  char *s;
  size_t n, cap;
} text;

static void put(text *t, const char *s, size_t n) {
  if (t->n + n + 1 > t->cap) {
    t->cap = (t->n + n + 1) * 2;
    t->s = loom_realloc(t->s, t->cap, 1);
  }
  memcpy(t->s + t->n, s, n);
  t->s[t->n += n] = 0;
}

/* key=value with everything but unreserved characters (RFC 3986) as %XX */
static void param(text *t, const char *key, const char *value) {
  if (t->n) put(t, "&", 1);
  put(t, key, strlen(key));
  put(t, "=", 1);
  for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        strchr("-._~", *p)) {
      put(t, (const char *)p, 1);
    } else {
      char hex[4];
      snprintf(hex, sizeof hex, "%%%02X", *p);
      put(t, hex, 3);
    }
  }
}

static void names(text *t, const char *key, char **list, int n) {
  if (!n) return;
  text joined = {0};
  for (int i = 0; i < n; i++) {
    if (i) put(&joined, ",", 1);
    put(&joined, list[i], strlen(list[i]));
  }
  param(t, key, joined.s);
  free(joined.s);
}

char *loom_serve_view_fragment(const loom_runs_query *q) {
  text t = {0};
  char limit[32];
  if (q->filter) param(&t, "filter", q->filter);
  if (q->sweep) param(&t, "sweep", q->sweep);
  if (q->sort_by) param(&t, "sort", q->sort_by);
  if (q->descending) param(&t, "desc", "1");
  names(&t, "show", q->show, q->nshow);
  names(&t, "hide", q->hide, q->nhide);
  if (q->all_columns) param(&t, "all", "1");
  if (q->limit > 0) snprintf(limit, sizeof limit, "%ld", q->limit), param(&t, "limit", limit);
  return t.s; /* NULL when the command line chose nothing */
}

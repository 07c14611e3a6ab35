/* loom_sched_parse / loom_sched_load: read the text form (docs/SCHEDULES.md). Line based:
 * '#' starts a comment; the first statement is the `schedule` header, then `rank N` sections
 * holding one instruction per line as `KIND key=value ...`. Numbers are checked against the
 * header's pp, vpp and microbatches here (with file:line); everything else is left to
 * loom_sched_validate. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

enum { MAX_TOKENS = 8 };

typedef struct {
  const char *file;
  int line;
  loom_schedule *s;
  int have_header, rank, header_line;
  int *rank_line; /* (pp) line of each `rank N`, 0 if not seen */
} parser;

typedef struct {
  const char *p;
  size_t n;
} token;

static int perr(const parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(const parser *ps, const char *fmt, ...) {
  char what[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return loom_err("%s:%d: %s", ps->file, ps->line, what);
}

/* "send-act chunk=C mb=M to=RANK" */
static void usage(loom_instr_kind kind, char *buf, size_t n) {
  const sched_kind_info *k = &sched_kinds[kind];
  unsigned f = k->required;
  snprintf(buf, n, "%s%s%s%s%s%s", k->name, f & SCHED_F_CHUNK ? " chunk=C" : "",
           k->optional & SCHED_F_CHUNK ? " [chunk=C]" : "", f & SCHED_F_MB ? " mb=M" : "",
           f & SCHED_F_TO ? " to=RANK" : "", f & SCHED_F_FROM ? " from=RANK" : "");
}

/* Non-negative decimal integer of at most 9 digits. */
static int parse_int(const char *p, size_t n, int *out) {
  if (n == 0 || n > 9) return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    v = v * 10 + (p[i] - '0');
  }
  *out = v;
  return 0;
}

static char *tok_str(token t, char *buf, size_t n) {
  snprintf(buf, n, "%.*s", (int)(t.n < 200 ? t.n : 200), t.p);
  return buf;
}

/* Split `tok` at '=' into key and value; -1 when there is no '='. */
static int split_kv(token t, token *key, token *val) {
  const char *eq = memchr(t.p, '=', t.n);
  if (!eq) return -1;
  *key = (token){t.p, (size_t)(eq - t.p)};
  *val = (token){eq + 1, t.n - (size_t)(eq - t.p) - 1};
  return 0;
}

static int key_is(token k, const char *name) {
  return k.n == strlen(name) && !memcmp(k.p, name, k.n);
}

static int parse_header(parser *ps, const token *t, int nt) {
  char a[256], b[256];
  int vals[3] = {-1, -1, -1};
  static const char *const keys[3] = {"pp", "vpp", "microbatches"};
  char name[32] = "custom";
  int have_name = 0;
  for (int j = 1; j < nt; j++) {
    token k, v;
    if (split_kv(t[j], &k, &v))
      return perr(ps, "expected key=value in the schedule line, found '%s' (expected: schedule "
                  "[name=NAME] pp=N vpp=N microbatches=N)", tok_str(t[j], a, sizeof a));
    if (key_is(k, "name")) {
      if (have_name) return perr(ps, "name= is given twice in the schedule line");
      if (!sched_name_ok(v.p, v.n))
        return perr(ps, "name='%s' is not a valid schedule name (1..31 of letters, digits, "
                    "'_', '.', '+', '-')", tok_str(v, a, sizeof a));
      snprintf(name, sizeof name, "%.*s", (int)v.n, v.p);
      have_name = 1;
      continue;
    }
    int which = -1;
    for (int q = 0; q < 3; q++)
      if (key_is(k, keys[q])) which = q;
    if (which < 0)
      return perr(ps, "unknown key '%s' in the schedule line (expected name=, pp=, vpp=, "
                  "microbatches=)", tok_str(k, a, sizeof a));
    if (vals[which] >= 0)
      return perr(ps, "%s= is given twice in the schedule line", keys[which]);
    if (parse_int(v.p, v.n, &vals[which]))
      return perr(ps, "%s='%s' is not a non-negative integer", keys[which],
                  tok_str(v, b, sizeof b));
  }
  for (int q = 0; q < 3; q++)
    if (vals[q] < 0)
      return perr(ps, "the schedule line needs %s=N (expected: schedule [name=NAME] pp=N vpp=N "
                  "microbatches=N)", keys[q]);
  if (sched_init(ps->s, name, vals[0], vals[1], vals[2]))
    return loom_err_prefix("%s:%d: ", ps->file, ps->line);
  ps->rank_line = loom_calloc((size_t)vals[0], sizeof *ps->rank_line);
  ps->have_header = 1;
  ps->header_line = ps->line;
  return 0;
}

static int parse_rank(parser *ps, const token *t, int nt) {
  int r;
  if (nt != 2 || parse_int(t[1].p, t[1].n, &r))
    return perr(ps, "expected 'rank N' with N a pipeline rank");
  if (r >= ps->s->pp)
    return perr(ps, "rank %d is out of range: the schedule line declares ranks 0..%d (pp=%d)", r,
                ps->s->pp - 1, ps->s->pp);
  if (ps->rank_line[r])
    return perr(ps, "rank %d appears twice (first at line %d)", r, ps->rank_line[r]);
  ps->rank_line[r] = ps->line;
  ps->rank = r;
  return 0;
}

static int parse_instr(parser *ps, loom_instr_kind kind, const token *t, int nt) {
  const sched_kind_info *k = &sched_kinds[kind];
  static const char *const names[4] = {"chunk", "mb", "to", "from"};
  int vals[4] = {-1, -1, -1, -1};
  char a[256], use[96];
  usage(kind, use, sizeof use);
  if (ps->rank < 0)
    return perr(ps, "'%s' before any 'rank N' line: instructions belong to a rank section",
                k->name);
  for (int j = 1; j < nt; j++) {
    token key, v;
    if (split_kv(t[j], &key, &v))
      return perr(ps, "expected key=value, found '%s' (expected: %s)", tok_str(t[j], a, sizeof a),
                  use);
    int f = -1;
    for (int q = 0; q < 4; q++)
      if (key_is(key, names[q])) f = q;
    if (f < 0 || !((k->required | k->optional) & (1u << f)))
      return perr(ps, "'%s' is not a field of this instruction (expected: %s)",
                  tok_str(key, a, sizeof a), use);
    if (vals[f] >= 0) return perr(ps, "%s= is given twice (expected: %s)", names[f], use);
    if (parse_int(v.p, v.n, &vals[f]))
      return perr(ps, "%s='%s' is not a non-negative integer", names[f], tok_str(v, a, sizeof a));
    static const char *const what[4] = {"chunks", "micro-batches", "ranks", "ranks"};
    int limit = f == 0 ? ps->s->vpp : f == 1 ? ps->s->microbatches : ps->s->pp;
    if (vals[f] >= limit)
      return perr(ps, "%s=%d is out of range: the schedule has %s 0..%d (%s=%d)", names[f],
                  vals[f], what[f], limit - 1, f == 0 ? "vpp" : f == 1 ? "microbatches" : "pp",
                  limit);
  }
  for (int q = 0; q < 4; q++)
    if ((k->required & (1u << q)) && vals[q] < 0)
      return perr(ps, "%s needs %s= (expected: %s)", k->name, names[q], use);
  sched_push(ps->s, ps->rank, kind, vals[0], vals[1], vals[2] >= 0 ? vals[2] : vals[3]);
  return 0;
}

static int parse_line(parser *ps, token *t, int nt) {
  char a[256], kinds[400] = "";
  if (key_is(t[0], "schedule")) {
    if (ps->have_header) {
      return perr(ps, "a second schedule line (the first is at line %d)", ps->header_line);
    }
    return parse_header(ps, t, nt);
  }
  if (!ps->have_header)
    return perr(ps, "expected the header 'schedule [name=NAME] pp=N vpp=N microbatches=N' "
                "before anything else, found '%s'", tok_str(t[0], a, sizeof a));
  if (key_is(t[0], "rank")) return parse_rank(ps, t, nt);
  for (int kind = 0; kind < LOOM_INSTR_COUNT; kind++)
    if (key_is(t[0], sched_kinds[kind].name)) return parse_instr(ps, (loom_instr_kind)kind, t, nt);
  for (int kind = 0; kind < LOOM_INSTR_COUNT; kind++) {
    strcat(kinds, sched_kinds[kind].name);
    strcat(kinds, ", ");
  }
  return perr(ps, "unknown instruction '%s' (expected 'rank N' or one of: %sor a '#' comment)",
              tok_str(t[0], a, sizeof a), kinds);
}

int loom_sched_parse(loom_schedule *s, const char *text, const char *filename) {
  memset(s, 0, sizeof *s);
  parser ps = {filename ? filename : "<text>", 0, s, 0, -1, 0, NULL};
  int rc = 0;
  for (const char *p = text; *p && !rc;) {
    const char *eol = strchr(p, '\n');
    size_t n = eol ? (size_t)(eol - p) : strlen(p);
    ps.line++;
    const char *hash = memchr(p, '#', n);
    if (hash) n = (size_t)(hash - p);
    token t[MAX_TOKENS + 1];
    int nt = 0;
    for (size_t i = 0; i < n;) {
      while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r')) i++;
      size_t j = i;
      while (j < n && p[j] != ' ' && p[j] != '\t' && p[j] != '\r') j++;
      if (j > i) {
        if (nt == MAX_TOKENS) {
          rc = perr(&ps, "too many words on one line (at most %d)", MAX_TOKENS);
          break;
        }
        t[nt++] = (token){p + i, j - i};
      }
      i = j;
    }
    if (!rc && nt) rc = parse_line(&ps, t, nt);
    p = eol ? eol + 1 : p + n + strlen(p + n);
  }
  if (!rc && !ps.have_header)
    rc = loom_err("%s:%d: no schedule line (end of the text): the text form starts with "
                  "'schedule [name=NAME] pp=N vpp=N microbatches=N' (see docs/SCHEDULES.md)",
                  ps.file, ps.line > 0 ? ps.line : 1);
  for (int r = 0; !rc && r < s->pp; r++)
    if (!ps.rank_line[r])
      rc = loom_err("%s:%d: rank %d has no 'rank %d' section (the schedule line declares pp=%d; "
                    "every rank needs one, even if empty)", ps.file, ps.header_line, r, r, s->pp);
  free(ps.rank_line);
  if (rc) loom_sched_free(s);
  return rc;
}

int loom_sched_load(loom_schedule *s, const char *path) {
  memset(s, 0, sizeof *s);
  char *text = NULL;
  if (loom_is_dir(path))
    return loom_err("schedule file '%s' is a directory; give the path of a schedule in the text "
                    "form (docs/SCHEDULES.md)", path);
  if (loom_read_file(path, &text, NULL)) return LOOM_ERR;
  int rc = loom_sched_parse(s, text, path);
  free(text);
  return rc;
}

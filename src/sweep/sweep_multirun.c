/* `loom train -m` (Hydra's multirun): command-line overrides with comma lists
 * (training.lr=1e-3,3e-3) or range(start,stop[,step]) (end excluded, as Python's range)
 * (user keys too: +exp.variant=a,b) become the parameters of an in-memory grid sweep over the config file (with its config
 * group choices); the other overrides apply to every point. The spec then goes through the
 * ordinary sweep expansion and runner (loom_sweep_expand, loom_sweep_run). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/config_schema.h"
#include "sweep/sweep_internal.h"
#include "loom/core.h"
#include "loom/sweep.h"

static void push(char ***list, int *n, char *s) {
  *list = loom_realloc(*list, (size_t)(*n + 1), sizeof(char *));
  (*list)[(*n)++] = s;
}

static char *trim(const char *s, size_t n) {
  while (n && isspace((unsigned char)*s)) s++, n--;
  while (n && isspace((unsigned char)s[n - 1])) n--;
  char *o = loom_malloc(n + 1);
  memcpy(o, s, n);
  o[n] = 0;
  return o;
}

static bool whole(const char *t, long *v) {
  char *end;
  errno = 0;
  *v = strtol(t, &end, 10);
  return *t && !*end && !errno;
}

/* range(a,b[,s]) -> values. */
static int expand_range(const char *key, const char *v, loom_sweep_param *p) {
  size_t n = strlen(v);
  if (v[n - 1] != ')')
    return loom_err("%s=%s: expected range(START,STOP[,STEP]) with whole numbers", key, v);
  long a = 0, b = 0, st = 1;
  bool ok = true;
  char *inner = trim(v + 6, n - 7);
  int np = 0;
  char *save = NULL;
  for (char *t = strtok_r(inner, ",", &save); t; t = strtok_r(NULL, ",", &save), np++) {
    while (isspace((unsigned char)*t)) t++;
    char *e = t + strlen(t);
    while (e > t && isspace((unsigned char)e[-1])) *--e = 0;
    long *dst = np == 0 ? &a : np == 1 ? &b : &st;
    if (np > 2 || !whole(t, dst)) ok = false;
  }
  free(inner);
  if (!ok || (np != 2 && np != 3))
    return loom_err("%s=%s: expected range(START,STOP[,STEP]) with whole numbers", key, v);
  if (st == 0) return loom_err("%s=%s: the step of a range cannot be 0", key, v);
  for (long x = a; st > 0 ? x < b : x > b; x += st) {
    if (p->nvalues >= 10000) return loom_err("%s=%s: more than 10000 values", key, v);
    push(&p->values, &p->nvalues, loom_sprintf("%ld", x));
  }
  if (!p->nvalues) return loom_err("%s=%s: the range is empty", key, v);
  return 0;
}

/* Is this override a sweep (a comma list or a range)? Quoted values are literal. */
static bool is_sweep(const char *expr) {
  const char *eq = strchr(expr, '=');
  if (!eq || expr[0] == '~') return false;
  const char *v = eq + 1;
  while (isspace((unsigned char)*v)) v++;
  if (*v == '\'' || *v == '"' || *v == '[' || *v == '{') return false;
  return strchr(v, ',') != NULL || !strncmp(v, "range(", 6);
}

static int add_param(loom_sweep_spec *s, const char *expr) {
  const char *eq = strchr(expr, '=');
  const char *kp = expr;
  if (!strncmp(kp, "++", 2)) kp += 2;
  else if (*kp == '+') kp++;
  char *key = trim(kp, (size_t)(eq - kp)), *val = trim(eq + 1, strlen(eq + 1));
  const loom_config_key *k = loom_config_key_find(key);
  bool user = !k && kp != expr; /* +exp.x=a,b: a user key */
  loom_config scratch;
  loom_config_defaults(&scratch);
  int rc = k || (user && !loom_config_user_set(&scratch, key, "x", true))
               ? 0 : user ? -1 : loom_config_unknown_key_err(key);
  const char *name = k ? k->name : key;
  for (int i = 0; !rc && i < s->nparams; i++)
    if (!strcmp(s->params[i].key, name))
      rc = loom_err("%s is swept twice; give its values in one override", name);
  loom_sweep_param p = {0};
  if (!rc) {
    p.key = loom_strdup(name);
    p.dist = LOOM_DIST_VALUES;
    p.line = 0;
    if (!strncmp(val, "range(", 6)) {
      rc = expand_range(name, val, &p);
    } else {
      const char *start = val;
      for (;;) {
        const char *c = strchr(start, ',');
        char *one = trim(start, c ? (size_t)(c - start) : strlen(start));
        if (!*one) rc = loom_err("%s=%s: an empty value in the list", name, val);
        push(&p.values, &p.nvalues, one);
        if (!c || rc) break;
        start = c + 1;
      }
    }
    for (int i = 0; !rc && i < p.nvalues; i++)
      if (k ? loom_config_key_set(&scratch, k, p.values[i])
            : loom_config_user_set(&scratch, name, p.values[i], false))
        rc = -1;
  }
  if (!rc) {
    s->params = loom_realloc(s->params, (size_t)(s->nparams + 1), sizeof *s->params);
    p.group = s->nparams;
    s->params[s->nparams++] = p;
  } else {
    free(p.key);
    for (int i = 0; i < p.nvalues; i++) free(p.values[i]);
    free(p.values);
  }
  free(key);
  free(val);
  return rc ? loom_err_prefix("multirun override '%s': ", expr) : 0;
}

int loom_sweep_multirun_spec(loom_sweep_spec *s, const char *config_path,
                             char *const *choices, int nchoices, char *const *overrides,
                             int noverrides) {
  memset(s, 0, sizeof *s);
  s->path = loom_strdup(config_path ? config_path : "loom train -m");
  s->name = loom_strdup("multirun");
  s->base = config_path ? loom_strdup(config_path) : NULL;
  int rc = 0;
  for (int i = 0; i < nchoices && !rc; i++) {
    if (strchr(choices[i], ',') || strstr(choices[i], "=range("))
      rc = loom_err("'%s': sweeping a config group's options is not supported; run one "
                    "multirun per option, or sweep the keys its files set (e.g. "
                    "model.preset=tiny-gpt2,tiny-llama)", choices[i]);
    else
      push(&s->choices, &s->nchoices, loom_strdup(choices[i]));
  }
  for (int i = 0; i < noverrides && !rc; i++) {
    if (is_sweep(overrides[i])) rc = add_param(s, overrides[i]);
    else push(&s->overrides, &s->noverrides, loom_strdup(overrides[i]));
  }
  if (!rc && !s->nparams)
    rc = loom_err("-m/--multirun: no override has a list of values; sweep a key with "
                  "KEY=A,B,C or KEY=range(START,STOP), e.g. training.lr=1e-3,3e-3");
  if (!rc) rc = loom_sweep_link_groups(s);
  if (rc) loom_sweep_spec_free(s);
  return rc;
}

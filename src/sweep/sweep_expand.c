/* Expanding a sweep spec into points: the base config (file + overrides), then either the
 * grid (cartesian product over the linked groups, last one fastest) or num_runs distinct
 * random draws; `${key}` values take that key's value in the point; points matching an
 * exclude entry, failing a constraint or repeating an earlier point are dropped; each point
 * gets a unique descriptive name and a validated config. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/config_schema.h"
#include "sweep/sweep_internal.h"
#include "loom/core.h"
#include "loom/filter.h"
#include "loom/sweep.h"

#define MAX_POINTS 100000

/* ---- constraints: filter expressions over config keys and `ranks` ------------------------- */

static int resolve_key(void *ctx, const char *name, const char **suggestion) {
  (void)ctx;
  if (!strcmp(name, "ranks")) return (int)loom_config_nkeys;
  const loom_config_key *k = loom_config_key_find(name);
  if (k) return (int)(k - loom_config_keys);
  *suggestion = loom_config_nearest_key(name);
  return -1;
}

static loom_value key_value(void *ctx, int col) {
  const loom_config *c = ctx;
  if (col == (int)loom_config_nkeys) return (loom_value){.type = LOOM_VAL_INT, .i = loom_config_ranks(c)};
  return loom_config_cell(c, &loom_config_keys[col]);
}

static int parse_constraints(const loom_sweep_spec *s, loom_expr ***out) {
  *out = loom_calloc((size_t)s->nconstraints + 1, sizeof **out);
  for (int i = 0; i < s->nconstraints; i++) {
    char what[600];
    snprintf(what, sizeof what, "%s: constraint %d", s->path, i + 1);
    if (loom_expr_parse(&(*out)[i], s->constraints[i], what, resolve_key, NULL,
                        "constraints use config keys and ranks (= dp*tp*pp*sp)"))
      return -1;
  }
  return 0;
}

static void free_constraints(loom_expr **c, int n) {
  for (int i = 0; c && i < n; i++) loom_expr_free(c[i]);
  free(c);
}

/* ---- one point ------------------------------------------------------------------------------ */

static int base_config(const loom_sweep_spec *s, loom_config *c) {
  loom_config_defaults(c);
  if ((s->base || s->nchoices) && loom_config_load_composed(c, s->base, s->choices, s->nchoices))
    return -1;
  for (int i = 0; i < s->noverrides; i++)
    if (loom_config_override(c, s->overrides[i]))
      return loom_err_prefix("%s: overrides: ", s->path);
  return 0;
}

static bool excluded(const loom_sweep_spec *s, const loom_config *c) {
  for (int e = 0; e < s->nexclude; e++) {
    bool all = true;
    for (int k = 0; k < s->nexclude_keys[e] && all; k++) {
      char *kv = loom_strdup(s->exclude[e][k]), *eq = strchr(kv, '=');
      *eq = 0;
      const loom_config_key *key = loom_config_key_find(kv);
      loom_config probe = *c;
      all = key && loom_config_key_set(&probe, key, eq + 1) == 0 &&
            loom_config_key_equal(c, &probe, key);
      free(kv);
    }
    if (all) return true;
  }
  return false;
}

/* Parameter i's value text in the point: plain, or the referenced key's value. */
static int set_value(const loom_sweep_spec *s, int i, const char *text, loom_sweep_point *p) {
  const loom_config_key *k = loom_config_key_find(s->params[i].key);
  if (!k) { /* a user key swept by loom train -m +exp.x=a,b */
    p->assign[i] = loom_sprintf("+%s=%s", s->params[i].key, text);
    if (loom_config_user_set(&p->cfg, s->params[i].key, text, false))
      return loom_err_prefix("%s: parameter +%s: ", s->path, s->params[i].key);
    return 0;
  }
  char ref[128], buf[LOOM_STR_MAX + 64];
  const char *value = text;
  if (loom_sweep_interp_key(text, ref, sizeof ref)) {
    loom_value v = loom_config_cell(&p->cfg, loom_config_key_find(ref));
    value = loom_value_text(&v, buf, sizeof buf);
  }
  p->assign[i] = loom_sprintf("%s=%s", k->name, value);
  if (loom_config_key_set(&p->cfg, k, value)) {
    if (value != text) return loom_err_prefix("%s: parameter %s: %s = ", s->path, k->name, text);
    return loom_err_prefix("%s: parameter %s: ", s->path, k->name);
  }
  return 0;
}

/* Build a point from assignments (plain values first, then interpolations); *keep is false
 * when it is excluded or fails a constraint. */
static int make_point(const loom_sweep_spec *s, const loom_config *base, char **values,
                      loom_expr **constraints, loom_sweep_point *p, bool *keep) {
  memset(p, 0, sizeof *p);
  p->cfg = *base;
  p->nassign = s->nparams;
  p->assign = loom_calloc((size_t)s->nparams + 1, sizeof *p->assign);
  char ref[128];
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < s->nparams; i++)
      if (loom_sweep_interp_key(values[i], ref, sizeof ref) == (pass == 1) &&
          set_value(s, i, values[i], p))
        return -1;
  *keep = !excluded(s, &p->cfg);
  for (int i = 0; i < s->nconstraints && *keep; i++)
    if (loom_expr_eval(constraints[i], key_value, &p->cfg, keep)) return -1;
  p->ranks = (int)loom_config_ranks(&p->cfg);
  return 0;
}

static void free_point(loom_sweep_point *p) {
  for (int i = 0; i < p->nassign; i++) free(p->assign[i]);
  free(p->assign);
  free(p->name);
  free(p->config_path);
  free(p->resume_dir);
  memset(p, 0, sizeof *p);
}

static void add_point(loom_sweep_plan *plan, loom_sweep_point *p) {
  plan->points = loom_realloc(plan->points, (size_t)(plan->n + 1), sizeof *plan->points);
  plan->points[plan->n++] = *p;
}

static bool same_assign(const loom_sweep_point *a, const loom_sweep_point *b) {
  for (int i = 0; i < a->nassign; i++)
    if (strcmp(a->assign[i], b->assign[i])) return false;
  return true;
}

/* ---- repeated points: a hash set of the points' assignments -------------------------------- */

typedef struct {
  int *slot;            /* point index + 1, 0 = empty */
  size_t cap;
} point_set;

static uint64_t assign_hash(const loom_sweep_point *p) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < p->nassign; i++)
    for (const char *c = p->assign[i];; c++) {
      h = (h ^ (unsigned char)*c) * 1099511628211ull;
      if (!*c) break;
    }
  return h;
}

/* True (and nothing added) when plan already holds a point with p's assignments. */
static bool seen_before(point_set *set, const loom_sweep_plan *plan, const loom_sweep_point *p) {
  if (!set->cap) {
    set->cap = 1024;
    set->slot = loom_calloc(set->cap, sizeof *set->slot);
  }
  if ((size_t)plan->n * 2 >= set->cap) { /* grow: re-insert what the plan holds */
    free(set->slot);
    set->cap *= 4;
    set->slot = loom_calloc(set->cap, sizeof *set->slot);
    for (int i = 0; i < plan->n; i++) {
      size_t k = assign_hash(&plan->points[i]) & (set->cap - 1);
      while (set->slot[k]) k = (k + 1) & (set->cap - 1);
      set->slot[k] = i + 1;
    }
  }
  size_t k = assign_hash(p) & (set->cap - 1);
  for (; set->slot[k]; k = (k + 1) & (set->cap - 1))
    if (same_assign(&plan->points[set->slot[k] - 1], p)) return true;
  set->slot[k] = plan->n + 1; /* the index p will take */
  return false;
}

/* ---- grid and random ------------------------------------------------------------------------ */

/* The grid's dimensions are the linked groups (a parameter alone is a group of one). */
static int expand_grid(const loom_sweep_spec *s, const loom_config *base, loom_expr **cons,
                       loom_sweep_plan *plan) {
  double total = 1;
  for (int i = 0; i < s->nparams; i++)
    if (s->params[i].group == i) total *= s->params[i].nvalues;
  if (total > MAX_POINTS)
    return loom_err("%s: the grid has %.0f points (more than %d); use strategy: random with "
                    "num_runs, or fewer values", s->path, total, MAX_POINTS);
  char **values = loom_calloc((size_t)(s->nparams > 0 ? s->nparams : 1), sizeof *values);
  int *pick = loom_calloc((size_t)(s->nparams > 0 ? s->nparams : 1), sizeof *pick);
  point_set set = {0};
  int rc = 0;
  for (long idx = 0; idx < (long)total && !rc; idx++) {
    long rest = idx;
    for (int i = s->nparams - 1; i >= 0; i--)
      if (s->params[i].group == i) {
        pick[i] = (int)(rest % s->params[i].nvalues);
        rest /= s->params[i].nvalues;
      }
    for (int i = 0; i < s->nparams; i++) values[i] = s->params[i].values[pick[s->params[i].group]];
    loom_sweep_point p;
    bool keep;
    rc = make_point(s, base, values, cons, &p, &keep);
    if (!rc && keep && !seen_before(&set, plan, &p)) add_point(plan, &p);
    else free_point(&p);
  }
  free(set.slot);
  free(pick);
  free(values);
  return rc;
}

/* A value drawn from a range distribution. */
static char *sample(const loom_sweep_param *p, bool int_key, loom_rng *rng) {
  double v;
  if (p->dist == LOOM_DIST_INT_UNIFORM) {
    double q = p->q > 0 ? p->q : 1;
    double lo = ceil(p->min / q - 1e-9), hi = floor(p->max / q + 1e-9);
    if (hi < lo) hi = lo;
    v = (lo + (double)loom_rng_below(rng, (uint64_t)(hi - lo + 1))) * q;
  } else {
    double u = loom_rng_uniform(rng);
    v = p->dist == LOOM_DIST_LOG_UNIFORM ? exp(log(p->min) + u * (log(p->max) - log(p->min)))
                                         : p->min + u * (p->max - p->min);
    if (p->q > 0) v = fmin(fmax(round(v / p->q) * p->q, p->min), p->max);
  }
  if (int_key) return loom_sprintf("%ld", (long)llround(v));
  return loom_sprintf(p->q > 0 || p->dist == LOOM_DIST_INT_UNIFORM ? "%.10g" : "%.4g", v);
}

static int expand_random(const loom_sweep_spec *s, const loom_config *base, loom_expr **cons,
                         loom_sweep_plan *plan) {
  if (s->num_runs > MAX_POINTS) return loom_err("%s: num_runs above %d", s->path, MAX_POINTS);
  loom_rng rng;
  loom_rng_seed(&rng, (uint64_t)s->seed);
  char **values = loom_calloc((size_t)(s->nparams > 0 ? s->nparams : 1), sizeof *values);
  int *pick = loom_calloc((size_t)(s->nparams > 0 ? s->nparams : 1), sizeof *pick);
  long attempts = 0, max_attempts = 200 * s->num_runs + 1000;
  int rc = 0;
  while (plan->n < s->num_runs && attempts++ < max_attempts && !rc) {
    for (int i = 0; i < s->nparams; i++) {
      const loom_sweep_param *q = &s->params[i];
      const loom_config_key *k = loom_config_key_find(q->key);
      if (q->group != i) { /* linked: the value at its group's drawn position */
        values[i] = loom_strdup(q->values[pick[q->group]]);
      } else if (q->dist == LOOM_DIST_VALUES) {
        pick[i] = (int)loom_rng_below(&rng, (uint64_t)q->nvalues);
        values[i] = loom_strdup(q->values[pick[i]]);
      } else {
        values[i] = sample(q, k->type == LOOM_KEY_INT, &rng);
      }
    }
    loom_sweep_point p;
    bool keep;
    rc = make_point(s, base, values, cons, &p, &keep);
    for (int i = 0; i < plan->n && keep; i++) keep = !same_assign(&plan->points[i], &p);
    if (!rc && keep) add_point(plan, &p);
    else free_point(&p);
    for (int i = 0; i < s->nparams; i++) free(values[i]);
  }
  free(pick);
  free(values);
  if (!rc && plan->n < s->num_runs)
    rc = loom_err("%s: found only %d distinct points that pass exclude/constraints in %ld "
                  "draws, but num_runs is %ld; widen the parameters or lower num_runs",
                  s->path, plan->n, max_attempts, s->num_runs);
  return rc;
}

/* Names from name_keys (or the swept keys), made unique with _2, _3, ...; then validation. */
static int name_points(const loom_sweep_spec *s, loom_sweep_plan *plan) {
  char **keys = s->name_keys;
  int nkeys = s->nname_keys;
  char **swept = NULL;
  if (!keys) {
    swept = loom_calloc((size_t)s->nparams, sizeof *swept);
    for (int i = 0; i < s->nparams; i++) swept[i] = s->params[i].key;
    keys = swept, nkeys = s->nparams;
  }
  for (int i = 0; i < plan->n; i++) {
    loom_sweep_point *p = &plan->points[i];
    char *base = loom_sweep_point_name(&p->cfg, keys, nkeys);
    p->name = loom_strdup(base);
    for (int k = 2;; k++) {
      bool taken = false;
      for (int j = 0; j < i && !taken; j++) taken = !strcmp(plan->points[j].name, p->name);
      if (!taken) break;
      free(p->name);
      p->name = loom_sprintf("%s_%d", base, k);
    }
    free(base);
    snprintf(p->cfg.run.name, sizeof p->cfg.run.name, "%s", p->name);
    if (loom_config_validate(&p->cfg)) {
      free(swept);
      return loom_err_prefix("sweep point %s: ", p->name);
    }
  }
  free(swept);
  return 0;
}

int loom_sweep_expand(const loom_sweep_spec *s, loom_sweep_plan *plan) {
  memset(plan, 0, sizeof *plan);
  plan->name = loom_strdup(s->name);
  plan->slurm = s->slurm;
  snprintf(plan->hardware, sizeof plan->hardware, "%s", s->hardware);
  loom_config base;
  loom_expr **cons = NULL;
  int rc = base_config(s, &base);
  if (!rc) rc = parse_constraints(s, &cons);
  if (!rc) rc = s->random ? expand_random(s, &base, cons, plan) : expand_grid(s, &base, cons, plan);
  if (!rc && plan->n == 0)
    rc = loom_err("%s: every point was excluded or failed a constraint; nothing to run", s->path);
  if (!rc) rc = name_points(s, plan);
  free_constraints(cons, s->nconstraints);
  if (rc) loom_sweep_plan_free(plan);
  return rc;
}

void loom_sweep_plan_free(loom_sweep_plan *plan) {
  for (int i = 0; i < plan->n; i++) free_point(&plan->points[i]);
  free(plan->points);
  free(plan->name);
  memset(plan, 0, sizeof *plan);
}

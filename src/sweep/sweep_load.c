/* Loading a sweep file (format in loom/sweep.h) through loom's YAML layer (loom/yaml.h). Every
 * error names file:line and what to do; parameter keys and values are checked against the
 * config schema here (a `${key}` value against the keys), and linked parameters are grouped, so
 * a bad sweep fails before anything is generated or run. */
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/config_schema.h"
#include "sweep/sweep_internal.h"
#include "loom/core.h"
#include "loom/sweep.h"
#include "loom/yaml.h"

typedef struct {
  const char *path;
  loom_sweep_spec *s;
} ctx;

static int want_scalar(const loom_yaml_node *n, const char *what, const char **out) {
  *out = loom_yaml_scalar(n);
  if (!*out) return loom_yaml_err(n, "%s must be a single value, not a list or mapping", what);
  return 0;
}

static int want_number(const loom_yaml_node *n, const char *what, double *out) {
  const char *t;
  if (want_scalar(n, what, &t)) return -1;
  char *end;
  *out = strtod(t, &end);
  if (!*t || *end || !isfinite(*out))
    return loom_yaml_err(n, "%s must be a number, not '%s'", what, t);
  return 0;
}

/* Append to a NULL-free string list. */
static void push(char ***list, int *n, char *s) {
  *list = loom_realloc(*list, (size_t)*n + 1, sizeof(char *));
  (*list)[(*n)++] = s;
}

/* A list of scalars (or one scalar) as strings. */
static int string_list(const loom_yaml_node *n, const char *what, char ***out, int *count) {
  if (n->kind == LOOM_YAML_SCALAR) {
    push(out, count, loom_strdup(n->text));
    return 0;
  }
  if (n->kind != LOOM_YAML_SEQUENCE) return loom_yaml_err(n, "%s must be a list", what);
  for (int i = 0; i < n->n; i++) {
    const char *t;
    if (want_scalar(n->items[i], what, &t)) return -1;
    push(out, count, loom_strdup(t));
  }
  return 0;
}

/* A config key named in the sweep file: must exist in the schema. */
static int check_key(const loom_yaml_node *n, const char *key) {
  if (loom_config_key_find(key)) return 0;
  loom_config_unknown_key_err(key);
  return loom_yaml_err_prefix(n);
}

/* A value for key k: parse it into a scratch config to report bad values here; `${other}`
 * must name a config key (its value is known only per point). */
static int check_value(const loom_yaml_node *n, const char *key, const char *text) {
  char ref[128];
  if (loom_sweep_interp_key(text, ref, sizeof ref)) {
    if (check_key(n, ref)) return -1;
    if (loom_config_key_find(ref) == loom_config_key_find(key))
      return loom_yaml_err(n, "%s: '%s' refers to the key itself; give a value", key, text);
    return 0;
  }
  if (strstr(text, "${"))
    return loom_yaml_err(n, "%s: '%s': an interpolation is the whole value, \"${some.key}\"", key,
                         text);
  loom_config scratch;
  loom_config_defaults(&scratch);
  if (loom_config_key_set(&scratch, loom_config_key_find(key), text) == 0) return 0;
  return loom_yaml_err_prefix(n);
}

static const char *const dist_names[] = {"values", "uniform", "log_uniform", "int_uniform", NULL};

static int param_mapping(const loom_yaml_node *n, loom_sweep_param *p) {
  static const char *const fields[] = {"values", "value", "min", "max", "distribution", "q",
                                       "link", NULL};
  bool have_min = false, have_max = false, have_dist = false;
  for (int i = 0; i < n->n; i++) {
    const loom_yaml_node *kn = n->pairs[i].key, *vn = n->pairs[i].value;
    const char *f = kn->text;
    if (!strcmp(f, "values") || !strcmp(f, "value")) {
      if (vn->kind == LOOM_YAML_MAPPING) return loom_yaml_err(vn, "%s takes a list of values", f);
      if (string_list(vn, p->key, &p->values, &p->nvalues)) return -1;
      if (p->nvalues == 0) return loom_yaml_err(vn, "%s: give at least one value", p->key);
      for (int j = 0; j < p->nvalues; j++)
        if (check_value(vn, p->key, p->values[j])) return -1;
    } else if (!strcmp(f, "min")) {
      if (want_number(vn, "min", &p->min)) return -1;
      have_min = true;
    } else if (!strcmp(f, "max")) {
      if (want_number(vn, "max", &p->max)) return -1;
      have_max = true;
    } else if (!strcmp(f, "link")) {
      const char *k;
      if (want_scalar(vn, "link", &k) || check_key(vn, k)) return -1;
      free(p->link);
      p->link = loom_strdup(loom_config_key_find(k)->name);
    } else if (!strcmp(f, "q")) {
      if (want_number(vn, "q", &p->q)) return -1;
      if (p->q <= 0) return loom_yaml_err(vn, "q must be > 0");
    } else if (!strcmp(f, "distribution")) {
      const char *d;
      if (want_scalar(vn, "distribution", &d)) return -1;
      int k = 0;
      while (dist_names[k] && strcmp(dist_names[k], d)) k++;
      if (!dist_names[k]) {
        const char *near = loom_config_nearest_of(d, dist_names);
        return loom_yaml_err(vn,
                             "unknown distribution '%s'%s%s%s (one of values, uniform, "
                             "log_uniform, int_uniform)",
                             d, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
      }
      p->dist = (loom_sweep_dist)k;
      have_dist = true;
    } else {
      const char *near = loom_config_nearest_of(f, fields);
      return loom_yaml_err(kn,
                           "unknown parameter field '%s'%s%s%s (values, value, min, max, "
                           "distribution, q, link)",
                           f, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
    }
  }
  if (p->nvalues) {
    if (have_min || have_max || (have_dist && p->dist != LOOM_DIST_VALUES))
      return loom_yaml_err(n, "%s: give either values or min/max, not both", p->key);
    p->dist = LOOM_DIST_VALUES;
    return 0;
  }
  if (!have_min || !have_max)
    return loom_yaml_err(n, "%s: give values: [...], or min and max with a distribution", p->key);
  if (!have_dist) p->dist = loom_config_key_find(p->key)->type == LOOM_KEY_INT
                                ? LOOM_DIST_INT_UNIFORM : LOOM_DIST_UNIFORM;
  if (p->dist == LOOM_DIST_VALUES)
    return loom_yaml_err(n, "%s: distribution values needs values: [...]", p->key);
  if (p->min > p->max)
    return loom_yaml_err(n, "%s: min %g is above max %g", p->key, p->min, p->max);
  if (p->dist == LOOM_DIST_LOG_UNIFORM && p->min <= 0)
    return loom_yaml_err(n, "%s: log_uniform needs min > 0", p->key);
  loom_key_type t = loom_config_key_find(p->key)->type;
  if (t != LOOM_KEY_INT && t != LOOM_KEY_FLOAT)
    return loom_yaml_err(n, "%s is not numeric; give values: [...] instead of a range", p->key);
  return 0;
}

static int load_parameters(const ctx *x, const loom_yaml_node *n) {
  if (n->kind != LOOM_YAML_MAPPING)
    return loom_yaml_err(n, "parameters must be a mapping of config keys, e.g. "
                            "{training.lr: {values: [1e-4, 3e-4]}}");
  loom_sweep_spec *s = x->s;
  for (int j = 0; j < n->n; j++) {
    const loom_yaml_node *kn = n->pairs[j].key, *vn = n->pairs[j].value;
    const char *key = kn->text;
    if (check_key(kn, key)) return -1;
    key = loom_config_key_find(key)->name; /* text.parallel.X is parallel.X */
    for (int i = 0; i < s->nparams; i++)
      if (!strcmp(s->params[i].key, key))
        return loom_yaml_err(kn, "parameter '%s' is given twice (first at line %d)", key,
                             s->params[i].line);
    s->params = loom_realloc(s->params, (size_t)s->nparams + 1, sizeof *s->params);
    loom_sweep_param *p = &s->params[s->nparams++];
    memset(p, 0, sizeof *p);
    p->key = loom_strdup(key);
    p->line = kn->line;
    if (vn->kind == LOOM_YAML_MAPPING) {
      if (param_mapping(vn, p)) return -1;
    } else { /* shorthand: a list of values or one value */
      if (string_list(vn, key, &p->values, &p->nvalues)) return -1;
      if (p->nvalues == 0) return loom_yaml_err(vn, "%s: give at least one value", key);
      for (int i = 0; i < p->nvalues; i++)
        if (check_value(vn, key, p->values[i])) return -1;
    }
  }
  return 0;
}

static int load_overrides(const ctx *x, const loom_yaml_node *n) {
  loom_sweep_spec *s = x->s;
  if (n->kind == LOOM_YAML_MAPPING) {
    for (int i = 0; i < n->n; i++) {
      const loom_yaml_node *kn = n->pairs[i].key, *vn = n->pairs[i].value;
      const char *k = kn->text, *v;
      if (want_scalar(vn, k, &v) || check_key(kn, k) || check_value(vn, k, v)) return -1;
      push(&s->overrides, &s->noverrides, loom_sprintf("%s=%s", k, v));
    }
    return 0;
  }
  if (string_list(n, "overrides", &s->overrides, &s->noverrides)) return -1;
  loom_config scratch;
  loom_config_defaults(&scratch);
  for (int i = 0; i < s->noverrides; i++)
    if (loom_config_override(&scratch, s->overrides[i])) return loom_yaml_err_prefix(n);
  return 0;
}

static int load_exclude(const ctx *x, const loom_yaml_node *n) {
  loom_sweep_spec *s = x->s;
  if (n->kind != LOOM_YAML_SEQUENCE)
    return loom_yaml_err(n, "exclude must be a list of mappings, e.g. [{parallel.tp: 2, "
                            "training.dtype: fp32}]");
  for (int e = 0; e < n->n; e++) {
    const loom_yaml_node *m = n->items[e];
    if (m->kind != LOOM_YAML_MAPPING)
      return loom_yaml_err(m, "each exclude entry must be a mapping of key: value");
    s->exclude = loom_realloc(s->exclude, (size_t)s->nexclude + 1, sizeof *s->exclude);
    s->nexclude_keys = loom_realloc(s->nexclude_keys, (size_t)s->nexclude + 1, sizeof(int));
    char **list = NULL;
    int count = 0;
    for (int i = 0; i < m->n; i++) {
      const loom_yaml_node *kn = m->pairs[i].key, *vn = m->pairs[i].value;
      const char *k = kn->text, *v = NULL;
      int rc = want_scalar(vn, k, &v);
      if (!rc) rc = check_key(kn, k);
      if (!rc) rc = check_value(vn, k, v);
      if (rc) {
        for (int i = 0; i < count; i++) free(list[i]);
        free(list);
        return -1;
      }
      push(&list, &count, loom_sprintf("%s=%s", k, v));
    }
    s->exclude[s->nexclude] = list;
    s->nexclude_keys[s->nexclude++] = count;
  }
  return 0;
}

static int slurm_field(const ctx *x, const loom_yaml_node *kn, const loom_yaml_node *vn) {
  loom_slurm_opts *o = &x->s->slurm;
  const char *k = kn->text, *v;
  if (want_scalar(vn, k, &v)) return -1;
  struct {
    const char *name;
    char *dst;
    size_t cap;
    int *num;
  } f[] = {{"partition", o->partition, sizeof o->partition, NULL},
           {"account", o->account, sizeof o->account, NULL},
           {"qos", o->qos, sizeof o->qos, NULL},
           {"time", o->time, sizeof o->time, NULL},
           {"mem", o->mem, sizeof o->mem, NULL},
           {"constraint", o->constraint, sizeof o->constraint, NULL},
           {"srun_args", o->srun_args, sizeof o->srun_args, NULL},
           {"extra", o->extra, sizeof o->extra, NULL},
           {"ntasks_per_node", NULL, 0, &o->ntasks_per_node},
           {"cpus_per_task", NULL, 0, &o->cpus_per_task},
           {"gpus_per_node", NULL, 0, &o->gpus_per_node}};
  const char *names[sizeof f / sizeof f[0] + 1];
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    names[i] = f[i].name;
    if (strcmp(f[i].name, k)) continue;
    if (f[i].num) {
      char *end;
      long n = strtol(v, &end, 10);
      if (*end || n < 0) return loom_yaml_err(vn, "slurm.%s must be a whole number >= 0", k);
      *f[i].num = (int)n;
    } else {
      if (strlen(v) >= f[i].cap) return loom_yaml_err(vn, "slurm.%s is too long", k);
      snprintf(f[i].dst, f[i].cap, "%s", v);
    }
    return 0;
  }
  names[sizeof f / sizeof f[0]] = NULL;
  const char *near = loom_config_nearest_of(k, names);
  return loom_yaml_err(kn, "unknown slurm setting '%s'%s%s%s", k, near ? "; did you mean '" : "",
                       near ? near : "", near ? "'?" : "");
}

static int sim_section(const ctx *x, const loom_yaml_node *n) {
  if (n->kind != LOOM_YAML_MAPPING)
    return loom_yaml_err(n, "sim must be a mapping, e.g. {hardware: h100-sxm}");
  for (int i = 0; i < n->n; i++) {
    const loom_yaml_node *kn = n->pairs[i].key, *vn = n->pairs[i].value;
    const char *v;
    if (strcmp(kn->text, "hardware"))
      return loom_yaml_err(kn, "unknown sim setting '%s' (the one setting is hardware: a profile "
                           "name such as h100-sxm, or a profile file)", kn->text);
    if (want_scalar(vn, "sim.hardware", &v)) return -1;
    if (!*v || strlen(v) >= sizeof x->s->hardware)
      return loom_yaml_err(vn, "sim.hardware must be a profile name or file (at most %zu "
                           "characters)", sizeof x->s->hardware - 1);
    snprintf(x->s->hardware, sizeof x->s->hardware, "%s", v);
  }
  return 0;
}

static char *resolve_base(const char *sweep_path, const char *base) {
  if (base[0] == '/') return loom_strdup(base);
  char *copy = loom_strdup(sweep_path);
  char *rel = loom_sprintf("%s/%s", dirname(copy), base);
  free(copy);
  if (loom_path_exists(rel) || !loom_path_exists(base)) return rel;
  free(rel);
  return loom_strdup(base);
}

static int top_key(const ctx *x, const loom_yaml_node *kn, const loom_yaml_node *vn) {
  static const char *const keys[] = {"name", "sweep_name", "description", "base", "overrides",
                                     "parameters", "strategy", "num_runs", "seed", "exclude",
                                     "constraints", "name_keys", "slurm", "sim", NULL};
  loom_sweep_spec *s = x->s;
  const char *k = kn->text, *v;
  if (!strcmp(k, "name") || !strcmp(k, "sweep_name")) {
    if (want_scalar(vn, k, &v)) return -1;
    free(s->name);
    s->name = loom_strdup(v);
  } else if (!strcmp(k, "description")) {
    return 0;
  } else if (!strcmp(k, "base")) {
    if (want_scalar(vn, k, &v)) return -1;
    free(s->base); /* a repeated base: the last one wins, as for name */
    s->base = *v ? resolve_base(x->path, v) : NULL;
    if (s->base && !loom_path_exists(s->base))
      return loom_yaml_err(
          vn, "base config '%s' not found (looked at %s, relative to the sweep file)", v, s->base);
  } else if (!strcmp(k, "overrides")) {
    return load_overrides(x, vn);
  } else if (!strcmp(k, "parameters")) {
    return load_parameters(x, vn);
  } else if (!strcmp(k, "strategy")) {
    if (want_scalar(vn, k, &v)) return -1;
    if (strcmp(v, "grid") && strcmp(v, "random"))
      return loom_yaml_err(vn, "strategy must be grid or random, not '%s'", v);
    s->random = !strcmp(v, "random");
  } else if (!strcmp(k, "num_runs") || !strcmp(k, "seed")) {
    double d;
    if (want_number(vn, k, &d)) return -1;
    if (d != floor(d) || d < 0 || (!strcmp(k, "num_runs") && d < 1))
      return loom_yaml_err(vn, "%s must be a whole number%s", k, k[0] == 'n' ? " >= 1" : " >= 0");
    if (k[0] == 'n') s->num_runs = (long)d;
    else s->seed = (long)d;
  } else if (!strcmp(k, "exclude")) {
    return load_exclude(x, vn);
  } else if (!strcmp(k, "constraints")) {
    return string_list(vn, k, &s->constraints, &s->nconstraints);
  } else if (!strcmp(k, "name_keys")) {
    if (string_list(vn, k, &s->name_keys, &s->nname_keys)) return -1;
    for (int i = 0; i < s->nname_keys; i++)
      if (check_key(vn, s->name_keys[i])) return -1;
  } else if (!strcmp(k, "sim")) {
    return sim_section(x, vn);
  } else if (!strcmp(k, "slurm")) {
    if (vn->kind != LOOM_YAML_MAPPING) return loom_yaml_err(vn, "slurm must be a mapping");
    for (int i = 0; i < vn->n; i++)
      if (slurm_field(x, vn->pairs[i].key, vn->pairs[i].value)) return -1;
  } else {
    const char *near = loom_config_nearest_of(k, keys);
    return loom_yaml_err(kn, "unknown sweep key '%s'%s%s%s (valid: name, base, overrides, "
                         "parameters, strategy, num_runs, seed, exclude, constraints, name_keys, "
                         "slurm, sim)", k, near ? "; did you mean '" : "", near ? near : "",
                         near ? "'?" : "");
  }
  return 0;
}

static char *default_name(const char *path) {
  char *copy = loom_strdup(path);
  char *b = loom_strdup(basename(copy));
  free(copy);
  char *dot = strrchr(b, '.');
  if (dot && dot != b) *dot = 0;
  return b;
}

static int load_doc(loom_sweep_spec *s, const char *path, const loom_yaml_node *root) {
  ctx x = {path, s};
  if (!root) return loom_err("%s: the sweep file is empty", path);
  if (root->kind != LOOM_YAML_MAPPING) return loom_yaml_err(root, "a sweep file is a mapping");
  for (int i = 0; i < root->n; i++)
    if (top_key(&x, root->pairs[i].key, root->pairs[i].value)) return -1;
  if (!s->nparams)
    return loom_yaml_err(root, "no parameters to sweep; add parameters: {KEY: {values: [...]}}");
  if (s->random && s->num_runs < 1)
    return loom_yaml_err(root, "strategy random needs num_runs (how many points to draw)");
  for (int i = 0; i < s->nparams && !s->random; i++)
    if (s->params[i].dist != LOOM_DIST_VALUES)
      return loom_err("%s:%d: %s has a %s range, which only strategy: random can sample; give "
                      "values: [...] for a grid", path, s->params[i].line, s->params[i].key,
                      dist_names[s->params[i].dist]);
  if (!s->name) s->name = default_name(path);
  return loom_sweep_link_groups(s);
}

int loom_sweep_load(loom_sweep_spec *s, const char *path) {
  memset(s, 0, sizeof *s);
  s->path = loom_strdup(path);
  char *text;
  size_t len;
  if (loom_read_file(path, &text, &len)) {
    loom_sweep_spec_free(s);
    return loom_err_prefix("sweep file: ");
  }
  loom_yaml_doc *doc;
  int rc = loom_yaml_parse(&doc, text, len, path);
  free(text);
  if (rc == 0) rc = load_doc(s, path, loom_yaml_root(doc));
  loom_yaml_free(doc);
  if (rc) loom_sweep_spec_free(s);
  return rc;
}

static void free_list(char **l, int n) {
  for (int i = 0; i < n; i++) free(l[i]);
  free(l);
}

void loom_sweep_spec_free(loom_sweep_spec *s) {
  free(s->path);
  free(s->name);
  free(s->base);
  free_list(s->overrides, s->noverrides);
  for (int i = 0; i < s->nparams; i++) {
    free(s->params[i].key);
    free(s->params[i].link);
    free_list(s->params[i].values, s->params[i].nvalues);
  }
  free(s->params);
  for (int i = 0; i < s->nexclude; i++) free_list(s->exclude[i], s->nexclude_keys[i]);
  free(s->exclude);
  free(s->nexclude_keys);
  free_list(s->constraints, s->nconstraints);
  free_list(s->name_keys, s->nname_keys);
  free_list(s->choices, s->nchoices);
  memset(s, 0, sizeof *s);
}

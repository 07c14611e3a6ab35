/* Linked parameters and interpolated values of sweep files: `link: KEY` puts parameters in one
 * group that varies value by value (one grid dimension, one random draw), and a value
 * "${some.key}" stands for that key's value in each point. Groups are (re)computed after the
 * file is loaded and after every command-line override, with the checks that make them
 * well-formed: links name parameters, a group's lists have one length and no ranges, and an
 * interpolation does not refer to a parameter whose own values are interpolations. */
#include <stdbool.h>
#include <string.h>

#include "loom/config_schema.h"
#include "sweep/sweep_internal.h"
#include "loom/core.h"
#include "loom/sweep.h"

bool loom_sweep_interp_key(const char *value, char *key, size_t cap) {
  size_t n = strlen(value);
  if (n < 4 || strncmp(value, "${", 2) || value[n - 1] != '}' || n - 3 >= cap) return false;
  memcpy(key, value + 2, n - 3);
  key[n - 3] = 0;
  return strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_.") == n - 3;
}

static int param_index(const loom_sweep_spec *s, const char *key) {
  for (int i = 0; i < s->nparams; i++)
    if (!strcmp(s->params[i].key, key)) return i;
  return -1;
}

/* Is any value of parameter p an interpolation? */
static bool interpolated(const loom_sweep_param *p) {
  char ref[128];
  for (int v = 0; v < p->nvalues; v++)
    if (loom_sweep_interp_key(p->values[v], ref, sizeof ref)) return true;
  return false;
}

int loom_sweep_link_groups(loom_sweep_spec *s) {
  for (int i = 0; i < s->nparams; i++) s->params[i].group = i;
  for (bool changed = true; changed;) { /* the smallest index of each connected set */
    changed = false;
    for (int i = 0; i < s->nparams; i++) {
      loom_sweep_param *p = &s->params[i];
      if (!p->link) continue;
      int j = param_index(s, p->link);
      if (j < 0)
        return loom_err("%s:%d: %s: link: %s is not a parameter of this sweep; link names "
                        "another key under parameters:", s->path, p->line, p->key, p->link);
      if (j == i) return loom_err("%s:%d: %s links to itself", s->path, p->line, p->key);
      int g = p->group < s->params[j].group ? p->group : s->params[j].group;
      int a = p->group, b = s->params[j].group;
      for (int k = 0; k < s->nparams; k++)
        if (s->params[k].group == a || s->params[k].group == b) {
          changed |= s->params[k].group != g;
          s->params[k].group = g;
        }
    }
  }
  for (int i = 0; i < s->nparams; i++) {
    const loom_sweep_param *p = &s->params[i], *lead = &s->params[p->group];
    char ref[128];
    if (p->group != i && (p->dist != LOOM_DIST_VALUES || lead->dist != LOOM_DIST_VALUES))
      return loom_err("%s:%d: %s is linked to %s: linked parameters take values: [...], not "
                      "ranges", s->path, p->line, p->key, lead->key);
    if (p->group != i && p->nvalues != lead->nvalues)
      return loom_err("%s:%d: %s has %d value%s but the parameter it is linked with, %s (line "
                      "%d), has %d: linked parameters go value by value, so give both the same "
                      "number", s->path, p->line, p->key, p->nvalues, p->nvalues == 1 ? "" : "s",
                      lead->key, lead->line, lead->nvalues);
    for (int v = 0; v < p->nvalues; v++) {
      if (!loom_sweep_interp_key(p->values[v], ref, sizeof ref)) continue;
      int j = param_index(s, loom_config_key_find(ref) ? loom_config_key_find(ref)->name : ref);
      if (j >= 0 && interpolated(&s->params[j]))
        return loom_err("%s:%d: %s: '%s' refers to %s, whose own values are interpolations; "
                        "refer to a key with plain values", s->path, p->line, p->key,
                        p->values[v], s->params[j].key);
    }
  }
  return 0;
}

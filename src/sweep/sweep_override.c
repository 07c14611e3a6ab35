/* Command-line overrides of a sweep file (`loom sweep run SWEEP.yaml KEY=VALUE ...`): each one
 * fixes a config key for every point, on top of the file's base and overrides. A key the file
 * sweeps leaves the sweep; parameters linked with it keep varying together (the group is
 * relinked around it). The grammar is the config's: KEY=VALUE, +KEY=VALUE, ~KEY; +KEY=VALUE
 * for a key outside the schema adds a user key to every point. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/config_schema.h"
#include "sweep/sweep_internal.h"
#include "loom/core.h"
#include "loom/sweep.h"

/* The key an override names ("+a.b=c" -> a.b, "~a.b" -> a.b), canonical, or an error. */
static const loom_config_key *override_key(const char *expr) {
  const char *k = expr[0] == '+' || expr[0] == '~' ? expr + 1 : expr;
  size_t n = strcspn(k, "=");
  char name[128];
  if (n == 0 || n >= sizeof name) {
    loom_err("override '%s': expected KEY=VALUE, +KEY=VALUE or ~KEY", expr);
    return NULL;
  }
  memcpy(name, k, n);
  name[n] = 0;
  const loom_config_key *key = loom_config_key_find(name);
  if (!key) {
    loom_config_unknown_key_err(name);
    loom_err_prefix("override '%s': ", expr);
  }
  return key;
}

/* Drop parameter i; the others of its group stay linked to the group's first remaining one. */
static void remove_param(loom_sweep_spec *s, int i) {
  int lead = -1;
  for (int j = 0; j < s->nparams; j++)
    if (j != i && s->params[j].group == s->params[i].group && lead < 0) lead = j;
  for (int j = 0; j < s->nparams; j++) {
    if (j == i || s->params[j].group != s->params[i].group) continue;
    free(s->params[j].link);
    s->params[j].link = j == lead ? NULL : loom_strdup(s->params[lead].key);
  }
  loom_sweep_param *p = &s->params[i];
  free(p->key);
  free(p->link);
  for (int v = 0; v < p->nvalues; v++) free(p->values[v]);
  free(p->values);
  memmove(p, p + 1, sizeof *p * (size_t)(s->nparams - i - 1));
  s->nparams--;
}

/* +exp.x=v / ++exp.x=v: a user key for every point (nothing in the sweep to drop). */
static bool is_user_key(const char *expr) {
  const char *k = expr + (expr[0] == '+') + (expr[0] == '+' && expr[1] == '+');
  size_t n = strcspn(k, "=");
  char name[128];
  if (k == expr || !k[n] || n == 0 || n >= sizeof name) return false;
  memcpy(name, k, n);
  name[n] = 0;
  return !loom_config_key_find(name);
}

int loom_sweep_override(loom_sweep_spec *s, const char *expr) {
  if (is_user_key(expr)) {
    loom_config scratch;
    loom_config_defaults(&scratch);
    if (loom_config_override(&scratch, expr)) return -1; /* names the override */
    s->overrides = loom_realloc(s->overrides, (size_t)(s->noverrides + 1), sizeof(char *));
    s->overrides[s->noverrides++] = loom_strdup(expr);
    return 0;
  }
  const loom_config_key *key = override_key(expr);
  if (!key) return -1;
  if (expr[0] != '~' && !strchr(expr, '='))
    return loom_err("override '%s': expected KEY=VALUE (or ~KEY to reset a key)", expr);
  loom_config scratch; /* the value must parse for the key */
  loom_config_defaults(&scratch);
  if (loom_config_override(&scratch, expr)) return -1; /* names the override */
  for (int i = 0; i < s->nparams; i++)
    if (!strcmp(s->params[i].key, key->name)) {
      remove_param(s, i);
      break;
    }
  s->overrides = loom_realloc(s->overrides, (size_t)(s->noverrides + 1), sizeof(char *));
  s->overrides[s->noverrides++] = loom_strdup(expr);
  return loom_sweep_link_groups(s);
}

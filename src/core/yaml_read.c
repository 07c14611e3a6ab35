/* Reading a loom_yaml tree (include/loom/yaml.h): errors at a node ("file:line: ..."), key
 * lookups, null, and the typed reads of scalars that the readers of loom's YAML files share. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/yaml.h"

int loom_yaml_err(const loom_yaml_node *n, const char *fmt, ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_err("%s:%d: %s", n->file, n->line, msg);
}

int loom_yaml_err_prefix(const loom_yaml_node *n) {
  return loom_err_prefix("%s:%d: ", n->file, n->line);
}

const char *loom_yaml_kind_phrase(const loom_yaml_node *n) {
  return n->kind == LOOM_YAML_MAPPING ? "a mapping" : n->kind == LOOM_YAML_SEQUENCE ? "a list"
                                                                                   : "a scalar";
}

const char *loom_yaml_scalar(const loom_yaml_node *n) {
  return n && n->kind == LOOM_YAML_SCALAR ? n->text : NULL;
}

bool loom_yaml_is_null(const loom_yaml_node *n) {
  if (!n || n->kind != LOOM_YAML_SCALAR || !n->plain) return false;
  const char *t = n->text;
  return !*t || !strcmp(t, "~") || !strcmp(t, "null") || !strcmp(t, "Null") ||
         !strcmp(t, "NULL");
}

const loom_yaml_node *loom_yaml_get(const loom_yaml_node *map, const char *key) {
  if (!map || map->kind != LOOM_YAML_MAPPING) return NULL;
  for (int i = 0; i < map->n; i++)
    if (!strcmp(map->pairs[i].key->text, key)) return map->pairs[i].value;
  return NULL;
}

int loom_yaml_number(const loom_yaml_node *n, const char *what, double *out) {
  if (n->kind != LOOM_YAML_SCALAR) return loom_yaml_err(n, "%s: expected a number", what);
  char *end;
  errno = 0;
  double v = strtod(n->text, &end);
  if (end == n->text || *end || errno || !isfinite(v))
    return loom_yaml_err(n, "%s: expected a number, found '%s'", what, n->text);
  *out = v;
  return 0;
}

int loom_yaml_int(const loom_yaml_node *n, const char *what, int *out) {
  double v;
  if (loom_yaml_number(n, what, &v)) return LOOM_ERR;
  if (v != floor(v) || fabs(v) > 1e9)
    return loom_yaml_err(n, "%s: expected an integer, found '%s'", what, n->text);
  *out = (int)v;
  return 0;
}

int loom_yaml_bool(const loom_yaml_node *n, const char *what, bool *out) {
  if (n->kind == LOOM_YAML_SCALAR) {
    if (!strcmp(n->text, "true") || !strcmp(n->text, "yes")) return *out = true, 0;
    if (!strcmp(n->text, "false") || !strcmp(n->text, "no")) return *out = false, 0;
  }
  return loom_yaml_err(n, "%s: expected true or false", what);
}

int loom_yaml_string(const loom_yaml_node *n, const char *what, char *out, size_t cap) {
  if (n->kind != LOOM_YAML_SCALAR) return loom_yaml_err(n, "%s: expected a string", what);
  size_t len = strlen(n->text);
  if (len >= cap) return loom_yaml_err(n, "%s: longer than %zu characters", what, cap - 1);
  memcpy(out, n->text, len + 1);
  return 0;
}

int loom_yaml_only(const loom_yaml_node *map, const char *where, const char *const *allowed) {
  if (map->kind != LOOM_YAML_MAPPING) return loom_yaml_err(map, "%s: expected a mapping", where);
  for (int i = 0; i < map->n; i++) {
    const loom_yaml_node *key = map->pairs[i].key;
    bool ok = false;
    for (int j = 0; allowed[j] && !ok; j++) ok = !strcmp(key->text, allowed[j]);
    if (ok) continue;
    char list[512] = "";
    for (int j = 0; allowed[j]; j++) {
      if (j) strncat(list, ", ", sizeof list - strlen(list) - 1);
      strncat(list, allowed[j], sizeof list - strlen(list) - 1);
    }
    return loom_yaml_err(key, "unknown key '%s' in %s (known: %s)", key->text, where, list);
  }
  return 0;
}

/* User keys (Hydra's append, +key=value): free-form dotted keys the schema does not have,
 * e.g. +exp.hypothesis=warmup_helps. They live in loom_config.user as text, in the order
 * added; config.yaml keeps them as "+name: value" lines and the registry records each as a
 * column (src/registry/registry_write.c). */
#include <ctype.h>
#include <string.h>

#include "config/config_internal.h"
#include "loom/core.h"

static int check_name(const char *name) {
  bool ok = *name != 0, dot = false, part_start = true;
  for (const char *p = name; *p && ok; p++) {
    if (*p == '.') {
      ok = !part_start;
      dot = true;
      part_start = true;
      continue;
    }
    ok = part_start ? isalpha((unsigned char)*p) || *p == '_'
                    : isalnum((unsigned char)*p) || *p == '_';
    part_start = false;
  }
  if (!ok || part_start)
    return loom_err("'%s' is not a valid user key name: dotted parts of letters, digits and "
                    "'_', each starting with a letter (e.g. exp.hypothesis)", name);
  if (!dot)
    return loom_err("user key '%s' needs a dotted name (e.g. exp.%s), so it cannot clash with "
                    "the registry's own columns", name, name);
  if (strlen(name) >= LOOM_USER_KEY_NAME_MAX)
    return loom_err("user key name '%s' is longer than %d characters", name,
                    LOOM_USER_KEY_NAME_MAX - 1);
  if (loom_config_key_find(name))
    return loom_err("'%s' is a config key, not a user key; set it with %s=VALUE", name, name);
  if (loom_config_is_section(name, strlen(name)) || loom_config_is_section_prefix(name))
    return loom_err("'%s' is a config section; a user key cannot have its name", name);
  return 0;
}

static int find(const loom_config *c, const char *name) {
  for (int i = 0; i < c->nuser; i++)
    if (!strcmp(c->user[i].name, name)) return i;
  return -1;
}

int loom_config_user_set(loom_config *c, const char *name, const char *value, bool add) {
  if (check_name(name)) return -1;
  if (strlen(value) >= LOOM_STR_MAX)
    return loom_err("user key %s: the value is longer than %d bytes", name, LOOM_STR_MAX - 1);
  size_t bad = loom_yaml_utf8_error(value, strlen(value));
  if (bad) return loom_err("user key %s: byte %zu of the value is not UTF-8", name, bad);
  int i = find(c, name);
  if (i >= 0 && add)
    return loom_err("user key %s is already set (to '%s'); use ++%s=VALUE to replace it", name,
                    c->user[i].value, name);
  if (i < 0) {
    if (c->nuser == LOOM_USER_KEYS_MAX)
      return loom_err("user key %s: at most %d user keys", name, LOOM_USER_KEYS_MAX);
    i = c->nuser++;
    memset(&c->user[i], 0, sizeof c->user[i]);
    strcpy(c->user[i].name, name);
  }
  memset(c->user[i].value, 0, sizeof c->user[i].value);
  strcpy(c->user[i].value, value);
  return 0;
}

const char *loom_config_user_get(const loom_config *c, const char *name) {
  int i = find(c, name);
  return i < 0 ? NULL : c->user[i].value;
}

bool loom_config_user_remove(loom_config *c, const char *name) {
  int i = find(c, name);
  if (i < 0) return false;
  memmove(&c->user[i], &c->user[i + 1], sizeof c->user[0] * (size_t)(c->nuser - i - 1));
  c->nuser--;
  memset(&c->user[c->nuser], 0, sizeof c->user[0]);
  return true;
}

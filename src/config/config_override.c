/* Command-line overrides in Hydra's grammar:
 *   key=value     set a key (it must exist in the schema)
 *   +key=value    "add" a key: for a schema key (always present in loom) the same as =;
 *                 any other dotted name becomes a user key (src/config/user_keys.c), which
 *                 must not be set yet
 *   ++key=value   force add-or-override: = for schema keys, add or replace a user key
 *   key=value     for an unknown key: an error with the nearest key and the +key hint;
 *                 for a user key already added: replace it
 *   ~key          reset the key to its schema default
 *   ~key=value    reset only if the current value equals value (else an error, as in Hydra)
 * Values follow the YAML typing rules (config_value.c). Quoted values ('a b', "x,y") are
 * taken literally; unquoted null is an error; lists [..] and mappings {..} are recognised
 * and rejected for loom's scalar keys; commas (Hydra sweeps) and ${..} interpolations are
 * rejected with a hint. Every error names the override string. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/tags.h"
#include "config/config_internal.h"
#include "loom/core.h"

typedef enum { OV_SET, OV_ADD, OV_FORCE, OV_DELETE } ov_mode;

/* Trimmed copy of s[0..n). */
static char *trimmed(const char *s, size_t n) {
  while (n && isspace((unsigned char)*s)) s++, n--;
  while (n && isspace((unsigned char)s[n - 1])) n--;
  char *out = loom_malloc(n + 1);
  memcpy(out, s, n);
  out[n] = 0;
  return out;
}

static bool valid_key_syntax(const char *k) {
  if (!*k) return false;
  for (const char *p = k; *p; p++)
    if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '.' || *p == '-')) return false;
  return true;
}

static int resolve_key(const char *name, const loom_config_key **out) {
  if (!valid_key_syntax(name)) {
    if (!*name) return loom_err("missing key name (expected key=value, e.g. training.lr=1e-3)");
    return loom_err("'%s' is not a key name (expected key=value, e.g. training.lr=1e-3)", name);
  }
  *out = loom_config_key_find(name);
  if (*out) return 0;
  if (!strchr(name, '.') && loom_config_is_section(name, strlen(name)))
    return loom_err("'%s' is a section, not a key; override one of its keys, e.g. %s=...",
                    name, loom_config_first_key_of(name));
  return loom_config_unknown_key_err(name);
}

/* Unquote '...' or "..." (backslash escapes the quote or a backslash). */
static int unquote(const char *v, char **out) {
  char q = v[0];
  size_t n = strlen(v);
  char *s = loom_malloc(n + 1), *o = s;
  const char *p = v + 1;
  for (; *p && *p != q; p++) {
    if (*p == '\\' && (p[1] == q || p[1] == '\\')) p++;
    *o++ = *p;
  }
  *o = 0;
  if (*p != q || p[1]) {
    free(s);
    return loom_err(*p != q ? "unterminated %c-quoted value" : "text after the closing %c quote",
                    q);
  }
  *out = s;
  return 0;
}

/* Turn the raw value of an override into the text for key k. */
static int value_text(const loom_config_key *k, const char *v, char **out) {
  char tb[256];
  size_t n = strlen(v);
  if (v[0] == '\'' || v[0] == '"') return unquote(v, out);
  if (v[0] == '[' || v[0] == '{') {
    bool closed = n >= 2 && v[n - 1] == (v[0] == '[' ? ']' : '}');
    if (!closed) return loom_err("unterminated %s", v[0] == '[' ? "list" : "mapping");
    return loom_err("%s takes %s, not a %s", k->name, loom_config_type_phrase(k, tb, sizeof tb),
                    v[0] == '[' ? "list" : "mapping");
  }
  if (!strcmp(v, "null")) return loom_config_null_err(k);
  if (strstr(v, "${"))
    return loom_err("interpolations (${...}) are not supported; give the value itself");
  if (strchr(v, ','))
    return loom_err("comma-separated values are a Hydra sweep, which only 'loom train -m' "
                    "runs; give one value, or quote it if the comma is part of a string");
  *out = loom_strdup(v);
  return 0;
}

static int parse_into(loom_config *c, const loom_config_key *k, const char *raw) {
  char *text;
  if (!strcmp(k->name, "run.tags") && raw[0] == '[') { /* run.tags=[ablation,warmup] */
    char joined[LOOM_STR_MAX];
    if (loom_config_tags_parse_list(raw, joined, sizeof joined)) return -1;
    return loom_config_key_set(c, k, joined);
  }
  if (value_text(k, raw, &text)) return -1;
  int rc = loom_config_key_set(c, k, text);
  free(text);
  return rc;
}

/* ~key=value: reset only when the current value is `value`. */
static int delete_if_equal(loom_config *c, const loom_config_key *k, const char *raw) {
  loom_config probe;
  memcpy(&probe, c, sizeof probe);
  if (parse_into(&probe, k, raw)) return -1;
  if (!loom_config_key_equal(c, &probe, k)) {
    char *cur = loom_config_key_format(c, k);
    loom_err("%s is %s, not %s; nothing was reset (use ~%s to reset it unconditionally)",
             k->name, cur, raw, k->name);
    free(cur);
    return -1;
  }
  loom_config_key_reset(c, k);
  return 0;
}

/* The raw value of a user key as text: quotes removed; lists, mappings, null, interpolations
 * and (unquoted) commas rejected. */
static int user_value(const char *name, const char *v, char **out) {
  size_t n = strlen(v);
  if (v[0] == '\'' || v[0] == '"') return unquote(v, out);
  if (v[0] == '[' || v[0] == '{')
    return loom_err("user key %s takes one value (text or a number), not a %s", name,
                    v[0] == '[' ? "list" : "mapping");
  if (loom_config_is_null_word(v))
    return loom_err("user key %s: give a value (null is not one; ~%s removes the key)", name,
                    name);
  if (strstr(v, "${"))
    return loom_err("interpolations (${...}) are not supported; give the value itself");
  if (strchr(v, ','))
    return loom_err("comma-separated values are a sweep (loom train -m); give one value, or "
                    "quote it if the comma is part of the text");
  *out = loom_strdup(v);
  (void)n;
  return 0;
}

/* An override of a key the schema does not have: a user key. */
static int apply_user(loom_config *c, ov_mode mode, const char *name, const char *eq) {
  if (mode == OV_DELETE) {
    if (eq) return loom_err("~%s=VALUE is for schema keys; remove a user key with ~%s", name,
                            name);
    if (!loom_config_user_remove(c, name))
      return loom_err("there is no user key '%s' to remove", name);
    return 0;
  }
  if (!eq) return loom_err("missing '=value' (expected +%s=VALUE)", name);
  char *raw = trimmed(eq + 1, strlen(eq + 1)), *text = NULL;
  int rc = user_value(name, raw, &text);
  if (!rc) rc = loom_config_user_set(c, name, text, mode == OV_ADD);
  free(raw);
  free(text);
  return rc;
}

static int apply(loom_config *c, const char *expr) {
  ov_mode mode = OV_SET;
  const char *p = expr;
  if (!strncmp(p, "++", 2)) mode = OV_FORCE, p += 2;
  else if (*p == '+') mode = OV_ADD, p++;
  else if (*p == '~') mode = OV_DELETE, p++;
  const char *eq = strchr(p, '=');
  char *key = trimmed(p, eq ? (size_t)(eq - p) : strlen(p));
  const loom_config_key *k = NULL;
  bool user = valid_key_syntax(key) && !loom_config_key_find(key) &&
              (mode != OV_SET || loom_config_user_get(c, key)) &&
              (mode != OV_DELETE || loom_config_user_get(c, key));
  if (user) {
    int urc = apply_user(c, mode, key, eq);
    free(key);
    return urc;
  }
  int rc = resolve_key(key, &k);
  if (rc && mode == OV_SET && valid_key_syntax(key) && strchr(key, '.') &&
      !loom_config_is_section(key, strlen(key))) {
    char prev[1024];
    snprintf(prev, sizeof prev, "%s", loom_errmsg()); /* loom_err reuses its buffer */
    rc = loom_err("%s; or, to add a key the schema does not have, use +%s=VALUE", prev, key);
  }
  free(key);
  if (rc) return rc;
  if (!eq && mode != OV_DELETE)
    return loom_err("missing '=value' (expected %s=VALUE, or ~%s to reset it to its default)",
                    k->name, k->name);
  if (mode == OV_DELETE && !eq) {
    loom_config_key_reset(c, k);
    return 0;
  }
  char *raw = trimmed(eq + 1, strlen(eq + 1));
  rc = mode == OV_DELETE ? delete_if_equal(c, k, raw) : parse_into(c, k, raw);
  free(raw);
  return rc;
}

int loom_config_override(loom_config *c, const char *expr) {
  if (!expr) return loom_err("command-line override: missing expression");
  if (apply(c, expr)) return loom_err_prefix("command-line override '%s': ", expr);
  return 0;
}

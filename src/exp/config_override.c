/* Command-line overrides in Hydra's grammar:
 *   key=value     set a key (it must exist in the schema)
 *   +key=value    "add" a key. Hydra only allows it for keys absent from the config; in
 *                 loom every schema key is always present, so + behaves like = but the key
 *                 must still be a valid schema key (no free-form additions)
 *   ++key=value   force add-or-override: same as = for loom's fixed schema
 *   ~key          reset the key to its schema default
 *   ~key=value    reset only if the current value equals value (else an error, as in Hydra)
 * Values follow the YAML typing rules (config_value.c). Quoted values ('a b', "x,y") are
 * taken literally; unquoted null is an error; lists [..] and mappings {..} are recognised
 * and rejected for loom's scalar keys; commas (Hydra sweeps) and ${..} interpolations are
 * rejected with a hint. Every error names the override string. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "exp/config_internal.h"
#include "loom/core.h"

typedef enum { OV_SET, OV_ADD, OV_FORCE, OV_DELETE } ov_mode;

/* Trimmed copy of s[0..n). */
static char *trimmed(const char *s, size_t n) {
  while (n && isspace((unsigned char)*s)) s++, n--;
  while (n && isspace((unsigned char)s[n - 1])) n--;
  char *out = malloc(n + 1);
  if (!out) abort();
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
  char *s = malloc(n + 1), *o = s;
  if (!s) abort();
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
    return loom_err("comma-separated values are a Hydra sweep, which loom does not run; give "
                    "one value, or quote it if the comma is part of a string");
  *out = loom_strdup(v);
  return 0;
}

static int parse_into(loom_config *c, const loom_config_key *k, const char *raw) {
  char *text;
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

static int apply(loom_config *c, const char *expr) {
  ov_mode mode = OV_SET;
  const char *p = expr;
  if (!strncmp(p, "++", 2)) mode = OV_FORCE, p += 2;
  else if (*p == '+') mode = OV_ADD, p++;
  else if (*p == '~') mode = OV_DELETE, p++;
  const char *eq = strchr(p, '=');
  char *key = trimmed(p, eq ? (size_t)(eq - p) : strlen(p));
  const loom_config_key *k = NULL;
  int rc = resolve_key(key, &k);
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

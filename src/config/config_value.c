/* Typed config values: parse text into a loom_config field by the key's schema type
 * (string, int, float, bool, enum) with errors naming the key, and format a field back as a
 * YAML scalar that loads bit-identically (used by the dump, the schema table and tests).
 *
 * Rules: integers are decimal with an optional sign (no fraction, exponent or overflow);
 * floats are decimal with optional fraction/exponent (3e-4, 1e-3, .5), finite only; bools
 * are true/false/yes/no/on/off in any case; enums match their allowed values in any case
 * and store the canonical spelling; strings must fit their field (no truncation). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config_internal.h"
#include "loom/core.h"

static void *field(loom_config *c, const loom_config_key *k) { return (char *)c + k->offset; }
static const void *cfield(const loom_config *c, const loom_config_key *k) {
  return (const char *)c + k->offset;
}

const char *loom_config_type_name(loom_key_type t) {
  switch (t) {
    case LOOM_KEY_STRING: return "string";
    case LOOM_KEY_INT: return "int";
    case LOOM_KEY_FLOAT: return "float";
    case LOOM_KEY_BOOL: return "bool";
    case LOOM_KEY_ENUM: return "enum";
  }
  return "?";
}

static void join_allowed(const loom_config_key *k, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = 0;
  for (const char *const *v = k->allowed; *v && used < n; v++)
    used += (size_t)snprintf(buf + used, n - used, "%s%s", v == k->allowed ? "" : ", ",
                             **v ? *v : "\"\"");
}

const char *loom_config_type_phrase(const loom_config_key *k, char *buf, size_t n) {
  switch (k->type) {
    case LOOM_KEY_STRING: return "a string";
    case LOOM_KEY_INT: return "an integer";
    case LOOM_KEY_FLOAT: return "a float";
    case LOOM_KEY_BOOL: return "a bool";
    case LOOM_KEY_ENUM: break;
  }
  char list[256];
  join_allowed(k, list, sizeof list);
  snprintf(buf, n, "one of %s", list);
  return buf;
}

const char *loom_config_show_text(const char *text, char *buf, size_t n) {
  size_t len = strlen(text), keep = len, max = n > 66 ? 60 : (n > 8 ? n - 6 : 0);
  if (keep > max) keep = max;
  size_t o = 0;
  buf[o++] = '\'';
  for (size_t i = 0; i < keep; i++)
    buf[o++] = ((unsigned char)text[i] < 0x20 || text[i] == 0x7f) ? '?' : text[i];
  if (keep < len) buf[o++] = '.', buf[o++] = '.', buf[o++] = '.';
  buf[o++] = '\'';
  buf[o] = 0;
  return buf;
}

bool loom_config_is_null_word(const char *t) {
  return !*t || !strcmp(t, "~") || !strcmp(t, "null") || !strcmp(t, "Null") ||
         !strcmp(t, "NULL");
}

int loom_config_null_err(const loom_config_key *k) {
  char tb[256];
  if (k->type == LOOM_KEY_STRING || k->type == LOOM_KEY_ENUM)
    return loom_err("%s has no value (null); give %s, or write \"\" for an empty string, or "
                    "drop the key to keep its default",
                    k->name, loom_config_type_phrase(k, tb, sizeof tb));
  return loom_err("%s has no value (null); give %s, or drop the key to keep its default",
                  k->name, loom_config_type_phrase(k, tb, sizeof tb));
}

/* [+-]? (digits (. digits*)? | . digits) ([eE] [+-]? digits)? */
static bool float_syntax(const char *s) {
  size_t i = 0, d = 0;
  if (s[i] == '+' || s[i] == '-') i++;
  while (isdigit((unsigned char)s[i])) i++, d++;
  if (s[i] == '.') {
    i++;
    while (isdigit((unsigned char)s[i])) i++, d++;
  }
  if (!d) return false;
  if (s[i] == 'e' || s[i] == 'E') {
    i++;
    if (s[i] == '+' || s[i] == '-') i++;
    if (!isdigit((unsigned char)s[i])) return false;
    while (isdigit((unsigned char)s[i])) i++;
  }
  return s[i] == 0;
}

static bool int_syntax(const char *s) {
  size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
  if (!isdigit((unsigned char)s[i])) return false;
  while (isdigit((unsigned char)s[i])) i++;
  return s[i] == 0;
}

static int parse_int(const loom_config_key *k, const char *t, long *out) {
  char sb[96];
  loom_config_show_text(t, sb, sizeof sb);
  if (!int_syntax(t)) {
    if (float_syntax(t))
      return loom_err("expected an integer for %s, found %s (write whole numbers without a "
                      "decimal point or exponent)", k->name, sb);
    return loom_err("expected an integer for %s, found %s", k->name, sb);
  }
  errno = 0;
  long v = strtol(t, NULL, 10);
  if (errno == ERANGE)
    return loom_err("expected an integer for %s, found %s (out of range: integers must be "
                    "between %ld and %ld)", k->name, sb, (long)LONG_MIN, (long)LONG_MAX);
  *out = v;
  return 0;
}

static int parse_float(const loom_config_key *k, const char *t, double *out) {
  char sb[96];
  loom_config_show_text(t, sb, sizeof sb);
  if (!float_syntax(t)) {
    const char *u = (*t == '+' || *t == '-') ? t + 1 : t;
    if (!strncasecmp(u, "inf", 3) || !strncasecmp(u, ".inf", 4) || !strncasecmp(u, "nan", 3) ||
        !strncasecmp(u, ".nan", 4))
      return loom_err("expected a float for %s, found %s (infinity and NaN are not allowed)",
                      k->name, sb);
    return loom_err("expected a float for %s, found %s (e.g. 0.5, 3e-4, .5)", k->name, sb);
  }
  double v = strtod(t, NULL);
  if (!isfinite(v))
    return loom_err("expected a float for %s, found %s (out of range for a double)", k->name,
                    sb);
  *out = v;
  return 0;
}

static int parse_bool(const loom_config_key *k, const char *t, bool *out) {
  static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
  for (int i = 0; i < 3; i++) {
    if (!strcasecmp(t, yes[i])) return *out = true, 0;
    if (!strcasecmp(t, no[i])) return *out = false, 0;
  }
  char sb[96];
  return loom_err("expected a bool for %s, found %s (use true/false, yes/no or on/off)",
                  k->name, loom_config_show_text(t, sb, sizeof sb));
}

static int parse_enum(const loom_config_key *k, const char *t, const char **out) {
  for (const char *const *v = k->allowed; *v; v++)
    if (!strcasecmp(t, *v)) return *out = *v, 0;
  char sb[96], list[256];
  loom_config_show_text(t, sb, sizeof sb);
  join_allowed(k, list, sizeof list);
  const char *near = loom_config_nearest_of(t, k->allowed);
  if (near)
    return loom_err("%s must be one of %s; found %s (did you mean '%s'?)", k->name, list, sb,
                    near);
  return loom_err("%s must be one of %s; found %s", k->name, list, sb);
}

static int store_string(loom_config *c, const loom_config_key *k, const char *t) {
  size_t len = strlen(t), bad = loom_yaml_utf8_error(t, len);
  if (bad)
    return loom_err("%s is not UTF-8 text: byte %zu (0x%02x) starts no valid UTF-8 character; "
                    "config strings must be UTF-8 (config.yaml could not hold this one)",
                    k->name, bad, (unsigned)(unsigned char)t[bad - 1]);
  if (len >= k->size)
    return loom_err("%s is too long: %zu bytes, at most %zu fit", k->name, len, k->size - 1);
  char *dst = field(c, k);
  memset(dst, 0, k->size);
  memcpy(dst, t, len);
  return 0;
}

int loom_config_key_set(loom_config *c, const loom_config_key *k, const char *text) {
  switch (k->type) {
    case LOOM_KEY_STRING: return store_string(c, k, text);
    case LOOM_KEY_ENUM: {
      const char *v;
      if (parse_enum(k, text, &v)) return -1;
      return store_string(c, k, v);
    }
    case LOOM_KEY_INT: {
      long v = 0;
      if (parse_int(k, text, &v)) return -1;
      memcpy(field(c, k), &v, sizeof v);
      return 0;
    }
    case LOOM_KEY_FLOAT: {
      double v = 0;
      if (parse_float(k, text, &v)) return -1;
      memcpy(field(c, k), &v, sizeof v);
      return 0;
    }
    case LOOM_KEY_BOOL: {
      bool v = false;
      if (parse_bool(k, text, &v)) return -1;
      memcpy(field(c, k), &v, sizeof v);
      return 0;
    }
  }
  return loom_err("%s: unknown key type", k->name);
}

void loom_config_key_reset(loom_config *c, const loom_config_key *k) {
  int rc = loom_config_key_set(c, k, k->def);
  LOOM_ASSERT(rc == 0); /* defaults in the schema table must parse */
}

bool loom_config_key_equal(const loom_config *a, const loom_config *b, const loom_config_key *k) {
  const void *x = cfield(a, k), *y = cfield(b, k);
  switch (k->type) {
    case LOOM_KEY_STRING:
    case LOOM_KEY_ENUM: return strncmp(x, y, k->size) == 0;
    case LOOM_KEY_INT: return *(const long *)x == *(const long *)y;
    case LOOM_KEY_FLOAT: return *(const double *)x == *(const double *)y;
    case LOOM_KEY_BOOL: return *(const bool *)x == *(const bool *)y;
  }
  return false;
}

static bool same_bits(double a, const char *text) {
  double b = strtod(text, NULL);
  return memcmp(&a, &b, sizeof a) == 0;
}

/* Make sure a %g result reads as a float in any YAML reader: "1" -> "1.0", "1e-08" ->
 * "1.0e-08". */
static void add_point(char *buf, size_t n) {
  if (strchr(buf, '.')) return;
  char *e = strchr(buf, 'e');
  size_t len = strlen(buf);
  if (len + 3 > n) return;
  if (!e) {
    memcpy(buf + len, ".0", 3);
    return;
  }
  memmove(e + 2, e, strlen(e) + 1);
  e[0] = '.', e[1] = '0';
}

void loom_config_format_double(double v, char *buf, size_t n) {
  if (isnan(v)) {
    snprintf(buf, n, ".nan");
    return;
  }
  if (isinf(v)) {
    snprintf(buf, n, v > 0 ? ".inf" : "-.inf");
    return;
  }
  snprintf(buf, n, "%.15g", v);
  if (!same_bits(v, buf)) snprintf(buf, n, "%.17g", v);
  add_point(buf, n);
}

/* Plain (unquoted) YAML is safe for simple path-like words that no YAML reader would take
 * for a number, bool or null. */
static bool plain_safe(const char *s) {
  static const char *const reserved[] = {"true", "false", "yes", "no", "on", "off",
                                         "y",    "n",     "null", "~", NULL};
  if (!(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == '/')) return false;
  for (const char *p = s; *p; p++)
    if (!(isalnum((unsigned char)*p) || strchr("_./-", *p))) return false;
  for (int i = 0; reserved[i]; i++)
    if (!strcasecmp(s, reserved[i])) return false;
  return true;
}

static char *quote_string(const char *s) {
  return plain_safe(s) ? loom_strdup(s) : loom_yaml_quote(s);
}

char *loom_config_key_format(const loom_config *c, const loom_config_key *k) {
  const void *f = cfield(c, k);
  char buf[64];
  switch (k->type) {
    case LOOM_KEY_STRING:
    case LOOM_KEY_ENUM: {
      char tmp[LOOM_STR_MAX];
      LOOM_ASSERT(k->size <= sizeof tmp);
      memcpy(tmp, f, k->size);
      tmp[k->size - 1] = 0; /* never read past the field, even if it is unterminated */
      return quote_string(tmp);
    }
    case LOOM_KEY_INT: snprintf(buf, sizeof buf, "%ld", *(const long *)f); break;
    case LOOM_KEY_FLOAT: loom_config_format_double(*(const double *)f, buf, sizeof buf); break;
    case LOOM_KEY_BOOL: snprintf(buf, sizeof buf, "%s", *(const bool *)f ? "true" : "false"); break;
  }
  return loom_strdup(buf);
}

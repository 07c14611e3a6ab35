/* Typed getters of a Hugging Face config.json object (hf_json.h): each names the file and the
 * key in its error, so a bad config.json is reported where it is wrong. Shared by the text
 * (hf_config.c) and vision-language (hf_config_vlm.c) importers. */
#include <jansson.h>
#include <limits.h>
#include <string.h>

#include "ckpt/hf_json.h"
#include "loom/core.h"

/* Integer key; absent or null gives def (or an error when required). */
int hf_json_int(const jcfg *j, const char *key, bool required, long def, long *out) {
  json_t *v = json_object_get(j->o, key);
  if (!v || json_is_null(v)) {
    if (required)
      return loom_err("%s: required key \"%s\" is missing; it is not a complete Hugging Face "
                      "config.json (or pass --config run.yaml to give the model)", j->path, key);
    *out = def;
    return 0;
  }
  if (!json_is_integer(v) || json_integer_value(v) <= 0)
    return loom_err("%s: \"%s\" must be a positive integer", j->path, key);
  if (json_integer_value(v) > INT_MAX)
    return loom_err("%s: \"%s\" = %lld is too large: loom holds it in a 32-bit int (at most "
                    "%d)", j->path, key, (long long)json_integer_value(v), INT_MAX);
  *out = (long)json_integer_value(v);
  return 0;
}

int hf_json_num(const jcfg *j, const char *key, double def, double *out) {
  json_t *v = json_object_get(j->o, key);
  if (!v || json_is_null(v)) {
    *out = def;
    return 0;
  }
  if (!json_is_number(v) || json_number_value(v) < 0)
    return loom_err("%s: \"%s\" must be a non-negative number", j->path, key);
  *out = json_number_value(v);
  return 0;
}

int hf_json_bool(const jcfg *j, const char *key, bool def, bool *out) {
  json_t *v = json_object_get(j->o, key);
  if (!v || json_is_null(v)) {
    *out = def;
    return 0;
  }
  if (!json_is_boolean(v)) return loom_err("%s: \"%s\" must be true or false", j->path, key);
  *out = json_is_true(v);
  return 0;
}

/* A string key that must be one of allowed (NULL-terminated) when present. */
int hf_json_str_in(const jcfg *j, const char *key, const char *const *allowed, const char *why) {
  json_t *v = json_object_get(j->o, key);
  if (!v || json_is_null(v)) return 0;
  const char *s = json_string_value(v);
  for (const char *const *a = allowed; s && *a; a++)
    if (!strcmp(s, *a)) return 0;
  return loom_err("%s: \"%s\" is %s; loom supports only %s%s", j->path, key,
                  s ? s : "not a string", allowed[0], why);
}

/* A boolean feature loom does not implement must be absent, null or false. */
int hf_json_off(const jcfg *j, const char *key, const char *what) {
  bool on = false;
  if (hf_json_bool(j, key, false, &on)) return LOOM_ERR;
  if (on)
    return loom_err("%s: \"%s\" is true (%s), which loom does not implement", j->path, key,
                    what);
  return 0;
}

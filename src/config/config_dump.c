/* The resolved config as YAML: every key, grouped by section in schema order, each value
 * formatted so that loading the text back gives bit-identical values; then the user keys as
 * top-level "+name: "value"" lines (the loader reads them back as user keys). Also the atomic save
 * and the config hash (loom_hash64 of that text), and the same text with the values a model
 * preset fills in said in comments (`loom config show`). */
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "loom/core.h"

typedef struct {
  char *data;
  size_t len, cap;
} strbuf;

static void sb_add(strbuf *b, const char *s) {
  size_t n = strlen(s);
  if (b->len + n + 1 > b->cap) {
    b->cap = (b->len + n + 1) * 2;
    b->data = loom_realloc(b->data, b->cap, 1);
  }
  memcpy(b->data + b->len, s, n + 1);
  b->len += n;
}

static bool same_section(const char *a, const char *b) {
  size_t la = loom_config_section_len(a);
  return la == loom_config_section_len(b) && !strncmp(a, b, la);
}

/* The YAML of c; with resolved, each key whose value there differs from c's carries a comment
 * saying where its value comes from (see loom_config_to_yaml_resolved). */
static char *to_yaml(const loom_config *c, const loom_config *resolved, const char *origin,
                     bool show_resolved) {
  strbuf b = {0};
  sb_add(&b, "");
  const char *prev = NULL;
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    const loom_config_key *k = &loom_config_keys[i];
    if (!prev || !same_section(prev, k->name)) {
      char *head = loom_sprintf("%.*s:\n", (int)loom_config_section_len(k->name), k->name);
      sb_add(&b, head);
      free(head);
    }
    char *val = loom_config_key_format(c, k);
    char *res = resolved && !loom_config_key_equal(c, resolved, k)
                    ? loom_config_key_format(resolved, k)
                    : NULL;
    char *line = !res           ? loom_sprintf("  %s: %s\n", loom_config_key_last(k->name), val)
                 : show_resolved ? loom_sprintf("  %s: %s  # %s\n", loom_config_key_last(k->name),
                                                res, origin)
                                 : loom_sprintf("  %s: %s  # %s: %s\n",
                                                loom_config_key_last(k->name), val, res, origin);
    sb_add(&b, line);
    free(line);
    free(val);
    free(res);
    prev = k->name;
  }
  for (int i = 0; i < c->nuser; i++) { /* user keys (+key=value), quoted: always text */
    char *q = loom_yaml_quote(c->user[i].value);
    char *line = loom_sprintf("+%s: %s\n", c->user[i].name, q);
    sb_add(&b, line);
    free(line);
    free(q);
  }
  return b.data;
}

char *loom_config_to_yaml(const loom_config *c) { return to_yaml(c, NULL, NULL, false); }

char *loom_config_to_yaml_resolved(const loom_config *c, const loom_config *resolved,
                                   const char *origin, bool show_resolved) {
  return to_yaml(c, resolved, origin, show_resolved);
}

int loom_config_save(const loom_config *c, const char *path) {
  char *yaml = loom_config_to_yaml(c);
  int rc = loom_write_file_atomic(path, yaml, strlen(yaml));
  free(yaml);
  return rc ? loom_err_prefix("saving the config: ") : 0;
}

uint64_t loom_config_hash(const loom_config *c) {
  char *yaml = loom_config_to_yaml(c);
  uint64_t h = loom_hash64(yaml, strlen(yaml), 0);
  free(yaml);
  return h;
}

/* loom_config_load: YAML (libyaml document API) over the defaults. Both nested sections
 * (training: {lr: 1e-3}) and dotted top-level keys (training.lr: 1e-3) are accepted, in any
 * mix. Every error names file:line (from libyaml's marks) and says what to do: unknown keys
 * get the nearest valid key, wrong types / enum values say what was expected, duplicate keys
 * point at the first occurrence, syntax errors carry libyaml's line:column. The config is
 * only modified when the whole file loads. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "exp/config_internal.h"
#include "loom/core.h"

#define MAX_KEYS 128
#define MAX_SECTIONS 16

typedef struct {
  const char *path;
  yaml_document_t *doc;
  loom_config *cfg;
  size_t key_line[MAX_KEYS];         /* line where each key was set (0 = not yet) */
  char sections[MAX_SECTIONS][32];   /* nested sections seen, and their lines */
  size_t section_line[MAX_SECTIONS];
  int nsections;
} load_ctx;

static size_t line_of(const yaml_node_t *n) { return n->start_mark.line + 1; }

/* Error at a node: "<path>:<line>: <message>". */
static int err_at(const load_ctx *x, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int err_at(const load_ctx *x, const yaml_node_t *n, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_err("%s:%zu: %s", x->path, line_of(n), msg);
}

/* Re-raise the current error message (from the value parser) at a node. */
static int reraise_at(const load_ctx *x, const yaml_node_t *n) {
  return loom_err_prefix("%s:%zu: ", x->path, line_of(n));
}

static const char *node_kind(const yaml_node_t *n) {
  return n->type == YAML_MAPPING_NODE ? "a mapping" : n->type == YAML_SEQUENCE_NODE ? "a list"
                                                                                   : "a scalar";
}

static const char *scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static bool is_null(const yaml_node_t *n) {
  return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
         loom_config_is_null_word(scalar(n));
}

/* Store one key's value (a scalar node). */
static int set_key(load_ctx *x, const loom_config_key *k, const yaml_node_t *key_node,
                   const yaml_node_t *val) {
  size_t idx = (size_t)(k - loom_config_keys);
  if (x->key_line[idx])
    return err_at(x, key_node, "duplicate key '%s' (first set at line %zu); keep only one",
                  k->name, x->key_line[idx]);
  char tb[256];
  if (val->type != YAML_SCALAR_NODE)
    return err_at(x, val, "%s takes %s, not %s", k->name,
                  loom_config_type_phrase(k, tb, sizeof tb), node_kind(val));
  if (is_null(val)) return loom_config_null_err(k), reraise_at(x, val);
  if (strlen(scalar(val)) != val->data.scalar.length)
    return err_at(x, val, "%s contains a NUL character (\\0), which a config value cannot "
                  "hold; remove it", k->name);
  if (loom_config_key_set(x->cfg, k, scalar(val))) return reraise_at(x, val);
  x->key_line[idx] = line_of(key_node);
  return 0;
}

static int unknown_key_at(const load_ctx *x, const yaml_node_t *n, const char *name) {
  loom_config_unknown_key_err(name);
  return reraise_at(x, n);
}

/* A key inside a section mapping, or a dotted key at the top level. */
static int set_named(load_ctx *x, const char *name, const yaml_node_t *key_node,
                     const yaml_node_t *val) {
  const loom_config_key *k = loom_config_key_find(name);
  if (!k) return unknown_key_at(x, key_node, name);
  return set_key(x, k, key_node, val);
}

static const yaml_node_t *node(const load_ctx *x, int id) {
  return yaml_document_get_node(x->doc, id);
}

static int key_text(const load_ctx *x, const yaml_node_t *k, const char **out) {
  if (k->type != YAML_SCALAR_NODE)
    return err_at(x, k, "keys must be plain names like 'training' or 'lr', found %s",
                  node_kind(k));
  *out = scalar(k);
  return 0;
}

static int note_section(load_ctx *x, const char *name, const yaml_node_t *key_node) {
  for (int i = 0; i < x->nsections; i++)
    if (!strcmp(x->sections[i], name))
      return err_at(x, key_node, "duplicate section '%s' (first at line %zu); merge the two",
                    name, x->section_line[i]);
  if (x->nsections < MAX_SECTIONS && strlen(name) < sizeof x->sections[0]) {
    strcpy(x->sections[x->nsections], name);
    x->section_line[x->nsections++] = line_of(key_node);
  }
  return 0;
}

static int load_section(load_ctx *x, const char *sec, const yaml_node_t *key_node,
                        const yaml_node_t *val) {
  if (note_section(x, sec, key_node)) return -1;
  if (is_null(val)) return 0; /* "training:" with nothing under it: all defaults */
  if (val->type != YAML_MAPPING_NODE)
    return err_at(x, val, "'%s' is a section and takes a mapping of keys (e.g. '%s: ...' "
                  "indented under it), not %s", sec, loom_config_key_last(
                  loom_config_first_key_of(sec)), node_kind(val));
  for (yaml_node_pair_t *p = val->data.mapping.pairs.start; p < val->data.mapping.pairs.top;
       p++) {
    const yaml_node_t *kn = node(x, p->key), *vn = node(x, p->value);
    const char *name = NULL;
    if (key_text(x, kn, &name)) return -1;
    char *full = loom_sprintf("%s.%s", sec, name);
    int rc = vn->type == YAML_MAPPING_NODE && (loom_config_is_section(full, strlen(full)) ||
                                               loom_config_is_section_prefix(full))
                 ? load_section(x, full, kn, vn) /* nested: vision: {parallel: {sp: 2}} */
                 : set_named(x, full, kn, vn);
    free(full);
    if (rc) return rc;
  }
  return 0;
}

static int load_top_pair(load_ctx *x, const yaml_node_t *kn, const yaml_node_t *vn) {
  const char *name = NULL;
  if (key_text(x, kn, &name)) return -1;
  bool dotted = strchr(name, '.') != NULL;
  if (loom_config_is_section(name, strlen(name)) ||
      (vn->type == YAML_MAPPING_NODE && loom_config_is_section_prefix(name)))
    return load_section(x, name, kn, vn); /* also "vision.parallel:" and "vision:" */
  if (dotted || vn->type != YAML_MAPPING_NODE) return set_named(x, name, kn, vn);
  const char *near = loom_config_nearest_section(name);
  if (near) return err_at(x, kn, "unknown section '%s'; did you mean '%s'?", name, near);
  if (loom_config_nearest_key(name)) return set_named(x, name, kn, vn);
  return err_at(x, kn, "unknown section '%s'; the sections are run, model, training, data and "
                "checkpoint (see 'loom config schema')", name);
}

static int load_root(load_ctx *x) {
  const yaml_node_t *root = yaml_document_get_root_node(x->doc);
  if (!root || is_null(root)) return 0; /* empty file: defaults */
  if (root->type != YAML_MAPPING_NODE)
    return err_at(x, root, "the top level must be a mapping of sections (run:, model:, "
                  "training:, ...) or dotted keys (training.lr: ...), found %s",
                  node_kind(root));
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
       p++)
    if (load_top_pair(x, node(x, p->key), node(x, p->value))) return -1;
  return 0;
}

static int syntax_err(const char *path, const yaml_parser_t *p) {
  const char *problem = p->problem ? p->problem : "malformed YAML";
  if (p->error == YAML_READER_ERROR)
    return loom_err("%s: invalid text at byte %zu: %s (is the file UTF-8?)", path,
                    p->problem_offset, problem);
  if (p->context)
    return loom_err("%s:%zu:%zu: YAML syntax error: %s %s that started at line %zu", path,
                    p->problem_mark.line + 1, p->problem_mark.column + 1, problem, p->context,
                    p->context_mark.line + 1);
  return loom_err("%s:%zu:%zu: YAML syntax error: %s", path, p->problem_mark.line + 1,
                  p->problem_mark.column + 1, problem);
}

/* Fail on a second document ("---") rather than silently ignoring it. */
static int check_single_document(const char *path, yaml_parser_t *p) {
  yaml_document_t extra;
  if (!yaml_parser_load(p, &extra)) return syntax_err(path, p);
  const yaml_node_t *r = yaml_document_get_root_node(&extra);
  size_t line = r ? r->start_mark.line + 1 : 0;
  yaml_document_delete(&extra);
  if (r)
    return loom_err("%s:%zu: a second YAML document starts here; put every key in one "
                    "document (remove the '---')", path, line);
  return 0;
}

static int parse_text(loom_config *tmp, const char *path, const char *text, size_t len) {
  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser)) return loom_err("%s: cannot start the YAML parser", path);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  int rc;
  if (!yaml_parser_load(&parser, &doc)) {
    rc = syntax_err(path, &parser);
  } else {
    load_ctx *x = calloc(1, sizeof *x);
    if (!x) abort();
    x->path = path, x->doc = &doc, x->cfg = tmp;
    rc = load_root(x);
    free(x);
    yaml_document_delete(&doc);
    if (rc == 0) rc = check_single_document(path, &parser);
  }
  yaml_parser_delete(&parser);
  return rc;
}

int loom_config_load(loom_config *c, const char *yaml_path) {
  if (loom_config_nkeys > MAX_KEYS) return loom_err("config schema has too many keys");
  if (!loom_path_exists(yaml_path))
    return loom_err("config file '%s' does not exist; check the path", yaml_path);
  if (loom_is_dir(yaml_path))
    return loom_err("config file '%s' is a directory; give the path of a YAML file", yaml_path);
  char *text;
  size_t len;
  if (loom_read_file(yaml_path, &text, &len)) return loom_err_prefix("config file: ");
  loom_config tmp; /* byte copy (padding included) so a failed load leaves c untouched */
  memcpy(&tmp, c, sizeof tmp);
  int rc = parse_text(&tmp, yaml_path, text, len);
  free(text);
  if (rc == 0) memcpy(c, &tmp, sizeof tmp);
  return rc;
}

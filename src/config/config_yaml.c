/* loom_config_load: YAML (libyaml document API) over the defaults. Both nested sections
 * (training: {lr: 1e-3}) and dotted top-level keys (training.lr: 1e-3) are accepted, in any
 * mix. Every error names file:line (from libyaml's marks) and says what to do: unknown keys
 * get the nearest valid key, wrong types / enum values say what was expected, duplicate keys
 * point at the first occurrence, syntax errors carry libyaml's line:column. The config is
 * only modified when the whole file loads.
 * Config groups (Hydra's defaults list): a top-level `defaults:` list of `- GROUP: OPTION`
 * entries and `- _self_` loads configs/GROUP/OPTION.yaml files (src/config/groups.c finds
 * them) in list order over each other; where `_self_` sits decides whether the file's own
 * keys come before (and lose to) or after (and win over) its defaults; without `_self_` the
 * file's own keys come last (Hydra >= 1.1). Group files may have defaults lists of their own
 * (a cycle is an error). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config/groups.h"
#include "config/tags.h"
#include "config/config_internal.h"
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
  loom_group_ctx *groups;            /* composition state (search path, CLI choices, chain) */
  const char *package;               /* group file: the section its keys go under; NULL = top */
  bool primary;                      /* the primary config (command-line choices apply) */
} load_ctx;

static int parse_text(loom_config *tmp, const char *path, const char *text, size_t len,
                      loom_group_ctx *g, const char *package, bool primary);

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
static const yaml_node_t *node(const load_ctx *x, int id);

static int set_key(load_ctx *x, const loom_config_key *k, const yaml_node_t *key_node,
                   const yaml_node_t *val) {
  size_t idx = (size_t)(k - loom_config_keys);
  if (x->key_line[idx])
    return err_at(x, key_node, "duplicate key '%s' (first set at line %zu); keep only one",
                  k->name, x->key_line[idx]);
  char tb[256];
  if (val->type == YAML_SEQUENCE_NODE && !strcmp(k->name, "run.tags")) {
    char *items[256];
    int n = 0;
    for (yaml_node_item_t *it = val->data.sequence.items.start;
         it < val->data.sequence.items.top; it++) {
      const yaml_node_t *e = node(x, *it);
      if (e->type != YAML_SCALAR_NODE || n == 256)
        return err_at(x, e, "run.tags is a list of labels (text), not %s", node_kind(e));
      items[n++] = (char *)scalar(e);
    }
    char joined[LOOM_STR_MAX];
    if (loom_config_tags_join(items, n, joined, sizeof joined)) return reraise_at(x, val);
    if (loom_config_key_set(x->cfg, k, joined)) return reraise_at(x, val);
    x->key_line[idx] = line_of(key_node);
    return 0;
  }
  if (val->type != YAML_SCALAR_NODE)
    return err_at(x, val, "%s takes %s, not %s", k->name,
                  loom_config_type_phrase(k, tb, sizeof tb), node_kind(val));
  if (is_null(val)) return loom_config_null_err(k), reraise_at(x, val);
  if (strlen(scalar(val)) != val->data.scalar.length)
    return err_at(x, val, "%s contains a NUL character (\\0), which a config value cannot "
                  "hold; remove it", k->name);
  if (!strcmp(k->name, "run.tags") && *scalar(val)) { /* "a, b": normalised to "a,b" */
    char *list = loom_sprintf("[%s]", scalar(val)), joined[LOOM_STR_MAX];
    int rc = loom_config_tags_parse_list(list, joined, sizeof joined);
    free(list);
    if (rc || loom_config_key_set(x->cfg, k, joined)) return reraise_at(x, val);
    x->key_line[idx] = line_of(key_node);
    return 0;
  }
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

static bool is_defaults(const yaml_node_t *kn) {
  return kn->type == YAML_SCALAR_NODE && !strcmp(scalar(kn), "defaults");
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
    if (val == yaml_document_get_root_node(x->doc) && is_defaults(kn)) continue;
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

/* "+exp.hypothesis: text": a user key (Hydra's append), as config.yaml records them. */
static int load_user_key(load_ctx *x, const char *name, const yaml_node_t *kn,
                         const yaml_node_t *vn) {
  if (vn->type != YAML_SCALAR_NODE)
    return err_at(x, vn, "user key %s takes one value (text or a number), not %s", name,
                  node_kind(vn));
  if (is_null(vn))
    return err_at(x, vn, "user key %s has no value; give one or remove the line", name);
  if (strlen(scalar(vn)) != vn->data.scalar.length)
    return err_at(x, vn, "user key %s contains a NUL character (\\0); remove it", name);
  /* a later file of a composition replaces an earlier one's value */
  if (loom_config_user_set(x->cfg, name, scalar(vn), false)) return reraise_at(x, kn);
  return 0;
}

static int load_top_pair(load_ctx *x, const yaml_node_t *kn, const yaml_node_t *vn) {
  const char *name = NULL;
  if (key_text(x, kn, &name)) return -1;
  if (name[0] == '+') return load_user_key(x, name + 1, kn, vn);
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

/* The file's own keys (everything but `defaults:`). */
static int load_self(load_ctx *x, const yaml_node_t *root) {
  if (x->package) return load_section(x, x->package, root, root);
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
       p++)
    if (!is_defaults(node(x, p->key)) && load_top_pair(x, node(x, p->key), node(x, p->value)))
      return -1;
  return 0;
}

/* Load GROUP/OPTION.yaml over cfg; `where` ("file:line") names the entry for errors. */
static int load_group(loom_config *cfg, loom_group_ctx *g, const char *group,
                      const char *option, const char *where) {
  char *file = NULL;
  if (loom_group_find(g, group, option, where, &file)) return -1;
  for (int i = 0; i < g->depth; i++) {
    char *abs = realpath(g->stack[i], NULL);
    bool same = abs && !strcmp(abs, file);
    free(abs);
    if (same) {
      char chain[4096] = "";
      for (int j = i; j < g->depth; j++)
        snprintf(chain + strlen(chain), sizeof chain - strlen(chain), "%s -> ", g->stack[j]);
      int rc = loom_err("%s: config group cycle: %s%s (remove one of these defaults entries)",
                        where, chain, file);
      free(file);
      return rc;
    }
  }
  if (g->depth == LOOM_GROUP_DEPTH) {
    free(file);
    return loom_err("%s: defaults lists nested more than %d deep", where, LOOM_GROUP_DEPTH);
  }
  char *text;
  size_t len;
  if (loom_read_file(file, &text, &len)) {
    free(file);
    return loom_err_prefix("%s: ", where);
  }
  int rc = 0;
  bool global = loom_group_file_is_global(text);
  if (!global && !loom_config_is_section(group, strlen(group)))
    rc = loom_err("%s: group '%s' is not a config section (run, model, training, data, "
                  "checkpoint, parallel), so its keys have no place; start the file with the "
                  "line '# @package _global_' and write full keys (training.lr: ...)", file,
                  group);
  if (!rc) rc = parse_text(cfg, file, text, len, g, global ? NULL : group, false);
  free(text);
  free(file);
  return rc;
}

/* The command-line choice for `group` (index), or -1. */
static int cli_choice(const loom_group_ctx *g, const char *group) {
  size_t n = strlen(group);
  for (int i = 0; i < g->nchoices; i++)
    if (!strncmp(g->choices[i], group, n) && g->choices[i][n] == '=') return i;
  return -1;
}

/* Choices given on the command line for groups the defaults list does not name: applied
 * after everything else (the command line wins over the file). */
static int load_cli_choices(loom_config *cfg, loom_group_ctx *g) {
  for (int i = 0; i < g->nchoices; i++) {
    if (g->choice_used[i]) continue;
    g->choice_used[i] = true;
    const char *eq = strchr(g->choices[i], '=');
    char *group = loom_strdup(g->choices[i]);
    group[eq - g->choices[i]] = 0;
    char *where = loom_sprintf("command-line override '%s'", g->choices[i]);
    int rc = load_group(cfg, g, group, eq + 1, where);
    free(where);
    free(group);
    if (rc) return rc;
  }
  return 0;
}

static int load_defaults(load_ctx *x, const yaml_node_t *list, const yaml_node_t *root) {
  if (list->type != YAML_SEQUENCE_NODE)
    return err_at(x, list, "defaults must be a list, e.g. [model: tiny-gpt2, optim: adamw, "
                  "_self_], not %s", node_kind(list));
  bool self_done = false;
  char seen[LOOM_GROUP_DEPTH * 4][64];
  size_t seen_line[LOOM_GROUP_DEPTH * 4];
  int nseen = 0;
  for (yaml_node_item_t *it = list->data.sequence.items.start; it < list->data.sequence.items.top;
       it++) {
    const yaml_node_t *e = node(x, *it);
    if (e->type == YAML_SCALAR_NODE && !strcmp(scalar(e), "_self_")) {
      if (self_done) return err_at(x, e, "_self_ appears twice in the defaults list");
      self_done = true;
      if (load_self(x, root)) return -1;
      continue;
    }
    const yaml_node_t *gk = NULL, *gv = NULL;
    if (e->type == YAML_MAPPING_NODE &&
        e->data.mapping.pairs.top - e->data.mapping.pairs.start == 1) {
      gk = node(x, e->data.mapping.pairs.start->key);
      gv = node(x, e->data.mapping.pairs.start->value);
    }
    if (!gk || gk->type != YAML_SCALAR_NODE || gv->type != YAML_SCALAR_NODE)
      return err_at(x, e, "a defaults entry is 'GROUP: OPTION' (e.g. '- model: tiny-gpt2') or "
                    "'_self_'");
    const char *group = scalar(gk), *option = scalar(gv);
    for (int i = 0; i < nseen; i++)
      if (!strcmp(seen[i], group))
        return err_at(x, gk, "config group '%s' is chosen twice in the defaults list (first at "
                      "line %zu); keep one", group, seen_line[i]);
    if (nseen < (int)(sizeof seen / sizeof seen[0]) && strlen(group) < sizeof seen[0]) {
      snprintf(seen[nseen], sizeof seen[0], "%s", group);
      seen_line[nseen++] = line_of(gk);
    }
    int c = x->primary ? cli_choice(x->groups, group) : -1;
    if (c >= 0) {
      x->groups->choice_used[c] = true;
      option = strchr(x->groups->choices[c], '=') + 1;
    }
    if (c < 0 && is_null(gv)) continue; /* "- model: null": no option of this group */
    char *where = c >= 0 ? loom_sprintf("command-line override '%s'", x->groups->choices[c])
                         : loom_sprintf("%s:%zu", x->path, line_of(gv));
    int rc = load_group(x->cfg, x->groups, group, option, where);
    free(where);
    if (rc) return rc;
  }
  return self_done ? 0 : load_self(x, root);
}

static int load_root(load_ctx *x) {
  const yaml_node_t *root = yaml_document_get_root_node(x->doc);
  if (!root || is_null(root)) return 0; /* empty file: defaults */
  if (root->type != YAML_MAPPING_NODE)
    return err_at(x, root, "the top level must be a mapping of sections (run:, model:, "
                  "training:, ...) or dotted keys (training.lr: ...), found %s",
                  node_kind(root));
  const yaml_node_t *defaults = NULL;
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
       p++)
    if (is_defaults(node(x, p->key))) {
      if (defaults)
        return err_at(x, node(x, p->key), "duplicate key 'defaults' (first at line %zu); keep "
                      "one list", line_of(defaults));
      defaults = node(x, p->value);
    }
  return defaults ? load_defaults(x, defaults, root) : load_self(x, root);
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

static int parse_text(loom_config *tmp, const char *path, const char *text, size_t len,
                      loom_group_ctx *g, const char *package, bool primary) {
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
    x->groups = g, x->package = package, x->primary = primary;
    g->stack[g->depth++] = path;
    rc = load_root(x);
    g->depth--;
    free(x);
    yaml_document_delete(&doc);
    if (rc == 0) rc = check_single_document(path, &parser);
  }
  yaml_parser_delete(&parser);
  return rc;
}

int loom_config_load_composed(loom_config *c, const char *yaml_path, char *const *choices,
                              int nchoices) {
  if (loom_config_nkeys > MAX_KEYS) return loom_err("config schema has too many keys");
  for (int i = 0; i < nchoices; i++)
    if (!strchr(choices[i], '=') || choices[i][0] == '=')
      return loom_err("command-line override '%s': expected GROUP=OPTION", choices[i]);
  char *text = NULL;
  size_t len = 0;
  if (yaml_path) {
    if (!loom_path_exists(yaml_path))
      return loom_err("config file '%s' does not exist; check the path", yaml_path);
    if (loom_is_dir(yaml_path))
      return loom_err("config file '%s' is a directory; give the path of a YAML file", yaml_path);
    if (loom_read_file(yaml_path, &text, &len)) return loom_err_prefix("config file: ");
  }
  loom_group_ctx g;
  loom_group_ctx_init(&g, yaml_path, choices, nchoices);
  loom_config tmp; /* byte copy (padding included) so a failed load leaves c untouched */
  memcpy(&tmp, c, sizeof tmp);
  int rc = yaml_path ? parse_text(&tmp, yaml_path, text, len, &g, NULL, true) : 0;
  if (rc == 0) rc = load_cli_choices(&tmp, &g);
  free(text);
  loom_group_ctx_free(&g);
  if (rc == 0) memcpy(c, &tmp, sizeof tmp);
  return rc;
}

int loom_config_load(loom_config *c, const char *yaml_path) {
  return loom_config_load_composed(c, yaml_path, NULL, 0);
}

bool loom_config_is_group_choice(const char *expr) {
  const char *eq = strchr(expr, '=');
  if (!eq || eq == expr || expr[0] == '+' || expr[0] == '~') return false;
  for (const char *p = expr; p < eq; p++)
    if (*p == '.' || *p == ' ') return false;
  return true;
}

/* loom_config_load: YAML (read through loom/yaml.h) over the defaults. Both nested sections
 * (training: {lr: 1e-3}) and dotted top-level keys (training.lr: 1e-3) are accepted, in any
 * mix. Every error names file:line (each node's line) and says what to do: unknown keys get
 * the nearest valid key, wrong types / enum values say what was expected, duplicate keys
 * point at the first occurrence, syntax errors carry libyaml's line:column. The config is
 * only modified when the whole file loads.
 * Config groups (Hydra's defaults list): a top-level `defaults:` list of `- GROUP: OPTION`
 * entries and `- _self_` loads configs/GROUP/OPTION.yaml files (src/config/groups.c finds
 * them) in list order over each other; where `_self_` sits decides whether the file's own
 * keys come before (and lose to) or after (and win over) its defaults; without `_self_` the
 * file's own keys come last (Hydra >= 1.1). Group files may have defaults lists of their own
 * (a cycle is an error). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/groups.h"
#include "config/tags.h"
#include "config/config_internal.h"
#include "loom/core.h"
#include "loom/yaml.h"

#define MAX_KEYS 128
#define MAX_SECTIONS 16

typedef struct {
  const char *path;
  const loom_yaml_node *root;
  loom_config *cfg;
  int key_line[MAX_KEYS];            /* line where each key was set (0 = not yet) */
  char sections[MAX_SECTIONS][32];   /* nested sections seen, and their lines */
  int section_line[MAX_SECTIONS];
  int nsections;
  loom_group_ctx *groups;            /* composition state (search path, CLI choices, chain) */
  const char *package;               /* group file: the section its keys go under; NULL = top */
  bool primary;                      /* the primary config (command-line choices apply) */
} load_ctx;

static int parse_text(loom_config *tmp, const char *path, const char *text, size_t len,
                      loom_group_ctx *g, const char *package, bool primary);

/* Store one key's value (a scalar node). */
static int set_key(load_ctx *x, const loom_config_key *k, const loom_yaml_node *key_node,
                   const loom_yaml_node *val) {
  size_t idx = (size_t)(k - loom_config_keys);
  if (x->key_line[idx])
    return loom_yaml_err(key_node, "duplicate key '%s' (first set at line %d); keep only one",
                         k->name, x->key_line[idx]);
  char tb[256];
  if (val->kind == LOOM_YAML_SEQUENCE && !strcmp(k->name, "run.tags")) {
    char *items[256];
    int n = 0;
    for (int i = 0; i < val->n; i++) {
      const loom_yaml_node *e = val->items[i];
      if (e->kind != LOOM_YAML_SCALAR || n == 256)
        return loom_yaml_err(e, "run.tags is a list of labels (text), not %s",
                             loom_yaml_kind_phrase(e));
      items[n++] = (char *)e->text;
    }
    char joined[LOOM_STR_MAX];
    if (loom_config_tags_join(items, n, joined, sizeof joined)) return loom_yaml_err_prefix(val);
    if (loom_config_key_set(x->cfg, k, joined)) return loom_yaml_err_prefix(val);
    x->key_line[idx] = key_node->line;
    return 0;
  }
  if (val->kind != LOOM_YAML_SCALAR)
    return loom_yaml_err(val, "%s takes %s, not %s", k->name,
                         loom_config_type_phrase(k, tb, sizeof tb), loom_yaml_kind_phrase(val));
  if (loom_yaml_is_null(val)) return loom_config_null_err(k), loom_yaml_err_prefix(val);
  if (strlen(val->text) != val->len)
    return loom_yaml_err(val, "%s contains a NUL character (\\0), which a config value "
                         "cannot hold; remove it", k->name);
  if (!strcmp(k->name, "run.tags") && *val->text) { /* "a, b": normalised to "a,b" */
    char *list = loom_sprintf("[%s]", val->text), joined[LOOM_STR_MAX];
    int rc = loom_config_tags_parse_list(list, joined, sizeof joined);
    free(list);
    if (rc || loom_config_key_set(x->cfg, k, joined)) return loom_yaml_err_prefix(val);
    x->key_line[idx] = key_node->line;
    return 0;
  }
  if (loom_config_key_set(x->cfg, k, val->text)) return loom_yaml_err_prefix(val);
  x->key_line[idx] = key_node->line;
  return 0;
}

static int unknown_key_at(const load_ctx *x, const loom_yaml_node *n, const char *name) {
  loom_config_unknown_key_err(name);
  return loom_yaml_err_prefix(n);
}

/* A key inside a section mapping, or a dotted key at the top level. */
static int set_named(load_ctx *x, const char *name, const loom_yaml_node *key_node,
                     const loom_yaml_node *val) {
  const loom_config_key *k = loom_config_key_find(name);
  if (!k) return unknown_key_at(x, key_node, name);
  return set_key(x, k, key_node, val);
}

static int note_section(load_ctx *x, const char *name, const loom_yaml_node *key_node) {
  for (int i = 0; i < x->nsections; i++)
    if (!strcmp(x->sections[i], name))
      return loom_yaml_err(key_node, "duplicate section '%s' (first at line %d); merge the two",
                           name, x->section_line[i]);
  if (x->nsections < MAX_SECTIONS && strlen(name) < sizeof x->sections[0]) {
    strcpy(x->sections[x->nsections], name);
    x->section_line[x->nsections++] = key_node->line;
  }
  return 0;
}

static bool is_defaults(const loom_yaml_node *kn) { return !strcmp(kn->text, "defaults"); }

static int load_section(load_ctx *x, const char *sec, const loom_yaml_node *key_node,
                        const loom_yaml_node *val) {
  if (note_section(x, sec, key_node)) return -1;
  if (loom_yaml_is_null(val)) return 0; /* "training:" with nothing under it: all defaults */
  if (val->kind != LOOM_YAML_MAPPING)
    return loom_yaml_err(val, "'%s' is a section and takes a mapping of keys (e.g. '%s: ...' "
                         "indented under it), not %s", sec,
                         loom_config_key_last(loom_config_first_key_of(sec)),
                         loom_yaml_kind_phrase(val));
  for (int i = 0; i < val->n; i++) {
    const loom_yaml_node *kn = val->pairs[i].key, *vn = val->pairs[i].value;
    if (val == x->root && is_defaults(kn)) continue;
    char *full = loom_sprintf("%s.%s", sec, kn->text);
    int rc = vn->kind == LOOM_YAML_MAPPING && (loom_config_is_section(full, strlen(full)) ||
                                               loom_config_is_section_prefix(full))
                 ? load_section(x, full, kn, vn) /* nested: vision: {parallel: {sp: 2}} */
                 : set_named(x, full, kn, vn);
    free(full);
    if (rc) return rc;
  }
  return 0;
}

/* "+exp.hypothesis: text": a user key (Hydra's append), as config.yaml records them. */
static int load_user_key(load_ctx *x, const char *name, const loom_yaml_node *kn,
                         const loom_yaml_node *vn) {
  if (vn->kind != LOOM_YAML_SCALAR)
    return loom_yaml_err(vn, "user key %s takes one value (text or a number), not %s", name,
                         loom_yaml_kind_phrase(vn));
  if (loom_yaml_is_null(vn))
    return loom_yaml_err(vn, "user key %s has no value; give one or remove the line", name);
  if (strlen(vn->text) != vn->len)
    return loom_yaml_err(vn, "user key %s contains a NUL character (\\0); remove it", name);
  /* a later file of a composition replaces an earlier one's value */
  if (loom_config_user_set(x->cfg, name, vn->text, false)) return loom_yaml_err_prefix(kn);
  return 0;
}

static int load_top_pair(load_ctx *x, const loom_yaml_node *kn, const loom_yaml_node *vn) {
  const char *name = kn->text;
  if (name[0] == '+') return load_user_key(x, name + 1, kn, vn);
  bool dotted = strchr(name, '.') != NULL;
  if (loom_config_is_section(name, strlen(name)) ||
      (vn->kind == LOOM_YAML_MAPPING && loom_config_is_section_prefix(name)))
    return load_section(x, name, kn, vn); /* also "vision.parallel:" and "vision:" */
  if (dotted || vn->kind != LOOM_YAML_MAPPING) return set_named(x, name, kn, vn);
  const char *near = loom_config_nearest_section(name);
  if (near) return loom_yaml_err(kn, "unknown section '%s'; did you mean '%s'?", name, near);
  if (loom_config_nearest_key(name)) return set_named(x, name, kn, vn);
  return loom_yaml_err(kn, "unknown section '%s'; the sections are run, model, training, data "
                       "and checkpoint (see 'loom config schema')", name);
}

/* The file's own keys (everything but `defaults:`). */
static int load_self(load_ctx *x, const loom_yaml_node *root) {
  if (x->package) return load_section(x, x->package, root, root);
  for (int i = 0; i < root->n; i++)
    if (!is_defaults(root->pairs[i].key) &&
        load_top_pair(x, root->pairs[i].key, root->pairs[i].value))
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

static int load_defaults(load_ctx *x, const loom_yaml_node *list, const loom_yaml_node *root) {
  if (list->kind != LOOM_YAML_SEQUENCE)
    return loom_yaml_err(list, "defaults must be a list, e.g. [model: tiny-gpt2, optim: adamw, "
                         "_self_], not %s", loom_yaml_kind_phrase(list));
  bool self_done = false;
  char seen[LOOM_GROUP_DEPTH * 4][64];
  int seen_line[LOOM_GROUP_DEPTH * 4];
  int nseen = 0;
  for (int k = 0; k < list->n; k++) {
    const loom_yaml_node *e = list->items[k];
    if (e->kind == LOOM_YAML_SCALAR && !strcmp(e->text, "_self_")) {
      if (self_done) return loom_yaml_err(e, "_self_ appears twice in the defaults list");
      self_done = true;
      if (load_self(x, root)) return -1;
      continue;
    }
    const loom_yaml_node *gk = NULL, *gv = NULL;
    if (e->kind == LOOM_YAML_MAPPING && e->n == 1) gk = e->pairs[0].key, gv = e->pairs[0].value;
    if (!gk || gv->kind != LOOM_YAML_SCALAR)
      return loom_yaml_err(e, "a defaults entry is 'GROUP: OPTION' (e.g. '- model: tiny-gpt2') or "
                              "'_self_'");
    const char *group = gk->text, *option = gv->text;
    for (int i = 0; i < nseen; i++)
      if (!strcmp(seen[i], group))
        return loom_yaml_err(gk, "config group '%s' is chosen twice in the defaults list (first "
                             "at line %d); keep one", group, seen_line[i]);
    if (nseen < (int)(sizeof seen / sizeof seen[0]) && strlen(group) < sizeof seen[0]) {
      snprintf(seen[nseen], sizeof seen[0], "%s", group);
      seen_line[nseen++] = gk->line;
    }
    int c = x->primary ? cli_choice(x->groups, group) : -1;
    if (c >= 0) {
      x->groups->choice_used[c] = true;
      option = strchr(x->groups->choices[c], '=') + 1;
    }
    if (c < 0 && loom_yaml_is_null(gv)) continue; /* "- model: null": no option of this group */
    char *where = c >= 0 ? loom_sprintf("command-line override '%s'", x->groups->choices[c])
                         : loom_sprintf("%s:%d", x->path, gv->line);
    int rc = load_group(x->cfg, x->groups, group, option, where);
    free(where);
    if (rc) return rc;
  }
  return self_done ? 0 : load_self(x, root);
}

static int load_root(load_ctx *x) {
  const loom_yaml_node *root = x->root;
  if (!root || loom_yaml_is_null(root)) return 0; /* empty file: defaults */
  if (root->kind != LOOM_YAML_MAPPING)
    return loom_yaml_err(root, "the top level must be a mapping of sections (run:, model:, "
                         "training:, ...) or dotted keys (training.lr: ...), found %s",
                         loom_yaml_kind_phrase(root));
  const loom_yaml_node *defaults = NULL;
  for (int i = 0; i < root->n; i++)
    if (is_defaults(root->pairs[i].key)) {
      if (defaults)
        return loom_yaml_err(root->pairs[i].key, "duplicate key 'defaults' (first at line %d); "
                             "keep one list", defaults->line);
      defaults = root->pairs[i].value;
    }
  return defaults ? load_defaults(x, defaults, root) : load_self(x, root);
}

static int parse_text(loom_config *tmp, const char *path, const char *text, size_t len,
                      loom_group_ctx *g, const char *package, bool primary) {
  loom_yaml_doc *doc;
  if (loom_yaml_parse(&doc, text, len, path)) return -1;
  load_ctx *x = loom_calloc(1, sizeof *x);
  x->path = path, x->root = loom_yaml_root(doc), x->cfg = tmp;
  x->groups = g, x->package = package, x->primary = primary;
  g->stack[g->depth++] = path;
  int rc = load_root(x);
  g->depth--;
  free(x);
  loom_yaml_free(doc);
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

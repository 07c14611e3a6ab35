/* YAML text -> a tree of mappings, sequences and scalars (libyaml's event parser), with the
 * line of every node for error messages, and typed reads of scalars. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "loom/core.h"
#include "sim/yaml_tree.h"

static yt_node *new_node(yt_kind kind, int line) {
  yt_node *n = calloc(1, sizeof *n);
  LOOM_ASSERT(n);
  n->kind = kind;
  n->line = line;
  return n;
}

static void push(yt_node *parent, char *key, int key_line, yt_node *child) {
  parent->items = realloc(parent->items, (size_t)(parent->n + 1) * sizeof *parent->items);
  parent->keys = realloc(parent->keys, (size_t)(parent->n + 1) * sizeof *parent->keys);
  parent->key_lines = realloc(parent->key_lines, (size_t)(parent->n + 1) * sizeof(int));
  LOOM_ASSERT(parent->items && parent->keys && parent->key_lines);
  parent->items[parent->n] = child;
  parent->keys[parent->n] = key;
  parent->key_lines[parent->n] = key_line;
  parent->n++;
}

void yt_free(yt_node *n) {
  if (!n) return;
  for (int i = 0; i < n->n; i++) {
    yt_free(n->items[i]);
    free(n->keys[i]);
  }
  free(n->items);
  free(n->keys);
  free(n->key_lines);
  free(n->text);
  free(n);
}

/* Parse one node whose first event is `ev` (already taken); recursive over collections. */
static yt_node *parse_node(yaml_parser_t *p, yaml_event_t *ev, const char *file, int depth);

static int next(yaml_parser_t *p, yaml_event_t *ev, const char *file) {
  if (yaml_parser_parse(p, ev)) return 0;
  return loom_err("%s:%zu: YAML syntax error: %s", file, p->problem_mark.line + 1,
                  p->problem ? p->problem : "unknown");
}

static yt_node *parse_collection(yaml_parser_t *p, yt_node *n, const char *file, int depth) {
  for (;;) {
    yaml_event_t ev;
    if (next(p, &ev, file)) goto fail;
    if (ev.type == YAML_MAPPING_END_EVENT || ev.type == YAML_SEQUENCE_END_EVENT) {
      yaml_event_delete(&ev);
      return n;
    }
    char *key = NULL;
    int key_line = (int)ev.start_mark.line + 1;
    if (n->kind == YT_MAP) {
      if (ev.type != YAML_SCALAR_EVENT) {
        loom_err("%s:%d: a mapping key must be a plain name", file, key_line);
        yaml_event_delete(&ev);
        goto fail;
      }
      key = loom_strdup((const char *)ev.data.scalar.value);
      yaml_event_delete(&ev);
      if (next(p, &ev, file)) {
        free(key);
        goto fail;
      }
    }
    yt_node *child = parse_node(p, &ev, file, depth + 1);
    if (!child) {
      free(key);
      goto fail;
    }
    push(n, key, key_line, child);
  }
fail:
  yt_free(n);
  return NULL;
}

static yt_node *parse_node(yaml_parser_t *p, yaml_event_t *ev, const char *file, int depth) {
  int line = (int)ev->start_mark.line + 1;
  yt_node *n = NULL;
  if (depth > 32) {
    loom_err("%s:%d: YAML nested too deeply", file, line);
  } else if (ev->type == YAML_SCALAR_EVENT) {
    n = new_node(YT_SCALAR, line);
    n->text = loom_strdup((const char *)ev->data.scalar.value);
  } else if (ev->type == YAML_MAPPING_START_EVENT || ev->type == YAML_SEQUENCE_START_EVENT) {
    n = new_node(ev->type == YAML_MAPPING_START_EVENT ? YT_MAP : YT_SEQ, line);
    yaml_event_delete(ev);
    return parse_collection(p, n, file, depth);
  } else if (ev->type == YAML_ALIAS_EVENT) {
    loom_err("%s:%d: YAML aliases are not supported in hardware profiles", file, line);
  } else {
    loom_err("%s:%d: unexpected YAML structure", file, line);
  }
  yaml_event_delete(ev);
  return n;
}

yt_node *yt_parse(const char *text, const char *filename) {
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) {
    loom_err("%s: cannot initialise the YAML parser", filename);
    return NULL;
  }
  yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
  yt_node *root = NULL;
  yaml_event_t ev;
  for (;;) {
    if (next(&p, &ev, filename)) break;
    yaml_event_type_t t = ev.type;
    if (t == YAML_STREAM_END_EVENT) {
      yaml_event_delete(&ev);
      if (!root) loom_err("%s: the file is empty (expected a mapping of profile keys)", filename);
      break;
    }
    if (t == YAML_STREAM_START_EVENT || t == YAML_DOCUMENT_START_EVENT ||
        t == YAML_DOCUMENT_END_EVENT) {
      yaml_event_delete(&ev);
      continue;
    }
    if (root) {
      loom_err("%s:%zu: only one YAML document is allowed", filename, ev.start_mark.line + 1);
      yaml_event_delete(&ev);
      yt_free(root);
      root = NULL;
      break;
    }
    root = parse_node(&p, &ev, filename, 0);
    if (!root) break;
  }
  yaml_parser_delete(&p);
  if (root && root->kind != YT_MAP) {
    loom_err("%s:%d: expected a mapping of keys at the top", filename, root->line);
    yt_free(root);
    return NULL;
  }
  return root;
}

yt_node *yt_get(const yt_node *map, const char *key) {
  if (!map || map->kind != YT_MAP) return NULL;
  for (int i = 0; i < map->n; i++)
    if (!strcmp(map->keys[i], key)) return map->items[i];
  return NULL;
}

int yt_number(const yt_node *n, const char *file, const char *key, double *out) {
  if (n->kind != YT_SCALAR)
    return loom_err("%s:%d: %s: expected a number", file, n->line, key);
  char *end;
  errno = 0;
  double v = strtod(n->text, &end);
  if (end == n->text || *end || errno || !isfinite(v))
    return loom_err("%s:%d: %s: expected a number, found '%s'", file, n->line, key, n->text);
  *out = v;
  return 0;
}

int yt_int(const yt_node *n, const char *file, const char *key, int *out) {
  double v;
  if (yt_number(n, file, key, &v)) return -1;
  if (v != floor(v) || fabs(v) > 1e9)
    return loom_err("%s:%d: %s: expected an integer, found '%s'", file, n->line, key, n->text);
  *out = (int)v;
  return 0;
}

int yt_bool(const yt_node *n, const char *file, const char *key, bool *out) {
  if (n->kind == YT_SCALAR) {
    if (!strcmp(n->text, "true") || !strcmp(n->text, "yes")) return *out = true, 0;
    if (!strcmp(n->text, "false") || !strcmp(n->text, "no")) return *out = false, 0;
  }
  return loom_err("%s:%d: %s: expected true or false", file, n->line, key);
}

int yt_string(const yt_node *n, const char *file, const char *key, char *out, int cap) {
  if (n->kind != YT_SCALAR) return loom_err("%s:%d: %s: expected a string", file, n->line, key);
  if ((int)strlen(n->text) >= cap)
    return loom_err("%s:%d: %s: longer than %d characters", file, n->line, key, cap - 1);
  strcpy(out, n->text);
  return 0;
}

int yt_only(const yt_node *map, const char *file, const char *where, const char *const *allowed) {
  if (map->kind != YT_MAP) return loom_err("%s:%d: %s: expected a mapping", file, map->line, where);
  for (int i = 0; i < map->n; i++) {
    bool ok = false;
    for (int j = 0; allowed[j] && !ok; j++) ok = !strcmp(map->keys[i], allowed[j]);
    if (!ok) {
      char list[512] = "";
      for (int j = 0; allowed[j]; j++) {
        if (j) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, allowed[j], sizeof list - strlen(list) - 1);
      }
      return loom_err("%s:%d: unknown key '%s' in %s (known: %s)", file, map->key_lines[i],
                      map->keys[i], where, list);
    }
  }
  return 0;
}

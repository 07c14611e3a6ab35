/* Read the small YAML files of an Energon metadata directory (dataset.yaml, split.yaml)
 * through loom's YAML layer (loom/yaml.h) into a jansson tree (mappings -> objects, sequences
 * -> arrays, scalars -> strings, null -> null; a repeated key keeps its last value), so the
 * rest of the Energon code reads JSON and YAML alike. The layer's limits bound the tree. */
#include <jansson.h>
#include <stdio.h>

#include "loom/core.h"
#include "loom/vqa.h"
#include "loom/yaml.h"

static json_t *convert(const loom_yaml_node *n) {
  switch (n->kind) {
    case LOOM_YAML_SCALAR:
      return loom_yaml_is_null(n) ? json_null() : json_stringn(n->text, n->len);
    case LOOM_YAML_SEQUENCE: {
      json_t *a = json_array();
      for (int i = 0; i < n->n; i++) json_array_append_new(a, convert(n->items[i]));
      return a;
    }
    case LOOM_YAML_MAPPING: {
      json_t *o = json_object();
      for (int i = 0; i < n->n; i++)
        json_object_set_new(o, n->pairs[i].key->text, convert(n->pairs[i].value));
      return o;
    }
  }
  return json_null();
}

json_t *loom_energon_yaml_load(const char *path) {
  loom_yaml_doc *doc;
  if (loom_yaml_load_file(&doc, path)) return NULL;
  const loom_yaml_node *root = loom_yaml_root(doc);
  json_t *out = root ? convert(root) : json_object();
  loom_yaml_free(doc);
  return out;
}

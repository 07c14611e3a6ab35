/* Read the small YAML files of an Energon metadata directory (dataset.yaml, split.yaml)
 * with libyaml into a jansson tree (mappings -> objects, sequences -> arrays, scalars ->
 * strings), so the rest of the Energon code reads JSON and YAML alike. */
#include <jansson.h>
#include <stdio.h>
#include <yaml.h>

#include "loom/core.h"
#include "loom/vqa.h"

static json_t *convert(yaml_document_t *doc, yaml_node_t *n, int depth) {
  if (!n || depth > 32) return json_null();
  switch (n->type) {
    case YAML_SCALAR_NODE: {
      const char *v = (const char *)n->data.scalar.value;
      int plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
      if (plain && (!strcmp(v, "null") || !strcmp(v, "~") || !*v)) return json_null();
      return json_stringn(v, n->data.scalar.length);
    }
    case YAML_SEQUENCE_NODE: {
      json_t *a = json_array();
      for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
           it++)
        json_array_append_new(a, convert(doc, yaml_document_get_node(doc, *it), depth + 1));
      return a;
    }
    case YAML_MAPPING_NODE: {
      json_t *o = json_object();
      for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
           p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (!k || k->type != YAML_SCALAR_NODE) continue;
        json_object_set_new(o, (const char *)k->data.scalar.value,
                            convert(doc, yaml_document_get_node(doc, p->value), depth + 1));
      }
      return o;
    }
    default: return json_null();
  }
}

json_t *loom_energon_yaml_load(const char *path) {
  char *text;
  size_t len;
  if (loom_read_file(path, &text, &len)) return NULL;
  yaml_parser_t p;
  yaml_document_t doc;
  yaml_parser_initialize(&p);
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  json_t *out = NULL;
  if (!yaml_parser_load(&p, &doc)) {
    loom_err("%s: YAML error at line %zu: %s", path, p.problem_mark.line + 1,
             p.problem ? p.problem : "unknown");
  } else {
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    out = root ? convert(&doc, root, 0) : json_object();
    yaml_document_delete(&doc);
  }
  yaml_parser_delete(&p);
  free(text);
  return out;
}

/* Energon metadata helpers: the dataset.yaml field map, the split ratio "9,1,0", loom's
 * .nv-meta/index.json loader, and WebDataset's member name -> (sample key, extension). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/vqa.h"

void loom_field_map_free(loom_field_map *f) {
  free(f->image);
  free(f->context);
  free(f->answers);
  memset(f, 0, sizeof *f);
}

const char *loom_field_map_ext(const char *spec, char *buf, size_t n) {
  size_t k = strcspn(spec, "[,");
  if (k >= n) k = n - 1;
  memcpy(buf, spec, k);
  buf[k] = 0;
  return buf;
}

static char *field(json_t *fm, const char *a, const char *b) {
  json_t *v = json_object_get(fm, a);
  if (!json_is_string(v) && b) v = json_object_get(fm, b);
  return json_is_string(v) ? loom_strdup(json_string_value(v)) : NULL;
}

int loom_energon_read_field_map(const char *dir, loom_field_map *f) {
  memset(f, 0, sizeof *f);
  char *path = loom_sprintf("%s/.nv-meta/dataset.yaml", dir);
  json_t *root = loom_energon_yaml_load(path);
  if (!root) {
    free(path);
    return loom_err_prefix("reading the dataset's field map: ");
  }
  json_t *fm = json_object_get(root, "field_map");
  int rc = 0;
  if (!json_is_object(fm)) {
    rc = loom_err("%s: no field_map (loom reads VQA samples through a field_map with image, "
                  "context and answers): re-run `loom data prepare` after removing the file",
                  path);
  } else {
    f->image = field(fm, "image", NULL);
    f->context = field(fm, "context", "question");
    f->answers = field(fm, "answers", "answer");
    if (!f->image || !f->context || !f->answers)
      rc = loom_err("%s: field_map needs image, context (or question) and answers (or answer), "
                    "e.g. image: jpg, context: json[question], answers: txt", path);
  }
  json_decref(root);
  free(path);
  if (rc) loom_field_map_free(f);
  return rc;
}

int loom_parse_split_ratio(const char *text, double r[3]) {
  const char *p = text;
  for (int i = 0; i < 3; i++) {
    char *end;
    errno = 0;
    r[i] = strtod(p, &end);
    if (end == p || errno || r[i] < 0 || r[i] != r[i]) goto bad;
    p = end;
    while (*p == ' ') p++;
    if (i < 2) {
      if (*p != ',') goto bad;
      p++;
    }
  }
  if (*p || r[0] + r[1] + r[2] <= 0) goto bad;
  return 0;
bad:
  return loom_err("split '%s' is not three non-negative numbers train,val,test with a positive "
                  "sum, e.g. 9,1,0 or 0.8,0.1,0.1", text);
}

json_t *loom_energon_index_load(const char *dir) {
  char *path = loom_sprintf("%s/.nv-meta/index.json", dir);
  json_error_t je;
  json_t *root = NULL;
  if (!loom_path_exists(path)) {
    loom_err("%s has no .nv-meta/index.json: run `loom data prepare %s --split 9,1,0` first",
             dir, dir);
  } else if (!(root = json_load_file(path, 0, &je))) {
    loom_err("%s: not valid JSON (line %d: %s): re-run `loom data prepare %s`", path, je.line,
             je.text, dir);
  } else if (!json_is_object(root) ||
             !json_is_string(json_object_get(root, "format")) ||
             strcmp(json_string_value(json_object_get(root, "format")), "loom-energon-index") ||
             !json_is_array(json_object_get(root, "shards"))) {
    loom_err("%s: not a loom index (format loom-energon-index): re-run `loom data prepare %s`",
             path, dir);
    json_decref(root);
    root = NULL;
  }
  free(path);
  return root;
}

int loom_wds_split_name(const char *name, char *key, size_t key_cap, const char **ext) {
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (base[0] == '.' || base[0] == 0) return -1;
  const char *dot = strchr(base, '.');
  if (!dot || !dot[1]) return -1;
  size_t k = (size_t)(dot - name);
  if (k + 1 > key_cap) return -1;
  memcpy(key, name, k);
  key[k] = 0;
  *ext = dot + 1;
  return 0;
}

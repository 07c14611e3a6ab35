/* Gradient norms per tensor from a checkpoint's gradient files (one file, or one per rank):
 * each entry is a piece of a tensor (named through "loom.pieces" when it is a slice or a
 * range), squares are summed per tensor in double, then square-rooted. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/grad_norms.h"
#include "loom/safetensors.h"

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* gradients.safetensors or gradients-r*.safetensors in dir, sorted. */
static int list_files(const char *dir, char ***out, int *n) {
  DIR *d = opendir(dir);
  if (!d) return loom_err("cannot open directory '%s'", dir);
  *out = NULL;
  *n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    const char *s = e->d_name;
    size_t len = strlen(s);
    bool grad = !strncmp(s, "gradients", 9) && len > 12 && !strcmp(s + len - 12, ".safetensors");
    if (!grad) continue;
    *out = loom_realloc(*out, (size_t)(*n + 1), sizeof(char *));
    (*out)[(*n)++] = loom_sprintf("%s/%s", dir, s);
  }
  closedir(d);
  if (*n == 0)
    return loom_err("no gradients*.safetensors in '%s'; gradients are saved only when the run "
                    "had checkpoint.save_gradients: true (give a checkpoint directory such as "
                    "runs/<id>/final_checkpoint)", dir);
  qsort(*out, (size_t)*n, sizeof **out, cmp_str);
  return 0;
}

static loom_grad_norm *find_or_add(loom_grad_norms *g, const char *name) {
  for (int i = 0; i < g->count; i++)
    if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
  g->tensors = loom_realloc(g->tensors, (size_t)(g->count + 1), sizeof *g->tensors);
  loom_grad_norm *t = &g->tensors[g->count++];
  memset(t, 0, sizeof *t);
  t->name = loom_strdup(name);
  return t;
}

/* Add one file's pieces; the l2 field holds the sum of squares until the end. */
static int add_file(loom_grad_norms *g, const char *path) {
  loom_st_file *f;
  if (loom_st_open(&f, path)) return -1;
  const char *meta = loom_st_metadata(f, "loom.pieces");
  json_t *pieces = meta ? json_loads(meta, 0, NULL) : NULL;
  const char *step = loom_st_metadata(f, "step");
  if (step) g->step = atol(step);
  for (int i = 0; i < loom_st_count(f); i++) {
    const char *entry = loom_st_name(f, i);
    const char *tensor = json_string_value(json_object_get(json_object_get(pieces, entry), "tensor"));
    loom_grad_norm *t = find_or_add(g, tensor ? tensor : entry);
    loom_dtype dt = loom_st_dtype(f, i);
    const void *data = loom_st_data(f, i);
    int64_t n = loom_st_numel(f, i);
    for (int64_t k = 0; k < n; k++) {
      double x = loom_dtype_get_f64(dt, data, (size_t)k);
      if (!isfinite(x)) t->nonfinite++;
      t->l2 += x * x;
      if (fabs(x) > t->max_abs) t->max_abs = fabs(x);
    }
    t->numel += n;
  }
  json_decref(pieces);
  loom_st_close(f);
  g->files++;
  return 0;
}

int loom_grad_norms_read(const char *path, loom_grad_norms *g) {
  memset(g, 0, sizeof *g);
  g->step = -1;
  char **files = NULL;
  int n = 0, rc = 0;
  if (loom_is_dir(path)) {
    rc = list_files(path, &files, &n);
  } else {
    files = loom_malloc(sizeof(char *));
    files[n++] = loom_strdup(path);
  }
  for (int i = 0; i < n && !rc; i++) rc = add_file(g, files[i]);
  for (int i = 0; i < n; i++) free(files[i]);
  free(files);
  if (rc) {
    loom_grad_norms_free(g);
    return -1;
  }
  double total = 0;
  for (int i = 0; i < g->count; i++) {
    total += g->tensors[i].l2;
    g->tensors[i].l2 = sqrt(g->tensors[i].l2);
  }
  g->total_l2 = sqrt(total);
  return 0;
}

void loom_grad_norms_free(loom_grad_norms *g) {
  for (int i = 0; i < g->count; i++) free(g->tensors[i].name);
  free(g->tensors);
  memset(g, 0, sizeof *g);
}

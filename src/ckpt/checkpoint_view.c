/* The global view of a checkpoint directory (`loom ckpt inspect`): the pieces that ranks wrote
 * merged into global tensors (each once, with its global shape and statistics over all its
 * elements), grouped into parameters, AdamW moments and gradients. See checkpoint.h. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include "ckpt/checkpoint_meta.h"
#include "loom/checkpoint.h"
#include "loom/ckpt_view.h"
#include "loom/core.h"

static const char *const group_names[LOOM_CKPT_GROUPS] = {"parameters", "exp_avg", "exp_avg_sq",
                                                          "optimizer_other", "gradients"};

const char *loom_ckpt_group_name(int g) {
  return g >= 0 && g < LOOM_CKPT_GROUPS ? group_names[g] : "?";
}

/* ---- the files ------------------------------------------------------------------------------ */

static bool starts_with(const char *s, const char *prefix) {
  return !strncmp(s, prefix, strlen(prefix));
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

/* What a file holds, by its name: optimizer state, gradients, else parameters. */
static int file_kind(const char *name) {
  if (starts_with(name, "optimizer") || starts_with(name, "vision-optimizer")) return 1;
  if (starts_with(name, "gradients") || starts_with(name, "vision-gradients")) return 2;
  return 0;
}

static void add_name(loom_ckpt_view *v, const char *dir, const char *name) {
  v->files = loom_realloc(v->files, (size_t)v->nfiles + 1, sizeof *v->files);
  v->files[v->nfiles++] = loom_sprintf("%s%s%s", dir, ends_with(dir, "/") ? "" : "/", name);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.safetensors of dir, by name. */
static int list_dir(const char *dir, loom_ckpt_view *v) {
  DIR *d = opendir(dir);
  if (!d) return loom_err("cannot open directory '%s': %s", dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)))
    if (ends_with(e->d_name, ".safetensors") && e->d_name[0] != '.') add_name(v, dir, e->d_name);
  closedir(d);
  if (v->nfiles == 0)
    return loom_err("no *.safetensors file in directory '%s'; give a checkpoint directory or a "
                    ".safetensors file",
                    dir);
  qsort(v->files, (size_t)v->nfiles, sizeof *v->files, cmp_str);
  return 0;
}

/* The files index.json lists (model, optimizer, gradients, each in rank order). */
static int list_index(const char *dir, const char *index, loom_ckpt_view *v) {
  char *text;
  size_t len;
  if (loom_read_file(index, &text, &len)) return LOOM_ERR;
  static const char *const kinds[] = {"model", "optimizer", "gradients"};
  int rc = 0;
  for (int k = 0; k < 3 && !rc; k++) {
    char **names;
    int n;
    if (k == 2 && !strstr(text, "\"gradient_files\"")) break; /* older index files */
    rc = loom_ckpt_index_parse(text, len, index, k == 2 ? "gradient" : kinds[k], &names, &n);
    for (int i = 0; i < n && !rc; i++) add_name(v, dir, names[i]);
    if (!rc) loom_ckpt_names_free(names, n);
  }
  free(text);
  return rc;
}

/* ---- merging pieces ------------------------------------------------------------------------- */

/* One distinct piece already counted: replicas (a norm weight every tensor-parallel rank
 * writes) describe the same elements and count once. */
typedef struct {
  int split_dim, split_start;
  int64_t lshape[2], begin, numel;
} piece_key;

typedef struct {
  piece_key *keys;
  int n;
} piece_set;

static bool seen_piece(piece_set *s, const piece_key *k) {
  for (int i = 0; i < s->n; i++)
    if (!memcmp(&s->keys[i], k, sizeof *k)) return true;
  s->keys = loom_realloc(s->keys, (size_t)s->n + 1, sizeof *s->keys);
  s->keys[s->n++] = *k;
  return false;
}

/* The tensor named `name` in group g, created (with the given global shape) if new; *pieces
 * receives its piece set (parallel to the group's tensors). */
static loom_ckpt_tensor *find_tensor(loom_ckpt_view *v, int g, const char *name, int ndim,
                                     const int64_t *shape, loom_dtype dt, piece_set **pieces) {
  loom_ckpt_group *gr = &v->group[g];
  for (int i = 0; i < gr->n; i++)
    if (!strcmp(gr->t[i].name, name)) {
      *pieces = &((piece_set *)v->pieces[g])[i];
      return &gr->t[i];
    }
  gr->t = loom_realloc(gr->t, (size_t)gr->n + 1, sizeof *gr->t);
  v->pieces[g] = loom_realloc(v->pieces[g], (size_t)gr->n + 1, sizeof(piece_set));
  loom_ckpt_tensor *t = &gr->t[gr->n];
  memset(t, 0, sizeof *t);
  t->name = loom_strdup(name);
  t->ndim = ndim;
  t->numel = 1;
  for (int d = 0; d < ndim; d++) t->shape[d] = shape[d], t->numel *= shape[d];
  t->dtype = dt;
  t->min = INFINITY;
  t->max = -INFINITY;
  *pieces = &((piece_set *)v->pieces[g])[gr->n];
  memset(*pieces, 0, sizeof **pieces);
  gr->n++;
  return t;
}

/* An integer field of a piece description (checked by loom_ckpt_pieces_check). */
static int64_t jint(json_t *o, const char *key, int i) {
  json_t *x = json_object_get(o, key);
  return (int64_t)json_integer_value(i < 0 ? x : json_array_get(x, (size_t)i));
}

/* Add entry i of file f (kind: file_kind) with its description d (NULL: a whole tensor). */
static void add_entry(loom_ckpt_view *v, const loom_st_file *f, int i, int kind, json_t *d) {
  const char *entry = loom_st_name(f, i);
  int g = kind == 2 ? LOOM_CKPT_GRADS : LOOM_CKPT_PARAMS;
  const char *name = d ? json_string_value(json_object_get(d, "tensor")) : entry;
  if (kind == 1) {
    g = starts_with(entry, "exp_avg_sq.") ? LOOM_CKPT_EXP_AVG_SQ
        : starts_with(entry, "exp_avg.")  ? LOOM_CKPT_EXP_AVG
                                          : LOOM_CKPT_OPT_OTHER;
    if (!d && g != LOOM_CKPT_OPT_OTHER) name = strchr(entry, '.') + 1;
  }
  int64_t shape[LOOM_ST_MAX_DIMS];
  int ndim = loom_st_ndim(f, i);
  piece_key k = {-1, 0, {0, 0}, 0, loom_st_numel(f, i)};
  if (d) { /* gshape [n, 0] is a vector */
    shape[0] = jint(d, "gshape", 0), shape[1] = jint(d, "gshape", 1);
    ndim = shape[1] == 0 ? 1 : 2;
    k = (piece_key){(int)jint(d, "split_dim", -1),
                    (int)jint(d, "split_start", -1),
                    {jint(d, "lshape", 0), jint(d, "lshape", 1)},
                    jint(d, "begin", -1),
                    k.numel};
  } else {
    for (int x = 0; x < ndim; x++) shape[x] = loom_st_shape(f, i)[x];
  }
  piece_set *ps;
  loom_ckpt_tensor *t = find_tensor(v, g, name, ndim, shape, loom_st_dtype(f, i), &ps);
  v->bytes += (int64_t)loom_st_nbytes(f, i);
  if (loom_st_dtype(f, i) != t->dtype) t->mixed_dtype = true;
  if (seen_piece(ps, &k)) return;
  loom_st_stats s;
  loom_st_tensor_stats(f, i, &s);
  t->pieces++;
  t->held += s.numel;
  t->sumsq += s.l2 * s.l2;
  t->nonfinite += s.nonfinite;
  if (s.numel && s.min < t->min) t->min = s.min;
  if (s.numel && s.max > t->max) t->max = s.max;
}

static int add_file(loom_ckpt_view *v, const char *path) {
  loom_st_file *f;
  if (loom_st_open(&f, path)) return LOOM_ERR;
  const char *meta = loom_st_metadata(f, "loom.pieces");
  json_t *pieces = meta ? json_loads(meta, 0, NULL) : NULL;
  int rc = 0;
  if (meta && !pieces)
    rc = loom_err("%s: metadata 'loom.pieces' is not valid JSON; the checkpoint is damaged", path);
  else if (pieces) rc = loom_ckpt_pieces_check(pieces, path);
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  for (int i = 0; i < loom_st_count(f) && !rc; i++)
    add_entry(v, f, i, file_kind(base),
              pieces ? json_object_get(pieces, loom_st_name(f, i)) : NULL);
  json_decref(pieces);
  loom_st_close(f);
  return rc;
}

int loom_ckpt_view_read(const char *dir, loom_ckpt_view *v) {
  memset(v, 0, sizeof *v);
  char *index = loom_sprintf("%s/index.json", dir);
  int rc = loom_path_exists(index) ? list_index(dir, index, v) : list_dir(dir, v);
  free(index);
  for (int i = 0; i < v->nfiles && !rc; i++) {
    if (!loom_path_exists(v->files[i])) {
      char *marker = loom_sprintf("%s/" LOOM_CKPT_MARKER, dir);
      rc = loom_err("checkpoint '%s': '%s' is missing (index.json lists it)%s", dir,
                    strrchr(v->files[i], '/') + 1,
                    loom_path_exists(marker) ? ""
                                             : "; the checkpoint has no " LOOM_CKPT_MARKER
                                               " marker: its save was "
                                               "interrupted, or files were removed");
      free(marker);
      break;
    }
    rc = add_file(v, v->files[i]);
  }
  for (int g = 0; g < LOOM_CKPT_GROUPS && !rc; g++)
    for (int i = 0; i < v->group[g].n; i++) {
      loom_ckpt_tensor *t = &v->group[g].t[i];
      t->l2 = sqrt(t->sumsq);
      if (t->held == 0) t->min = t->max = NAN;
      v->count[g] += t->numel;
    }
  if (rc) loom_ckpt_view_free(v);
  return rc;
}

void loom_ckpt_view_free(loom_ckpt_view *v) {
  for (int g = 0; g < LOOM_CKPT_GROUPS; g++) {
    for (int i = 0; i < v->group[g].n; i++) {
      free(v->group[g].t[i].name);
      if (v->pieces[g]) free(((piece_set *)v->pieces[g])[i].keys);
    }
    free(v->group[g].t);
    free(v->pieces[g]);
  }
  for (int i = 0; i < v->nfiles; i++) free(v->files[i]);
  free(v->files);
  memset(v, 0, sizeof *v);
}

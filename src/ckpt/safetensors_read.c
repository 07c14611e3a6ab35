/* safetensors reader: maps the file, validates the whole header (JSON object, every entry's
 * dtype/shape/data_offsets, contiguous offsets with no gap, overlap or trailing bytes) and
 * serves names, shapes, data pointers, metadata and float conversion. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/safetensors.h"

#define MAX_HEADER_BYTES 100000000ull /* same limit as the reference implementation */
#define HINT_CORRUPT "the file may be truncated, corrupt or not a safetensors file; re-export it"

typedef struct {
  char *name;
  loom_dtype dtype;
  int ndim;
  int64_t shape[LOOM_ST_MAX_DIMS];
  int64_t numel;
  uint64_t begin, end; /* relative to the data buffer */
  int order;           /* position in the JSON header, breaks offset ties */
} st_tensor;

typedef struct {
  const char *name; /* points into the st_tensor */
  int index;
} st_name;

struct loom_st_file {
  char *path;
  unsigned char *map;
  size_t map_len;
  const unsigned char *buf; /* data buffer (after the header) */
  uint64_t buf_len;
  st_tensor *t;
  int n;
  st_name *by_name; /* sorted by name, for loom_st_find */
  char **meta_key, **meta_val;
  int n_meta;
};

/* ---- validation of one header entry ---------------------------------------------------- */

static int parse_dtype(const char *path, const char *name, json_t *e, st_tensor *t) {
  json_t *d = json_object_get(e, "dtype");
  if (!d) return loom_err("'%s': tensor '%s' has no \"dtype\"; " HINT_CORRUPT, path, name);
  if (!json_is_string(d))
    return loom_err("'%s': tensor '%s': \"dtype\" is not a string; " HINT_CORRUPT, path, name);
  if (loom_dtype_from_name(json_string_value(d), &t->dtype))
    return loom_err_prefix("'%s': tensor '%s': ", path, name);
  return 0;
}

static int parse_shape(const char *path, const char *name, json_t *e, st_tensor *t) {
  json_t *s = json_object_get(e, "shape");
  if (!s) return loom_err("'%s': tensor '%s' has no \"shape\"; " HINT_CORRUPT, path, name);
  if (!json_is_array(s))
    return loom_err("'%s': tensor '%s': \"shape\" is not an array; " HINT_CORRUPT, path, name);
  size_t nd = json_array_size(s);
  if (nd > LOOM_ST_MAX_DIMS)
    return loom_err("'%s': tensor '%s' has %zu dimensions; loom supports at most %d", path, name,
                    nd, LOOM_ST_MAX_DIMS);
  t->ndim = (int)nd;
  /* The byte size of the shape, and of every sub-product (zero dims left out, so consumers
   * multiplying some of the dims cannot overflow either), must fit in int64; whether the
   * bytes are present is checked against the file by parse_offsets and check_layout. */
  uint64_t numel = 1, nonzero = 1, limit = (uint64_t)INT64_MAX / loom_dtype_size(t->dtype);
  for (size_t d = 0; d < nd; d++) {
    json_t *v = json_array_get(s, d);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
      return loom_err("'%s': tensor '%s': shape[%zu] is not a non-negative integer; " HINT_CORRUPT,
                      path, name, d);
    uint64_t dim = (uint64_t)json_integer_value(v);
    if (dim > 0 && nonzero > limit / dim)
      return loom_err("'%s': tensor '%s': shape is too large (%s byte size overflows 64 "
                      "bits); " HINT_CORRUPT, path, name, numel ? "its" : "a partial");
    if (dim > 0) nonzero *= dim;
    numel *= dim;
    t->shape[d] = (int64_t)dim;
  }
  t->numel = (int64_t)numel;
  return 0;
}

static int parse_offsets(const char *path, const char *name, json_t *e, st_tensor *t) {
  json_t *o = json_object_get(e, "data_offsets");
  if (!o) return loom_err("'%s': tensor '%s' has no \"data_offsets\"; " HINT_CORRUPT, path, name);
  json_t *b = json_array_get(o, 0), *en = json_array_get(o, 1);
  if (!json_is_array(o) || json_array_size(o) != 2 || !json_is_integer(b) || !json_is_integer(en) ||
      json_integer_value(b) < 0 || json_integer_value(en) < 0)
    return loom_err(
        "'%s': tensor '%s': \"data_offsets\" is not [begin, end] with non-negative "
        "integers; " HINT_CORRUPT,
        path, name);
  t->begin = (uint64_t)json_integer_value(b);
  t->end = (uint64_t)json_integer_value(en);
  uint64_t want = (uint64_t)t->numel * loom_dtype_size(t->dtype);
  if (t->end < t->begin)
    return loom_err(
        "'%s': tensor '%s': data_offsets [%llu, %llu] end before they begin; " HINT_CORRUPT, path,
        name, (unsigned long long)t->begin, (unsigned long long)t->end);
  if (t->end - t->begin != want)
    return loom_err(
        "'%s': tensor '%s': data_offsets [%llu, %llu] span %llu bytes but shape and "
        "dtype %s need %llu; " HINT_CORRUPT,
        path, name, (unsigned long long)t->begin, (unsigned long long)t->end,
        (unsigned long long)(t->end - t->begin), loom_dtype_name(t->dtype),
        (unsigned long long)want);
  return 0;
}

static int parse_entry(const char *path, const char *name, json_t *e, st_tensor *t) {
  if (!json_is_object(e))
    return loom_err("'%s': tensor '%s': entry is not a JSON object; " HINT_CORRUPT, path, name);
  if (parse_dtype(path, name, e, t) || parse_shape(path, name, e, t) ||
      parse_offsets(path, name, e, t))
    return LOOM_ERR;
  t->name = loom_strdup(name);
  return 0;
}

static int parse_metadata(loom_st_file *f, json_t *m) {
  if (!json_is_object(m))
    return loom_err("'%s': \"__metadata__\" is not a JSON object; " HINT_CORRUPT, f->path);
  size_t n = json_object_size(m);
  f->meta_key = loom_calloc(n + 1, sizeof *f->meta_key);
  f->meta_val = loom_calloc(n + 1, sizeof *f->meta_val);
  const char *k;
  json_t *v;
  json_object_foreach(m, k, v) {
    if (!json_is_string(v))
      return loom_err(
          "'%s': metadata '%s' is not a string (safetensors metadata maps strings to "
          "strings); " HINT_CORRUPT,
          f->path, k);
    f->meta_key[f->n_meta] = loom_strdup(k);
    f->meta_val[f->n_meta++] = loom_strdup(json_string_value(v));
  }
  return 0;
}

/* ---- layout checks --------------------------------------------------------------------- */

static int cmp_offset(const void *a, const void *b) {
  const st_tensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->order - y->order;
}

/* Tensors sorted by offset must tile [0, buf_len) exactly. */
static int check_layout(loom_st_file *f) {
  qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_offset);
  uint64_t pos = 0;
  for (int i = 0; i < f->n; i++) {
    const st_tensor *t = &f->t[i];
    if (t->end > f->buf_len)
      return loom_err(
          "'%s': tensor '%s': data_offsets [%llu, %llu] run past the end of the "
          "%llu-byte data section; " HINT_CORRUPT,
          f->path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
          (unsigned long long)f->buf_len);
    if (t->begin < pos)
      return loom_err(
          "'%s': tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s'; " HINT_CORRUPT,
          f->path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
          f->t[i - 1].name);
    if (t->begin > pos)
      return loom_err(
          "'%s': tensor '%s': gap of %llu unused bytes before it (data_offsets begin "
          "at %llu, %s at %llu); " HINT_CORRUPT,
          f->path, t->name, (unsigned long long)(t->begin - pos), (unsigned long long)t->begin,
          i ? "the previous tensor ends" : "the data section starts", (unsigned long long)pos);
    pos = t->end;
  }
  if (pos != f->buf_len)
    return loom_err("'%s': %llu trailing bytes after the last tensor%s%s%s; " HINT_CORRUPT, f->path,
                    (unsigned long long)(f->buf_len - pos), f->n ? " '" : "",
                    f->n ? f->t[f->n - 1].name : "", f->n ? "'" : "");
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const st_name *)a)->name, ((const st_name *)b)->name);
}

static void build_name_index(loom_st_file *f) {
  f->by_name = loom_calloc((size_t)f->n + 1, sizeof *f->by_name);
  for (int i = 0; i < f->n; i++) f->by_name[i] = (st_name){f->t[i].name, i};
  qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
}

/* ---- header ---------------------------------------------------------------------------- */

static int parse_header(loom_st_file *f, const char *text, size_t len) {
  if (len == 0 || text[0] != '{')
    return loom_err("'%s': header does not start with '{' (not a JSON object); " HINT_CORRUPT,
                    f->path);
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return loom_err("'%s': header is not valid JSON (%s at byte %d of the header); " HINT_CORRUPT,
                    f->path, je.text, je.position);
  int rc = 0;
  f->t = loom_calloc(json_object_size(root) + 1, sizeof *f->t);
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (!strcmp(k, "__metadata__")) {
      rc = parse_metadata(f, v);
    } else {
      f->t[f->n].order = f->n;
      rc = parse_entry(f->path, k, v, &f->t[f->n]);
      if (rc == 0) f->n++;
    }
    if (rc) break;
  }
  json_decref(root);
  if (rc == 0) rc = check_layout(f);
  if (rc == 0) build_name_index(f);
  return rc;
}

/* Map the file and check the 8-byte length prefix; sets map, buf, buf_len. */
static int map_file(loom_st_file *f) {
  int fd = open(f->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return loom_err("cannot open '%s': %s", f->path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return loom_err("'%s' is not a regular file; give the path of a .safetensors file", f->path);
  }
  if (st.st_size < 8) {
    close(fd);
    return loom_err("'%s' is %lld bytes, shorter than the 8-byte header length; " HINT_CORRUPT,
                    f->path, (long long)st.st_size);
  }
  f->map_len = (size_t)st.st_size;
  void *m = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (m == MAP_FAILED) return loom_err("cannot map '%s': %s", f->path, strerror(e));
  f->map = m;
  uint64_t n = 0;
  for (int b = 7; b >= 0; b--) n = (n << 8) | f->map[b];
  if (n > MAX_HEADER_BYTES)
    return loom_err("'%s': header length %llu is above the limit of %llu bytes (as in the "
                    "reference implementation); " HINT_CORRUPT, f->path, (unsigned long long)n,
                    MAX_HEADER_BYTES);
  if (n > f->map_len - 8)
    return loom_err(
        "'%s': header length %llu is larger than the %zu bytes that follow it; " HINT_CORRUPT,
        f->path, (unsigned long long)n, f->map_len - 8);
  f->buf = f->map + 8 + n;
  f->buf_len = f->map_len - 8 - n;
  return parse_header(f, (const char *)f->map + 8, (size_t)n);
}

int loom_st_open(loom_st_file **out, const char *path) {
  *out = NULL;
  loom_st_file *f = loom_calloc(1, sizeof *f);
  f->path = loom_strdup(path);
  if (map_file(f)) {
    loom_st_close(f);
    return LOOM_ERR;
  }
  *out = f;
  return 0;
}

void loom_st_close(loom_st_file *f) {
  if (!f) return;
  if (f->map) munmap(f->map, f->map_len);
  for (int i = 0; i < f->n; i++) free(f->t[i].name);
  for (int i = 0; i < f->n_meta; i++) {
    free(f->meta_key[i]);
    free(f->meta_val[i]);
  }
  free(f->t);
  free(f->by_name);
  free(f->meta_key);
  free(f->meta_val);
  free(f->path);
  free(f);
}

/* ---- accessors ------------------------------------------------------------------------- */

const char *loom_st_path(const loom_st_file *f) { return f->path; }
int loom_st_count(const loom_st_file *f) { return f->n; }

int loom_st_find(const loom_st_file *f, const char *name) {
  int lo = 0, hi = f->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(f->by_name[mid].name, name);
    if (c == 0) return f->by_name[mid].index;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

static const st_tensor *tensor(const loom_st_file *f, int i) {
  LOOM_ASSERT(i >= 0 && i < f->n);
  return &f->t[i];
}

const char *loom_st_name(const loom_st_file *f, int i) { return tensor(f, i)->name; }
loom_dtype loom_st_dtype(const loom_st_file *f, int i) { return tensor(f, i)->dtype; }
int loom_st_ndim(const loom_st_file *f, int i) { return tensor(f, i)->ndim; }
const int64_t *loom_st_shape(const loom_st_file *f, int i) { return tensor(f, i)->shape; }
int64_t loom_st_numel(const loom_st_file *f, int i) { return tensor(f, i)->numel; }
const void *loom_st_data(const loom_st_file *f, int i) { return f->buf + tensor(f, i)->begin; }

size_t loom_st_nbytes(const loom_st_file *f, int i) {
  const st_tensor *t = tensor(f, i);
  return (size_t)(t->end - t->begin);
}

int loom_st_metadata_count(const loom_st_file *f) { return f->n_meta; }

const char *loom_st_metadata_key(const loom_st_file *f, int i) {
  LOOM_ASSERT(i >= 0 && i < f->n_meta);
  return f->meta_key[i];
}

const char *loom_st_metadata_value(const loom_st_file *f, int i) {
  LOOM_ASSERT(i >= 0 && i < f->n_meta);
  return f->meta_val[i];
}

const char *loom_st_metadata(const loom_st_file *f, const char *key) {
  for (int i = 0; i < f->n_meta; i++)
    if (!strcmp(f->meta_key[i], key)) return f->meta_val[i];
  return NULL;
}

int loom_st_read_f32(const loom_st_file *f, const char *name, float *dst, size_t numel) {
  int i = loom_st_find(f, name);
  if (i < 0)
    return loom_err("'%s': no tensor named '%s'; check the name (loom ckpt inspect lists them)",
                    f->path, name);
  const st_tensor *t = &f->t[i];
  if ((uint64_t)t->numel != numel)
    return loom_err(
        "'%s': tensor '%s' has %lld elements but %zu were requested; the checkpoint "
        "does not match the model shape",
        f->path, name, (long long)t->numel, numel);
  const void *src = f->buf + t->begin;
  switch (t->dtype) {
    case LOOM_DT_F32:
      memcpy(dst, src, numel * 4);
      return 0;
    case LOOM_DT_F64:
    case LOOM_DT_BF16:
    case LOOM_DT_F16:
      for (size_t j = 0; j < numel; j++) dst[j] = (float)loom_dtype_get_f64(t->dtype, src, j);
      return 0;
    default:
      return loom_err(
          "'%s': tensor '%s' has integer dtype %s, not a float type; read it with "
          "loom_st_data instead",
          f->path, name, loom_dtype_name(t->dtype));
  }
}

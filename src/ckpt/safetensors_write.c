/* safetensors writer: collects tensors (referenced, or owned BF16 copies) and metadata, then
 * writes header + contiguous data to PATH.tmp.<pid>, fsyncs and renames it over PATH. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/safetensors.h"

typedef struct {
  char *name;
  loom_dtype dtype;
  int ndim;
  int64_t shape[LOOM_ST_MAX_DIMS];
  const void *data;
  void *owned; /* copy owned by the writer (BF16 conversions), else NULL */
  size_t nbytes;
} st_entry;

struct loom_st_writer {
  st_entry *t;
  int n, cap;
  char **meta_key, **meta_val;
  int n_meta, cap_meta;
};

loom_st_writer *loom_st_writer_create(void) {
  loom_st_writer *w = loom_calloc(1, sizeof *w);
  return w;
}

void loom_st_writer_free(loom_st_writer *w) {
  if (!w) return;
  for (int i = 0; i < w->n; i++) {
    free(w->t[i].name);
    free(w->t[i].owned);
  }
  for (int i = 0; i < w->n_meta; i++) {
    free(w->meta_key[i]);
    free(w->meta_val[i]);
  }
  free(w->t);
  free(w->meta_key);
  free(w->meta_val);
  free(w);
}

static int find_entry(const loom_st_writer *w, const char *name) {
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->t[i].name, name)) return i;
  return -1;
}

/* Validate name/dtype/shape and compute the byte size; 0 or -1 with message. */
static int check_tensor(const loom_st_writer *w, const char *name, loom_dtype dt, int ndim,
                        const int64_t *shape, const void *data, size_t *nbytes) {
  if (!name || !name[0])
    return loom_err(
        "safetensors writer: tensor name is empty; give every "
        "tensor a unique non-empty name");
  if (!strcmp(name, "__metadata__"))
    return loom_err("safetensors writer: '__metadata__' is reserved and cannot name a tensor");
  if (find_entry(w, name) >= 0)
    return loom_err("safetensors writer: tensor '%s' was added twice; names must be unique", name);
  if (loom_dtype_size(dt) == 0)
    return loom_err("safetensors writer: tensor '%s' has invalid dtype %d", name, (int)dt);
  if (ndim < 0 || ndim > LOOM_ST_MAX_DIMS)
    return loom_err("safetensors writer: tensor '%s' has %d dimensions; allowed 0..%d", name, ndim,
                    LOOM_ST_MAX_DIMS);
  uint64_t numel = 1, limit = (uint64_t)INT64_MAX / loom_dtype_size(dt);
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0)
      return loom_err("safetensors writer: tensor '%s' has negative dimension %lld at axis %d",
                      name, (long long)shape[d], d);
    if (shape[d] > 0 && numel > limit / (uint64_t)shape[d])
      return loom_err("safetensors writer: tensor '%s' is too large (byte size overflows)", name);
    numel *= (uint64_t)shape[d];
  }
  if (numel > 0 && !data)
    return loom_err("safetensors writer: tensor '%s' has %llu elements but data is NULL", name,
                    (unsigned long long)numel);
  *nbytes = (size_t)(numel * loom_dtype_size(dt));
  return 0;
}

static st_entry *push_entry(loom_st_writer *w) {
  if (w->n == w->cap) {
    w->cap = w->cap ? 2 * w->cap : 16;
    w->t = loom_realloc(w->t, (size_t)w->cap, sizeof *w->t);
  }
  st_entry *e = &w->t[w->n++];
  memset(e, 0, sizeof *e);
  return e;
}

int loom_st_writer_add(loom_st_writer *w, const char *name, loom_dtype dt, int ndim,
                       const int64_t *shape, const void *data) {
  size_t nbytes;
  if (check_tensor(w, name, dt, ndim, shape, data, &nbytes)) return LOOM_ERR;
  st_entry *e = push_entry(w);
  e->name = loom_strdup(name);
  e->dtype = dt;
  e->ndim = ndim;
  if (ndim > 0) memcpy(e->shape, shape, (size_t)ndim * sizeof *shape);
  e->data = data;
  e->nbytes = nbytes;
  return 0;
}

int loom_st_writer_add_bf16_from_f32(loom_st_writer *w, const char *name, int ndim,
                                     const int64_t *shape, const float *data) {
  size_t nbytes;
  if (check_tensor(w, name, LOOM_DT_BF16, ndim, shape, data, &nbytes)) return LOOM_ERR;
  size_t numel = nbytes / 2;
  loom_bf16 *copy = loom_malloc(nbytes);
  for (size_t i = 0; i < numel; i++) copy[i] = loom_f32_to_bf16(data[i]);
  if (loom_st_writer_add(w, name, LOOM_DT_BF16, ndim, shape, copy)) {
    free(copy);
    return LOOM_ERR;
  }
  w->t[w->n - 1].owned = copy;
  return 0;
}

int loom_st_writer_set_metadata(loom_st_writer *w, const char *key, const char *value) {
  json_t *probe_k = key ? json_string(key) : NULL, *probe_v = value ? json_string(value) : NULL;
  int ok = probe_k && probe_v; /* json_string() rejects NULL and invalid UTF-8 */
  json_decref(probe_k);
  json_decref(probe_v);
  if (!ok)
    return loom_err("safetensors writer: metadata key/value '%s' is NULL or not valid UTF-8",
                    key ? key : "(null)");
  for (int i = 0; i < w->n_meta; i++)
    if (!strcmp(w->meta_key[i], key)) {
      free(w->meta_val[i]);
      w->meta_val[i] = loom_strdup(value);
      return 0;
    }
  if (w->n_meta == w->cap_meta) {
    w->cap_meta = w->cap_meta ? 2 * w->cap_meta : 8;
    w->meta_key = loom_realloc(w->meta_key, (size_t)w->cap_meta, sizeof *w->meta_key);
    w->meta_val = loom_realloc(w->meta_val, (size_t)w->cap_meta, sizeof *w->meta_val);
  }
  w->meta_key[w->n_meta] = loom_strdup(key);
  w->meta_val[w->n_meta++] = loom_strdup(value);
  return 0;
}

/* JSON entry {"dtype", "shape", "data_offsets"} for one tensor. */
static json_t *entry_json(const st_entry *e, uint64_t begin) {
  json_t *shape = json_array();
  for (int d = 0; d < e->ndim; d++) json_array_append_new(shape, json_integer(e->shape[d]));
  json_t *offs = json_array();
  json_array_append_new(offs, json_integer((json_int_t)begin));
  json_array_append_new(offs, json_integer((json_int_t)(begin + e->nbytes)));
  json_t *o = json_object();
  json_object_set_new(o, "dtype", json_string(loom_dtype_name(e->dtype)));
  json_object_set_new(o, "shape", shape);
  json_object_set_new(o, "data_offsets", offs);
  return o;
}

/* Header JSON padded with spaces to a multiple of 8 bytes (malloc'd), or NULL with message. */
static char *build_header(const loom_st_writer *w, size_t *len) {
  json_t *root = json_object();
  if (w->n_meta > 0) {
    json_t *meta = json_object();
    for (int i = 0; i < w->n_meta; i++)
      json_object_set_new(meta, w->meta_key[i], json_string(w->meta_val[i]));
    json_object_set_new(root, "__metadata__", meta);
  }
  uint64_t off = 0;
  int bad = -1;
  for (int i = 0; i < w->n && bad < 0; i++) {
    if (json_object_set_new(root, w->t[i].name, entry_json(&w->t[i], off))) bad = i;
    off += w->t[i].nbytes;
  }
  char *text = bad < 0 ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(root);
  if (!text) {
    loom_err("safetensors writer: cannot encode the header%s%s%s (names must be valid UTF-8)",
             bad >= 0 ? " (tensor '" : "", bad >= 0 ? w->t[bad].name : "", bad >= 0 ? "')" : "");
    return NULL;
  }
  size_t n = strlen(text), padded = (n + 7) & ~(size_t)7;
  char *buf = loom_realloc(text, padded, 1);
  memset(buf + n, ' ', padded - n);
  *len = padded;
  return buf;
}

/* Write header length, header and every tensor's bytes to f; 0 or -1 (errno set). */
static int write_body(const loom_st_writer *w, FILE *f, const char *hdr, size_t hdr_len) {
  unsigned char len8[8];
  for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)hdr_len >> (8 * b));
  if (fwrite(len8, 1, 8, f) != 8 || fwrite(hdr, 1, hdr_len, f) != hdr_len) return -1;
  for (int i = 0; i < w->n; i++)
    if (w->t[i].nbytes && fwrite(w->t[i].data, 1, w->t[i].nbytes, f) != w->t[i].nbytes) return -1;
  if (fflush(f) != 0 || fsync(fileno(f)) != 0) return -1;
  return 0;
}

int loom_st_writer_write(loom_st_writer *w, const char *path) {
  size_t hdr_len;
  char *hdr = build_header(w, &hdr_len);
  if (!hdr) return loom_err_prefix("writing '%s': ", path);
  char *tmp = loom_tmp_path(path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    int e = errno;
    free(hdr);
    free(tmp);
    return loom_err("cannot write '%s': %s (does the directory exist and is it writable?)", path,
                    strerror(e));
  }
  int rc = write_body(w, f, hdr, hdr_len);
  int e = errno;
  if (fclose(f) != 0 && rc == 0) rc = -1, e = errno;
  if (rc == 0 && rename(tmp, path) != 0) rc = -1, e = errno;
  if (rc != 0) {
    unlink(tmp);
    loom_err("cannot write '%s': %s (disk full, or the path is a directory?)", path, strerror(e));
  }
  free(hdr);
  free(tmp);
  return rc ? LOOM_ERR : 0;
}

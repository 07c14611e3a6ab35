/* loom safetensors: element types, a writer (tensors referenced until an atomic write) and a
 * fully validating reader (mmap) for the safetensors format, plus per-tensor statistics.
 *
 * File layout (see docs/FORMATS-checkpoint.md): u64 little-endian header length N, N bytes of
 * UTF-8 JSON {"__metadata__": {str: str}, "<name>": {"dtype", "shape", "data_offsets"}},
 * padded with spaces so 8 + N is a multiple of 8, then the tensor bytes, contiguous, in the
 * order the tensors were added, offsets relative to the first byte after the header.
 * Tensor data is little-endian; data pointers from the reader are NOT aligned to the element
 * size in general (copy with memcpy or use loom_st_read_f32). */
#ifndef LOOM_SAFETENSORS_H
#define LOOM_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

/* ---- element types ------------------------------------------------------------------------ */
typedef enum {
  LOOM_DT_F32,
  LOOM_DT_F64,
  LOOM_DT_BF16,
  LOOM_DT_F16,
  LOOM_DT_I32,
  LOOM_DT_I64,
  LOOM_DT_U8,
  LOOM_DT_I8,
  LOOM_DT_U16,
  LOOM_DT_BOOL,
  LOOM_DT_COUNT
} loom_dtype;

#define LOOM_ST_MAX_DIMS 8 /* most dimensions a tensor may have (reader and writer) */

/* Bytes per element (BOOL is one byte). */
size_t loom_dtype_size(loom_dtype dt);
/* Safetensors spelling: "F32", "BF16", ...; "?" for an out-of-range value. */
const char *loom_dtype_name(loom_dtype dt);
/* Parse a safetensors dtype string; 0 on success, -1 (with message) when unsupported. */
int loom_dtype_from_name(const char *name, loom_dtype *out);
/* Element i of a little-endian array of dt at data (any alignment), as a double. */
double loom_dtype_get_f64(loom_dtype dt, const void *data, size_t i);
/* IEEE binary16 bits to float (exact, including subnormals, inf and NaN). */
float loom_f16_to_f32(uint16_t h);

/* ---- writer ------------------------------------------------------------------------------- */
typedef struct loom_st_writer loom_st_writer;

/* New empty writer; never NULL (aborts when out of memory). */
loom_st_writer *loom_st_writer_create(void);
/* Add a tensor. data (numel * dtype size bytes; may be NULL when numel is 0) is referenced,
 * not copied, and must stay valid until loom_st_writer_write. Rejects empty, reserved
 * ("__metadata__") or duplicate names, ndim outside [0, LOOM_ST_MAX_DIMS], negative dims.
 * shape may be NULL when ndim is 0 (a scalar). */
int loom_st_writer_add(loom_st_writer *w, const char *name, loom_dtype dt, int ndim,
                       const int64_t *shape, const void *data);
/* Add a BF16 tensor converted from float (round to nearest even); the writer owns the copy. */
int loom_st_writer_add_bf16_from_f32(loom_st_writer *w, const char *name, int ndim,
                                     const int64_t *shape, const float *data);
/* Set (or replace) a __metadata__ string entry (copied); -1 when NULL or not valid UTF-8. */
int loom_st_writer_set_metadata(loom_st_writer *w, const char *key, const char *value);
/* Write the file atomically (PATH.tmp.<pid>, fsync, rename); nothing is left on error. */
int loom_st_writer_write(loom_st_writer *w, const char *path);
/* Free the writer and the copies it owns (NULL is fine). */
void loom_st_writer_free(loom_st_writer *w);

/* ---- reader ------------------------------------------------------------------------------- */
typedef struct loom_st_file loom_st_file;

/* Map and fully validate PATH (header, every entry, offsets contiguous without gaps); on
 * error *f is NULL and the message names the file, the tensor and what to do. */
int loom_st_open(loom_st_file **f, const char *path);
/* Unmap and free (NULL is fine); pointers obtained from f become invalid. */
void loom_st_close(loom_st_file *f);
/* Path the file was opened with. */
const char *loom_st_path(const loom_st_file *f);
/* Number of tensors. Tensors are indexed 0..count-1 in data-offset (= write) order. */
int loom_st_count(const loom_st_file *f);
/* Index of the tensor called name, or -1 when absent. */
int loom_st_find(const loom_st_file *f, const char *name);
/* Name of tensor i. */
const char *loom_st_name(const loom_st_file *f, int i);
/* Element type of tensor i. */
loom_dtype loom_st_dtype(const loom_st_file *f, int i);
/* Number of dimensions of tensor i (0 for a scalar). */
int loom_st_ndim(const loom_st_file *f, int i);
/* The ndim dimensions of tensor i. */
const int64_t *loom_st_shape(const loom_st_file *f, int i);
/* Number of elements of tensor i (product of the shape; 1 for a scalar). */
int64_t loom_st_numel(const loom_st_file *f, int i);
/* Bytes of tensor i (numel * dtype size). */
size_t loom_st_nbytes(const loom_st_file *f, int i);
/* Start of tensor i's bytes inside the mapping (unaligned in general). */
const void *loom_st_data(const loom_st_file *f, int i);
/* Number of __metadata__ entries. */
int loom_st_metadata_count(const loom_st_file *f);
/* Key of metadata entry i (header order). */
const char *loom_st_metadata_key(const loom_st_file *f, int i);
/* Value of metadata entry i. */
const char *loom_st_metadata_value(const loom_st_file *f, int i);
/* Value stored under key in __metadata__, or NULL when absent. */
const char *loom_st_metadata(const loom_st_file *f, const char *key);
/* Copy tensor name into dst as float, converting from F32/F64/BF16/F16; numel must equal the
 * tensor's element count. Errors for a missing tensor, a size mismatch or an integer dtype. */
int loom_st_read_f32(const loom_st_file *f, const char *name, float *dst, size_t numel);

/* ---- statistics --------------------------------------------------------------------------- */
typedef struct {
  int64_t numel;
  double l2;         /* sqrt(sum x^2) in double over all elements (NaN/inf propagate) */
  double min, max;   /* over non-NaN elements; NaN when there are none (e.g. empty) */
  int64_t nonfinite; /* count of NaN and +-inf elements */
} loom_st_stats;

/* Statistics of tensor i, every element converted to double. */
void loom_st_tensor_stats(const loom_st_file *f, int i, loom_st_stats *out);

#endif

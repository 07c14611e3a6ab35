/* loom core: error reporting, deterministic RNG, bf16 conversion, timing, file-system
 * helpers (mkdir -p, atomic write-then-rename) and checked allocation. Every module uses it. */
#ifndef LOOM_CORE_H
#define LOOM_CORE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------------------
 * Library functions return 0 on success and -1 on failure after calling loom_err(), which
 * records a message saying what was wrong, where, and what to do. The CLI prints it. */
#define LOOM_OK 0
#define LOOM_ERR (-1)
int loom_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prefix the current message with context ("loading x.yaml: ") and return -1. */
int loom_err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *loom_errmsg(void);
void loom_err_clear(void);

/* Broken internal invariant (never bad input): print and abort. */
#define LOOM_ASSERT(cond)                                                                  \
  do {                                                                                     \
    if (!(cond)) loom_panic(__FILE__, __LINE__, #cond);                                    \
  } while (0)
void loom_panic(const char *file, int line, const char *what) __attribute__((noreturn));

/* ---- logging ----------------------------------------------------------------------------- */
void loom_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));  /* to stderr */

/* ---- memory ------------------------------------------------------------------------------
 * Checked allocation: loom allocates through these macros (the raw malloc/calloc/realloc calls
 * are in memory.c, and in the few readers that return an out-of-memory error to their caller
 * instead: loom_read_file, the JPEG decoder). None returns NULL. When memory runs out they
 * print one message -- what was being allocated, how many bytes, the file:line of the call,
 * the rank when there are several, and what to do (a smaller training.micro_batch_size,
 * activation checkpointing, more ranks or ZeRO, a smaller model, free memory) -- and end the
 * process with exit status LOOM_EXIT_OOM: never abort() (no SIGABRT, no core dump). n * size
 * is checked for overflow. A zero size allocates a minimal block. The *_for forms name what is
 * allocated ("decoder activations"), for the large allocations whose size a user controls.
 *   loom_alloc(bytes)             64-byte aligned and zeroed (buffers the kernels read)
 *   loom_malloc(bytes)            uninitialised
 *   loom_calloc(n, size)          n elements of size bytes, zeroed
 *   loom_realloc(p, n, size)      p resized to n elements of size bytes (reallocarray)
 *   loom_strdup(s), loom_strndup(s, n), loom_sprintf(fmt, ...)   malloc'd strings
 * All are released with free() (loom_free is the same). */
#define LOOM_EXIT_OOM 1
#define loom_alloc(bytes) loom_alloc_at((bytes), NULL, __FILE__, __LINE__)
#define loom_alloc_for(bytes, what) loom_alloc_at((bytes), (what), __FILE__, __LINE__)
#define loom_malloc(bytes) loom_malloc_at((bytes), NULL, __FILE__, __LINE__)
#define loom_malloc_for(bytes, what) loom_malloc_at((bytes), (what), __FILE__, __LINE__)
#define loom_calloc(n, size) loom_calloc_at((n), (size), NULL, __FILE__, __LINE__)
#define loom_calloc_for(n, size, what) loom_calloc_at((n), (size), (what), __FILE__, __LINE__)
#define loom_realloc(p, n, size) loom_realloc_at((p), (n), (size), NULL, __FILE__, __LINE__)
#define loom_strdup(s) loom_strdup_at((s), __FILE__, __LINE__)
#define loom_strndup(s, n) loom_strndup_at((s), (n), __FILE__, __LINE__)
#define loom_sprintf(...) loom_sprintf_at(__FILE__, __LINE__, __VA_ARGS__)
void *loom_alloc_at(size_t bytes, const char *what, const char *file, int line);
void *loom_malloc_at(size_t bytes, const char *what, const char *file, int line);
void *loom_calloc_at(size_t n, size_t size, const char *what, const char *file, int line);
void *loom_realloc_at(void *p, size_t n, size_t size, const char *what, const char *file,
                      int line);
char *loom_strdup_at(const char *s, const char *file, int line);
char *loom_strndup_at(const char *s, size_t n, const char *file, int line);
char *loom_sprintf_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void loom_free(void *p);
/* Report running out of memory for n elements of size bytes (n * size may overflow) and end
 * the process; what the macros above call when the C library returns NULL. */
void loom_oom(size_t n, size_t size, const char *what, const char *file, int line)
    __attribute__((noreturn));
/* Called after the message is printed, before the process exits: MPI start-up registers one
 * that takes every rank down (MPI_Abort), so the others do not wait in a collective until its
 * timeout. Core itself never calls MPI. */
typedef void (*loom_oom_handler)(int exit_status);
void loom_set_oom_handler(loom_oom_handler fn);
/* This process's rank and the number of ranks, named in the message when there are several
 * (MPI start-up sets them). */
void loom_set_rank(int rank, int world);
/* A directory being written under a temporary name (PATH.tmp.<pid>, a mkdtemp directory):
 * running out of memory removes it before the process exits, as the failure paths that
 * return an error do. Up to LOOM_OOM_CLEANUP_MAX at a time; remove it from the list once it
 * is renamed into place or removed. */
#define LOOM_OOM_CLEANUP_MAX 4
void loom_oom_cleanup_add(const char *dir);
void loom_oom_cleanup_remove(const char *dir);

/* ---- deterministic random numbers ---------------------------------------------------------
 * xoshiro256** seeded through splitmix64. The whole state is 4 words so checkpoints can save
 * and restore it exactly. */
typedef struct {
  uint64_t s[4];
} loom_rng;
void loom_rng_seed(loom_rng *r, uint64_t seed);
uint64_t loom_rng_u64(loom_rng *r);
double loom_rng_uniform(loom_rng *r);            /* [0, 1) with 53 random bits */
double loom_rng_normal(loom_rng *r);             /* standard normal (Box-Muller) */
uint64_t loom_rng_below(loom_rng *r, uint64_t n); /* uniform in [0, n), unbiased */

/* ---- bf16 -------------------------------------------------------------------------------- */
typedef uint16_t loom_bf16;
static inline loom_bf16 loom_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (loom_bf16)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
  return (loom_bf16)(u >> 16);
}
static inline float loom_bf16_to_f32(loom_bf16 h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline float loom_bf16_round(float f) { return loom_bf16_to_f32(loom_f32_to_bf16(f)); }

/* ---- time -------------------------------------------------------------------------------- */
double loom_now(void); /* monotonic seconds */

/* ---- files -------------------------------------------------------------------------------
 * Writers never leave half-written files: they write PATH.tmp.<pid> and rename it. */
int loom_mkdir_p(const char *path);
bool loom_path_exists(const char *path);
bool loom_is_dir(const char *path);
int loom_read_file(const char *path, char **data, size_t *len); /* malloc'd, NUL-terminated */
int loom_write_file_atomic(const char *path, const void *data, size_t len);
int loom_rm_rf(const char *path);
/* fsync a file or a directory (a directory: so that renames inside it are durable). */
int loom_fsync_path(const char *path);
/* Append text to f and flush; on failure remove the partial record (ftruncate to the length
 * before it) and fail with "cannot write 'path': <reason>". */
int loom_append_checked(FILE *f, const char *path, const char *text, size_t len);
/* Directory written under a temporary name and renamed into place once complete. */
char *loom_tmp_path(const char *final_path); /* malloc'd "<final>.tmp.<pid>" */
int loom_rename_dir_atomic(const char *tmp_dir, const char *final_dir); /* replaces final */

/* FNV-1a 64-bit hash, used for config hashes and file fingerprints. */
uint64_t loom_hash64(const void *data, size_t len, uint64_t seed);

#endif

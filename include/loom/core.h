/* loom core: error reporting, deterministic RNG, bf16 conversion, timing, file-system
 * helpers (mkdir -p, atomic write-then-rename) and aligned allocation. Every module uses it. */
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

/* ---- memory ------------------------------------------------------------------------------ */
void *loom_alloc(size_t bytes);          /* 64-byte aligned, zeroed; aborts when out of memory */
void loom_free(void *p);
char *loom_strdup(const char *s);
char *loom_sprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* malloc'd */

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

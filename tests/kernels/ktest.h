/* Helpers shared by the kernel tests: random fills, relative norm errors, and a check that
 * prints every measured error next to its tolerance (so the CTest log shows the margins). */
#ifndef LOOM_KTEST_H
#define LOOM_KTEST_H
#include <stdint.h>

#include "harness.h"
#include "loom/core.h"
#include "loom/kernels.h"

static loom_rng ktest_rng;

/* x[i] ~ scale * N(0,1), rounded to float so that f32 and f64 runs see identical inputs. */
static inline void fill_normal(double *x, size_t n, double scale) {
  for (size_t i = 0; i < n; i++) x[i] = (double)(float)(scale * loom_rng_normal(&ktest_rng));
}
static inline void to_f32(float *dst, const double *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
}
static inline double *dalloc(size_t n) { return loom_alloc(sizeof(double) * (n ? n : 1)); }
static inline float *falloc(size_t n) { return loom_alloc(sizeof(float) * (n ? n : 1)); }

/* ||a - b|| / max(||b||, 1e-8) */
static inline double rel_err_dd(const double *a, const double *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  den = sqrt(den);
  return sqrt(num) / (den > 1e-8 ? den : 1e-8);
}
static inline double rel_err_fd(const float *a, const double *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  den = sqrt(den);
  return sqrt(num) / (den > 1e-8 ? den : 1e-8);
}

/* Largest error/tolerance ratio seen, reported at the end. */
static double ktest_worst_ratio = 0;
static char ktest_worst_what[160];

#define CHECK_REL(err, tol, ...)                                                     \
  do {                                                                               \
    double e_ = (err), t_ = (tol);                                                   \
    char w_[160];                                                                    \
    snprintf(w_, sizeof w_, __VA_ARGS__);                                            \
    printf("  %-60s rel err %.3e (tol %.0e)\n", w_, e_, t_);                       \
    if (e_ / t_ > ktest_worst_ratio || e_ != e_) {                                   \
      ktest_worst_ratio = e_ / t_;                                                   \
      snprintf(ktest_worst_what, sizeof ktest_worst_what, "%s", w_);                 \
    }                                                                                \
    CHECK(e_ <= t_, "%s: rel err %.3e > tol %.0e", w_, e_, t_);                      \
  } while (0)

static inline void ktest_report_worst(void) {
  printf("worst error/tolerance ratio: %.3g (%s)\n", ktest_worst_ratio, ktest_worst_what);
}
#endif

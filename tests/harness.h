/* Minimal test harness shared by the C tests: CHECK macros that count and report failures
 * with file:line, and a closing "N passed, N failed" line that CTest output shows. */
#ifndef LOOM_TEST_HARNESS_H
#define LOOM_TEST_HARNESS_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int harness_passed = 0, harness_failed = 0;

#define CHECK(cond, ...)                                                              \
  do {                                                                                \
    if (cond) {                                                                       \
      harness_passed++;                                                               \
    } else {                                                                          \
      harness_failed++;                                                               \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                 \
      fprintf(stderr, __VA_ARGS__);                                                   \
      fprintf(stderr, "\n");                                                          \
    }                                                                                 \
  } while (0)

/* |got - want| <= tol * max(1, |want|) */
#define CHECK_CLOSE(got, want, tol, what)                                             \
  do {                                                                                \
    double g_ = (double)(got), w_ = (double)(want);                                   \
    double s_ = fabs(w_) > 1.0 ? fabs(w_) : 1.0;                                      \
    CHECK(fabs(g_ - w_) <= (tol) * s_, "%s: got %.10g want %.10g (tol %.3g)", what, g_, \
          w_, (double)(tol));                                                         \
  } while (0)

static inline int harness_finish(const char *name) {
  printf("%s: %d passed, %d failed\n", name, harness_passed, harness_failed);
  return harness_failed ? 1 : 0;
}
#endif

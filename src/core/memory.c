/* Aligned zeroed allocation and small string helpers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"

void *loom_alloc(size_t bytes) {
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded == 0) rounded = 64;
  void *p = aligned_alloc(64, rounded);
  if (!p) {
    fprintf(stderr, "loom: out of memory allocating %zu bytes\n", bytes);
    abort();
  }
  memset(p, 0, rounded);
  return p;
}

void loom_free(void *p) { free(p); }

char *loom_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (!d) abort();
  memcpy(d, s, n);
  return d;
}

char *loom_sprintf(const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = malloc((size_t)n + 1);
  if (!s) abort();
  vsnprintf(s, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

uint64_t loom_hash64(const void *data, size_t len, uint64_t seed) {
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ull ^ seed;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

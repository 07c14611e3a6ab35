/* Cell values shared by filters, the runs table and sweeps: text form (shortest exact real),
 * numeric reading, and the sort order (NULLs last, numbers before text). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/filter.h"

static void format_real(double v, char *buf, size_t n) {
  if (isnan(v)) {
    snprintf(buf, n, "nan");
    return;
  }
  if (isinf(v)) {
    snprintf(buf, n, v > 0 ? "inf" : "-inf");
    return;
  }
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(buf, n, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) return;
  }
}

const char *loom_value_text(const loom_value *v, char *buf, size_t n) {
  switch (v->type) {
    case LOOM_VAL_NULL: buf[0] = 0; return buf;
    case LOOM_VAL_INT: snprintf(buf, n, "%lld", v->i); return buf;
    case LOOM_VAL_REAL: format_real(v->r, buf, n); return buf;
    case LOOM_VAL_TEXT: return v->s ? v->s : "";
  }
  return "";
}

bool loom_value_number(const loom_value *v, double *out) {
  switch (v->type) {
    case LOOM_VAL_INT: *out = (double)v->i; return true;
    case LOOM_VAL_REAL: *out = v->r; return true;
    case LOOM_VAL_TEXT: {
      if (!v->s || !*v->s) return false;
      char *end;
      double d = strtod(v->s, &end);
      if (*end || end == v->s || isnan(d)) return false;
      /* "inf"/"infinity" words are text, not numbers, unless spelled as such on purpose */
      if (isinf(d) && !strpbrk(v->s, "0123456789")) return false;
      *out = d;
      return true;
    }
    case LOOM_VAL_NULL: return false;
  }
  return false;
}

int loom_value_cmp(const loom_value *a, const loom_value *b) {
  bool an = a->type == LOOM_VAL_NULL, bn = b->type == LOOM_VAL_NULL;
  if (an || bn) return an == bn ? 0 : an ? 1 : -1;
  if (a->type == LOOM_VAL_INT && b->type == LOOM_VAL_INT) return a->i < b->i ? -1 : a->i > b->i;
  double x, y;
  bool ax = loom_value_number(a, &x), by = loom_value_number(b, &y);
  if (ax && by) return x < y ? -1 : x > y ? 1 : 0;
  if (ax != by) return ax ? -1 : 1;
  char ba[64], bb[64];
  return strcmp(loom_value_text(a, ba, sizeof ba), loom_value_text(b, bb, sizeof bb));
}

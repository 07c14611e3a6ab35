/* Fuzz harness: filter expressions (`loom runs --filter`, sweep constraints): tokenizer,
 * parser and evaluation over rows that hold the extreme values (64-bit limits, NULL, text
 * that reads as a number). Invariants beyond memory safety and no undefined behaviour
 * (signed overflow, LLONG_MIN / -1): parsing either succeeds or sets an error message, and
 * NOT (e) is true exactly when e is false and not NULL (SQL's three-valued logic). */
#include <limits.h>

#include "fuzz_util.h"
#include "loom/core.h"
#include "loom/filter.h"

static const char *const cols[] = {"a", "big", "small", "lr", "name", "empty", "num_text",
                                   "training.lr", NULL};

static int resolve(void *ctx, const char *name, const char **suggestion) {
  (void)ctx;
  for (int i = 0; cols[i]; i++)
    if (!strcmp(cols[i], name)) return i;
  *suggestion = "a";
  return -1;
}

static loom_value value(void *ctx, int col) {
  int row = *(const int *)ctx;
  switch (col) {
    case 0: return (loom_value){.type = LOOM_VAL_INT, .i = row ? -1 : 3};
    case 1: return (loom_value){.type = LOOM_VAL_INT, .i = LLONG_MAX};
    case 2: return (loom_value){.type = LOOM_VAL_INT, .i = LLONG_MIN};
    case 3: return (loom_value){.type = LOOM_VAL_REAL, .r = row ? 1e308 : 3e-4};
    case 4: return (loom_value){.type = LOOM_VAL_TEXT, .s = row ? "" : "gpt2-124m_tp2"};
    case 5: return (loom_value){.type = LOOM_VAL_NULL};
    case 6: return (loom_value){.type = LOOM_VAL_TEXT, .s = row ? "-9223372036854775808" : "1e3"};
    default: return (loom_value){.type = LOOM_VAL_REAL, .r = 0.1};
  }
}

/* 1 / 0, or -1 for an evaluation error. */
static int run(const loom_expr *e, int row) {
  bool r = false;
  return loom_expr_eval(e, value, &row, &r) ? -1 : r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_input_string(data, size);
  loom_expr *e = NULL;
  loom_err_clear();
  if (loom_expr_parse(&e, text, "--filter", resolve, NULL, NULL)) {
    if (!*loom_errmsg()) FUZZ_FINDING("the parse failed without an error message");
    free(text);
    return 0;
  }
  char *neg_text = loom_sprintf("NOT (%s)", text), *null_text = loom_sprintf("(%s) IS NULL", text);
  loom_expr *neg = NULL, *isnull = NULL;
  if (loom_expr_parse(&neg, neg_text, "--filter", resolve, NULL, NULL) ||
      loom_expr_parse(&isnull, null_text, "--filter", resolve, NULL, NULL))
    neg = NULL; /* wrapping can pass a nesting limit: skip the check */
  for (int row = 0; row < 2 && neg; row++) {
    int v = run(e, row), nv = run(neg, row), un = run(isnull, row);
    if (v < 0 || nv < 0 || un < 0) continue;
    if (nv != (!v && !un))
      FUZZ_FINDING("row %d: '%s' is %d, IS NULL %d, but NOT of it is %d", row, text, v, un, nv);
  }
  loom_expr_free(neg);
  loom_expr_free(isnull);
  loom_expr_free(e);
  free(neg_text);
  free(null_text);
  free(text);
  loom_err_clear();
  return 0;
}

/* Filter expressions: evaluation of a parsed tree for one row, with SQL's three-valued logic
 * (a comparison involving NULL is unknown, and only true rows pass), numeric comparison when
 * both sides read as numbers, and LIKE with % and _ ignoring ASCII case; HAS matches one
 * item of a comma-separated list (run.tags). */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "filter/filter_internal.h"
#include "loom/core.h"

typedef struct {
  const loom_expr *e;
  loom_expr_value_fn value;
  void *ctx;
} eval_ctx;

static loom_value v_null(void) { return (loom_value){.type = LOOM_VAL_NULL}; }
static loom_value v_int(long long i) { return (loom_value){.type = LOOM_VAL_INT, .i = i}; }
static loom_value v_real(double r) { return (loom_value){.type = LOOM_VAL_REAL, .r = r}; }

static int eval_err(const eval_ctx *x, int pos, const char *msg) {
  return loom_expr_error_at(x->e->what, x->e->text, pos, msg);
}

/* Truth of a value: 1, 0, or -1 for unknown (NULL). */
static int truth(const loom_value *v) {
  double d;
  if (v->type == LOOM_VAL_NULL) return -1;
  if (v->type == LOOM_VAL_TEXT) {
    if (!strcasecmp(v->s, "true")) return 1;
    if (!strcasecmp(v->s, "false") || !*v->s) return 0;
  }
  if (loom_value_number(v, &d)) return d != 0;
  return 1;
}

static loom_value from_truth(int t) { return t < 0 ? v_null() : v_int(t); }

/* SQL LIKE: % any run, _ any one character; ASCII case-insensitive. Iterative, remembering
 * only the last %: a failed match resumes one character further after it, so the time is
 * O(len(s) * len(pat)) whatever the pattern (the recursive form is exponential in the number
 * of %s). */
static bool like(const char *s, const char *pat) {
  const char *star = NULL, *resume = NULL;
  while (*s) {
    if (*pat == '%') {
      while (*pat == '%') pat++;
      if (!*pat) return true;
      star = pat, resume = s;
    } else if (*pat && (*pat == '_' || tolower((unsigned char)*pat) == tolower((unsigned char)*s))) {
      pat++, s++;
    } else if (star) {
      pat = star, s = ++resume;
    } else {
      return false;
    }
  }
  while (*pat == '%') pat++;
  return !*pat;
}

static int eval(const eval_ctx *x, const loom_expr_node *n, loom_value *out);

static int eval_arith(const eval_ctx *x, const loom_expr_node *n, loom_value *out) {
  loom_value a, b = v_null();
  if (eval(x, n->a, &a)) return -1;
  if (n->kind == LOOM_EN_ARITH && eval(x, n->b, &b)) return -1;
  if (a.type == LOOM_VAL_NULL || (n->kind == LOOM_EN_ARITH && b.type == LOOM_VAL_NULL)) {
    *out = v_null();
    return 0;
  }
  double da, db = 0;
  char buf[256], tb[64];
  if (!loom_value_number(&a, &da) || (n->kind == LOOM_EN_ARITH && !loom_value_number(&b, &db))) {
    const loom_value *bad = loom_value_number(&a, &da) ? &b : &a;
    snprintf(buf, sizeof buf, "'%c' needs numbers, but got the text '%.60s'", n->op,
             loom_value_text(bad, tb, sizeof tb));
    return eval_err(x, n->pos, buf);
  }
  bool ints = a.type == LOOM_VAL_INT && (n->kind == LOOM_EN_NEG || b.type == LOOM_VAL_INT);
  /* Integer results that do not fit in 64 bits become reals (as in SQLite): the checked
   * builtins report the overflow instead of wrapping. */
  long long r = 0;
  if (n->kind == LOOM_EN_NEG) {
    *out = ints && !__builtin_sub_overflow(0LL, a.i, &r) ? v_int(r) : v_real(-da);
    return 0;
  }
  switch (n->op) {
    case '+': *out = ints && !__builtin_add_overflow(a.i, b.i, &r) ? v_int(r) : v_real(da + db); break;
    case '-': *out = ints && !__builtin_sub_overflow(a.i, b.i, &r) ? v_int(r) : v_real(da - db); break;
    case '*': *out = ints && !__builtin_mul_overflow(a.i, b.i, &r) ? v_int(r) : v_real(da * db); break;
    default:
      if (db == 0) return eval_err(x, n->pos, "division by zero");
      /* LLONG_MIN / -1 overflows (and LLONG_MIN % -1 traps on x86): a real result */
      ints = ints && !(b.i == -1 && a.i == LLONG_MIN);
      *out = ints && a.i % b.i == 0 ? v_int(a.i / b.i) : v_real(da / db);
  }
  if (out->type == LOOM_VAL_REAL && !isfinite(out->r))
    return eval_err(x, n->pos, "the result is too large for a number");
  return 0;
}

static int compare(const loom_value *a, const loom_value *b) {
  double x, y;
  /* two integers compare exactly (as doubles, 2^63 - 1 and 2^63 - 2 would be equal) */
  if (a->type == LOOM_VAL_INT && b->type == LOOM_VAL_INT) return a->i < b->i ? -1 : a->i > b->i;
  if (loom_value_number(a, &x) && loom_value_number(b, &y)) return x < y ? -1 : x > y;
  char ba[64], bb[64];
  return strcmp(loom_value_text(a, ba, sizeof ba), loom_value_text(b, bb, sizeof bb));
}

/* HAS: item is one of the comma-separated items of list (exactly, case-sensitive). */
static bool has_item(const char *list, const char *item) {
  size_t n = strlen(item);
  for (const char *p = list;;) {
    const char *c = strchr(p, ',');
    size_t l = c ? (size_t)(c - p) : strlen(p);
    if (l == n && !strncmp(p, item, n)) return true;
    if (!c) return false;
    p = c + 1;
  }
}

static int eval_cmp(const eval_ctx *x, const loom_expr_node *n, loom_value *out) {
  loom_value a, b;
  if (eval(x, n->a, &a) || eval(x, n->b, &b)) return -1;
  if (a.type == LOOM_VAL_NULL || b.type == LOOM_VAL_NULL) {
    *out = v_null();
    return 0;
  }
  if (n->kind == LOOM_EN_LIKE && n->op == 'h') {
    char ba[64], bb[64];
    bool m = has_item(loom_value_text(&a, ba, sizeof ba), loom_value_text(&b, bb, sizeof bb));
    *out = v_int(m != n->negate);
    return 0;
  }
  if (n->kind == LOOM_EN_LIKE) {
    char ba[64], bb[64];
    bool m = like(loom_value_text(&a, ba, sizeof ba), loom_value_text(&b, bb, sizeof bb));
    *out = v_int(m != n->negate);
    return 0;
  }
  int c = compare(&a, &b);
  bool r = false;
  switch (n->op) {
    case '=': r = c == 0; break;
    case '!': r = c != 0; break;
    case '<': r = c < 0; break;
    case 'l': r = c <= 0; break;
    case '>': r = c > 0; break;
    case 'g': r = c >= 0; break;
  }
  *out = v_int(r);
  return 0;
}

static int eval_logic(const eval_ctx *x, const loom_expr_node *n, loom_value *out) {
  loom_value a, b;
  if (eval(x, n->a, &a)) return -1;
  int ta = truth(&a);
  if (n->kind == LOOM_EN_NOT) {
    *out = from_truth(ta < 0 ? -1 : !ta);
    return 0;
  }
  if (n->kind == LOOM_EN_AND && ta == 0) return *out = v_int(0), 0;
  if (n->kind == LOOM_EN_OR && ta == 1) return *out = v_int(1), 0;
  if (eval(x, n->b, &b)) return -1;
  int tb = truth(&b);
  if (n->kind == LOOM_EN_AND) *out = from_truth(tb == 0 ? 0 : (ta < 0 || tb < 0) ? -1 : 1);
  else *out = from_truth(tb == 1 ? 1 : (ta < 0 || tb < 0) ? -1 : 0);
  return 0;
}

static int eval(const eval_ctx *x, const loom_expr_node *n, loom_value *out) {
  switch (n->kind) {
    case LOOM_EN_NUM: *out = n->is_int ? v_int(n->inum) : v_real(n->num); return 0;
    case LOOM_EN_STR: *out = (loom_value){.type = LOOM_VAL_TEXT, .s = n->str}; return 0;
    case LOOM_EN_NULL: *out = v_null(); return 0;
    case LOOM_EN_COL: *out = x->value(x->ctx, n->col); return 0;
    case LOOM_EN_NEG:
    case LOOM_EN_ARITH: return eval_arith(x, n, out);
    case LOOM_EN_CMP:
    case LOOM_EN_LIKE: return eval_cmp(x, n, out);
    case LOOM_EN_ISNULL: {
      loom_value a;
      if (eval(x, n->a, &a)) return -1;
      *out = v_int((a.type == LOOM_VAL_NULL) != n->negate);
      return 0;
    }
    case LOOM_EN_AND:
    case LOOM_EN_OR:
    case LOOM_EN_NOT: return eval_logic(x, n, out);
  }
  return -1;
}

int loom_expr_eval(const loom_expr *e, loom_expr_value_fn value, void *ctx, bool *result) {
  eval_ctx x = {e, value, ctx};
  loom_value v;
  if (eval(&x, e->root, &v)) return -1;
  *result = truth(&v) == 1;
  return 0;
}

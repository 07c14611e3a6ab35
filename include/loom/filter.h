/* Filter expressions over named columns, used by `loom runs --filter` and by sweep
 * constraints. A small hand-written parser (no SQL engine) with SQL-like semantics:
 *
 *   expr    := or ;  or := and (OR and)* ;  and := not (AND not)* ;  not := NOT not | cmp
 *   cmp     := sum [ (= | == | != | <> | < | <= | > | >=) sum | [NOT] LIKE sum | [NOT] HAS sum
 *              | IS [NOT] NULL ]
 *   sum     := prod ((+ | -) prod)* ;  prod := unary ((* | /) unary)* ;  unary := - unary | atom
 *   atom    := number | 'text' | "text" | TRUE | FALSE | NULL | column | `column` | ( expr )
 *
 * Columns are dotted names (training.lr, status); keywords are case-insensitive. Numbers
 * compare numerically (text that reads as a number too), text compares as text; LIKE uses
 * % and _ and ignores ASCII case; a HAS b is true when b is one of the comma-separated items
 * of a (run.tags HAS 'ablation'). A comparison involving NULL (an empty cell) is false.
 * Every error names the 1-based column of the problem ("--filter: column 12: ...") and
 * repeats the text with a caret under that column. */
#ifndef LOOM_FILTER_H
#define LOOM_FILTER_H
#include <stdbool.h>
#include <stddef.h>

/* A cell value: NULL, integer, real or text (text not owned by the value). */
typedef enum { LOOM_VAL_NULL, LOOM_VAL_INT, LOOM_VAL_REAL, LOOM_VAL_TEXT } loom_value_type;
typedef struct {
  loom_value_type type;
  long long i;
  double r;
  const char *s;
} loom_value;

/* Text form of a value: integers as is, reals in the shortest form that reads back
 * exactly, NULL as "" (buf of at least 32 bytes; text values are returned as they are). */
const char *loom_value_text(const loom_value *v, char *buf, size_t n);
/* Numeric value of INT/REAL, or of TEXT that is entirely a number; false otherwise. */
bool loom_value_number(const loom_value *v, double *out);
/* Ordering for sorting: NULLs last, numbers before text, numbers numerically, text by strcmp. */
int loom_value_cmp(const loom_value *a, const loom_value *b);

/* Resolves a column name to an index >= 0, or returns -1 and may set *suggestion to the
 * nearest valid name. */
typedef int (*loom_expr_resolve_fn)(void *ctx, const char *name, const char **suggestion);
/* The value of column `col` for the row being evaluated. */
typedef loom_value (*loom_expr_value_fn)(void *ctx, int col);

typedef struct loom_expr loom_expr;

/* Parse text; `what` names it in errors ("--filter", "constraint 2"). `columns_hint` is
 * appended to unknown-column errors (e.g. "loom runs --list-columns lists them"). */
int loom_expr_parse(loom_expr **e, const char *text, const char *what,
                    loom_expr_resolve_fn resolve, void *ctx, const char *columns_hint);
/* Evaluate for one row: *result is the truth of the expression. Errors (arithmetic on text)
 * name the column of the operator. */
int loom_expr_eval(const loom_expr *e, loom_expr_value_fn value, void *ctx, bool *result);
void loom_expr_free(loom_expr *e);

#endif

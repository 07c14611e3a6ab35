/* Private to src/filter/filter_*.c: the syntax tree of a parsed filter expression. */
#ifndef LOOM_FILTER_INTERNAL_H
#define LOOM_FILTER_INTERNAL_H
#include "loom/filter.h"

typedef enum {
  LOOM_EN_NUM,     /* number literal: is_int ? inum : num */
  LOOM_EN_STR,     /* text literal (also TRUE/FALSE as "true"/"false") */
  LOOM_EN_NULL,    /* NULL */
  LOOM_EN_COL,     /* column reference */
  LOOM_EN_NEG,     /* -a */
  LOOM_EN_ARITH,   /* a op b, op one of + - * / */
  LOOM_EN_CMP,     /* a op b, op one of = ! < l > g  (! is !=, l is <=, g is >=) */
  LOOM_EN_LIKE,    /* a LIKE b (negate: NOT LIKE) */
  LOOM_EN_ISNULL,  /* a IS NULL (negate: IS NOT NULL) */
  LOOM_EN_AND,
  LOOM_EN_OR,
  LOOM_EN_NOT,
} loom_expr_kind;

typedef struct loom_expr_node {
  loom_expr_kind kind;
  char op;
  bool negate;
  bool is_int;
  long long inum;
  double num;
  char *str;       /* STR: the text; COL: the column name */
  int col;         /* COL: resolved index */
  int pos;         /* 1-based column in the source text (for errors) */
  int height;      /* 1 + the height of the taller operand (a leaf is 1) */
  struct loom_expr_node *a, *b;
} loom_expr_node;

struct loom_expr {
  loom_expr_node *root;
  char *text;      /* source text, for error messages */
  char *what;      /* "--filter", "constraint 1", ... */
};

/* Limits that keep parsing, evaluation and freeing (all recursive) within the stack:
 * parentheses, NOT and unary minus nest at most LOOM_EXPR_MAX_NESTING deep, and the syntax
 * tree (chains such as a OR b OR c ... included) is at most LOOM_EXPR_MAX_HEIGHT deep. */
#define LOOM_EXPR_MAX_NESTING 256
#define LOOM_EXPR_MAX_HEIGHT 1000

/* "<what>: column <pos>: <msg>\n  <text>\n  <caret>" as the current error; returns -1. */
int loom_expr_error_at(const char *what, const char *text, int pos, const char *msg);
#endif

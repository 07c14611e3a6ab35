/* Filter expressions: the tokenizer and recursive-descent parser (grammar in loom/filter.h).
 * Column names are resolved while parsing, so an unknown column is reported with its
 * position and the nearest valid name before anything is evaluated. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "filter/filter_internal.h"
#include "loom/core.h"

typedef enum { T_END, T_NUM, T_STR, T_IDENT, T_QIDENT, T_OP, T_LPAREN, T_RPAREN } tok_kind;

typedef struct {
  tok_kind kind;
  int pos;           /* 1-based column */
  char *text;        /* NUM/IDENT/QIDENT/STR: the (unquoted) text; OP: the operator */
} token;

typedef struct {
  const char *src, *what, *hint;
  size_t at;          /* next byte of src */
  token tok;          /* current token */
  loom_expr_resolve_fn resolve;
  void *ctx;
  int nesting;        /* open parentheses, NOTs and unary minuses around the current token */
} parser;

/* A long expression is shown as the 60 characters either side of the column, with "..." where
 * it was cut, so that the caret line survives in the message. */
int loom_expr_error_at(const char *what, const char *text, int pos, const char *msg) {
  int len = (int)strlen(text);
  if (len <= 160)
    return loom_err("%s: column %d: %s\n  %s\n  %*s^", what, pos, msg, text, pos - 1, "");
  int at = pos - 1 < len ? pos - 1 : len, start = at > 60 ? at - 60 : 0;
  int end = at + 60 < len ? at + 60 : len;
  const char *pre = start > 0 ? "..." : "";
  return loom_err("%s: column %d: %s\n  %s%.*s%s\n  %*s^", what, pos, msg, pre, end - start,
                  text + start, end < len ? "..." : "", (int)strlen(pre) + at - start, "");
}

static int perr(parser *p, int pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int perr(parser *p, int pos, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_expr_error_at(p->what, p->src, pos, msg);
}

/* ---- tokens ------------------------------------------------------------------------------ */

static char *copy_n(const char *s, size_t n) {
  char *o = loom_malloc(n + 1);
  memcpy(o, s, n);
  o[n] = 0;
  return o;
}

static bool ident_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.'; }

static int lex_number(parser *p, size_t start) {
  const char *s = p->src;
  size_t i = start;
  while (isdigit((unsigned char)s[i])) i++;
  if (s[i] == '.') {
    i++;
    while (isdigit((unsigned char)s[i])) i++;
  }
  if ((s[i] == 'e' || s[i] == 'E') &&
      (isdigit((unsigned char)s[i + 1]) ||
       ((s[i + 1] == '+' || s[i + 1] == '-') && isdigit((unsigned char)s[i + 2])))) {
    i += 2;
    while (isdigit((unsigned char)s[i])) i++;
  }
  if (ident_char(s[i]))
    return perr(p, (int)start + 1, "malformed number '%.*s'", (int)(i - start + 1), s + start);
  p->tok.kind = T_NUM;
  p->tok.text = copy_n(s + start, i - start);
  p->at = i;
  return 0;
}

/* 'text', "text" or `column`; a doubled quote stands for one quote character. */
static int lex_quoted(parser *p, size_t start) {
  const char *s = p->src;
  char q = s[start];
  size_t n = strlen(s);
  char *out = loom_malloc(n + 1), *o = out;
  size_t i = start + 1;
  for (;; i++) {
    if (!s[i]) {
      free(out);
      return perr(p, (int)start + 1, "unterminated %s (add the closing %c)",
                  q == '`' ? "quoted column name" : "string", q);
    }
    if (s[i] == q) {
      if (s[i + 1] != q) break;
      i++;
    }
    *o++ = s[i];
  }
  *o = 0;
  p->tok.kind = q == '`' ? T_QIDENT : T_STR;
  p->tok.text = out;
  p->at = i + 1;
  return 0;
}

static int next(parser *p) {
  free(p->tok.text);
  p->tok.text = NULL;
  const char *s = p->src;
  while (isspace((unsigned char)s[p->at])) p->at++;
  size_t i = p->at;
  p->tok.pos = (int)i + 1;
  char c = s[i];
  if (!c) return p->tok.kind = T_END, 0;
  if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)s[i + 1])))
    return lex_number(p, i);
  if (c == '\'' || c == '"' || c == '`') return lex_quoted(p, i);
  if (ident_start(c)) {
    size_t j = i;
    while (ident_char(s[j])) j++;
    p->tok.kind = T_IDENT;
    p->tok.text = copy_n(s + i, j - i);
    p->at = j;
    return 0;
  }
  if (c == '(' || c == ')') {
    p->tok.kind = c == '(' ? T_LPAREN : T_RPAREN;
    p->at = i + 1;
    return 0;
  }
  static const char *const ops[] = {"==", "!=", "<>", "<=", ">=", "=", "<", ">",
                                    "+",  "-",  "*",  "/",  NULL};
  for (int k = 0; ops[k]; k++) {
    size_t n = strlen(ops[k]);
    if (!strncmp(s + i, ops[k], n)) {
      p->tok.kind = T_OP;
      p->tok.text = copy_n(ops[k], n);
      p->at = i + n;
      return 0;
    }
  }
  if (c == '&' || c == '|')
    return perr(p, (int)i + 1, "unexpected '%c' (write %s)", c, c == '&' ? "AND" : "OR");
  if (c == '!') return perr(p, (int)i + 1, "unexpected '!' (write != or NOT)");
  return perr(p, (int)i + 1, "unexpected character '%c'", c);
}

static bool is_kw(const parser *p, const char *kw) {
  return p->tok.kind == T_IDENT && !strcasecmp(p->tok.text, kw);
}
static bool is_op(const parser *p, const char *op) {
  return p->tok.kind == T_OP && !strcmp(p->tok.text, op);
}

static const char *tok_desc(const parser *p, char *buf, size_t n) {
  switch (p->tok.kind) {
    case T_END: return "the end of the expression";
    case T_LPAREN: return "'('";
    case T_RPAREN: return "')'";
    case T_STR: snprintf(buf, n, "string '%.40s'", p->tok.text); return buf;
    default: snprintf(buf, n, "'%.40s'", p->tok.text); return buf;
  }
}

/* ---- nodes ------------------------------------------------------------------------------- */

static void free_node(loom_expr_node *n);

static loom_expr_node *node(loom_expr_kind kind, int pos) {
  loom_expr_node *n = loom_calloc(1, sizeof *n);
  n->kind = kind;
  n->pos = pos;
  n->col = -1;
  n->height = 1;
  return n;
}

/* Enter one more level of parentheses / NOT / unary minus (leave with p->nesting--). */
static int enter(parser *p, int pos) {
  if (++p->nesting <= LOOM_EXPR_MAX_NESTING) return 0;
  return perr(p, pos, "the expression nests too deeply: more than %d levels of parentheses, "
              "NOT or unary minus; simplify it", LOOM_EXPR_MAX_NESTING);
}

/* A new operator node must keep the tree within LOOM_EXPR_MAX_HEIGHT; on error *n is freed. */
static int check_height(parser *p, loom_expr_node **n) {
  if ((*n)->height <= LOOM_EXPR_MAX_HEIGHT) return 0;
  int pos = (*n)->pos;
  free_node(*n);
  *n = NULL;
  return perr(p, pos, "the expression is too deep: more than %d operators applied one on top "
              "of another; split it or simplify it", LOOM_EXPR_MAX_HEIGHT);
}

static void free_node(loom_expr_node *n) {
  if (!n) return;
  free_node(n->a);
  free_node(n->b);
  free(n->str);
  free(n);
}

/* Move past the token that completed *out; on a lexing error free *out (every parse
 * function leaves *out NULL when it fails). */
static int next_or_free(parser *p, loom_expr_node **out) {
  if (!next(p)) return 0;
  free_node(*out);
  *out = NULL;
  return -1;
}

static loom_expr_node *binary(loom_expr_kind kind, char op, int pos, loom_expr_node *a,
                              loom_expr_node *b) {
  loom_expr_node *n = node(kind, pos);
  n->op = op, n->a = a, n->b = b;
  int ha = a ? a->height : 0, hb = b ? b->height : 0;
  n->height = 1 + (ha > hb ? ha : hb);
  return n;
}

/* ---- grammar ----------------------------------------------------------------------------- */

static int parse_or(parser *p, loom_expr_node **out);

static int column_ref(parser *p, loom_expr_node **out) {
  const char *suggestion = NULL;
  int col = p->resolve(p->ctx, p->tok.text, &suggestion);
  if (col < 0) {
    char sug[160] = "", quote[160] = "";
    if (suggestion) snprintf(sug, sizeof sug, " (did you mean '%s'?)", suggestion);
    else if (p->tok.kind == T_IDENT)
      snprintf(quote, sizeof quote, "; if it is a text value, quote it: '%s'", p->tok.text);
    return perr(p, p->tok.pos, "unknown column '%s'%s%s%s%s", p->tok.text, sug, quote,
                p->hint ? "; " : "", p->hint ? p->hint : "");
  }
  loom_expr_node *n = node(LOOM_EN_COL, p->tok.pos);
  n->str = loom_strdup(p->tok.text);
  n->col = col;
  *out = n;
  return next_or_free(p, out);
}

static int number_node(parser *p, loom_expr_node **out) {
  loom_expr_node *n = node(LOOM_EN_NUM, p->tok.pos);
  const char *t = p->tok.text;
  n->num = strtod(t, NULL);
  if (!strpbrk(t, ".eE")) {
    errno = 0;
    long long v = strtoll(t, NULL, 10);
    if (!errno) n->is_int = true, n->inum = v;
  }
  *out = n;
  return next_or_free(p, out);
}

static int parse_atom(parser *p, loom_expr_node **out) {
  char buf[96];
  int pos = p->tok.pos;
  switch (p->tok.kind) {
    case T_NUM: return number_node(p, out);
    case T_STR: {
      loom_expr_node *n = node(LOOM_EN_STR, pos);
      n->str = loom_strdup(p->tok.text);
      *out = n;
      return next_or_free(p, out);
    }
    case T_QIDENT: return column_ref(p, out);
    case T_IDENT:
      if (is_kw(p, "true") || is_kw(p, "false")) {
        loom_expr_node *n = node(LOOM_EN_STR, pos);
        n->str = loom_strdup(is_kw(p, "true") ? "true" : "false");
        *out = n;
        return next_or_free(p, out);
      }
      if (is_kw(p, "null")) {
        *out = node(LOOM_EN_NULL, pos);
        return next_or_free(p, out);
      }
      if (is_kw(p, "and") || is_kw(p, "or") || is_kw(p, "like") || is_kw(p, "is") ||
          is_kw(p, "not") || is_kw(p, "has"))
        return perr(p, pos, "expected a value or column before '%s'", p->tok.text);
      return column_ref(p, out);
    case T_LPAREN: {
      if (enter(p, pos) || next(p) || parse_or(p, out)) return -1;
      p->nesting--;
      if (p->tok.kind != T_RPAREN) {
        free_node(*out);
        *out = NULL;
        return perr(p, p->tok.pos, "expected ')' to close the '(' at column %d, found %s", pos,
                    tok_desc(p, buf, sizeof buf));
      }
      return next_or_free(p, out);
    }
    default:
      return perr(p, pos, "expected a value or column, found %s", tok_desc(p, buf, sizeof buf));
  }
}

static int parse_unary(parser *p, loom_expr_node **out) {
  if (is_op(p, "-")) {
    int pos = p->tok.pos;
    loom_expr_node *a = NULL;
    if (enter(p, pos) || next(p) || parse_unary(p, &a)) return -1;
    p->nesting--;
    *out = binary(LOOM_EN_NEG, '-', pos, a, NULL);
    return check_height(p, out);
  }
  return parse_atom(p, out);
}

/* Left-associative binary level over `ops` (single-character operators). */
static int parse_level(parser *p, loom_expr_node **out, const char *ops,
                       int (*sub)(parser *, loom_expr_node **)) {
  if (sub(p, out)) return -1;
  while (p->tok.kind == T_OP && strlen(p->tok.text) == 1 && strchr(ops, p->tok.text[0])) {
    char op = p->tok.text[0];
    int pos = p->tok.pos;
    loom_expr_node *b = NULL;
    if (next(p) || sub(p, &b)) {
      free_node(*out);
      *out = NULL;
      return -1;
    }
    *out = binary(LOOM_EN_ARITH, op, pos, *out, b);
    if (check_height(p, out)) return -1;
  }
  return 0;
}

static int parse_prod(parser *p, loom_expr_node **out) {
  return parse_level(p, out, "*/", parse_unary);
}
static int parse_sum(parser *p, loom_expr_node **out) {
  return parse_level(p, out, "+-", parse_prod);
}

static char cmp_code(const char *op) {
  if (!strcmp(op, "=") || !strcmp(op, "==")) return '=';
  if (!strcmp(op, "!=") || !strcmp(op, "<>")) return '!';
  if (!strcmp(op, "<=")) return 'l';
  if (!strcmp(op, ">=")) return 'g';
  if (!strcmp(op, "<")) return '<';
  if (!strcmp(op, ">")) return '>';
  return 0;
}

static int parse_cmp(parser *p, loom_expr_node **out) {
  if (parse_sum(p, out)) return -1;
  int pos = p->tok.pos;
  loom_expr_node *b = NULL;
  if (p->tok.kind == T_OP && cmp_code(p->tok.text)) {
    char op = cmp_code(p->tok.text);
    if (next(p) || parse_sum(p, &b)) goto fail;
    *out = binary(LOOM_EN_CMP, op, pos, *out, b);
    if (check_height(p, out)) return -1;
  } else if (is_kw(p, "like") || is_kw(p, "not") || is_kw(p, "has")) {
    /* HAS: one of the comma-separated items of the left side (run.tags HAS 'ablation') */
    bool neg = is_kw(p, "not");
    char op = is_kw(p, "has") ? 'h' : 0;
    if (next(p)) goto fail;
    if (neg && !is_kw(p, "like") && !is_kw(p, "has")) {
      char buf[96];
      perr(p, p->tok.pos, "expected LIKE or HAS after NOT, found %s",
           tok_desc(p, buf, sizeof buf));
      goto fail;
    }
    if (neg) op = is_kw(p, "has") ? 'h' : 0;
    if (neg && next(p)) goto fail;
    if (parse_sum(p, &b)) goto fail;
    *out = binary(LOOM_EN_LIKE, op, pos, *out, b);
    (*out)->negate = neg;
    if (check_height(p, out)) return -1;
  } else if (is_kw(p, "is")) {
    bool neg = false;
    if (next(p)) goto fail;
    if (is_kw(p, "not")) {
      neg = true;
      if (next(p)) goto fail;
    }
    if (!is_kw(p, "null")) {
      char buf[96];
      perr(p, p->tok.pos, "expected NULL after IS%s, found %s", neg ? " NOT" : "",
           tok_desc(p, buf, sizeof buf));
      goto fail;
    }
    if (next(p)) goto fail;
    *out = binary(LOOM_EN_ISNULL, 0, pos, *out, NULL);
    (*out)->negate = neg;
    if (check_height(p, out)) return -1;
  }
  return 0;
fail:
  free_node(*out);
  *out = NULL;
  return -1;
}

static int parse_not(parser *p, loom_expr_node **out) {
  if (is_kw(p, "not")) {
    int pos = p->tok.pos;
    loom_expr_node *a = NULL;
    if (enter(p, pos) || next(p) || parse_not(p, &a)) return -1;
    p->nesting--;
    *out = binary(LOOM_EN_NOT, 0, pos, a, NULL);
    return check_height(p, out);
  }
  return parse_cmp(p, out);
}

static int parse_bool_level(parser *p, loom_expr_node **out, const char *kw,
                            loom_expr_kind kind, int (*sub)(parser *, loom_expr_node **)) {
  if (sub(p, out)) return -1;
  while (is_kw(p, kw)) {
    int pos = p->tok.pos;
    loom_expr_node *b = NULL;
    if (next(p) || sub(p, &b)) {
      free_node(*out);
      *out = NULL;
      return -1;
    }
    *out = binary(kind, 0, pos, *out, b);
    if (check_height(p, out)) return -1;
  }
  return 0;
}

static int parse_and(parser *p, loom_expr_node **out) {
  return parse_bool_level(p, out, "and", LOOM_EN_AND, parse_not);
}
static int parse_or(parser *p, loom_expr_node **out) {
  return parse_bool_level(p, out, "or", LOOM_EN_OR, parse_and);
}

int loom_expr_parse(loom_expr **e, const char *text, const char *what,
                    loom_expr_resolve_fn resolve, void *ctx, const char *columns_hint) {
  *e = NULL;
  parser p = {.src = text, .what = what, .hint = columns_hint, .resolve = resolve, .ctx = ctx};
  loom_expr_node *root = NULL;
  int rc = next(&p);
  if (!rc && p.tok.kind == T_END) rc = perr(&p, p.tok.pos, "empty expression");
  if (!rc) rc = parse_or(&p, &root);
  if (!rc && p.tok.kind != T_END) {
    char buf[96];
    rc = perr(&p, p.tok.pos, "unexpected %s (join conditions with AND or OR)",
              tok_desc(&p, buf, sizeof buf));
  }
  free(p.tok.text);
  if (rc) {
    free_node(root);
    return -1;
  }
  loom_expr *x = loom_calloc(1, sizeof *x);
  x->root = root;
  x->text = loom_strdup(text);
  x->what = loom_strdup(what);
  *e = x;
  return 0;
}

void loom_expr_free(loom_expr *e) {
  if (!e) return;
  free_node(e->root);
  free(e->text);
  free(e->what);
  free(e);
}

/* Filter expressions (loom/filter.h): valid expressions evaluated over a small table
 * (comparisons, numbers vs text, LIKE, AND/OR/NOT, NULL logic, arithmetic, dotted and quoted
 * column names), and invalid ones whose errors name the column of the problem. */
#include <string.h>

#include "harness.h"
#include "loom/core.h"
#include "loom/filter.h"

static const char *const cols[] = {"training.lr", "status", "name", "steps", "final_loss",
                                   "my-col", "ckpt", "run.tags", NULL};

static int resolve(void *ctx, const char *name, const char **suggestion) {
  (void)ctx;
  for (int i = 0; cols[i]; i++)
    if (!strcmp(cols[i], name)) return i;
  if (!strcmp(name, "trainng.lr")) *suggestion = "training.lr";
  return -1;
}

/* One row: lr, status, name, steps, final_loss (NULL in row 1), my-col, ckpt. */
typedef struct {
  double lr;
  const char *status, *name;
  long long steps;
  bool has_loss;
  double loss;
  const char *ckpt;
} row;

static const row rows[] = {
    {3e-4, "finished", "gpt2-124m_tp2", 100, true, 3.5, "true"},
    {1e-3, "failed", "GPT2-small", 7, false, 0, "false"},
    {1e-2, "finished", "llama_tp1", 100, true, 2.5, "false"},
};

/* run.tags of each row (a comma-separated list, as the registry holds it) */
static const char *const row_tags[] = {"ablation,warm up", "ablation2", ""};

static loom_value value(void *ctx, int col) {
  const row *r = ctx;
  switch (col) {
    case 7: return (loom_value){.type = LOOM_VAL_TEXT, .s = row_tags[r - rows]};
    case 0: return (loom_value){.type = LOOM_VAL_REAL, .r = r->lr};
    case 1: return (loom_value){.type = LOOM_VAL_TEXT, .s = r->status};
    case 2: return (loom_value){.type = LOOM_VAL_TEXT, .s = r->name};
    case 3: return (loom_value){.type = LOOM_VAL_INT, .i = r->steps};
    case 4:
      return r->has_loss ? (loom_value){.type = LOOM_VAL_REAL, .r = r->loss}
                         : (loom_value){.type = LOOM_VAL_NULL};
    case 5: return (loom_value){.type = LOOM_VAL_TEXT, .s = "12"};
    default: return (loom_value){.type = LOOM_VAL_TEXT, .s = r->ckpt};
  }
}

/* Bit i set when row i matches. */
static int matches(const char *text) {
  loom_expr *e;
  if (loom_expr_parse(&e, text, "--filter", resolve, NULL, NULL)) {
    fprintf(stderr, "unexpected parse error: %s\n", loom_errmsg());
    return -1;
  }
  int mask = 0;
  for (int i = 0; i < 3; i++) {
    bool keep;
    if (loom_expr_eval(e, value, (void *)&rows[i], &keep)) {
      loom_expr_free(e);
      return -2;
    }
    mask |= keep << i;
  }
  loom_expr_free(e);
  return mask;
}

static void valid(void) {
  struct {
    const char *text;
    int mask;
  } cases[] = {
      {"training.lr > 1e-4 AND status = 'finished'", 0x5},
      {"training.lr >= 1e-3", 0x6},
      {"training.lr < 1e-3", 0x1},
      {"training.lr <= 0.001", 0x3},
      {"training.lr = 3e-4", 0x1},
      {"training.lr == 0.0003", 0x1},
      {"training.lr != 3e-4", 0x6},
      {"training.lr <> 3e-4", 0x6},
      {"status != \"failed\"", 0x5},
      {"name LIKE 'gpt2%'", 0x3},        /* case-insensitive */
      {"name like '%_tp_'", 0x5},        /* _ is one character */
      {"name NOT LIKE '%tp%'", 0x2},
      {"run.tags HAS 'ablation'", 0x1},   /* one whole item, not a prefix of ablation2 */
      {"run.tags has 'warm up'", 0x1},    /* the last item, spaces inside kept */
      {"run.tags HAS 'ablation2'", 0x2},  /* a single item */
      {"run.tags HAS 'warm'", 0x0},       /* not a substring match */
      {"run.tags HAS ''", 0x4},           /* the empty list holds one empty item */
      {"run.tags NOT HAS 'ablation'", 0x6},
      {"status HAS 'finished'", 0x5},
      {"status = 'finished' OR steps < 10", 0x7},
      {"NOT status = 'finished'", 0x2},
      {"NOT (training.lr > 1e-3 OR steps < 10)", 0x1},
      {"final_loss < 3", 0x4},           /* NULL compares false */
      {"NOT final_loss < 3", 0x1},       /* ... and NOT NULL is still not true */
      {"final_loss IS NULL", 0x2},
      {"final_loss IS NOT NULL", 0x5},
      {"steps * 2 = 200 AND -steps < 0", 0x5},
      {"steps / 3 > 2 + 0.5 * 2", 0x5},
      {"`my-col` = 12", 0x7},            /* text that reads as a number compares numerically */
      {"`my-col` > 9", 0x7},
      {"ckpt = true", 0x1},
      {"ckpt = FALSE AND status = 'finished'", 0x4},
      {"(status = 'finished') AND (steps >= 100)", 0x5},
      {"name = 'it''s'", 0x0},           /* doubled quote inside a string */
      {"status > 'finished'", 0x0},      /* text order */
      {"status < 'g'", 0x7},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int got = matches(cases[i].text);
    CHECK(got == cases[i].mask, "'%s': rows 0x%x, want 0x%x", cases[i].text, got, cases[i].mask);
  }
}

/* The error names `column` and contains `what`. */
static void invalid(const char *text, int column, const char *what) {
  loom_expr *e = NULL;
  int rc = loom_expr_parse(&e, text, "--filter", resolve, NULL, "see --list-columns");
  CHECK(rc != 0 && !e, "'%.200s' should not parse", text);
  char want[64];
  snprintf(want, sizeof want, "--filter: column %d: ", column);
  CHECK(strstr(loom_errmsg(), want) != NULL, "'%.200s': want \"%s\" in: %.400s", text, want,
        loom_errmsg());
  CHECK(strstr(loom_errmsg(), what) != NULL, "'%.200s': want \"%s\" in: %.400s", text, what,
        loom_errmsg());
  /* the caret line points at the column: "\n" + 2 spaces + (column - 1) spaces + "^"; a long
   * text is shown from 60 characters before the column, after "..." */
  const char *caret = strrchr(loom_errmsg(), '\n');
  int shown = strlen(text) <= 160 || column <= 61 ? column : 3 + 61;
  CHECK(caret && (int)strlen(caret) == 3 + shown && caret[strlen(caret) - 1] == '^',
        "'%.200s': caret under column %d in: %.400s", text, column, loom_errmsg());
  if (caret && strlen(text) > 160) {
    const char *line = caret - 1;
    while (line > loom_errmsg() && line[-1] != '\n') line--;
    CHECK(line[2 + shown - 1] == text[column - 1], "'%.40s...': the caret is under the character "
          "at column %d", text, column);
  }
  loom_expr_free(e);
}

static void errors(void) {
  invalid("trainng.lr > 1e-4", 1, "unknown column 'trainng.lr' (did you mean 'training.lr'?)");
  invalid("status = finished", 10, "if it is a text value, quote it: 'finished'");
  invalid("steps > 1 AND bogus = 2", 15, "unknown column 'bogus'");
  invalid("steps >", 8, "expected a value or column, found the end");
  invalid("status = 'finished", 10, "unterminated string");
  invalid("steps = 1 status = 'x'", 11, "unexpected 'status' (join conditions with AND or OR)");
  invalid("(steps = 1", 11, "expected ')' to close the '(' at column 1");
  invalid("steps = 1 && steps = 2", 11, "write AND");
  invalid("steps = 1e-4x", 9, "malformed number");
  invalid("", 1, "empty expression");
  invalid("   ", 4, "empty expression");
  invalid("name NOT 'x'", 10, "expected LIKE or HAS after NOT");
  invalid("final_loss IS 3", 15, "expected NULL after IS");
  invalid("steps = AND", 9, "expected a value or column before 'AND'");
  invalid("steps ! 3", 7, "write != or NOT");
  invalid("steps = 1 AND", 14, "found the end");
  invalid("`my col` = 1", 1, "unknown column 'my col'");
  invalid("steps = `unterminated", 9, "unterminated quoted column name");
  invalid("steps = 1 # 2", 11, "unexpected character '#'");
  /* evaluation errors point at the operator */
  loom_expr *e;
  CHECK(loom_expr_parse(&e, "steps > 1 AND name * 2 > 1", "--filter", resolve, NULL, NULL) == 0,
        "parses");
  bool keep;
  CHECK(loom_expr_eval(e, value, (void *)&rows[0], &keep) != 0, "text * 2 fails");
  CHECK(strstr(loom_errmsg(), "column 20: '*' needs numbers, but got the text 'gpt2-124m_tp2'"),
        "eval error: %s", loom_errmsg());
  loom_expr_free(e);
  CHECK(loom_expr_parse(&e, "steps / 0 > 1", "--filter", resolve, NULL, NULL) == 0, "parses");
  CHECK(loom_expr_eval(e, value, (void *)&rows[0], &keep) != 0 &&
            strstr(loom_errmsg(), "column 7: division by zero"),
        "division by zero: %s", loom_errmsg());
  loom_expr_free(e);
}

static void values(void) {
  char buf[64];
  loom_value r = {.type = LOOM_VAL_REAL, .r = 0.1};
  CHECK(!strcmp(loom_value_text(&r, buf, sizeof buf), "0.1"), "0.1 -> %s", buf);
  r.r = 1.0 / 3.0;
  CHECK(strtod(loom_value_text(&r, buf, sizeof buf), NULL) == 1.0 / 3.0, "1/3 round-trips: %s", buf);
  loom_value n = {.type = LOOM_VAL_NULL}, t = {.type = LOOM_VAL_TEXT, .s = "abc"};
  loom_value i = {.type = LOOM_VAL_INT, .i = 5}, s5 = {.type = LOOM_VAL_TEXT, .s = "5"};
  CHECK(loom_value_cmp(&n, &i) > 0 && loom_value_cmp(&i, &n) < 0, "NULL sorts last");
  CHECK(loom_value_cmp(&i, &t) < 0, "numbers before text");
  CHECK(loom_value_cmp(&i, &s5) == 0, "5 = '5'");
  loom_value big = {.type = LOOM_VAL_INT, .i = 9223372036854775807LL},
             big1 = {.type = LOOM_VAL_INT, .i = 9223372036854775806LL};
  CHECK(loom_value_cmp(&big1, &big) < 0 && loom_value_cmp(&big, &big1) > 0,
        "64-bit integers sort exactly");
  double d;
  loom_value inf = {.type = LOOM_VAL_TEXT, .s = "info"};
  CHECK(!loom_value_number(&inf, &d), "'info' is text");
}

/* Truth of a column-free expression (or -1 for an evaluation error). */
static int truth_of(const char *text) {
  loom_expr *e;
  if (loom_expr_parse(&e, text, "--filter", resolve, NULL, NULL)) {
    fprintf(stderr, "unexpected parse error: %s\n", loom_errmsg());
    return -2;
  }
  bool r = false;
  int rc = loom_expr_eval(e, value, (void *)&rows[0], &r);
  loom_expr_free(e);
  return rc ? -1 : r;
}

/* n copies of unit, then tail (malloc'd). */
static char *repeat(const char *unit, int n, const char *tail) {
  size_t u = strlen(unit), t = strlen(tail);
  char *s = malloc(u * (size_t)n + t + 1), *o = s;
  for (int i = 0; i < n; i++, o += u) memcpy(o, unit, u);
  memcpy(o, tail, t + 1);
  return s;
}

/* Found by fuzzing (tests/fuzz/regress/filter): 64-bit overflow, LLONG_MIN / -1, unbounded
 * nesting; LIKE patterns with many % that took exponential time. */
static void limits(void) {
  /* integers that overflow 64 bits become reals (no wrap-around, no SIGFPE) */
  CHECK(truth_of("9223372036854775807 + 1 < 0") == 0, "MAX + 1 wrapped to a negative number");
  CHECK(truth_of("9223372036854775807 + 1 = 9223372036854775808.0") == 1, "MAX + 1 is 2^63");
  CHECK(truth_of("(-9223372036854775807 - 1) / -1 = 9223372036854775808.0") == 1,
        "LLONG_MIN / -1 is 2^63");
  CHECK(truth_of("-(-9223372036854775807 - 1) > 0") == 1, "-LLONG_MIN is positive");
  CHECK(truth_of("9223372036854775807 * 4 = 36893488147419103232.0") == 1, "MAX * 4");
  CHECK(truth_of("-9223372036854775807 - 2 < -9223372036854775000") == 1, "MIN - 1");
  CHECK(truth_of("(-9223372036854775807 - 1) / -2 = 4611686018427387904") == 1, "exact division");
  CHECK(truth_of("7 / 2 = 3.5 AND 6 / 3 = 2") == 1, "division");
  CHECK(truth_of("9223372036854775807 > 9223372036854775806 AND "
                 "9223372036854775807 - 1 = 9223372036854775806") == 1,
        "64-bit integers compare exactly, not as doubles");
  CHECK(truth_of("1e308 * 10 > 0") == -1 && strstr(loom_errmsg(), "column 7: the result is too "
                                                   "large for a number"),
        "double overflow is an error: %s", loom_errmsg());
  /* nesting: 256 levels parse, 257 are an error at the 257th '(' */
  char *ok = repeat("(", 256, "1"), *okc = repeat(")", 256, "");
  char *text = loom_sprintf("%s%s = 1", ok, okc);
  CHECK(truth_of(text) == 1, "256 nested parentheses");
  free(text), free(ok), free(okc);
  char *deep = repeat("(", 20000, "1");
  invalid(deep, 257, "the expression nests too deeply: more than 256 levels of parentheses, NOT "
                     "or unary minus");
  free(deep);
  deep = repeat("-", 120000, "1");
  invalid(deep, 257, "nests too deeply");
  free(deep);
  deep = repeat("NOT ", 30000, "steps = 1");
  invalid(deep, 1025, "nests too deeply");
  free(deep);
  /* chains: 900 ORs are fine, 1200 pass the tree height limit of 1000 */
  char *chain = repeat("steps = 1 OR ", 900, "steps = 100");
  CHECK(truth_of(chain) == 1, "900-term OR chain");
  free(chain);
  chain = repeat("1 + ", 1200, "1 > 0");
  loom_expr *e = NULL;
  CHECK(loom_expr_parse(&e, chain, "--filter", resolve, NULL, NULL) != 0 &&
            strstr(loom_errmsg(), "the expression is too deep: more than 1000 operators"),
        "1200-term sum: %s", loom_errmsg());
  free(chain);
  /* LIKE: linear time whatever the pattern, same answers */
  CHECK(truth_of("'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' LIKE "
                 "'%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%b'") == 0,
        "many %% against a near miss");
  CHECK(truth_of("'abcabd' LIKE '%ab_' AND 'abcabd' LIKE 'a%d' AND 'ab' LIKE '%%%' AND "
                 "'ab' NOT LIKE 'a' AND 'x' LIKE '_' AND '' LIKE '%' AND '' NOT LIKE '_' AND "
                 "'mississippi' LIKE '%iss%ppi' AND 'mississippi' NOT LIKE '%iss%pi%x'") == 1,
        "LIKE semantics");
}

int main(void) {
  valid();
  errors();
  values();
  limits();
  return harness_finish("test_filter");
}

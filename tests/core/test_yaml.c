/* loom's YAML layer (loom/yaml.h): the tree (kinds, text, plain/quoted, file:line:column of
 * every node, pairs in order with duplicates kept), aliases shared and counted, the rules
 * every file follows (one document, scalar keys, no cycles) and the limits (depth, node
 * count), each error with file:line; the typed reads; the quoting round trip. */
#include "harness.h"
#include "loom/core.h"
#include "loom/yaml.h"

static loom_yaml_doc *parse(const char *text) {
  loom_yaml_doc *d = NULL;
  loom_err_clear();
  if (loom_yaml_parse(&d, text, strlen(text), "t.yaml")) return NULL;
  return d;
}

/* parse fails, the message starts with `where` and holds `what` */
static void fails(const char *text, const char *where, const char *what) {
  loom_yaml_doc *d = parse(text);
  CHECK(!d, "accepted: %s", text);
  loom_yaml_free(d);
  const char *m = loom_errmsg();
  CHECK(!strncmp(m, where, strlen(where)) && strstr(m, what), "want '%s' ... '%s', got: %s",
        where, what, m);
}

static void test_tree(void) {
  loom_yaml_doc *d = parse("# a comment\n"
                           "name: tiny\n"
                           "sizes: [1, 2.5, '3']\n"
                           "nested:\n"
                           "  empty:\n"
                           "  quoted: \"null\"\n"
                           "  tilde: ~\n"
                           "name: again\n"
                           "nul: \"a\\0b\"\n");
  CHECK(d, "%s", loom_errmsg());
  if (!d) return;
  const loom_yaml_node *r = loom_yaml_root(d);
  CHECK(r->kind == LOOM_YAML_MAPPING && r->n == 5 && r->line == 2 && r->col == 1, "root");
  CHECK(!strcmp(r->file, "t.yaml"), "file name on every node");
  CHECK(!strcmp(r->pairs[0].key->text, "name") && r->pairs[0].key->line == 2 &&
            !strcmp(r->pairs[4].key->text, "nul"),
        "pairs in file order");
  CHECK(!strcmp(loom_yaml_scalar(loom_yaml_get(r, "name")), "tiny"), "get returns the first");
  CHECK(!strcmp(r->pairs[3].value->text, "again"), "duplicate keys kept");
  const loom_yaml_node *s = loom_yaml_get(r, "sizes");
  CHECK(s->kind == LOOM_YAML_SEQUENCE && s->n == 3 && s->line == 3 && s->col == 8, "list");
  CHECK(s->items[0]->plain && !s->items[2]->plain && s->items[1]->col == 12, "styles, column");
  const loom_yaml_node *n = loom_yaml_get(r, "nested");
  CHECK(loom_yaml_is_null(loom_yaml_get(n, "empty")) &&
            loom_yaml_is_null(loom_yaml_get(n, "tilde")),
        "empty and ~ are null");
  CHECK(!loom_yaml_is_null(loom_yaml_get(n, "quoted")), "a quoted 'null' is text");
  CHECK(loom_yaml_get(n, "empty")->line == 5, "line of an empty value");
  const loom_yaml_node *nul = loom_yaml_get(r, "nul");
  CHECK(nul->len == 3 && strlen(nul->text) == 1, "an embedded NUL keeps the true length");
  CHECK(!loom_yaml_get(s, "x") && !loom_yaml_scalar(s) && !loom_yaml_scalar(NULL),
        "lookups on the wrong kind");
  CHECK(!strcmp(loom_yaml_kind_phrase(s), "a list") &&
            !strcmp(loom_yaml_kind_phrase(n), "a mapping"),
        "kind phrases");
  CHECK(loom_yaml_err(s->items[1], "bad %d", 7) == -1 && !strcmp(loom_errmsg(), "t.yaml:3: bad 7"),
        "errors at a node: %s", loom_errmsg());
  loom_err("inner");
  CHECK(loom_yaml_err_prefix(n) == -1 && !strcmp(loom_errmsg(), "t.yaml:5: inner"),
        "prefix: %s", loom_errmsg());
  loom_yaml_free(d);

  d = parse("# only a comment\n");
  CHECK(d && !loom_yaml_root(d), "no document: no root");
  loom_yaml_free(d);
  d = parse("");
  CHECK(d && !loom_yaml_root(d), "empty text: no root");
  loom_yaml_free(d);
  d = parse("a: 1\n...\n");
  CHECK(d && loom_yaml_root(d)->n == 1, "a document end marker alone is fine");
  loom_yaml_free(d);
}

static void test_aliases(void) {
  loom_yaml_doc *d = parse("base: &b {lr: 1}\nrun: *b\nlist: [&x 5, *x]\n");
  CHECK(d, "%s", loom_errmsg());
  if (d) {
    const loom_yaml_node *r = loom_yaml_root(d);
    CHECK(loom_yaml_get(r, "run") == loom_yaml_get(r, "base"), "an alias shares its node");
    const loom_yaml_node *l = loom_yaml_get(r, "list");
    CHECK(l->items[0] == l->items[1] && !strcmp(l->items[1]->text, "5"), "scalar alias");
  }
  loom_yaml_free(d);
  fails("a: *x\n", "t.yaml:1:", "alias '*x' names no anchor");
  fails("a: &x [1, *x]\n", "t.yaml:1:", "names no anchor"); /* no cycles */
  fails("a: &x 1\nb: &x 2\n", "t.yaml:2:", "anchor '&x' is defined twice (first at line 1)");
  /* a billion laughs: 10^7 nodes from a few lines */
  char text[2048] = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 6; i++) {
    char line[256];
    snprintf(line, sizeof line, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, "
             "*a%d]\n", i, i, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1);
    strcat(text, line);
  }
  fails(text, "t.yaml:6:", "more than 1000000 YAML nodes");
}

static void test_rules_and_limits(void) {
  fails("a: 1\n---\nb: 2\n", "t.yaml:3:", "a second YAML document starts here");
  fails("a: 1\n---\n", "t.yaml:3:", "a second YAML document");
  fails("? [a]\n: 1\n", "t.yaml:1:", "a mapping key must be a name (a scalar), not a list");
  fails("a: {{x: 1}: 2}\n", "t.yaml:1:", "not a mapping");
  fails("training:\n  lr: 1\n bad: 2\n", "t.yaml:3:", "YAML syntax error");
  fails("a: [1, 2\n", "t.yaml:2:1:", "YAML syntax error: did not find expected ',' or ']'");
  fails("a: 1\nb: \xff\n", "t.yaml:2:4:", "invalid text at byte 8");
  char deep[256];
  snprintf(deep, sizeof deep, "a: %.32s%.32s\n", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
           "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
  loom_yaml_doc *d = parse(deep); /* 32 lists below the root mapping: the deepest allowed */
  CHECK(d, "depth 32: %s", loom_errmsg());
  loom_yaml_free(d);
  snprintf(deep, sizeof deep, "a: %.32s1%.32s\n", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
           "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]");
  fails(deep, "t.yaml:1:", "YAML nested more than 32 levels deep");
  size_t n = 1100000; /* a flat list longer than the node limit */
  char *big = malloc(2 * n + 8), *p = big;
  p += sprintf(p, "[");
  for (size_t i = 0; i < n; i++) *p++ = '1', *p++ = ',';
  strcpy(p - 1, "]\n");
  fails(big, "t.yaml:1:", "more than 1000000 YAML nodes");
  free(big);
}

static void test_typed(void) {
  loom_yaml_doc *d = parse("n: 2.5\ni: 7\nf: 1.5\nb: yes\ns: hello\nl: [1]\nx: nan\n");
  CHECK(d, "%s", loom_errmsg());
  if (!d) return;
  const loom_yaml_node *r = loom_yaml_root(d);
  double v;
  int i;
  bool b;
  char s[6];
  CHECK(loom_yaml_number(loom_yaml_get(r, "n"), "n", &v) == 0 && v == 2.5, "number");
  CHECK(loom_yaml_int(loom_yaml_get(r, "i"), "i", &i) == 0 && i == 7, "int");
  CHECK(loom_yaml_int(loom_yaml_get(r, "f"), "f", &i) != 0 &&
            !strcmp(loom_errmsg(), "t.yaml:3: f: expected an integer, found '1.5'"),
        "%s", loom_errmsg());
  CHECK(loom_yaml_number(loom_yaml_get(r, "x"), "x", &v) != 0 &&
            strstr(loom_errmsg(), "t.yaml:7: x: expected a number, found 'nan'"),
        "%s", loom_errmsg());
  CHECK(loom_yaml_number(loom_yaml_get(r, "l"), "l", &v) != 0 &&
            !strcmp(loom_errmsg(), "t.yaml:6: l: expected a number"),
        "%s", loom_errmsg());
  CHECK(loom_yaml_bool(loom_yaml_get(r, "b"), "b", &b) == 0 && b, "bool");
  CHECK(loom_yaml_bool(loom_yaml_get(r, "s"), "s", &b) != 0 &&
            strstr(loom_errmsg(), "expected true or false"),
        "%s", loom_errmsg());
  CHECK(loom_yaml_string(loom_yaml_get(r, "s"), "s", s, sizeof s) == 0 && !strcmp(s, "hello"),
        "string that just fits");
  CHECK(loom_yaml_string(loom_yaml_get(r, "s"), "s", s, 5) != 0 &&
            !strcmp(loom_errmsg(), "t.yaml:5: s: longer than 4 characters"),
        "%s", loom_errmsg());
  static const char *const known[] = {"n", "i", "f", "b", "s", "l", NULL};
  CHECK(loom_yaml_only(r, "the test file", known) != 0 &&
            !strcmp(loom_errmsg(), "t.yaml:7: unknown key 'x' in the test file (known: n, i, f, "
                                   "b, s, l)"),
        "%s", loom_errmsg());
  loom_yaml_free(d);
}

static void test_quote(void) {
  const char *cases[] = {"plain", "a \"quoted\" \\ text", "tab\there", "nel\xc2\x85line",
                         "bom\xef\xbb\xbf", "caf\xc3\xa9", ""};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char *q = loom_yaml_quote(cases[k]), *text = loom_sprintf("v: %s\n", q);
    loom_yaml_doc *d = parse(text);
    const loom_yaml_node *v = d ? loom_yaml_get(loom_yaml_root(d), "v") : NULL;
    CHECK(v && !v->plain && v->len == strlen(cases[k]) && !strcmp(v->text, cases[k]),
          "round trip of case %zu through %s", k, q);
    loom_yaml_free(d);
    free(text);
    free(q);
  }
  CHECK(loom_yaml_utf8_error("ok \xc3\xa9", 5) == 0, "valid UTF-8");
  CHECK(loom_yaml_utf8_error("ab\xc0\xafz", 5) == 3, "overlong form at byte 3");
  CHECK(loom_yaml_utf8_error("\xed\xa0\x80", 3) == 1, "surrogate");
  char *q = loom_yaml_quote("bad\xff");
  CHECK(!strcmp(q, "\"bad\\xff\""), "non-UTF-8 bytes escaped: %s", q);
  free(q);
}

int main(void) {
  test_tree();
  test_aliases();
  test_rules_and_limits();
  test_typed();
  test_quote();
  return harness_finish("test_yaml");
}

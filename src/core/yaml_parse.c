/* YAML text -> the read-only tree of include/loom/yaml.h. libyaml's event parser drives an
 * explicit stack of the collections still open (no recursion: nesting costs no C stack), the
 * nodes and their strings live in the document's arena (freed in one go), an anchor names a
 * finished node that its aliases then share, and the limits (depth, node count with every use
 * of an alias counted) are checked as the events arrive, before anything is allocated for
 * them. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "loom/core.h"
#include "loom/yaml.h"

/* ---- the document's arena ---------------------------------------------------------------- */

typedef struct arena_block {
  struct arena_block *next;
  unsigned char *data;
  size_t used, cap;
} arena_block;

struct loom_yaml_doc {
  arena_block *blocks; /* the current block first */
  const char *file;
  const loom_yaml_node *root;
};

enum { ARENA_BLOCK = 64 * 1024 };

static void *arena_alloc(loom_yaml_doc *d, size_t bytes) {
  bytes = (bytes + 15) & ~(size_t)15;
  arena_block *b = d->blocks;
  if (!b || b->cap - b->used < bytes) {
    b = loom_calloc(1, sizeof *b);
    b->cap = bytes > ARENA_BLOCK / 4 ? bytes : ARENA_BLOCK;
    b->data = loom_malloc_for(b->cap, "a YAML document");
    if (bytes > ARENA_BLOCK / 4 && d->blocks) { /* a large piece: keep filling the current one */
      b->next = d->blocks->next;
      d->blocks->next = b;
    } else {
      b->next = d->blocks;
      d->blocks = b;
    }
  }
  void *p = b->data + b->used;
  b->used += bytes;
  return p;
}

static char *arena_strndup(loom_yaml_doc *d, const char *s, size_t n) {
  char *p = arena_alloc(d, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

void loom_yaml_free(loom_yaml_doc *d) {
  if (!d) return;
  for (arena_block *b = d->blocks, *next; b; b = next) {
    next = b->next;
    free(b->data);
    free(b);
  }
  free(d);
}

const loom_yaml_node *loom_yaml_root(const loom_yaml_doc *d) { return d->root; }

/* ---- building the tree from events ------------------------------------------------------- */

typedef struct {
  loom_yaml_node *node;       /* the open collection (its children are set when it closes) */
  const loom_yaml_node **kid; /* (nkid) children so far; a mapping's alternate key, value */
  int nkid, cap;
  char *anchor;               /* its anchor (&name), registered when it closes; or NULL */
  size_t total_before;        /* nodes counted before this one: its weight when it closes */
} frame;

typedef struct {
  char *name;
  const loom_yaml_node *node;
  size_t weight; /* nodes of its subtree, aliases expanded */
} anchor;

typedef struct {
  loom_yaml_doc *doc;
  const char *text;
  size_t len;
  frame stack[LOOM_YAML_MAX_DEPTH + 1]; /* open collections; the root's first */
  int depth;
  size_t total;   /* nodes so far, an aliased node counted once per use */
  anchor *anchors;
  int nanchors, cap_anchors;
  int *slot;      /* (nslot) open-addressing index of anchors: 1 + its index, 0 = free */
  size_t nslot;
  bool have_root; /* the first document's root node has begun */
} builder;

static int err_at_mark(const builder *b, yaml_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int err_at_mark(const builder *b, yaml_mark_t m, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_err("%s:%zu: %s", b->doc->file, m.line + 1, msg);
}

static int syntax_err(const builder *b, const yaml_parser_t *p) {
  const char *file = b->doc->file, *problem = p->problem ? p->problem : "malformed YAML";
  if (p->error == YAML_READER_ERROR) { /* libyaml gives a byte offset only: find its line */
    size_t off = p->problem_offset < b->len ? p->problem_offset : b->len, line = 1, col = 1;
    for (size_t i = 0; i < off; i++, col++)
      if (b->text[i] == '\n') line++, col = 0;
    return loom_err("%s:%zu:%zu: invalid text at byte %zu: %s (is the file UTF-8?)", file, line,
                    col, p->problem_offset, problem);
  }
  if (p->context)
    return loom_err("%s:%zu:%zu: YAML syntax error: %s %s that started at line %zu", file,
                    p->problem_mark.line + 1, p->problem_mark.column + 1, problem, p->context,
                    p->context_mark.line + 1);
  return loom_err("%s:%zu:%zu: YAML syntax error: %s", file, p->problem_mark.line + 1,
                  p->problem_mark.column + 1, problem);
}

static loom_yaml_node *new_node(builder *b, loom_yaml_kind kind, const yaml_event_t *ev) {
  loom_yaml_node *n = arena_alloc(b->doc, sizeof *n);
  memset(n, 0, sizeof *n);
  n->kind = kind;
  n->file = b->doc->file;
  n->line = (int)ev->start_mark.line + 1;
  n->col = (int)ev->start_mark.column + 1;
  n->text = "";
  return n;
}

/* A node event begins at depth b->depth: the limits, and one document per file. */
static int check_node(builder *b, const yaml_event_t *ev, size_t weight) {
  if (b->depth == 0 && b->have_root)
    return err_at_mark(b, ev->start_mark, "a second YAML document starts here; put every key "
                       "in one document (remove the '---')");
  b->have_root = true;
  if (b->depth > LOOM_YAML_MAX_DEPTH)
    return err_at_mark(b, ev->start_mark, "YAML nested more than %d levels deep; loom's YAML "
                       "files are far flatter (is this the right file?)", LOOM_YAML_MAX_DEPTH);
  if (weight > LOOM_YAML_MAX_NODES - b->total)
    return err_at_mark(b, ev->start_mark, "more than %d YAML nodes (values, lists, mappings; an "
                       "alias counts its anchored node again each time it is used); loom's "
                       "YAML files are far smaller (is this the right file?)",
                       LOOM_YAML_MAX_NODES);
  b->total += weight;
  return 0;
}

static size_t name_hash(const char *s) { /* FNV-1a */
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (size_t)h;
}

/* The slot holding anchor `name`, or the free slot where it would go. */
static size_t find_slot(const builder *b, const char *name) {
  size_t i = name_hash(name) & (b->nslot - 1);
  while (b->slot[i] && strcmp(b->anchors[b->slot[i] - 1].name, name)) i = (i + 1) & (b->nslot - 1);
  return i;
}

static const anchor *find_anchor(const builder *b, const char *name) {
  if (!b->nslot) return NULL;
  size_t i = find_slot(b, name);
  return b->slot[i] ? &b->anchors[b->slot[i] - 1] : NULL;
}

static int register_anchor(builder *b, char *name, const loom_yaml_node *n, size_t weight) {
  const anchor *old = find_anchor(b, name);
  if (old) {
    int rc = loom_yaml_err(n, "anchor '&%s' is defined twice (first at line %d); rename one",
                           name, old->node->line);
    free(name);
    return rc;
  }
  if (b->nanchors == b->cap_anchors) {
    b->cap_anchors = b->cap_anchors ? 2 * b->cap_anchors : 16;
    b->anchors = loom_realloc(b->anchors, (size_t)b->cap_anchors, sizeof *b->anchors);
  }
  b->anchors[b->nanchors++] = (anchor){name, n, weight};
  if ((size_t)b->nanchors * 2 > b->nslot) { /* rebuild the index at half load */
    free(b->slot);
    b->nslot = b->nslot ? 2 * b->nslot : 64;
    b->slot = loom_calloc(b->nslot, sizeof *b->slot);
    for (int i = 0; i < b->nanchors; i++) b->slot[find_slot(b, b->anchors[i].name)] = i + 1;
  } else {
    b->slot[find_slot(b, name)] = b->nanchors;
  }
  return 0;
}

/* A finished node joins the collection open above it (or becomes the root). */
static int attach(builder *b, const loom_yaml_node *n) {
  if (b->depth == 0) {
    b->doc->root = n;
    return 0;
  }
  frame *f = &b->stack[b->depth - 1];
  if (f->node->kind == LOOM_YAML_MAPPING && f->nkid % 2 == 0 && n->kind != LOOM_YAML_SCALAR)
    return loom_yaml_err(n, "a mapping key must be a name (a scalar), not %s",
                         loom_yaml_kind_phrase(n));
  if (f->nkid == f->cap) {
    f->cap = f->cap ? 2 * f->cap : 8;
    f->kid = loom_realloc(f->kid, (size_t)f->cap, sizeof *f->kid);
  }
  f->kid[f->nkid++] = n;
  return 0;
}

/* Take the anchor of a node event (malloc'd copy) or NULL. */
static char *take_anchor(const yaml_char_t *a) { return a ? loom_strdup((const char *)a) : NULL; }

static int on_scalar(builder *b, const yaml_event_t *ev) {
  if (check_node(b, ev, 1)) return -1;
  loom_yaml_node *n = new_node(b, LOOM_YAML_SCALAR, ev);
  n->len = ev->data.scalar.length;
  n->text = arena_strndup(b->doc, (const char *)ev->data.scalar.value, n->len);
  n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
  if (ev->data.scalar.anchor &&
      register_anchor(b, take_anchor(ev->data.scalar.anchor), n, 1))
    return -1;
  return attach(b, n);
}

static int on_start(builder *b, const yaml_event_t *ev, loom_yaml_kind kind) {
  size_t before = b->total;
  if (check_node(b, ev, 1)) return -1;
  frame *f = &b->stack[b->depth++];
  memset(f, 0, sizeof *f);
  f->node = new_node(b, kind, ev);
  f->total_before = before;
  const yaml_char_t *a = kind == LOOM_YAML_MAPPING ? ev->data.mapping_start.anchor
                                                   : ev->data.sequence_start.anchor;
  f->anchor = take_anchor(a);
  return 0;
}

static int on_end(builder *b) {
  frame *f = &b->stack[--b->depth];
  loom_yaml_node *n = f->node;
  if (n->kind == LOOM_YAML_SEQUENCE) {
    const loom_yaml_node **items = arena_alloc(b->doc, (size_t)f->nkid * sizeof *items);
    if (f->nkid) memcpy(items, f->kid, (size_t)f->nkid * sizeof *items);
    n->items = items;
    n->n = f->nkid;
  } else {
    loom_yaml_pair *pairs = arena_alloc(b->doc, (size_t)(f->nkid / 2) * sizeof *pairs);
    for (int i = 0; i + 1 < f->nkid; i += 2)
      pairs[i / 2] = (loom_yaml_pair){f->kid[i], f->kid[i + 1]};
    n->pairs = pairs;
    n->n = f->nkid / 2;
  }
  free(f->kid);
  f->kid = NULL;
  char *name = f->anchor;
  f->anchor = NULL;
  if (name && register_anchor(b, name, n, b->total - f->total_before)) return -1;
  return attach(b, n);
}

static int on_alias(builder *b, const yaml_event_t *ev) {
  const char *name = (const char *)ev->data.alias.anchor;
  const anchor *a = find_anchor(b, name);
  if (!a)
    return err_at_mark(b, ev->start_mark, "alias '*%s' names no anchor ('&%s') defined before "
                       "it (an anchor cannot be used inside its own node)", name, name);
  if (check_node(b, ev, a->weight)) return -1;
  return attach(b, a->node);
}

/* One event; *done once the stream ends. */
static int on_event(builder *b, const yaml_event_t *ev, bool *done) {
  switch (ev->type) {
    case YAML_SCALAR_EVENT: return on_scalar(b, ev);
    case YAML_SEQUENCE_START_EVENT: return on_start(b, ev, LOOM_YAML_SEQUENCE);
    case YAML_MAPPING_START_EVENT: return on_start(b, ev, LOOM_YAML_MAPPING);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: return on_end(b);
    case YAML_ALIAS_EVENT: return on_alias(b, ev);
    case YAML_STREAM_END_EVENT: *done = true; return 0;
    default: return 0; /* stream and document start, document end */
  }
}

static void builder_free(builder *b) {
  for (int i = 0; i < b->depth; i++) {
    free(b->stack[i].kid);
    free(b->stack[i].anchor);
  }
  for (int i = 0; i < b->nanchors; i++) free(b->anchors[i].name);
  free(b->anchors);
  free(b->slot);
}

int loom_yaml_parse(loom_yaml_doc **out, const char *text, size_t len, const char *file) {
  *out = NULL;
  loom_yaml_doc *d = loom_calloc(1, sizeof *d);
  d->file = arena_strndup(d, file, strlen(file));
  builder *b = loom_calloc(1, sizeof *b); /* the stack is a few KiB: not on the C stack */
  b->doc = d, b->text = text, b->len = len;
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) {
    free(b);
    loom_yaml_free(d);
    return loom_err("%s: cannot start the YAML parser (out of memory?)", file);
  }
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  int rc = 0;
  for (bool done = false; !rc && !done;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&p, &ev)) {
      rc = syntax_err(b, &p);
      break;
    }
    rc = on_event(b, &ev, &done);
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&p);
  builder_free(b);
  free(b);
  if (rc) {
    loom_yaml_free(d);
    return LOOM_ERR;
  }
  *out = d;
  return 0;
}

int loom_yaml_load_file(loom_yaml_doc **out, const char *path) {
  char *text;
  size_t len;
  *out = NULL;
  if (loom_read_file(path, &text, &len)) return LOOM_ERR;
  int rc = loom_yaml_parse(out, text, len, path);
  free(text);
  return rc;
}

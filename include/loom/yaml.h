/* loom's one YAML layer: every YAML file loom reads (run configs and config groups, sweep
 * files, hardware profiles, Energon metadata) goes through loom_yaml_parse, and every string
 * loom writes into a YAML file through loom_yaml_quote.
 *
 * Reading. loom_yaml_parse turns one YAML document (libyaml's event parser) into a read-only
 * tree of mappings, sequences and scalars. Every node carries the file name and the line and
 * column where it starts, so a reader's errors name file:line (loom_yaml_err). The rules are
 * the same for every file:
 *   - one document per file: a second one ("---") is an error at its first line;
 *   - mapping keys are scalars (text); a mapping keeps every pair in file order, duplicate
 *     keys included (the readers that forbid them say where the first one was);
 *   - an alias (*name) is the node its anchor (&name) marked earlier in the file, shared, not
 *     copied; an anchor cannot be used inside its own node, so the tree has no cycles;
 *   - tags are ignored: a scalar is its text and whether it was written plain (unquoted);
 *   - limits on untrusted input: nodes nested at most LOOM_YAML_MAX_DEPTH deep below the
 *     root, and at most LOOM_YAML_MAX_NODES nodes, an aliased node counting once per use (so
 *     a "billion laughs" file is an error, and a reader that walks the whole tree does
 *     bounded work).
 * Syntax errors read "file:line:column: YAML syntax error: <libyaml's words>"; text that is
 * not UTF-8 reads "file:line:column: invalid text at byte N: ... (is the file UTF-8?)".
 *
 * Writing. loom_yaml_utf8_error is the UTF-8 check every string value passes before loom
 * stores it (a YAML file cannot hold other bytes); loom_yaml_quote renders a string as a
 * double-quoted scalar with libyaml's emitter, so it reads back byte for byte. */
#ifndef LOOM_YAML_H
#define LOOM_YAML_H
#include <stdbool.h>
#include <stddef.h>

#define LOOM_YAML_MAX_DEPTH 32
#define LOOM_YAML_MAX_NODES 1000000

typedef enum { LOOM_YAML_SCALAR = 0, LOOM_YAML_MAPPING, LOOM_YAML_SEQUENCE } loom_yaml_kind;

typedef struct loom_yaml_node loom_yaml_node;

/* One key: value pair of a mapping; the key is always a scalar node (its line for errors). */
typedef struct {
  const loom_yaml_node *key;
  const loom_yaml_node *value;
} loom_yaml_pair;

struct loom_yaml_node {
  loom_yaml_kind kind;
  const char *file;                   /* the name given to the parser (owned by the document) */
  int line, col;                      /* 1-based start of the node */
  /* scalars */
  const char *text;                   /* NUL-terminated ("" for collections) */
  size_t len;                         /* bytes of text; more than strlen(text) if it holds \0 */
  bool plain;                         /* written without quotes (only then can it be null) */
  /* collections */
  int n;                              /* mapping: pairs; sequence: items; scalar: 0 */
  const loom_yaml_pair *pairs;        /* (n) mapping */
  const loom_yaml_node *const *items; /* (n) sequence */
};

/* A parsed file: owns every node and string of its tree. */
typedef struct loom_yaml_doc loom_yaml_doc;

/* Parse text[0..len) (`file` names it in messages). On success *doc holds the tree (free it
 * with loom_yaml_free); on a syntax error or a broken limit *doc is NULL and -1 is returned
 * with the message set. */
int loom_yaml_parse(loom_yaml_doc **doc, const char *text, size_t len, const char *file);
/* Read the file at `path` and parse it. */
int loom_yaml_load_file(loom_yaml_doc **doc, const char *path);
/* The document's root node; NULL when the file holds no document (empty, or comments only). */
const loom_yaml_node *loom_yaml_root(const loom_yaml_doc *doc);
void loom_yaml_free(loom_yaml_doc *doc);

/* ---- errors at a node ------------------------------------------------------------------- */
/* Set "file:line: <message>" at node n and return -1. */
int loom_yaml_err(const loom_yaml_node *n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefix the current message (from a value parser) with "file:line: " of n; returns -1. */
int loom_yaml_err_prefix(const loom_yaml_node *n);
/* "a scalar", "a mapping" or "a list", for messages ("takes a float, not a list"). */
const char *loom_yaml_kind_phrase(const loom_yaml_node *n);

/* ---- lookups and typed reads ------------------------------------------------------------ */
/* The text of a scalar; NULL when n is NULL or a collection. */
const char *loom_yaml_scalar(const loom_yaml_node *n);
/* A plain scalar that YAML reads as null: empty, ~, null, Null or NULL. */
bool loom_yaml_is_null(const loom_yaml_node *n);
/* The value of the first pair of `map` whose key is `key`; NULL when absent or when map is
 * not a mapping. */
const loom_yaml_node *loom_yaml_get(const loom_yaml_node *map, const char *key);
/* Typed reads of a scalar: 0, or -1 with "file:line: <what>: expected ..., found '...'". A
 * number is what strtod reads whole, finite and in range; an int is such a number that is
 * whole and at most 1e9 in size; a bool is true/yes or false/no; a string must fit cap bytes
 * with its NUL (text past an embedded \0 is not part of it). */
int loom_yaml_number(const loom_yaml_node *n, const char *what, double *out);
int loom_yaml_int(const loom_yaml_node *n, const char *what, int *out);
int loom_yaml_bool(const loom_yaml_node *n, const char *what, bool *out);
int loom_yaml_string(const loom_yaml_node *n, const char *what, char *out, size_t cap);
/* `map` must be a mapping whose keys are all in `allowed` (NULL-terminated); else -1 naming
 * `where` and, for an unknown key, its line and the known keys. */
int loom_yaml_only(const loom_yaml_node *map, const char *where, const char *const *allowed);

/* ---- writing ---------------------------------------------------------------------------- */
/* 1-based offset of the first byte of s[0..len) that is not part of a valid UTF-8 character
 * (overlong forms, surrogates and code points past U+10FFFF included), or 0 when all is. */
size_t loom_yaml_utf8_error(const char *s, size_t len);
/* s as a double-quoted YAML scalar, malloc'd: libyaml's emitter escapes every character a
 * reader would not return unchanged (C0/C1 controls, U+FEFF, U+FFFE/FFFF, and the line breaks
 * NEL, LS and PS that a reader folds), so a UTF-8 s loads back byte for byte. Bytes that are
 * not UTF-8 (a string built in code; loading refuses them) become \xNN escapes. */
char *loom_yaml_quote(const char *s);

#endif

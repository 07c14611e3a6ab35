/* A small YAML document tree (libyaml events -> nodes with line numbers) for the hardware
 * profiles: mappings, sequences and scalars; lookups by key; typed reads whose errors name
 * the file, line and key. Private to src/sim. */
#ifndef LOOM_SIM_YAML_TREE_H
#define LOOM_SIM_YAML_TREE_H
#include <stdbool.h>

typedef enum { YT_SCALAR = 0, YT_MAP, YT_SEQ } yt_kind;

typedef struct yt_node {
  yt_kind kind;
  int line;
  char *text;              /* scalar value */
  int n;                   /* children (map: pairs, seq: items) */
  char **keys;             /* (n) map keys */
  int *key_lines;          /* (n) */
  struct yt_node **items;  /* (n) */
} yt_node;

/* Parse text into a tree (NULL with loom_err "file:line: ..." on a syntax error). */
yt_node *yt_parse(const char *text, const char *filename);
void yt_free(yt_node *n);
/* Child of a mapping by key (NULL when absent or when n is not a mapping). */
yt_node *yt_get(const yt_node *map, const char *key);
/* Typed reads: 0 on success, -1 with "file:line: key: expected ..." */
int yt_number(const yt_node *n, const char *file, const char *key, double *out);
int yt_int(const yt_node *n, const char *file, const char *key, int *out);
int yt_bool(const yt_node *n, const char *file, const char *key, bool *out);
int yt_string(const yt_node *n, const char *file, const char *key, char *out, int cap);
/* Unknown keys of a mapping: -1 naming the first key not in `allowed` (NULL-terminated). */
int yt_only(const yt_node *map, const char *file, const char *where, const char *const *allowed);
#endif

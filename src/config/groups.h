/* Config groups (Hydra's defaults list): the search path for `<dir>/<group>/<option>.yaml`
 * files, lookup with "did you mean" errors, and the composition state shared while a primary
 * config and its group files load (command-line choices, the chain of files being loaded for
 * cycle errors). Used by src/config/config_yaml.c; not part of the public API. */
#ifndef LOOM_CONFIG_GROUPS_H
#define LOOM_CONFIG_GROUPS_H
#include <stdbool.h>

#define LOOM_GROUP_DEPTH 16  /* group files nested in each other's defaults lists */
#define LOOM_GROUP_DIRS 3    /* primary config's dir, ./configs, <source>/configs */

typedef struct {
  char *dirs[LOOM_GROUP_DIRS];   /* search path, in order (absolute, existing, no duplicates) */
  int ndirs;
  char *const *choices;          /* "group=option" from the command line */
  int nchoices;
  bool *choice_used;             /* per choice: it replaced or added a defaults entry */
  const char *stack[LOOM_GROUP_DEPTH]; /* files being loaded, outermost first */
  int depth;
} loom_group_ctx;

/* Search path for a primary config at `primary` (NULL: none). */
void loom_group_ctx_init(loom_group_ctx *g, const char *primary, char *const *choices,
                         int nchoices);
void loom_group_ctx_free(loom_group_ctx *g);
/* Path of group/option's YAML file (malloc'd), or an error naming `where` (e.g. "x.yaml:3")
 * that lists the available groups / options with the nearest one. */
int loom_group_find(const loom_group_ctx *g, const char *group, const char *option,
                    const char *where, char **path);
/* True when the file's first line is "# @package _global_" (keys are top-level names);
 * otherwise a group file's keys live under the section named like the group. */
bool loom_group_file_is_global(const char *text);
/* The search path as "a, b, c" (static buffer) for messages and docs. */
const char *loom_group_search_path(const loom_group_ctx *g);
#endif

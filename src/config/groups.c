/* Config group lookup: the search path (the primary config's directory, ./configs, then the
 * source tree's configs/), `<dir>/<group>/<option>.yaml` resolution (a group's options are
 * the union over the search path; the first directory holding the file wins), and errors that list the groups / options and suggest the
 * nearest (Levenshtein, as for keys). */
#include "config/groups.h"

#include <dirent.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "loom/core.h"

static void add_dir(loom_group_ctx *g, const char *dir) {
  char *abs = realpath(dir, NULL);
  if (!abs || !loom_is_dir(abs) || g->ndirs == LOOM_GROUP_DIRS) {
    free(abs);
    return;
  }
  for (int i = 0; i < g->ndirs; i++)
    if (!strcmp(g->dirs[i], abs)) {
      free(abs);
      return;
    }
  g->dirs[g->ndirs++] = abs;
}

void loom_group_ctx_init(loom_group_ctx *g, const char *primary, char *const *choices,
                         int nchoices) {
  memset(g, 0, sizeof *g);
  if (primary) {
    char *copy = loom_strdup(primary);
    add_dir(g, dirname(copy));
    free(copy);
  }
  add_dir(g, "configs");
#ifdef LOOM_SOURCE_DIR
  add_dir(g, LOOM_SOURCE_DIR "/configs");
#endif
  g->choices = choices;
  g->nchoices = nchoices;
  g->choice_used = loom_calloc((size_t)nchoices + 1, sizeof *g->choice_used);
}

void loom_group_ctx_free(loom_group_ctx *g) {
  for (int i = 0; i < g->ndirs; i++) free(g->dirs[i]);
  free(g->choice_used);
  memset(g, 0, sizeof *g);
}

const char *loom_group_search_path(const loom_group_ctx *g) {
  static char buf[3 * PATH_MAX + 16];
  buf[0] = 0;
  for (int i = 0; i < g->ndirs; i++)
    snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? ", " : "", g->dirs[i]);
  if (!g->ndirs) snprintf(buf, sizeof buf, "(no configs/ directory found)");
  return buf;
}

/* Sorted, de-duplicated names in every search dir: groups (sub-directories) when group is
 * NULL, else the options (<name>.yaml) of that group. NULL-terminated, malloc'd. */
static char **list_names(const loom_group_ctx *g, const char *group, int *n) {
  char **out = NULL;
  *n = 0;
  for (int d = 0; d < g->ndirs; d++) {
    char *dir = group ? loom_sprintf("%s/%s", g->dirs[d], group) : loom_strdup(g->dirs[d]);
    DIR *dh = opendir(dir);
    struct dirent *e;
    while (dh && (e = readdir(dh))) {
      if (e->d_name[0] == '.') continue;
      char *full = loom_sprintf("%s/%s", dir, e->d_name);
      char *name = NULL;
      size_t len = strlen(e->d_name);
      if (!group && loom_is_dir(full)) name = loom_strdup(e->d_name);
      if (group && len > 5 && !strcmp(e->d_name + len - 5, ".yaml") && !loom_is_dir(full)) {
        name = loom_strdup(e->d_name);
        name[len - 5] = 0;
      }
      free(full);
      bool dup = false;
      for (int i = 0; name && i < *n; i++) dup |= !strcmp(out[i], name);
      if (!name || dup) {
        free(name);
        continue;
      }
      out = loom_realloc(out, (size_t)(*n + 2), sizeof *out);
      int i = (*n)++;
      while (i > 0 && strcmp(out[i - 1], name) > 0) out[i] = out[i - 1], i--;
      out[i] = name;
      out[*n] = NULL;
    }
    if (dh) closedir(dh);
    free(dir);
  }
  return out;
}

static void free_names(char **l, int n) {
  for (int i = 0; i < n; i++) free(l[i]);
  free(l);
}

/* "a, b, c" of a list (malloc'd). */
static char *joined(char **l, int n) {
  char *s = loom_strdup("");
  for (int i = 0; i < n; i++) {
    char *t = loom_sprintf("%s%s%s", s, i ? ", " : "", l[i]);
    free(s);
    s = t;
  }
  return s;
}

/* An unknown group (group NULL; value: the option given, NULL if none) or an unknown option of
 * group, with the nearest name and, for a group named like a key ("lr"), that key. */
static int not_found(const loom_group_ctx *g, const char *where, const char *what,
                     const char *word, const char *group, const char *value) {
  int n;
  char **names = list_names(g, group, &n);
  const char *near = names ? loom_config_nearest_of(word, (const char *const *)names) : NULL;
  char *list = joined(names, n);
  int rc;
  if (group)
    rc = loom_err("%s: unknown option '%s' of config group '%s'%s%s%s; available: %s "
                  "(files %s/*.yaml in the search path: %s)", where, word, group,
                  near ? "; did you mean '" : "", near ? near : "", near ? "'" : "", list, group,
                  loom_group_search_path(g));
  else {
    /* "lr=1e-3": a key's last name without its section, not a group */
    const char *key = loom_config_is_section(word, strlen(word)) ? NULL
                                                                  : loom_config_nearest_key(word);
    char *as_key = key ? loom_sprintf("; did you mean the config key '%s' (%s=%s)?", key, key,
                                      value ? value : "...")
                       : loom_strdup("");
    if (key) near = NULL; /* the key is the likelier meaning */
    rc = loom_err("%s: unknown %s '%s'%s%s%s%s; the groups are: %s (directories in the search "
                  "path: %s)%s", where, what, word, as_key, near ? "; did you mean '" : "",
                  near ? near : "", near ? "'" : "", n ? list : "(none)",
                  loom_group_search_path(g),
                  loom_config_is_section(word, strlen(word))
                      ? "; to set a key of that section, write the full key (e.g. "
                        "training.lr=1e-3)" : "");
    free(as_key);
  }
  free(list);
  free_names(names, n);
  return rc;
}

static bool plain_name(const char *s) {
  if (!*s || !strcmp(s, ".") || !strcmp(s, "..")) return false;
  for (; *s; s++)
    if (*s == '/' || *s == '\\') return false;
  return true;
}

int loom_group_find(const loom_group_ctx *g, const char *group, const char *option,
                    const char *where, char **path) {
  if (!plain_name(group))
    return loom_err("%s: '%s' is not a config group name (a directory name, no '/')", where,
                    group);
  if (!plain_name(option))
    return loom_err("%s: '%s' is not an option name of group '%s' (a file name without "
                    ".yaml, no '/')", where, option, group);
  bool group_known = false;
  for (int d = 0; d < g->ndirs; d++) { /* the first directory with the file wins */
    char *dir = loom_sprintf("%s/%s", g->dirs[d], group);
    bool has = loom_is_dir(dir);
    char *file = has ? loom_sprintf("%s/%s.yaml", dir, option) : NULL;
    free(dir);
    group_known |= has;
    if (has && loom_path_exists(file) && !loom_is_dir(file)) {
      *path = file;
      return 0;
    }
    free(file);
  }
  if (group_known) return not_found(g, where, "option", option, group, NULL);
  return not_found(g, where, "config group", group, NULL, option);
}

bool loom_group_file_is_global(const char *text) {
  const char *tag = "# @package _global_";
  size_t n = strlen(tag);
  if (strncmp(text, tag, n)) return false;
  return text[n] == 0 || text[n] == '\n' || text[n] == '\r' || text[n] == ' ';
}

/* The commit a git checkout is at, read from .git (HEAD, loose refs, packed-refs, worktree
 * gitdir/commondir files) without running git: the trainer may be an MPI rank, where
 * forking is best avoided. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/registry.h"

static char *read_trimmed(const char *path) {
  char *data;
  size_t len;
  if (loom_read_file(path, &data, &len)) {
    loom_err_clear();
    return NULL;
  }
  while (len && isspace((unsigned char)data[len - 1])) data[--len] = 0;
  return data;
}

static bool is_sha(const char *s) {
  int n = 0;
  for (; isxdigit((unsigned char)s[n]); n++) {}
  return n == 40 && (!s[n] || isspace((unsigned char)s[n]));
}

/* Resolve `ref` (refs/heads/x) in gitdir, then in the common dir of a worktree. */
static bool lookup_ref(const char *gitdir, const char *common, const char *ref, char *out,
                       size_t n) {
  const char *dirs[2] = {gitdir, common};
  for (int d = 0; d < 2; d++) {
    if (!dirs[d]) continue;
    char *p = loom_sprintf("%s/%s", dirs[d], ref);
    char *v = read_trimmed(p);
    free(p);
    if (v && is_sha(v)) {
      snprintf(out, n, "%.40s", v);
      free(v);
      return true;
    }
    free(v);
    p = loom_sprintf("%s/packed-refs", dirs[d]);
    char *packed = read_trimmed(p);
    free(p);
    for (char *line = packed ? strtok(packed, "\n") : NULL; line; line = strtok(NULL, "\n")) {
      if (is_sha(line) && !strcmp(line + 41, ref)) {
        snprintf(out, n, "%.40s", line);
        free(packed);
        return true;
      }
    }
    free(packed);
  }
  return false;
}

/* The git directory of the checkout holding dir (walking up), or NULL. */
static char *find_gitdir(const char *dir) {
  char *cur = realpath(dir, NULL);
  while (cur) {
    char *dotgit = loom_sprintf("%s/.git", cur);
    if (loom_is_dir(dotgit)) {
      free(cur);
      return dotgit;
    }
    char *text = loom_path_exists(dotgit) ? read_trimmed(dotgit) : NULL;
    free(dotgit);
    if (text && !strncmp(text, "gitdir: ", 8)) {
      char *g = text[8] == '/' ? loom_strdup(text + 8) : loom_sprintf("%s/%s", cur, text + 8);
      free(text);
      free(cur);
      return g;
    }
    free(text);
    char *slash = strrchr(cur, '/');
    if (!slash || slash == cur) break;
    *slash = 0;
  }
  free(cur);
  return NULL;
}

void loom_git_head(const char *dir, char *out, size_t n) {
  out[0] = 0;
  char *gitdir = find_gitdir(dir);
  if (!gitdir) return;
  char *p = loom_sprintf("%s/HEAD", gitdir);
  char *head = read_trimmed(p);
  free(p);
  p = loom_sprintf("%s/commondir", gitdir);
  char *common_rel = read_trimmed(p);
  free(p);
  char *common = common_rel ? (common_rel[0] == '/' ? loom_strdup(common_rel)
                                                    : loom_sprintf("%s/%s", gitdir, common_rel))
                            : NULL;
  if (head && is_sha(head)) snprintf(out, n, "%.40s", head);
  else if (head && !strncmp(head, "ref: ", 5)) lookup_ref(gitdir, common, head + 5, out, n);
  free(head), free(common_rel), free(common), free(gitdir);
}

/* Checks before a tool reads a checkpoint (eval, generate, export, compare, inspect): a
 * directory whose COMPLETE marker does not check out is refused with what is missing and the
 * newest complete checkpoint of the same run directory to use instead. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "loom/checkpoint.h"
#include "loom/core.h"

/* N of "checkpoint_<N>", else -1 (also for "checkpoint_<N>.tmp" and the like). */
static long checkpoint_number(const char *name) {
  if (strncmp(name, "checkpoint_", 11) || !isdigit((unsigned char)name[11])) return -1;
  char *end;
  long n = strtol(name + 11, &end, 10);
  return *end ? -1 : n;
}

/* The same directory named twice (trailing slashes, "./")? Compared by inode. */
static bool same_dir(const char *a, const char *b) {
  struct stat sa, sb;
  return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

int loom_ckpt_newest_complete(const char *run_dir, const char *except, char **ckpt, long *step) {
  *ckpt = NULL;
  *step = -1;
  DIR *d = opendir(run_dir);
  if (!d) return loom_err("cannot read the run directory '%s': %s", run_dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d))) {
    if (checkpoint_number(e->d_name) < 0 && strcmp(e->d_name, "final_checkpoint")) continue;
    char *dir = loom_sprintf("%s/%s", run_dir, e->d_name);
    long s;
    bool final = !strcmp(e->d_name, "final_checkpoint"); /* wins a tie with checkpoint_<N> */
    if (!same_dir(dir, except) && loom_ckpt_check_complete(dir, &s) == 0 &&
        (s > *step || (s == *step && final))) {
      free(*ckpt);
      *ckpt = dir;
      *step = s;
    } else {
      free(dir);
    }
  }
  closedir(d);
  loom_err_clear(); /* incomplete candidates are skipped, not errors */
  return 0;
}

/* The run directory holding checkpoint dir (its parent), malloc'd. */
static char *parent_of(const char *dir) {
  char *copy = loom_strdup(dir);
  size_t n = strlen(copy);
  while (n > 1 && copy[n - 1] == '/') copy[--n] = 0;
  char *parent = loom_strdup(dirname(copy));
  free(copy);
  return parent;
}

int loom_ckpt_check_readable(const char *dir) {
  char *marker = loom_sprintf("%s/" LOOM_CKPT_MARKER, dir);
  bool marked = loom_path_exists(marker);
  free(marker);
  long step;
  if (!marked || loom_ckpt_check_complete(dir, &step) == 0) return 0;
  char *why = loom_strdup(loom_errmsg());
  char *run = parent_of(dir), *other;
  long other_step;
  if (loom_ckpt_newest_complete(run, dir, &other, &other_step)) other = NULL;
  if (other)
    loom_err("%s; use '%s' (step %ld) instead, the newest complete checkpoint of '%s'", why, other,
             other_step, run);
  else
    loom_err("%s; '%s' holds no other complete checkpoint: restore the missing file, or train "
             "again",
             why, run);
  free(why);
  free(run);
  free(other);
  return LOOM_ERR;
}

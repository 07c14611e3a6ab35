/* Output directories of `loom ckpt export` / `import`: trailing-slash cleanup and the
 * checks that keep a conversion from replacing its own input or an unrelated directory. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/hf.h"

char *loom_hf_clean_dir(const char *path) {
  char *s = loom_strdup(path);
  size_t n = strlen(s);
  while (n > 1 && s[n - 1] == '/') s[--n] = 0;
  return s;
}

int loom_hf_check_out(const char *src, const char *out, bool force) {
  if (!out[0]) return loom_err("the output directory (--out) is empty");
  if (!loom_path_exists(out)) return 0;
  if (!force)
    return loom_err("output '%s' already exists; remove it, choose another --out, or pass "
                    "--force to replace it", out);
  if (!loom_is_dir(out))
    return loom_err("output '%s' exists and is not a directory; remove it or choose another "
                    "--out", out);
  char rs[PATH_MAX], ro[PATH_MAX];
  if (realpath(src, rs) && realpath(out, ro)) {
    size_t n = strlen(ro);
    if (!strcmp(rs, ro) || (!strncmp(rs, ro, n) && (rs[n] == '/' || n == 1)))
      return loom_err("output '%s' is (or contains) the input '%s'; --force would delete the "
                      "input: choose another --out", out, src);
  }
  return 0;
}

/* The table of sweep launchers and small helpers they share. To add one, implement
 * loom_sweep_launcher in its own sweep_launch_<name>.c and add it to the table below. */
#include <stdlib.h>
#include <string.h>

#include "sweep/sweep_launch.h"
#include "loom/core.h"

static const loom_sweep_launcher *const launchers[] = {&loom_launcher_local, &loom_launcher_slurm,
                                                       &loom_launcher_sim};
#define N_LAUNCHERS (sizeof launchers / sizeof launchers[0])

const loom_sweep_launcher *loom_sweep_launcher_find(const char *name) {
  for (size_t i = 0; i < N_LAUNCHERS; i++)
    if (!strcmp(launchers[i]->name, name)) return launchers[i];
  loom_err("unknown launcher '%s'; use local (mpirun on this machine), slurm (sbatch) or sim "
           "(the cluster simulator)", name);
  return NULL;
}

char *loom_shell_quote(const char *text) {
  size_t n = 3;
  for (const char *p = text; *p; p++) n += *p == '\'' ? 4 : 1;
  char *out = loom_malloc(n), *o = out;
  *o++ = '\'';
  for (const char *p = text; *p; p++) {
    if (*p == '\'') {
      memcpy(o, "'\\''", 4);
      o += 4;
    } else {
      *o++ = *p;
    }
  }
  *o++ = '\'';
  *o = 0;
  return out;
}

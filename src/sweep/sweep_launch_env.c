/* The environment of multi-rank starts (loom/mpi_env.h), shared by `loom train --nproc`
 * (src/cli/util.c) and the sweep runner's local launcher (sweep_launch_local.c). */
#include <stdlib.h>
#include <unistd.h>

#include "loom/mpi_env.h"

bool loom_mpi_env_set(int ranks, bool single_threaded_ranks) {
  if (geteuid() == 0) { /* Open MPI refuses root unless told it is deliberate */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  bool over = ranks > 1 && ranks > sysconf(_SC_NPROCESSORS_ONLN);
  if (over) setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  if (single_threaded_ranks) {
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
  }
  return over;
}

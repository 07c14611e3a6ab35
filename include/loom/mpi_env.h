/* The environment every multi-rank start gets, whoever starts it (`loom train --nproc`,
 * `loom bench --nproc`, the sweep runner's mpirun points): one function so that they cannot
 * drift apart. */
#ifndef LOOM_MPI_ENV_H
#define LOOM_MPI_ENV_H
#include <stdbool.h>

/* Set in this process's environment, before exec'ing mpirun for `ranks` ranks:
 * - as root, Open MPI's consent to run as root (OMPI_ALLOW_RUN_AS_ROOT and
 *   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = 1; mpirun refuses root without them),
 * - when ranks exceed this machine's cores, oversubscription
 *   (OMPI_MCA_rmaps_base_oversubscribe = 1, what `mpirun --oversubscribe` sets),
 * - with single_threaded_ranks, one OpenMP/OpenBLAS thread per rank.
 * Values the user already set are kept. Returns true when oversubscription was needed. */
bool loom_mpi_env_set(int ranks, bool single_threaded_ranks);
#endif

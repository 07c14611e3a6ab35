/* Small helpers shared by the subcommands. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "loom/mpi_env.h"

int loom_cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
  return 0;
}

int loom_cli_exec_mpirun(const char *command, int argc, char **argv, const char *nproc,
                         bool single_threaded_ranks) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "loom %s: --nproc: cannot find the loom executable\n", command);
    return 1;
  }
  self[n] = 0;
  char **args = calloc((size_t)argc + 8, sizeof(char *));
  int k = 0;
  args[k++] = "mpirun";
  /* root consent, oversubscription past the core count, threads: loom/mpi_env.h */
  if (loom_mpi_env_set((int)atol(nproc), single_threaded_ranks)) args[k++] = "--oversubscribe";
  args[k++] = "-np";
  args[k++] = (char *)nproc;
  args[k++] = self;
  args[k++] = (char *)command;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--nproc")) {
      i++;
      continue;
    }
    args[k++] = argv[i];
  }
  execvp("mpirun", args);
  fprintf(stderr, "loom %s: --nproc: cannot run mpirun (%s); install openmpi-bin\n", command,
          strerror(errno));
  free(args);
  return 1;
}

/* Small helpers shared by the subcommands. */
#include <string.h>

#include "cli/commands.h"

int loom_cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
  return 0;
}

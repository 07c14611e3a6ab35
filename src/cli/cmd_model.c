/* loom model: placeholder until its module lands (replaced in this change). */
#include <stdio.h>

#include "cli/commands.h"

int loom_cmd_model(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "loom model: not built yet\n");
  return 1;
}

/* loom ckpt: placeholder until its module lands (replaced in this change). */
#include <stdio.h>

#include "cli/commands.h"

int loom_cmd_ckpt(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "loom ckpt: not built yet\n");
  return 1;
}

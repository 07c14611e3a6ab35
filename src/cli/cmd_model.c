/* `loom model`: list presets with their dimensions and parameter counts. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "loom/model.h"

int loom_cmd_model(int argc, char **argv) {
  if (loom_cli_wants_help(argc, argv) || argc < 2) {
    printf("usage: loom model list\n\nList the model presets (model.preset) with their "
           "dimensions and parameter counts (without vocabulary padding).\n");
    return argc < 2 && !loom_cli_wants_help(argc, argv) ? 2 : 0;
  }
  if (!strcmp(argv[1], "list")) {
    loom_model_list_presets();
    return 0;
  }
  fprintf(stderr, "loom model: unknown subcommand '%s' (try: loom model list)\n", argv[1]);
  return 2;
}

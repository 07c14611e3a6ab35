/* `loom model`: list presets with their dimensions and parameter counts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/model.h"

static void usage(FILE *out) {
  fprintf(out, "usage: loom model list\n\nList the model presets (model.preset) with their "
          "dimensions and parameter counts (without vocabulary padding).\n");
}

/* `loom model list`: no options, no arguments. */
static int cmd_list(int argc, char **argv) {
  const loom_cli_opt opts[] = {{0}};
  loom_cli_parser p = {.command = "model list", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  if (prc == LOOM_CLI_OK && p.npos) {
    fprintf(stderr, "loom model list: takes no arguments ('%s' given)\n", p.pos[0]);
    prc = LOOM_CLI_BAD;
  }
  free(p.pos);
  if (prc == LOOM_CLI_HELP) usage(stdout);
  if (prc) return prc == LOOM_CLI_HELP ? 0 : 2;
  loom_model_list_presets();
  return 0;
}

int loom_cmd_model(int argc, char **argv) {
  static const char *const names[] = {"list", NULL};
  int sub = loom_cli_subcommand("model", argc, argv, names, " (try: loom model list)");
  if (sub >= 0) return cmd_list(argc - 1, argv + 1);
  if (sub == LOOM_CLI_SUB_HELP) return usage(stdout), 0;
  if (sub == LOOM_CLI_SUB_NONE) usage(stderr);
  return 2;
}

/* loom config: `show` prints the resolved config (defaults, then an optional YAML file, then
 * command-line overrides, validated) as YAML; `schema` prints every key with its type,
 * default and meaning. Errors go to stderr with exit status 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/config.h"
#include "loom/core.h"

/* The override grammar and config groups: what show's arguments are. */
static const char overrides_help[] =
    "Overrides (Hydra grammar):\n"
    "  key=value     set a key, e.g. training.lr=1e-3 run.name='my run'\n"
    "  +key=value    add a user key (a dotted name outside the schema, e.g.\n"
    "                +exp.hypothesis=warmup_helps: kept in config.yaml, a registry\n"
    "                column); for a schema key the same as =\n"
    "  ++key=value   add or replace a user key (= for a schema key)\n"
    "  ~key          reset a key to its default (a user key: remove it)\n"
    "  ~key=value    reset it only if its current value is value\n"
    "  group=option  choose a config group option (a name without a dot): model=tiny-llama\n"
    "                loads configs/model/tiny-llama.yaml\n\n"
    "Config groups (Hydra's defaults list): a config file may start with\n"
    "  defaults:\n"
    "    - model: tiny-gpt2     # configs/model/tiny-gpt2.yaml, keys under model:\n"
    "    - optim: adamw         # '# @package _global_' files hold full keys\n"
    "    - _self_               # the file's own keys: here last, so they win\n"
    "Entries load in list order; without _self_ the file's own keys load last. Group\n"
    "files are looked up in the config file's directory, ./configs, then loom's configs/.\n"
    "group=option on the command line replaces that group's entry, or (for a group the\n"
    "list does not name) loads after the file.\n"
    "run.tags takes a list: run.tags=[ablation,warmup]. See docs/EXPERIMENTS.md.\n"
    "Values are typed like YAML: 3e-4, 64, true/false/yes/no/on/off, quoted strings.\n";

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom config show [CONFIG.yaml] [OVERRIDE ...]\n"
          "       loom config schema\n\n"
          "show    print the resolved config as YAML: the defaults, then CONFIG.yaml (if\n"
          "        given), then each override in order; the result is validated\n"
          "schema  print every key with its type, default and meaning\n\n%s",
          overrides_help);
}

static void usage_show(FILE *out) {
  fprintf(out,
          "usage: loom config show [CONFIG.yaml] [OVERRIDE ...]\n\n"
          "Print the resolved config as YAML: the defaults, then CONFIG.yaml (if given), then\n"
          "each override in order; the result is validated.\n\n%s",
          overrides_help);
}

static void usage_schema(FILE *out) {
  fprintf(out, "usage: loom config schema\n\nPrint every config key with its type, default and "
          "meaning, then notes on user keys\nand config groups.\n");
}

static int fail(void) {
  fprintf(stderr, "loom config: %s\n", loom_errmsg());
  return 1;
}

static bool is_override(const char *a) {
  return a[0] == '+' || a[0] == '~' || strchr(a, '=') != NULL;
}

static int cmd_show(int argc, char **argv) {
  const loom_cli_opt opts[] = {{0}};
  loom_cli_parser p = {.command = "config show", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  if (prc) {
    free(p.pos);
    if (prc == LOOM_CLI_HELP) usage_show(stdout);
    return prc == LOOM_CLI_HELP ? 0 : 1;
  }
  loom_config c;
  loom_config_defaults(&c);
  int i = 0;
  const char *path = NULL;
  if (i < p.npos && !is_override(p.pos[i])) path = p.pos[i++];
  char **choices = calloc((size_t)p.npos + 1, sizeof *choices);
  int nchoices = 0;
  for (int j = i; j < p.npos; j++)
    if (loom_config_is_group_choice(p.pos[j])) choices[nchoices++] = p.pos[j];
  int rc = (path || nchoices) ? loom_config_load_composed(&c, path, choices, nchoices) : 0;
  free(choices);
  for (; i < p.npos && !rc; i++) {
    if (loom_config_is_group_choice(p.pos[i])) continue;
    if (!is_override(p.pos[i])) {
      fprintf(stderr, "loom config show: '%s' is not an override (key=value, +key=value, "
              "~key); only the first argument may be a config file\n", p.pos[i]);
      free(p.pos);
      return 1;
    }
    rc = loom_config_override(&c, p.pos[i]);
  }
  free(p.pos);
  if (rc) return fail();
  if (loom_config_validate(&c)) return fail();
  char *yaml = loom_config_to_yaml(&c);
  fputs(yaml, stdout);
  free(yaml);
  return 0;
}

static int cmd_schema(int argc, char **argv) {
  const loom_cli_opt opts[] = {{0}};
  loom_cli_parser p = {.command = "config schema", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  if (prc == LOOM_CLI_OK && p.npos) {
    fprintf(stderr, "loom config schema: takes no arguments ('%s' given)\n", p.pos[0]);
    prc = LOOM_CLI_BAD;
  }
  free(p.pos);
  if (prc == LOOM_CLI_HELP) usage_schema(stdout);
  if (prc) return prc == LOOM_CLI_HELP ? 0 : 1;
  loom_config_print_schema();
  return 0;
}

int loom_cmd_config(int argc, char **argv) {
  static const char *const names[] = {"show", "schema", NULL};
  int sub = loom_cli_subcommand("config", argc, argv, names, " (expected show or schema)");
  if (sub >= 0) return (sub == 0 ? cmd_show : cmd_schema)(argc - 1, argv + 1);
  if (sub == LOOM_CLI_SUB_HELP) return usage(stdout), 0;
  if (sub == LOOM_CLI_SUB_BAD) fputc('\n', stderr);
  usage(stderr);
  return 1;
}

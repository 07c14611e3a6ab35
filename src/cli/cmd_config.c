/* loom config: `show` prints the resolved config (defaults, then an optional YAML file, then
 * command-line overrides, validated) as YAML; `schema` prints every key with its type,
 * default and meaning. Errors go to stderr with exit status 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/config.h"
#include "loom/config_schema.h"
#include "loom/core.h"
#include "loom/model.h"
#include "loom/train.h"

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
          "each override in order; the result is validated. The model keys a preset fills in\n"
          "(0 or \"\" in the config) show the preset's values, marked\n"
          "'# from model.preset X'.\n\n%s",
          overrides_help);
}

static void usage_schema(FILE *out) {
  fprintf(out, "usage: loom config schema\n\nPrint every config key with its type, default and "
          "meaning, then notes on user keys\nand config groups.\n");
}

/* A preset name that is no preset: the nearest one, as " (did you mean 'X'?)", or "". */
static const char *preset_hint(const char *name, char *buf, size_t n) {
  const char *names[128];
  int k = 0;
  for (const char *p; k < 127 && (p = loom_model_preset_name(k)); k++) names[k] = p;
  names[k] = NULL;
  const char *near = loom_config_nearest_of(name, names);
  snprintf(buf, n, near ? "; did you mean '%s'?" : "", near);
  return buf;
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
  char **choices = loom_calloc((size_t)p.npos + 1, sizeof *choices);
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
  /* the model as it will be built: the values a preset fills in are printed, with a comment */
  loom_model_spec spec, probe;
  loom_config resolved = c;
  bool unbuilt = loom_model_spec_from_config(&spec, &c.model) != 0;
  if (unbuilt) {
    char hint[160] = "", *msg = loom_strdup(loom_errmsg());
    bool unknown = c.model.preset[0] && loom_model_preset(&probe, c.model.preset);
    if (unknown) preset_hint(c.model.preset, hint, sizeof hint);
    /* an unknown preset is an error; a model not complete yet (a config meant to be combined
     * with more overrides) is shown as it is, with a note */
    fprintf(stderr, "loom config: %s%s%s\n", unknown ? "" : "note: the model cannot be built yet: ",
            msg, hint);
    free(msg);
    if (unknown) return 1;
  }
  char origin[128] = "";
  if (!unbuilt) loom_train_config_resolved(&c, &spec, &resolved, origin, sizeof origin);
  char *yaml = loom_config_to_yaml_resolved(&c, &resolved, origin, true);
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

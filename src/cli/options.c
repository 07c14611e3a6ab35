/* The table-driven option parser of the subcommands, and the readers of argv that share its
 * table and its reading of it: subcommand dispatch, the first positional argument, argv
 * without some options (see options.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/core.h"

static int bad(const loom_cli_parser *p, const char *what, const char *arg, const char *extra) {
  fprintf(stderr, "loom %s: %s '%s'%s (see loom %s --help)\n", p->command, what, arg, extra,
          p->command);
  return LOOM_CLI_BAD;
}

static const loom_cli_opt *find(const loom_cli_opt *opts, const char *arg, size_t len) {
  for (const loom_cli_opt *o = opts; o->name; o++)
    if ((strlen(o->name) == len && !strncmp(o->name, arg, len)) ||
        (o->alias && strlen(o->alias) == len && !strncmp(o->alias, arg, len)))
      return o;
  return NULL;
}

/* How many arguments from argv[i] (an option, known or not) make one option as
 * loom_cli_parse reads them: itself, its value unless given with '=', and a greedy option's
 * further values up to the next "--" argument. */
static int extent(const loom_cli_opt *opts, int argc, char **argv, int i) {
  const char *a = argv[i];
  size_t len = strcspn(a, "=");
  const loom_cli_opt *o = find(opts, a, len);
  if (!o || !(o->value || o->each) || a[len]) return 1;
  int n = i + 1 < argc ? 2 : 1;
  while (o->greedy && i + n < argc && strncmp(argv[i + n], "--", 2)) n++;
  return n;
}

static bool is_option(const char *a) { return a[0] == '-' && a[1]; }

static int unknown(const loom_cli_parser *p, const char *arg) {
  int n = 1;
  for (const loom_cli_opt *o = p->opts; o->name; o++) n++;
  const char **names = loom_calloc((size_t)n + 1, sizeof *names);
  int k = 0;
  for (const loom_cli_opt *o = p->opts; o->name; o++) names[k++] = o->name;
  names[k] = "--help";
  char word[128];
  snprintf(word, sizeof word, "%.*s", (int)strcspn(arg, "="), arg);
  int rc = bad(p, "unknown option", word, loom_cli_did_you_mean(word, names));
  free(names);
  return rc;
}

static int take(loom_cli_parser *p, const loom_cli_opt *o, const char *v) {
  if (o->value) *o->value = v;
  if (o->each && o->each(v, p->ctx)) { /* the option's name first, once */
    const char *msg = loom_errmsg();
    bool named = !strncmp(msg, o->name, strlen(o->name));
    fprintf(stderr, "loom %s: %s%s%s (see loom %s --help)\n", p->command, named ? "" : o->name,
            named ? "" : ": ", msg, p->command);
    return LOOM_CLI_BAD;
  }
  return LOOM_CLI_OK;
}

/* --list-options: the table's option names, one a line, "=" after one that takes a value
 * (shell completion, tests/cli/options_walk_test.sh). */
static void list_options(const loom_cli_parser *p) {
  for (const loom_cli_opt *o = p->opts; o->name; o++) {
    const char *eq = o->value || o->each ? "=" : "";
    printf("%s%s\n", o->name, eq);
    if (o->alias) printf("%s%s\n", o->alias, eq);
  }
  fflush(stdout);
}

void loom_cli_unknown_subcommand(const char *command, const char *arg,
                                 const char *const *names, const char *extra) {
  if (arg[0] == '-')
    fprintf(stderr, "loom %s: unknown option '%s' (options follow the subcommand: loom %s "
            "<subcommand> --help)\n", command, arg, command);
  else
    fprintf(stderr, "loom %s: unknown subcommand '%s'%s%s\n", command, arg, extra ? extra : "",
            loom_cli_did_you_mean(arg, names));
}

int loom_cli_parse(loom_cli_parser *p, int argc, char **argv, int first) {
  for (int i = first; i < argc && strcmp(argv[i], "--"); i++)
    if (!strcmp(argv[i], "--list-options")) {
      list_options(p);
      exit(0);
    }
  p->pos = loom_calloc((size_t)argc + 1, sizeof *p->pos);
  p->npos = 0;
  bool options = true;
  for (int i = first; i < argc; i++) {
    const char *a = argv[i];
    if (!options || !is_option(a)) {
      p->pos[p->npos++] = argv[i];
      continue;
    }
    if (!strcmp(a, "--")) {
      options = false;
      continue;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return LOOM_CLI_HELP;
    size_t len = strcspn(a, "=");
    const loom_cli_opt *o = find(p->opts, a, len);
    if (!o) return unknown(p, a);
    bool wants_value = o->value || o->each;
    if (!wants_value) {
      if (a[len]) return bad(p, "option takes no value:", a, "");
      if (o->flag) *o->flag = true;
      if (o->off) *o->off = false;
      continue;
    }
    const char *v = a[len] ? a + len + 1 : i + 1 < argc ? argv[++i] : NULL;
    if (!v) return bad(p, "missing value after", a, "");
    int rc = take(p, o, v);
    while (!rc && o->greedy && !a[len] && i + 1 < argc && strncmp(argv[i + 1], "--", 2))
      rc = take(p, o, argv[++i]);
    if (rc) return rc;
  }
  return LOOM_CLI_OK;
}

int loom_cli_subcommand(const char *command, int argc, char **argv, const char *const *names,
                        const char *extra) {
  if (argc < 2) return LOOM_CLI_SUB_NONE;
  const char *a = argv[1];
  for (int k = 0; names[k]; k++)
    if (!strcmp(a, names[k])) return k;
  if (!strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "help")) return LOOM_CLI_SUB_HELP;
  if (!strcmp(a, "--list-options")) exit(0); /* no options of its own */
  loom_cli_unknown_subcommand(command, a, names, extra);
  return LOOM_CLI_SUB_BAD;
}

int loom_cli_first_positional(const loom_cli_opt *opts, int argc, char **argv, int first) {
  for (int i = first; i < argc; i += extent(opts, argc, argv, i)) {
    if (!strcmp(argv[i], "--")) return i + 1 < argc ? i + 1 : -1;
    if (!is_option(argv[i])) return i;
  }
  return -1;
}

int loom_cli_without(const loom_cli_opt *opts, int argc, char **argv, int first,
                     const char *const *drop, char **out) {
  int n = 0;
  for (int i = first; i < argc;) {
    if (!strcmp(argv[i], "--")) { /* the rest is positional */
      while (i < argc) out[n++] = argv[i++];
      break;
    }
    int k = is_option(argv[i]) ? extent(opts, argc, argv, i) : 1;
    const loom_cli_opt *o = is_option(argv[i]) ? find(opts, argv[i], strcspn(argv[i], "="))
                                               : NULL;
    bool dropped = false;
    for (int d = 0; o && drop[d] && !dropped; d++) dropped = !strcmp(drop[d], o->name);
    for (int j = 0; j < k; j++)
      if (!dropped) out[n++] = argv[i + j];
    i += k;
  }
  return n;
}

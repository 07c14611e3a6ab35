/* One table-driven option parser for the subcommands: long options with or without a value
 * ("--x V" or "--x=V"), short aliases, repeatable options through a callback, --help/-h,
 * positional arguments in order, "--" ending the options, and errors naming the command and
 * the nearest known option ("did you mean"). */
#ifndef LOOM_CLI_OPTIONS_H
#define LOOM_CLI_OPTIONS_H
#include <stdbool.h>

typedef struct {
  const char *name;    /* "--model" */
  const char *alias;   /* "-o", or NULL */
  const char **value;  /* takes a value, stored here (the last one given wins) */
  bool *flag;          /* takes no value: set to true */
  /* takes a value: called for each one instead of (or besides) storing it; nonzero with
   * loom_err set rejects it ("--limit takes a whole number ...") */
  int (*each)(const char *value, void *ctx);
  bool greedy;         /* with each: also every following argument up to the next option */
} loom_cli_opt;

typedef struct {
  const char *command;     /* "runs", "plan": messages start "loom <command>: " */
  const loom_cli_opt *opts; /* ends with an entry whose name is NULL */
  void *ctx;               /* passed to each() */
  char **pos;              /* positional arguments, in order (malloc'd; free it) */
  int npos;
} loom_cli_parser;

/* Table entries: an option with a value, a flag, a value handled by a callback. */
#define LOOM_OPT_VALUE(n, ptr) {.name = (n), .value = (ptr)}
#define LOOM_OPT_FLAG(n, ptr) {.name = (n), .flag = (ptr)}
#define LOOM_OPT_EACH(n, fn) {.name = (n), .each = (fn)}

enum { LOOM_CLI_OK = 0, LOOM_CLI_HELP = 1, LOOM_CLI_BAD = 2 };
/* Parse argv[first..argc). LOOM_CLI_HELP when -h/--help was given (print usage, exit 0);
 * LOOM_CLI_BAD after printing the error to stderr (exit 2, or the command's usage-error
 * status). A hidden --list-options prints the table's names (one a line, "=" after one
 * that takes a value) and exits 0: for shell completion, and for
 * tests/cli/options_walk_test.sh, which checks that --help names every accepted option. */
int loom_cli_parse(loom_cli_parser *p, int argc, char **argv, int first);

/* A command with subcommands got arg where a subcommand belongs: prints to stderr "loom
 * <command>: unknown subcommand 'arg'<extra>; did you mean 'X'?" (names: NULL-terminated), or
 * for an option there "unknown option 'arg' (options follow the subcommand: loom <command>
 * <subcommand> --help)". */
void loom_cli_unknown_subcommand(const char *command, const char *arg,
                                 const char *const *names, const char *extra);
#endif

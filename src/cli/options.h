/* One table-driven option parser for the subcommands: long options with or without a value
 * ("--x V" or "--x=V"), short aliases, repeatable options through a callback, a flag's
 * opposite, --help/-h, positional arguments in order, "--" ending the options, and errors
 * naming the command and the nearest known option ("did you mean"). Beside it, read with the
 * same table: the dispatch of a command's subcommands, the first positional argument (a
 * subcommand after options), and argv without some options (what a re-run is handed). */
#ifndef LOOM_CLI_OPTIONS_H
#define LOOM_CLI_OPTIONS_H
#include <stdbool.h>

typedef struct {
  const char *name;    /* "--model" */
  const char *alias;   /* "-o", or NULL */
  const char **value;  /* takes a value, stored here (the last one given wins) */
  bool *flag;          /* takes no value: set to true */
  bool *off;           /* takes no value: set to false (the opposite of another option's flag,
                        * "--continue-on-failure" of "--stop-on-failure": the last one wins) */
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
#define LOOM_OPT_OFF(n, ptr) {.name = (n), .off = (ptr)}

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

/* A command with subcommands, given argv (argv[0] the command): the index in names
 * (NULL-terminated) of the subcommand argv[1] names; LOOM_CLI_SUB_HELP for -h, --help or
 * help (print the usage to stdout, exit 0); LOOM_CLI_SUB_NONE without argv[1] (print the
 * usage to stderr); LOOM_CLI_SUB_BAD after printing what argv[1] is instead
 * (loom_cli_unknown_subcommand with extra). A hidden --list-options prints nothing and exits 0
 * (the command's options are its subcommands'). */
enum { LOOM_CLI_SUB_HELP = -1, LOOM_CLI_SUB_NONE = -2, LOOM_CLI_SUB_BAD = -3 };
int loom_cli_subcommand(const char *command, int argc, char **argv, const char *const *names,
                        const char *extra);

/* The index of the first positional argument of argv[first..argc) as loom_cli_parse reads it
 * with opts (options and their values skipped, unknown ones taken for flags; after "--" the
 * next argument), or -1: a subcommand that may follow options ("loom runs --db F show ID"). */
int loom_cli_first_positional(const loom_cli_opt *opts, int argc, char **argv, int first);

/* argv[first..argc) without the options named in drop (NULL-terminated, names as in opts) and
 * their values, in both forms ("--nproc 4", "--nproc=4"), read as loom_cli_parse reads it with
 * opts; everything else in order, unchanged. Written to out (room for argc - first entries);
 * returns the count. For a command that runs itself again (under mpirun, or relaunched by the
 * training supervisor) without the options that started the re-run. */
int loom_cli_without(const loom_cli_opt *opts, int argc, char **argv, int first,
                     const char *const *drop, char **out);
#endif

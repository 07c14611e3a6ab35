/* Small helpers shared by the subcommands. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/checkpoint.h"
#include "loom/config_schema.h"
#include "loom/core.h"
#include "loom/mpi_env.h"
#include "loom/run_dir.h"

int loom_cli_exec_mpirun(const char *command, const loom_cli_opt *opts, int argc, char **argv,
                         const char *nproc, bool single_threaded_ranks) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "loom %s: --nproc: cannot find the loom executable\n", command);
    return 1;
  }
  self[n] = 0;
  char **args = loom_calloc((size_t)argc + 8, sizeof(char *));
  int k = 0;
  args[k++] = "mpirun";
  /* root consent, oversubscription past the core count, threads: loom/mpi_env.h */
  if (loom_mpi_env_set((int)atol(nproc), single_threaded_ranks)) args[k++] = "--oversubscribe";
  args[k++] = "-np";
  args[k++] = (char *)nproc;
  args[k++] = self;
  args[k++] = (char *)command;
  static const char *const nproc_opt[] = {"--nproc", NULL}; /* the ranks run the rest as given */
  k += loom_cli_without(opts, argc, argv, 1, nproc_opt, args + k);
  args[k] = NULL;
  execvp("mpirun", args);
  fprintf(stderr, "loom %s: --nproc: cannot run mpirun (%s); install openmpi-bin\n", command,
          strerror(errno));
  free(args);
  return 1;
}

const char *loom_cli_did_you_mean(const char *word, const char *const *names) {
  static char text[160];
  const char *near = loom_config_nearest_of(word, names);
  if (!near) return "";
  snprintf(text, sizeof text, "; did you mean '%s'?", near);
  return text;
}

/* A word the shell passes through unchanged needs no quotes. */
static bool shell_plain(const char *s) {
  if (!*s) return false;
  for (const char *p = s; *p; p++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%_+=:,./-", *p))
      return false;
  return true;
}

char *loom_cli_command_line(const char *command, int argc, char **argv) {
  size_t n = strlen(command) + 8;
  for (int i = 0; i < argc; i++) n += 4 * strlen(argv[i]) + 3;
  char *s = loom_calloc(1, n), *p = s;
  p += sprintf(p, "loom %s", command);
  for (int i = 0; i < argc; i++) {
    *p++ = ' ';
    if (shell_plain(argv[i])) {
      p += sprintf(p, "%s", argv[i]);
      continue;
    }
    *p++ = '\''; /* '...' with each ' written as '\'' */
    for (const char *c = argv[i]; *c; c++) {
      if (*c == '\'') p += sprintf(p, "'\\''");
      else *p++ = *c;
    }
    *p++ = '\'';
  }
  *p = 0;
  return s;
}

int loom_cli_checkpoint_arg(const char *arg, char **ckpt) {
  *ckpt = NULL;
  const char *marks[] = {"config.yaml", "train.log", "metrics.jsonl", LOOM_CKPT_MARKER};
  bool has[4];
  for (int i = 0; i < 4; i++) {
    char *p = loom_sprintf("%s/%s", arg, marks[i]);
    has[i] = loom_path_exists(p);
    free(p);
  }
  if (!loom_is_dir(arg) || !has[0] || !(has[1] || has[2]) || has[3]) {
    *ckpt = loom_strdup(arg); /* a checkpoint, an import, a Hugging Face directory, or wrong */
    return 0;
  }
  long step;
  if (loom_run_dir_newest_checkpoint(arg, ckpt, &step)) return LOOM_ERR;
  if (!*ckpt)
    return loom_err("run directory '%s' has no complete checkpoint (checkpoint_<step>/ or "
                    "final_checkpoint/ with a COMPLETE marker) yet", arg);
  return 0;
}

int loom_cli_terminal_width(void) {
  const char *env = getenv("COLUMNS");
  char *end;
  long n = env && *env ? strtol(env, &end, 10) : 0;
  if (env && *env && !*end && n > 0) return (int)n;
  struct winsize ws;
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  return 100;
}

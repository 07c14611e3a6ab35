/* Local launcher: each point is a child process, `loom train CONFIG` for one rank or
 * `mpirun -np RANKS [args] loom train CONFIG` for several (`loom train --resume RUN_DIR` for a
 * stopped point of a continued sweep), with stdout and stderr in the point's log and
 * LOOM_SWEEP / LOOM_SWEEP_ID in its environment (so the run registers under the sweep).
 * Multi-rank points get what `loom train --nproc` gives mpirun (loom/mpi_env.h: Open MPI's
 * root consent, oversubscription past the core count). Each point runs in a process group of
 * its own, out of reach of a terminal's Ctrl-C, and reads LOOM_STOP_FILE: the runner stops it
 * cleanly through that file (mpirun would turn a SIGINT into a kill of every rank). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sweep/sweep_launch.h"
#include "loom/core.h"
#include "loom/mpi_env.h"

typedef struct {
  char **v;
  int n;
} argv_list;

static void arg(argv_list *a, const char *s) {
  a->v = loom_realloc(a->v, (size_t)(a->n + 2), sizeof(char *));
  a->v[a->n++] = loom_strdup(s);
  a->v[a->n] = NULL;
}

static void free_args(argv_list *a) {
  for (int i = 0; i < a->n; i++) free(a->v[i]);
  free(a->v);
}

static void build_argv(const loom_launch_ctx *c, const loom_sweep_point *p, argv_list *a) {
  const loom_sweep_run_opts *o = c->opts;
  if (p->ranks > 1) {
    char np[32];
    snprintf(np, sizeof np, "%d", p->ranks);
    arg(a, o->mpirun && *o->mpirun ? o->mpirun : "mpirun");
    arg(a, "-np");
    arg(a, np);
    if (o->mpirun_args) {
      char *copy = loom_strdup(o->mpirun_args), *save = NULL;
      for (char *t = strtok_r(copy, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) arg(a, t);
      free(copy);
    }
  }
  arg(a, o->loom_bin);
  arg(a, "train");
  if (p->resume_dir) { /* its config.yaml is the point's config */
    arg(a, "--resume");
    arg(a, p->resume_dir);
  } else {
    arg(a, p->config_path);
  }
}

static char *command_text(const argv_list *a) {
  size_t n = 1;
  char **q = loom_malloc(sizeof(char *) * (size_t)a->n);
  for (int i = 0; i < a->n; i++) n += strlen(q[i] = loom_shell_quote(a->v[i])) + 1;
  char *s = loom_calloc(1, n);
  for (int i = 0; i < a->n; i++) {
    if (i) strcat(s, " ");
    strcat(s, q[i]);
    free(q[i]);
  }
  free(q);
  return s;
}

/* In the child: environment, log as stdout/stderr, exec. Never returns. */
static void child(const loom_launch_ctx *c, const loom_sweep_point *p, const char *log_path,
                  const argv_list *a, const char *cmd) {
  setpgid(0, 0); /* Ctrl-C reaches the runner only, which stops the point through the file */
  int fd = open(log_path, O_WRONLY | O_CREAT | (c->append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) _exit(126);
  dprintf(fd, "# loom sweep %s (%s), point %s, %d rank%s%s\n# command: %s\n# cwd: %s\n",
          c->sweep_name, c->sweep_id, p->name, p->ranks, p->ranks == 1 ? "" : "s",
          c->append ? ", continued" : "", cmd, c->cwd);
  int null = open("/dev/null", O_RDONLY);
  if (null >= 0) dup2(null, STDIN_FILENO);
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  setenv("LOOM_SWEEP", c->sweep_name, 1);
  setenv("LOOM_SWEEP_ID", c->sweep_id, 1);
  if (c->stop_file) setenv("LOOM_STOP_FILE", c->stop_file, 1);
  if (p->ranks > 1) loom_mpi_env_set(p->ranks, false);
  execvp(a->v[0], a->v);
  dprintf(STDERR_FILENO, "loom sweep: cannot run '%s': %s\n", a->v[0], strerror(errno));
  _exit(127);
}

static int start_local(const loom_launch_ctx *c, const loom_sweep_point *p, const char *log_path,
                       loom_launch_result *r) {
  argv_list a = {0};
  build_argv(c, p, &a);
  char *cmd = command_text(&a);
  int rc = 0;
  if (c->opts->dry_run) {
    r->status = LOOM_PT_DRY_RUN;
    snprintf(r->note, sizeof r->note, "%s", cmd);
  } else {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) rc = loom_err("cannot start '%s': %s", p->name, strerror(errno));
    else if (pid == 0) child(c, p, log_path, &a, cmd);
    else {
      setpgid(pid, pid); /* (both sides: whichever runs first) */
      r->pid = pid;
    }
  }
  free(cmd);
  free_args(&a);
  return rc;
}

const loom_sweep_launcher loom_launcher_local = {
    .name = "local",
    .summary = "loom train / mpirun -np RANKS on this machine",
    .concurrent = true,
    .start = start_local,
};

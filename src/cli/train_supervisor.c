/* `loom train --nproc N [--max-restarts K]`: the launcher stays up while the job runs. It
 * starts the ranks (mpirun, or loom itself for one process) in a process group of their own,
 * forwards their output without Open MPI's banners, and when the job ends without loom's own
 * report (a rank was killed or crashed, a collective timed out) it records the failure in
 * train.log, summary.json and the registry, naming what happened (the rank and its signal,
 * or the rank's own error line), then relaunches from the newest complete checkpoint, at most
 * K times, logging each restart. Rank 0 tells it the run directory, a failure it reported and
 * a clean stop through LOOM_REPORT_FILE.
 *
 * Across nodes (docs/MULTINODE.md) a rank's abort may leave mpirun waiting on a node it cannot
 * reach (its kill order stuck in TCP): once the job is failing (a rank aborted, a collective
 * timed out, Open MPI lost a node's daemon), mpirun gets ABORT_GRACE_S to end, then it is
 * killed (SIGKILL to its process group: a SIGTERM finds it already aborting), and the failure
 * is recorded as usual, naming the node. A relaunch whose launch agent cannot reach a node (ssh,
 * scripts/node_agent.sh) names it; when the restarts are spent on such a node, or one Open MPI
 * lost, the last message names it and says how to go on without it (resume on the nodes left).
 *
 * Stopping: SIGINT, SIGTERM, SIGUSR1 or SIGHUP to the launcher are written to the job's
 * LOOM_STOP_FILE, which every rank reads at the end of each step (mpirun itself would turn
 * SIGINT/SIGTERM into a kill of every rank one second later: the job's own process group keeps
 * a terminal's Ctrl-C away from it); the ranks stop together with a checkpoint, the job is
 * not relaunched, and the launcher exits with 128 + the signal. A second signal kills the job
 * at once (mpirun is sent SIGTERM, a lone rank SIGKILL); the run is then recorded stopped. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/core.h"
#include "loom/registry.h"
#include "loom/train.h"
#include "loom/lineage.h"
#include "loom/run_dir.h"

typedef struct {
  char *run_dir;   /* from the report file, NULL when rank 0 never got that far */
  bool reported;   /* loom reported the failure itself (train.log, summary.json, registry) */
  int stopped;     /* rank 0 reported a clean stop: the signal (0: --stop-after), -1: none */
  char reason[512];/* what ended the job, when loom did not report it */
  int exited_rank; /* from Open MPI's "Process name: [[job,1],RANK]" line, -1 if none */
  char rank_error[512]; /* the last "loom train: error: ..." line of a rank ("" if none) */
  char timeout_error[512]; /* the first "loom: rank N...: no progress ..." line ("" if none) */
  char lost_node[256];     /* the node whose daemon Open MPI lost ("" if none) */
  char unreachable[512];   /* the launch agent's line for a node it could not start a daemon
                              on (ssh, scripts/node_agent.sh), "" if none */
  char agent_node[256];    /* that node */
  int signal;              /* the signal that killed the launched process (0: it exited) */
  double failing_since;    /* when the first sign of a failing job came (0: none) */
} attempt_result;

/* Seconds mpirun gets to end a failing job before it is killed. */
#define ABORT_GRACE_S 15.0

static void log_line(const char *run_dir, const char *text) {
  char *path = loom_sprintf("%s/train.log", run_dir);
  FILE *f = fopen(path, "a");
  free(path);
  if (!f) return;
  char ts[32];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
  fprintf(f, "[%s] %s\n", ts, text);
  fclose(f);
}

/* Open MPI's banners are blocks between lines of dashes; the ones that name mpirun/prterun
 * or MPI_ABORT are dropped (what they say is in loom's own line), and the dead rank they
 * name is kept as the reason. */
static bool is_dashes(const char *s) {
  size_t n = 0;
  while (s[n] == '-') n++;
  return n >= 20 && (s[n] == '\n' || s[n] == 0);
}

/* Signs of a failing job: a rank's collective timed out (its line names the rank, its node and
 * the ranks it waited for), a rank called MPI_Abort, Open MPI lost the daemon of a node. */
static void note_failing(const char *line, attempt_result *res) {
  bool timeout = !strncmp(line, "loom: rank ", 11) && strstr(line, ": no progress for ");
  if (timeout && !res->timeout_error[0]) {
    snprintf(res->timeout_error, sizeof res->timeout_error, "%s", line + 6);
    res->timeout_error[strcspn(res->timeout_error, "\n")] = 0;
  }
  const char *q = strstr(line, "Remote daemon: ");
  if (q && (q = strstr(q, " on node ")) && !res->lost_node[0]) {
    snprintf(res->lost_node, sizeof res->lost_node, "%s", q + 9);
    res->lost_node[strcspn(res->lost_node, " \n")] = 0;
  }
  if ((timeout || q || strstr(line, "MPI_ABORT was invoked") ||
       strstr(line, "ORTE has lost communication")) && res->failing_since == 0)
    res->failing_since = loom_now();
}

/* The launch agent could not reach a node (mpirun then says only that a daemon did not start):
 * ssh's "ssh: connect to host X port 22: ...", "ssh: Could not resolve hostname X: ...", the
 * node agent's "node_agent.sh: node X is not up ..." / "... cannot reach mpirun ...". */
static void note_agent(const char *line, attempt_result *res) {
  static const char *const pre[] = {"ssh: connect to host ", "ssh: Could not resolve hostname ",
                                     "node_agent.sh: node ", NULL};
  if (res->unreachable[0]) return;
  for (int i = 0; pre[i]; i++) {
    const char *q = strstr(line, pre[i]);
    if (!q) continue;
    q += strlen(pre[i]);
    size_t n = strcspn(q, " :\n");
    if (!n || (i == 2 && !strstr(q, " is not up") && !strstr(q, " cannot reach mpirun"))) continue;
    snprintf(res->agent_node, sizeof res->agent_node, "%.*s", (int)n, q);
    snprintf(res->unreachable, sizeof res->unreachable, "%s", line);
    res->unreachable[strcspn(res->unreachable, "\n")] = 0;
    return;
  }
}

static void note_reason(const char *line, attempt_result *res) {
  int rank, sig, code;
  note_failing(line, res);
  note_agent(line, res);
  const char *q = strstr(line, "Process name: [[");
  if (q && (q = strchr(q + 16, ',')) && (q = strchr(q + 1, ',')) && sscanf(q + 1, "%d", &rank) == 1)
    res->exited_rank = rank;
  q = strstr(line, "MPI_ABORT was invoked on rank ");
  if (q && !res->reason[0] && sscanf(q, "MPI_ABORT was invoked on rank %d", &rank) == 1)
    snprintf(res->reason, sizeof res->reason, "rank %d aborted the job (its message is above)",
             rank);
  q = strstr(line, "Exit code:");
  if (q && res->exited_rank >= 0 && !res->reason[0] && sscanf(q, "Exit code: %d", &code) == 1)
    snprintf(res->reason, sizeof res->reason, "rank %d exited with status %d without loom's "
             "report", res->exited_rank, code);
  const char *p = strstr(line, "process rank ");
  if (p && sscanf(p, "process rank %d", &rank) == 1) {
    const char *s = strstr(line, "on signal ");
    if (s && sscanf(s, "on signal %d", &sig) == 1)
      snprintf(res->reason, sizeof res->reason, "rank %d was killed by signal %d (%s)", rank,
               sig, strsignal(sig));
    else if (strstr(line, "exited"))
      snprintf(res->reason, sizeof res->reason, "rank %d exited without loom's report", rank);
  }
}

typedef struct {
  char *block;      /* a dashes-delimited block being collected */
  size_t blen;
  bool in_block;
} filter_state;

static void handle_line(const char *line, filter_state *st, attempt_result *res) {
  static const char err[] = "loom train: error: ";
  if (!strncmp(line, err, sizeof err - 1)) { /* a rank's own error: the reason if it dies */
    snprintf(res->rank_error, sizeof res->rank_error, "%s", line + sizeof err - 1);
    res->rank_error[strcspn(res->rank_error, "\n")] = 0;
  }
  if (!st->in_block && is_dashes(line)) {
    st->in_block = true;
    st->blen = 0;
  }
  note_reason(line, res);
  if (st->in_block) {
    size_t n = strlen(line);
    st->block = loom_realloc(st->block, st->blen + n + 1, 1);
    memcpy(st->block + st->blen, line, n + 1);
    st->blen += n;
    if (is_dashes(line) && st->blen > n) { /* the closing line */
      st->in_block = false;
      bool mpi = strstr(st->block, "mpirun") || strstr(st->block, "prterun") ||
                 strstr(st->block, "MPI_ABORT") || strstr(st->block, "MPI_COMM_WORLD") ||
                 strstr(st->block, "Primary job") || strstr(st->block, "lost communication");
      if (!mpi) fputs(st->block, stderr);
    }
    return;
  }
  if (strstr(line, "mpirun noticed") || strstr(line, "prterun noticed")) return;
  fputs(line, stderr);
}

/* The job's stop file and what the signal handler needs (async-signal-safe state only). */
static char stop_path[64];
static volatile pid_t running_child = 0;
static volatile sig_atomic_t child_is_mpirun = 0;
static volatile sig_atomic_t stop_signal = 0; /* the first stop signal: no restart after it */
static volatile sig_atomic_t killed_by = 0;   /* a second one: the job was killed at once */

/* A failing job that mpirun has not ended within ABORT_GRACE_S: SIGKILL to its process group
 * (mpirun and what it started on this host). Returns true once it was killed. */
static bool hurry_mpirun(pid_t pid, const attempt_result *res, bool killed) {
  if (killed || !child_is_mpirun || res->failing_since == 0 ||
      loom_now() - res->failing_since <= ABORT_GRACE_S)
    return killed;
  fprintf(stderr, "loom train: mpirun has not ended the failing job %.0f s after its first "
          "error (a node it cannot reach?); killing it\n", ABORT_GRACE_S);
  kill(-pid, SIGKILL);
  return true;
}

/* Forward the job's stderr line by line through the filter; a live progress line (redrawn
 * with "\r", no newline) goes through at once. Returns true when it reaped the job (*status)
 * after killing it (processes it left on other nodes may hold the pipe open). */
static bool forward_output(int fd, attempt_result *res, pid_t pid, int *status) {
  filter_state st = {0};
  char buf[4096], *line = NULL;
  size_t len = 0, cap = 0;
  bool live = false; /* the current line is a live progress line: passed straight through */
  bool reaped = false, killed = false;
  for (;;) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int ready = poll(&pfd, 1, 1000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if (killed && waitpid(pid, status, WNOHANG) == pid) {
        reaped = true;
        break;
      }
      killed = hurry_mpirun(pid, res, killed);
      continue;
    }
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; i++) {
      char ch = buf[i];
      if (live) {
        fputc(ch, stderr);
        if (ch == '\n') live = false;
        continue;
      }
      if (len + 2 > cap) {
        cap = 2 * cap + 256;
        line = loom_realloc(line, cap, 1);
      }
      line[len++] = ch;
      line[len] = 0;
      if (ch == '\n') {
        handle_line(line, &st, res);
        len = 0;
      }
    }
    if (len && !st.in_block && line[0] == '\r') { /* the progress line being redrawn */
      fputs(line, stderr);
      live = true;
      len = 0;
    }
    fflush(stderr);
  }
  if (len) {
    line[len] = 0;
    handle_line(line, &st, res);
  }
  if (st.in_block && st.blen) fputs(st.block, stderr);
  fflush(stderr);
  free(line);
  free(st.block);
  close(fd);
  return reaped;
}

static void read_report(const char *path, attempt_result *res) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[4200];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (!strncmp(line, "run ", 4)) {
      free(res->run_dir);
      res->run_dir = loom_strdup(line + 4);
    } else if (!strcmp(line, "failed")) {
      res->reported = true;
    } else if (!strncmp(line, "stopped ", 8)) {
      res->stopped = atoi(line + 8);
    }
  }
  fclose(f);
}


/* SIGINT, SIGTERM, SIGUSR1, SIGHUP: the first asks every rank to stop after its step (the
 * stop file), a second kills the job at once. */
static void on_stop_signal(int sig) {
  if (stop_signal) {
    killed_by = sig;
    if (running_child > 0) kill(running_child, child_is_mpirun ? SIGTERM : SIGKILL);
    return;
  }
  stop_signal = sig;
  loom_train_request_stop(stop_path, sig);
  static const char note[] = "\nloom train: stopping: every rank finishes its step and saves a "
                             "checkpoint (send the signal again to stop at once)\n";
  ssize_t w = write(STDERR_FILENO, note, sizeof note - 1);
  (void)w;
}

static const char *signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1"
         : sig == SIGHUP ? "SIGHUP" : "a signal";
}

/* One launch; returns the exit status (128 + signal when killed). */
static int launch(char **args, const char *report, bool restart, attempt_result *res) {
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    fprintf(stderr, "loom train: cannot create a pipe: %s\n", strerror(errno));
    return 1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "loom train: cannot start the job: %s\n", strerror(errno));
    return 1;
  }
  if (pid == 0) {
    setpgid(0, 0); /* a terminal's Ctrl-C reaches the launcher only, which asks the ranks */
    close(pipefd[0]);
    bool tty = isatty(STDERR_FILENO);
    dup2(pipefd[1], STDERR_FILENO);
    close(pipefd[1]);
    int null = open("/dev/null", O_RDONLY); /* a background group must not read the terminal */
    if (null >= 0) dup2(null, STDIN_FILENO);
    setenv("LOOM_SUPERVISED", "1", 1);
    setenv("LOOM_REPORT_FILE", report, 1);
    setenv("LOOM_STOP_FILE", stop_path, 1);
    setenv("LOOM_SUPERVISOR_TTY", tty ? "1" : "0", 1);
    if (restart) setenv("LOOM_RESTART", "1", 1);
    execvp(args[0], args);
    fprintf(stderr, "loom train: cannot run %s (%s)%s\n", args[0], strerror(errno),
            strcmp(args[0], "mpirun") ? "" : "; install openmpi-bin");
    _exit(127);
  }
  close(pipefd[1]);
  setpgid(pid, pid); /* (both sides: whichever runs first) */
  child_is_mpirun = !strcmp(args[0], "mpirun");
  running_child = pid;
  if (killed_by) kill(pid, child_is_mpirun ? SIGTERM : SIGKILL); /* asked before it began */
  int status;
  if (!forward_output(pipefd[0], res, pid, &status))
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  running_child = 0;
  read_report(report, res);
  if (WIFSIGNALED(status)) res->signal = WTERMSIG(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

/* The registry: the number of restarts so far, as the custom metric "restarts". */
static void registry_restarts(const char *output_dir, const char *run_dir, long restarts) {
  const char *env = getenv("LOOM_REGISTRY");
  if (env && !strcmp(env, "off")) return;
  char *db = loom_registry_path(output_dir);
  loom_registry *reg = NULL;
  if (loom_registry_open(&reg, db) == 0) {
    const char *slash = strrchr(run_dir, '/');
    char count[32];
    snprintf(count, sizeof count, "%ld", restarts);
    if (loom_registry_set_metric(reg, slash ? slash + 1 : run_dir, "restarts", count))
      fprintf(stderr, "loom train: warning: run registry: %s\n", loom_errmsg());
    loom_registry_close(reg);
  }
  free(db);
  loom_err_clear();
}

/* The job ended without loom's report: train.log, summary.json and the registry say so, with
 * steps and losses from metrics.jsonl (status failed; stopped when a second signal killed it). */
static void record_unreported(const char *output_dir, const char *run_dir, const char *status,
                              const char *stopped_by, const char *reason) {
  char *line = strcmp(status, "failed")
                   ? loom_strdup(reason)
                   : loom_sprintf("error: the job ended without a report from loom: %s", reason);
  log_line(run_dir, line);
  free(line);
  if (loom_train_record_end(run_dir, output_dir, status, stopped_by, reason))
    fprintf(stderr, "loom train: warning: %s\n", loom_errmsg());
  loom_err_clear();
}

/* A forked run without a checkpoint of its own restarts from the one it was forked from
 * (run.parent_checkpoint of its config.yaml; malloc'd, NULL when it is not a fork). */
static char *fork_start(const char *run_dir) {
  loom_config *cfg = loom_malloc(sizeof *cfg);
  char *ckpt = NULL;
  if (loom_lineage_load_run_config(run_dir, NULL, cfg) == 0 && cfg->run.parent_checkpoint[0])
    ckpt = loom_strdup(cfg->run.parent_checkpoint);
  loom_err_clear();
  free(cfg);
  return ckpt;
}

/* What ended the job when loom did not report it, in res->reason: a rank killed by a
 * signal or exiting (Open MPI's notice), else a rank's own error line (a rank that failed
 * alone prints it, then aborts the job), else the lone process's signal, else the status. */
static void unreported_reason(attempt_result *res, int status) {
  bool aborted = !strncmp(res->reason, "rank ", 5) && strstr(res->reason, "aborted the job");
  bool open = !res->reason[0] || aborted; /* rank errors, then timeouts, then a lost node */
  if (open && res->rank_error[0])
    snprintf(res->reason, sizeof res->reason, "%s", res->rank_error);
  else if (open && res->timeout_error[0])
    snprintf(res->reason, sizeof res->reason, "%s", res->timeout_error);
  else if (open && res->lost_node[0])
    snprintf(res->reason, sizeof res->reason, "Open MPI lost its connection to node %s (the "
             "network to it failed, or the node or its daemon died)", res->lost_node);
  else if (open && res->unreachable[0])
    snprintf(res->reason, sizeof res->reason, "mpirun could not start its daemon on node %.64s "
             "(%.380s)", res->agent_node, res->unreachable);
  if (!res->reason[0] && res->signal) /* killed by a signal (one process, or mpirun itself) */
    snprintf(res->reason, sizeof res->reason, "the %s was killed by signal %d (%s)",
             child_is_mpirun ? "mpirun" : "process", res->signal, strsignal(res->signal));
  if (!res->reason[0])
    snprintf(res->reason, sizeof res->reason, "the job exited with status %d and no rank "
             "printed an error", status);
}

/* The ranks' command line of one attempt (args: room for argc + 12 entries). A restart
 * continues in the run directory: --resume <run_dir> instead of the given --resume. */
static void attempt_args(char **args, const char *self, const char *nproc, char **given,
                         int ngiven, const char *resume_run) {
  int k = 0;
  if (nproc) {
    args[k++] = "mpirun";
    if (atol(nproc) > sysconf(_SC_NPROCESSORS_ONLN)) args[k++] = "--oversubscribe";
    args[k++] = "-np";
    args[k++] = (char *)nproc;
  }
  args[k++] = (char *)self;
  args[k++] = "train";
  memcpy(args + k, given, sizeof(char *) * (size_t)ngiven);
  k += ngiven;
  if (resume_run) {
    args[k++] = "--resume";
    args[k++] = (char *)resume_run;
  }
  args[k] = NULL;
}

/* Restart after a failure: say from where, in train.log and the registry's restart count. */
static void note_restart(const char *output_dir, const char *run_dir, long attempt,
                         long max_restarts, const char *reason) {
  char *ckpt = NULL;
  long step = -1;
  if (run_dir && loom_run_dir_newest_checkpoint(run_dir, &ckpt, &step)) loom_err_clear();
  bool forked = run_dir && !ckpt && (ckpt = fork_start(run_dir)) != NULL;
  char *line = loom_sprintf("restart %ld of %ld after: %s; %s%s%s", attempt + 1, max_restarts,
                            reason, ckpt ? "resuming from " : "",
                            ckpt ? ckpt : run_dir ? "no complete checkpoint: from step 0"
                                                  : "the run directory was not created yet",
                            forked ? " (the checkpoint the run was forked from)" : "");
  fprintf(stderr, "loom train: %s\n", line);
  if (run_dir) log_line(run_dir, line);
  if (run_dir) registry_restarts(output_dir, run_dir, attempt + 1);
  free(line);
  free(ckpt);
}

/* The end of an attempt that loom did not report: recorded; whether to try again. *rc: the
 * launcher's exit status so far. */
static bool after_unreported(const char *output_dir, const char *run_dir, attempt_result *res,
                             int status, int *rc) {
  unreported_reason(res, status);
  if (killed_by) { /* a second signal: the job was killed at once, on request */
    char *why = loom_sprintf("stopped at once by a second %s (killed; it continues from the "
                             "newest complete checkpoint)", signal_name(killed_by));
    fprintf(stderr, "loom train: %s\n", why);
    if (run_dir) record_unreported(output_dir, run_dir, "stopped", signal_name(stop_signal), why);
    free(why);
    *rc = 128 + stop_signal;
    return false;
  }
  fprintf(stderr, "loom train: the job failed: %s\n", res->reason);
  if (run_dir) record_unreported(output_dir, run_dir, "failed", NULL, res->reason);
  *rc = 1;
  if (!stop_signal) return true;
  fprintf(stderr, "loom train: stopping on %s; not restarting\n", signal_name(stop_signal));
  return false;
}

/* The restarts are spent: say so with the last failure, in train.log too; a node that could not
 * be reached (its daemon did not start, or Open MPI lost it) is named, with the way on without
 * it: resume on the nodes left, in a layout for their ranks. */
static void give_up(const char *run_dir, long max_restarts, const attempt_result *res) {
  const char *node = res->agent_node[0] ? res->agent_node : res->lost_node;
  const char *s = max_restarts == 1 ? "" : "s";
  char *line = node[0] ? loom_sprintf("giving up after %ld restart%s: %s; to go on without node "
                                      "%s, resume the run on the nodes left with a layout for "
                                      "their ranks (loom train --resume %s parallel.dp=...)",
                                      max_restarts, s, res->reason, node,
                                      run_dir ? run_dir : "<run directory>")
                       : loom_sprintf("giving up after %ld restart%s; the last failure: %s",
                                      max_restarts, s, res->reason);
  fprintf(stderr, "loom train: %s\n", line);
  if (run_dir) log_line(run_dir, line);
  free(line);
}

static void install_handlers(void) {
  snprintf(stop_path, sizeof stop_path, "/tmp/loom-stop.%ld", (long)getpid());
  unlink(stop_path);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
}

int loom_cli_train_supervise(const loom_cli_opt *opts, int argc, char **argv, const char *nproc,
                             long max_restarts, const char *output_dir) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "loom train: cannot find the loom executable\n");
    return 1;
  }
  self[n] = 0;
  if (geteuid() == 0) { /* Open MPI refuses root unless told it is deliberate */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  install_handlers();
  char **args = loom_calloc((size_t)argc + 12, sizeof(char *));
  char report[] = "/tmp/loom-report.XXXXXX";
  int rc = 1;
  char *run_dir = NULL;
  /* the ranks' arguments: train's as given, without the supervisor's own options; a restart
   * also leaves out --resume (it continues in the run directory) */
  static const char *const own[] = {"--nproc", "--max-restarts", NULL};
  static const char *const own_resume[] = {"--nproc", "--max-restarts", "--resume", NULL};
  char **first_args = loom_calloc((size_t)argc + 1, sizeof(char *));
  char **restart_args = loom_calloc((size_t)argc + 1, sizeof(char *));
  int nfirst = loom_cli_without(opts, argc, argv, 1, own, first_args);
  int nrestart = loom_cli_without(opts, argc, argv, 1, own_resume, restart_args);
  for (long attempt = 0;; attempt++) {
    bool restart = attempt > 0 && run_dir; /* a restart continues in the run directory */
    attempt_args(args, self, nproc, restart ? restart_args : first_args,
                 restart ? nrestart : nfirst, restart ? run_dir : NULL);
    int fd = mkstemp(report);
    if (fd < 0) {
      fprintf(stderr, "loom train: cannot create a report file in /tmp: %s\n", strerror(errno));
      break;
    }
    close(fd);
    attempt_result res = {.exited_rank = -1, .stopped = -1};
    int status = launch(args, report, restart, &res);
    unlink(report);
    strcpy(report, "/tmp/loom-report.XXXXXX");
    if (res.run_dir) {
      free(run_dir);
      run_dir = res.run_dir;
    }
    if (res.stopped >= 0 || status == 0 || res.reported) { /* loom's own end: as it says */
      rc = res.stopped > 0 ? 128 + res.stopped : status == 0 ? 0 : 1;
      break;
    }
    if (!after_unreported(output_dir, run_dir, &res, status, &rc)) break;
    if (attempt >= max_restarts) {
      if (max_restarts > 0)
        give_up(run_dir, max_restarts, &res);
      break;
    }
    note_restart(output_dir, run_dir, attempt, max_restarts, res.reason);
  }
  unlink(stop_path);
  free(run_dir);
  free(args), free(first_args), free(restart_args);
  return rc;
}

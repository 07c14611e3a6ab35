/* Stopping a run early and cleanly. SIGINT (Ctrl-C), SIGTERM (a scheduler's preemption, Slurm
 * at the time limit, `kill`) and SIGUSR1 (Slurm's --signal=USR1@SECONDS before the limit) only
 * set a flag: the rank finishes the step it is in, then every rank agrees at the end of the
 * step whether any of them was signalled (a signal may reach only some ranks: one maximum
 * over the job), and they stop together at that step: a checkpoint, summary.json and the
 * registry say "stopped", and the process exits with 128 + the signal (130, 143, 138). A
 * second signal to the same process ends it at once (the default action). The `loom train
 * --nproc` supervisor and the sweep runner ask through a file instead (LOOM_STOP_FILE holding
 * the signal's number): mpirun turns its own SIGINT/SIGTERM into a kill of every rank one
 * second later, so the job is kept out of their reach. SIGPIPE is ignored: a closed stdout or
 * stderr (`loom train ... | head`) stops the printing, never the training.
 *
 * Where the handler runs: oneDNN 2.6's JIT GEMM kernels (Debian 12's libdnnl2) point rsp at a
 * heap buffer while they run (oneDNN issue #4845, fixed upstream in 3.11 by #4855). A signal
 * delivered there has the kernel write its frame below that rsp, into the heap, and glibc
 * aborts later in free() ("corrupted size vs. prev_size"). So the handler runs on an
 * alternate stack (SA_ONSTACK), and the OpenMP workers, which run those kernels too, block the
 * stop signals: the process-directed signal reaches the main thread (or a thread of MPI's,
 * which never runs them). */
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "train/run_internal.h"

static volatile sig_atomic_t pending;  /* the first stop signal this process received (0: none) */
static volatile sig_atomic_t announce; /* say so on stderr when it arrives (the lead, not quiet) */

static void on_stop_signal(int sig) {
  if (pending) { /* the second: at once, as the default action would */
    signal(sig, SIG_DFL);
    raise(sig); /* delivered when this handler returns */
    return;
  }
  pending = sig;
  static const char note[] = "\nloom train: stopping after this step with a checkpoint (send "
                             "the signal again to stop at once)\n";
  if (announce) {
    ssize_t w = write(STDERR_FILENO, note, sizeof note - 1);
    (void)w;
  }
}

/* The calling thread's signal frames go on a stack of their own, never where rsp points. */
static void alt_stack_install(void) {
  long want = sysconf(_SC_SIGSTKSZ); /* the CPU's xsave area (AMX tiles: 11 KB) included */
  size_t size = want > 0 && (size_t)want * 4 > 65536 ? (size_t)want * 4 : 65536;
  /* mapped, not malloc'ed: a frame on it never lies beside the heap's chunks */
  void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  stack_t ss = {.ss_sp = mem, .ss_size = size, .ss_flags = 0};
  if (mem != MAP_FAILED && sigaltstack(&ss, NULL) == 0) return; /* kept for the process's life */
  int err = errno;
  if (mem != MAP_FAILED) munmap(mem, size);
  fprintf(stderr, "loom train: warning: no alternate signal stack (%s): a stop signal during a "
                  "oneDNN GEMM may corrupt the heap\n", strerror(err));
}

/* The OpenMP workers (those there are and those the pool starts later: a thread inherits the
 * mask of the one that starts it) never take the stop signals. */
static void workers_block(const sigset_t *stop) {
  sigset_t was;
  pthread_sigmask(SIG_BLOCK, stop, &was); /* the workers started in the region inherit it */
#pragma omp parallel num_threads(omp_get_max_threads())
  if (omp_get_thread_num() != 0) pthread_sigmask(SIG_BLOCK, stop, NULL);
  pthread_sigmask(SIG_SETMASK, &was, NULL);
}

void loom_train_signals_install(void) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGUSR1);
  workers_block(&stop);
  alt_stack_install();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART | SA_ONSTACK; /* reads, writes, waits go on: the step finishes */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  signal(SIGPIPE, SIG_IGN); /* a closed pipe is EPIPE on the write: progress.c stops printing */
}

void loom_run_stop_announce(bool on) { announce = on; }

const char *loom_signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

void loom_train_request_stop(const char *stop_file, int sig) {
  char num[4] = {(char)('0' + sig / 10 % 10), (char)('0' + sig % 10), '\n', 0};
  int fd = open(stop_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  ssize_t w = write(fd, sig >= 10 ? num : num + 1, sig >= 10 ? 3 : 2);
  close(fd);
  (void)w;
}

/* The signal asked for through LOOM_STOP_FILE (its first number), 0 when it does not exist. */
static int stop_file_signal(void) {
  const char *path = getenv("LOOM_STOP_FILE");
  if (!path || !*path || access(path, F_OK)) return 0;
  FILE *f = fopen(path, "r");
  int sig = 0;
  if (f && fscanf(f, "%d", &sig) != 1) sig = 0;
  if (f) fclose(f);
  return sig > 0 ? sig : SIGTERM;
}

int loom_run_stop_agree(loom_run *run) {
  double sig[1] = {pending ? (double)pending : (double)stop_file_signal()};
  if (run->ranks.job.world > 1) { /* control traffic: the step's counters stay as they were */
    loom_comm_stats saved = loom_comm_counters;
    loom_comm_allreduce_f64(&run->ranks.job.world_comm, sig, 1, LOOM_OP_MAX);
    loom_comm_counters = saved;
  }
  return (int)sig[0];
}

/* path as one shell word: as it is when the shell leaves it alone, else in '...' */
static char *shell_word(const char *path) {
  static const char plain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                              "@%_+=:,./-";
  if (path[strspn(path, plain)] == 0) return loom_strdup(path);
  char *out = loom_malloc(4 * strlen(path) + 3), *o = out;
  *o++ = '\'';
  for (const char *c = path; *c; c++) {
    if (*c == '\'') o += sprintf(o, "'\\''");
    else *o++ = *c;
  }
  strcpy(o, "'");
  return out;
}

char *loom_run_resume_command(const loom_run *run) {
  char *dir = shell_word(run->out.dir);
  char *cmd = run->ranks.job.world > 1
                  ? loom_sprintf("loom train --resume %s --nproc %d", dir, run->ranks.job.world)
                  : loom_sprintf("loom train --resume %s", dir);
  free(dir);
  return cmd;
}

int loom_run_stopped(loom_run *run, const loom_train_opts *o) {
  char by[64];
  if (run->stop.signal) snprintf(by, sizeof by, "%s", loom_signal_name(run->stop.signal));
  else snprintf(by, sizeof by, "--stop-after %ld", o->stop_after);
  char *resume = loom_run_resume_command(run);
  int rc = loom_run_agree(run, loom_run_report_summary(run, "stopped", by, resume));
  if (!rc) {
    if (run->stop.signal)
      loom_progress_note(&run->out.progress,
                         "stopped by %s after step %ld of %ld (checkpoint_%ld saved); to "
                         "continue: %s",
                         by, run->state.step, run->cfg->training.steps, run->state.step, resume);
    else
      loom_progress_note(&run->out.progress, "stopping after step %ld as asked; to continue: %s",
                         run->state.step, resume);
    if (run->ranks.lead && run->out.progress.quiet && run->stop.signal) /* asked: say so */
      fprintf(stderr, "loom train: stopped by %s after step %ld; to continue: %s\n", by,
              run->state.step, resume);
    char line[32];
    snprintf(line, sizeof line, "stopped %d", run->stop.signal);
    if (run->ranks.lead) loom_run_report_supervisor(line);
  }
  free(resume);
  return rc;
}

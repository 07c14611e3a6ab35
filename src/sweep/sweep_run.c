/* The sweep runner: makes logs/sweep_<timestamp>/, writes the points' configs there when
 * they come from a sweep file, starts points through the launcher (up to --parallel at once
 * for the local one), waits for them, prints a coloured status line per event on a terminal
 * (plain text otherwise), keeps going past failures unless told to stop, and writes
 * state.tsv, summary.txt and summary.csv. A simulated point out of memory (OOM) is a result,
 * not a failure.
 *
 * Stopping: the first SIGINT, SIGTERM or SIGUSR1 writes its number to the points' stop file
 * (LOOM_STOP_FILE: each running `loom train` finishes its step, saves a checkpoint and ends
 * "stopped", mpirun's ranks together), no further point starts, the runner waits for the
 * running ones, records them STOPPED (the others stay PENDING) with the summary, and exits
 * with 128 + the signal; a second signal kills the running points at once. Continuing: the
 * newest execution of the same sweep that did not finish is taken up in its own directory
 * (--resume, or a rerun): finished points stay, stopped ones resume their runs from their
 * newest complete checkpoint, the rest start. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sweep/sweep_internal.h"
#include "sweep/sweep_launch.h"
#include "loom/core.h"
#include "loom/hw.h"
#include "loom/run_dir.h"
#include "loom/train.h"

typedef struct {
  const loom_sweep_run_opts *o;
  const loom_sweep_launcher *launcher;
  loom_launch_ctx ctx;
  loom_sweep_info info;
  loom_sweep_plan *plan;
  loom_point_result *res;
  pid_t *pids;          /* per point: running child, or 0 */
  double *started;      /* loom_now() at start */
  double *prior;        /* a continued sweep: the point's wall time in earlier executions */
  bool color;
  bool continued;       /* an unfinished execution taken up in its own directory */
  int done;             /* points with a final status */
} runner;

/* What the stop signal handler needs (async-signal-safe state only). */
static char stop_path[PATH_MAX];
static volatile sig_atomic_t stop_signal; /* the first stop signal (0: none) */
static volatile sig_atomic_t killed_by;   /* a second one: the running points were killed */
static pid_t *volatile live_pids;        /* the runner's pids array (0: not running) */
static const loom_sweep_point *volatile live_points; /* their points (ranks > 1: mpirun) */
static volatile int live_n;

static void on_stop_signal(int sig) {
  if (stop_signal) { /* the second: every running point at once */
    killed_by = sig;
    for (int i = 0; i < live_n; i++) /* mpirun ends its ranks (in groups of their own) */
      if (live_pids[i] > 0) kill(live_pids[i], live_points[i].ranks > 1 ? SIGTERM : SIGKILL);
    return;
  }
  stop_signal = sig;
  if (stop_path[0]) loom_train_request_stop(stop_path, sig);
  static const char note[] = "\nloom sweep: stopping: the running points finish their step and "
                             "save a checkpoint, no more start (send the signal again to kill "
                             "them at once)\n";
  ssize_t w = write(STDERR_FILENO, note, sizeof note - 1);
  (void)w;
}

static const int stop_signals[] = {SIGINT, SIGTERM, SIGUSR1};
enum { NSTOP = sizeof stop_signals / sizeof stop_signals[0] };

/* Install the stop handler (no SA_RESTART: a wait returns to the loop), keeping the old ones. */
static void signals_install(runner *r, struct sigaction *old) {
  stop_signal = killed_by = 0;
  live_pids = r->pids;
  live_points = r->plan->points;
  live_n = r->plan->n;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int k = 0; k < NSTOP; k++) sigaction(stop_signals[k], &sa, &old[k]);
}

static void signals_restore(const struct sigaction *old) {
  for (int k = 0; k < NSTOP; k++) sigaction(stop_signals[k], &old[k], NULL);
  live_n = 0;
  live_pids = NULL;
  live_points = NULL;
}

static const char *signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1"
                                                                               : "a signal";
}

/* Not finished: never run, or stopped by a signal (its run resumes). */
static bool to_run(const loom_point_result *res) {
  return res->status == LOOM_PT_PENDING || res->status == LOOM_PT_STOPPED;
}

static const char *status_color(loom_point_status s) {
  switch (s) {
    case LOOM_PT_SUCCESS: return "\033[32m";
    case LOOM_PT_FAILED: return "\033[31m";
    case LOOM_PT_SKIPPED: return "\033[33m";
    case LOOM_PT_PENDING: return "\033[34m";
    case LOOM_PT_OOM: return "\033[35m";
    default: return "\033[36m";
  }
}

/* "[ 2/8] SUCCESS  name  details" */
static void report(runner *r, int i, loom_point_status s, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void report(runner *r, int i, loom_point_status s, const char *label, const char *fmt, ...) {
  char details[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(details, sizeof details, fmt, ap);
  va_end(ap);
  int w = snprintf(NULL, 0, "%d", r->plan->n);
  printf("[%*d/%d] %s%-9s%s %s%s%s\n", w, i + 1, r->plan->n, r->color ? status_color(s) : "",
         label, r->color ? "\033[0m" : "", r->plan->points[i].name, details[0] ? "  " : "", details);
  fflush(stdout);
}

static int make_log_dir(const char *root, char **out) {
  char stamp[32];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  if (loom_mkdir_p(root)) return -1;
  for (int k = 1;; k++) {
    char *dir = k == 1 ? loom_sprintf("%s/sweep_%s", root, stamp)
                       : loom_sprintf("%s/sweep_%s_%d", root, stamp, k);
    if (mkdir(dir, 0755) == 0) {
      char *abs = realpath(dir, NULL);
      free(dir);
      *out = abs;
      return abs ? 0 : loom_err("cannot resolve '%s'", root);
    }
    int e = errno;
    free(dir);
    if (e != EEXIST) return loom_err("cannot create a directory under '%s': %s", root, strerror(e));
  }
}

static int apply_skips(loom_sweep_plan *plan, const loom_sweep_run_opts *o) {
  for (int s = 0; s < o->nskip; s++) {
    bool found = false;
    for (int i = 0; i < plan->n; i++)
      if (!strcmp(plan->points[i].name, o->skip[s])) plan->points[i].skip = found = true;
    if (!found)
      return loom_err("--skip %s: no point has that name (the names are in manifest.txt, or "
                      "'loom sweep generate' prints them)", o->skip[s]);
  }
  return 0;
}

static void save_state(runner *r) {
  if (loom_sweep_state_write(&r->info, r->plan, r->res)) {
    loom_log("warning: %s", loom_errmsg());
    loom_err_clear();
  }
}

static void start_point(runner *r, int i) {
  loom_sweep_point *p = &r->plan->points[i];
  loom_point_result *res = &r->res[i];
  if (p->skip) {
    res->status = LOOM_PT_SKIPPED;
    snprintf(res->note, sizeof res->note, "skip flag set");
    report(r, i, res->status, "SKIPPED", "(skip flag)");
    r->done++;
    return;
  }
  loom_launch_result lr = {0};
  r->started[i] = loom_now();
  res->note[0] = 0; /* an earlier execution's "stopped by ..." */
  res->exit_code = -1;
  if (r->launcher->start(&r->ctx, p, res->log_path, &lr)) {
    res->status = LOOM_PT_FAILED;
    snprintf(res->note, sizeof res->note, "could not start: %s", loom_errmsg());
    loom_err_clear();
    report(r, i, res->status, "FAILED", "%s", res->note);
    r->done++;
  } else if (lr.pid > 0) {
    r->pids[i] = lr.pid;
    res->status = LOOM_PT_PENDING;
    report(r, i, LOOM_PT_PENDING, "RUNNING", "(%d rank%s)%s%s log: %s", p->ranks,
           p->ranks == 1 ? "" : "s", p->resume_dir ? " resuming " : "",
           p->resume_dir ? p->resume_dir : "", res->log_path);
  } else {
    res->status = lr.status;
    res->wall_s = loom_now() - r->started[i];
    snprintf(res->job_id, sizeof res->job_id, "%s", lr.job_id);
    snprintf(res->note, sizeof res->note, "%s", lr.note);
    report(r, i, res->status, loom_point_status_label(res->status), "(%d rank%s) %s", p->ranks,
           p->ranks == 1 ? "" : "s", lr.note);
    r->done++;
  }
  save_state(r);
}

/* Wait for one child; returns false when none is running. */
static bool reap_one(runner *r, bool *failed) {
  int st;
  pid_t pid;
  do pid = waitpid(-1, &st, 0);
  while (pid < 0 && errno == EINTR);
  if (pid < 0) return false;
  int i = 0;
  while (i < r->plan->n && r->pids[i] != pid) i++;
  if (i == r->plan->n) return true; /* not one of ours */
  r->pids[i] = 0;
  loom_point_result *res = &r->res[i];
  res->wall_s = r->prior[i] + loom_now() - r->started[i];
  res->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  res->status = res->exit_code == 0 ? LOOM_PT_SUCCESS : LOOM_PT_FAILED;
  int code = res->exit_code; /* loom train stopped by a signal: 128 + it, after a checkpoint */
  if (code && (stop_signal || code == 128 + SIGINT || code == 128 + SIGTERM ||
               code == 128 + SIGUSR1)) {
    res->status = LOOM_PT_STOPPED;
    if (killed_by)
      snprintf(res->note, sizeof res->note, "killed at once by a second %s (resumes from its "
               "newest complete checkpoint, if any)", signal_name(killed_by));
    else
      snprintf(res->note, sizeof res->note, "stopped by %s (exit status %d): its run saved a "
               "checkpoint and resumes from it",
               signal_name(stop_signal ? stop_signal : code - 128), code);
    report(r, i, res->status, "STOPPED", "%.1f s, %s", res->wall_s, res->note);
  } else if (res->status == LOOM_PT_FAILED) {
    *failed = true;
    if (WIFSIGNALED(st)) snprintf(res->note, sizeof res->note, "killed by signal %d", WTERMSIG(st));
    else snprintf(res->note, sizeof res->note, "exit status %d", res->exit_code);
    char why[256];
    loom_sweep_log_error(res->log_path, why, sizeof why);
    if (why[0]) snprintf(res->note + strlen(res->note), sizeof res->note - strlen(res->note),
                         ": %s", why);
    report(r, i, res->status, "FAILED", "%.1f s, %s; see %s", res->wall_s, res->note,
           res->log_path);
  } else {
    report(r, i, res->status, "SUCCESS", "%.1f s", res->wall_s);
  }
  r->done++;
  save_state(r);
  return true;
}

static void run_all(runner *r) {
  int next = 0, running = 0, n = r->plan->n;
  int limit = r->launcher->concurrent && r->o->parallel > 1 ? r->o->parallel : 1;
  bool failed = false;
  for (;;) {
    while (running < limit && !stop_signal && !(failed && r->o->stop_on_failure)) {
      while (next < n && !to_run(&r->res[next])) next++; /* finished in an earlier execution */
      if (next >= n) break;
      int i = next++;
      start_point(r, i);
      if (r->pids[i] > 0) running++;
      if (r->res[i].status == LOOM_PT_FAILED) failed = true;
    }
    if (running == 0) break;
    if (reap_one(r, &failed)) running--;
    else break;
  }
  for (int i = next; i < n; i++) {
    if (!to_run(&r->res[i])) continue;
    if (stop_signal) { /* not started: the next execution takes it up */
      snprintf(r->res[i].note, sizeof r->res[i].note, "not started: the sweep was stopped by %s",
               signal_name(stop_signal));
      continue;
    }
    r->res[i].status = LOOM_PT_SKIPPED;
    snprintf(r->res[i].note, sizeof r->res[i].note, "not run: an earlier point failed and "
             "--stop-on-failure was given");
    report(r, i, LOOM_PT_SKIPPED, "SKIPPED", "(an earlier point failed: --stop-on-failure)");
  }
}

/* The "# sweep: NAME" and "# launcher: L" header lines of a state.tsv match, and whether any
 * point is PENDING or STOPPED. */
static bool state_matches(const char *path, const char *name, const char *launcher,
                          bool *unfinished) {
  char *data;
  size_t len;
  *unfinished = false;
  if (loom_read_file(path, &data, &len)) return loom_err_clear(), false;
  char *want_name = loom_sprintf("# sweep: %s\n", name);
  char *want_l = loom_sprintf("# launcher: %s\n", launcher);
  bool same = strstr(data, want_name) && strstr(data, want_l);
  bool ran = false; /* a --dry-run ran nothing: not an execution to continue or to stop at */
  for (char *l = data; same && l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    if (*l == '#') continue;
    const char *tab = strchr(l, '\t');
    if (tab && (!strncmp(tab + 1, "PENDING\t", 8) || !strncmp(tab + 1, "STOPPED\t", 8)))
      *unfinished = true;
    if (tab && strncmp(tab + 1, "DRY-RUN\t", 8)) ran = true;
  }
  free(want_name), free(want_l), free(data);
  return same && ran;
}

/* The newest execution of this sweep (name, launcher) under root, if it did not finish: its
 * directory (malloc'd); NULL when the newest finished or there is none. */
static char *unfinished_execution(const char *root, const char *name, const char *launcher) {
  DIR *d = opendir(root);
  if (!d) return NULL;
  char *newest = NULL;
  bool newest_unfinished = false;
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, "sweep_", 6)) continue;
    char *state = loom_sprintf("%s/%s/state.tsv", root, e->d_name);
    bool unfinished;
    if (state_matches(state, name, launcher, &unfinished) &&
        (!newest || strcmp(e->d_name, strrchr(newest, '/') + 1) > 0)) {
      free(newest);
      newest = loom_sprintf("%s/%s", root, e->d_name);
      newest_unfinished = unfinished;
    }
    free(state);
  }
  closedir(d);
  char *abs = newest && newest_unfinished ? realpath(newest, NULL) : NULL; /* as logs in ... */
  free(newest);
  return abs;
}

/* Take up the execution in dir: its results for the points of plan (the same names), its
 * configs, and for each point not finished, the run to resume. */
static int take_up(runner *r, loom_sweep_plan *plan, const char *dir) {
  loom_sweep_info info;
  loom_sweep_plan old;
  loom_point_result *old_res;
  int rc = loom_sweep_state_read(dir, &info, &old, &old_res);
  bool same = !rc && old.n == plan->n;
  int *match = loom_calloc((size_t)plan->n + 1, sizeof *match);
  for (int i = 0; same && i < plan->n; i++) {
    match[i] = -1;
    for (int j = 0; j < old.n && match[i] < 0; j++)
      if (!strcmp(old.points[j].name, plan->points[i].name)) match[i] = j;
    same = match[i] >= 0;
  }
  if (!rc && !same)
    rc = loom_err("the points of sweep %s differ from those of its execution in %s (the sweep "
                  "file or the overrides changed): run it without --resume for a new execution",
                  plan->name, dir);
  if (!rc) {
    r->info = info;
    r->res = loom_calloc((size_t)plan->n + 1, sizeof *r->res);
    for (int i = 0; i < plan->n; i++) {
      loom_point_result *res = &r->res[i];
      loom_sweep_point *p = &plan->points[i];
      *res = old_res[match[i]];
      res->log_path = loom_strdup(old_res[match[i]].log_path);
      free(p->config_path);
      p->config_path = loom_strdup(old.points[match[i]].config_path);
      if (!to_run(res)) continue;
      char *run_dir = loom_sweep_point_run_dir(&r->info, p, res), *ckpt = NULL;
      long step;
      if (run_dir && loom_run_dir_finished(run_dir)) { /* it ended after the runner did */
        res->status = LOOM_PT_SUCCESS;
        snprintf(res->note, sizeof res->note, "finished after its sweep runner stopped");
      } else if (run_dir && !loom_run_dir_newest_checkpoint(run_dir, &ckpt, &step) && ckpt) {
        p->resume_dir = loom_strdup(run_dir);
      }
      loom_err_clear();
      free(ckpt), free(run_dir);
    }
  }
  free(match);
  loom_point_results_free(old_res, old.n);
  loom_sweep_plan_free(&old);
  if (rc) loom_sweep_info_free(&info);
  return rc;
}

static int prepare(runner *r, loom_sweep_plan *plan, const loom_sweep_run_opts *o) {
  r->o = o;
  r->plan = plan;
  r->launcher = loom_sweep_launcher_find(o->launcher ? o->launcher : "local");
  if (!r->launcher || apply_skips(plan, o)) return -1;
  if (o->hardware && !r->launcher->uses_hardware)
    return loom_err("--hardware %s: only --launcher sim takes a hardware profile (the %s "
                    "launcher runs on real machines)", o->hardware, r->launcher->name);
  const char *hardware = o->hardware ? o->hardware : plan->hardware[0] ? plan->hardware : NULL;
  if (r->launcher->setup && r->launcher->setup(o, hardware)) return -1;
  const char *root = o->log_root ? o->log_root : "logs";
  char *prev = o->resume && !o->dry_run ? unfinished_execution(root, plan->name, r->launcher->name)
                                        : NULL;
  if (!prev && o->resume == 1 && !o->dry_run)
    return loom_err("--resume: no execution of sweep %s (launcher %s) under %s/ was left "
                    "unfinished (points PENDING or STOPPED in its state.tsv); run it without "
                    "--resume for a new execution", plan->name, r->launcher->name, root);
  if (prev && take_up(r, plan, prev)) {
    if (o->resume == 1) return free(prev), -1;
    printf("sweep %s: not continuing %s: %s; starting a new execution\n", plan->name, prev,
           loom_errmsg());
    loom_err_clear();
    free(prev);
    prev = NULL;
  }
  r->continued = prev != NULL;
  free(prev);
  if (!r->continued && make_log_dir(root, &r->info.log_dir)) return -1;
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) return loom_err("cannot read the current directory");
  if (!r->continued) {
    r->info.sweep_name = loom_strdup(plan->name);
    const char *slash = strrchr(r->info.log_dir, '/');
    r->info.sweep_id = loom_strdup(slash ? slash + 1 : r->info.log_dir);
    r->info.launcher = loom_strdup(r->launcher->name);
  }
  r->info.parallel = r->launcher->concurrent && o->parallel > 1 ? o->parallel : 1;
  if (!r->continued && plan->n && !plan->points[0].config_path) { /* keep the configs */
    char *dir = loom_sprintf("%s/configs", r->info.log_dir);
    int rc = loom_sweep_write(plan, dir, NULL, false);
    free(dir);
    if (rc) return -1;
  }
  for (int i = 0; i < plan->n; i++) { /* children may run elsewhere: absolute config paths */
    char *abs = realpath(plan->points[i].config_path, NULL);
    if (!abs) return loom_err("config '%s' is missing", plan->points[i].config_path);
    free(plan->points[i].config_path);
    plan->points[i].config_path = abs;
  }
  r->pids = loom_calloc((size_t)plan->n + 1, sizeof *r->pids);
  r->started = loom_calloc((size_t)plan->n + 1, sizeof *r->started);
  r->prior = loom_calloc((size_t)plan->n + 1, sizeof *r->prior);
  if (!r->continued) {
    r->res = loom_calloc((size_t)plan->n + 1, sizeof *r->res);
    for (int i = 0; i < plan->n; i++) {
      r->res[i].exit_code = -1;
      r->res[i].log_path = loom_sprintf("%s/%s.log", r->info.log_dir, plan->points[i].name);
    }
  }
  for (int i = 0; i < plan->n && r->continued; i++)
    if (r->res[i].status == LOOM_PT_STOPPED) r->prior[i] = r->res[i].wall_s;
  r->ctx = (loom_launch_ctx){.opts = o, .log_dir = r->info.log_dir,
                             .sweep_name = r->info.sweep_name, .sweep_id = r->info.sweep_id};
  r->ctx.cwd = loom_strdup(cwd);
  r->ctx.append = r->continued;
  snprintf(stop_path, sizeof stop_path, "%s/stop", r->info.log_dir);
  unlink(stop_path); /* a stop of an earlier execution */
  r->ctx.stop_file = stop_path;
  if (r->launcher->uses_hardware) {
    free(r->info.hardware);
    r->info.hardware = loom_strdup(hardware ? hardware : "h100-sxm");
    r->ctx.hardware = r->info.hardware;
  }
  r->color = o->color > 0 || (o->color < 0 && isatty(STDOUT_FILENO) && !getenv("NO_COLOR"));
  if (!strcmp(r->launcher->name, "local") && !o->dry_run) { /* as loom train's MFU */
    char why[256];
    r->info.peak_flops[0] = loom_mfu_peak("fp32", why, sizeof why);
    r->info.peak_flops[1] = loom_mfu_peak("bf16", why, sizeof why);
  }
  return 0;
}

int loom_sweep_run(loom_sweep_plan *plan, const loom_sweep_run_opts *o, char **log_dir) {
  runner r;
  memset(&r, 0, sizeof r);
  *log_dir = NULL;
  double t0 = loom_now();
  int rc = prepare(&r, plan, o);
  struct sigaction old[NSTOP];
  if (!rc) {
    double before = r.continued ? r.info.wall_s : 0; /* earlier executions' wall time */
    int left = 0, resumes = 0;
    for (int i = 0; i < plan->n; i++) {
      left += to_run(&r.res[i]);
      resumes += plan->points[i].resume_dir != NULL;
    }
    if (r.continued)
      printf("sweep %s: continuing the execution in %s: %d of %d point%s to run (%d resume%s "
             "from a checkpoint), launcher %s, %d at a time\n", plan->name, r.info.log_dir, left,
             plan->n, plan->n == 1 ? "" : "s", resumes, resumes == 1 ? "s" : "", r.launcher->name,
             r.info.parallel);
    else
      printf("sweep %s: %d point%s, launcher %s, %d at a time; logs in %s\n", plan->name,
             plan->n, plan->n == 1 ? "" : "s", r.launcher->name, r.info.parallel, r.info.log_dir);
    save_state(&r);
    signals_install(&r, old);
    run_all(&r);
    signals_restore(old);
    r.info.wall_s = before + loom_now() - t0;
    save_state(&r);
    rc = loom_sweep_write_summary(&r.info, plan, r.res);
  }
  if (!rc) {
    int failed = 0, ok = 0, skipped = 0, oom = 0, stopped = 0, pending = 0;
    for (int i = 0; i < plan->n; i++) {
      failed += r.res[i].status == LOOM_PT_FAILED;
      ok += r.res[i].status == LOOM_PT_SUCCESS;
      skipped += r.res[i].status == LOOM_PT_SKIPPED;
      oom += r.res[i].status == LOOM_PT_OOM;
      stopped += r.res[i].status == LOOM_PT_STOPPED;
      pending += r.res[i].status == LOOM_PT_PENDING;
    }
    char oom_text[48] = "";
    if (oom) snprintf(oom_text, sizeof oom_text, ", %d out of memory", oom);
    if (stop_signal) {
      printf("stopped by %s after %.1f s: %d succeeded%s, %d failed, %d stopped (their runs "
             "saved a checkpoint), %d not started; summary: %s/summary.txt\n",
             signal_name(stop_signal), r.info.wall_s, ok, oom_text, failed, stopped, pending,
             r.info.log_dir);
      if (o->resume_hint) printf("to continue: %s\n", o->resume_hint);
      rc = 128 + stop_signal;
    } else {
      printf("done in %.1f s: %d succeeded%s, %d failed, %d skipped; summary: %s/summary.txt\n",
             r.info.wall_s, ok, oom_text, failed, skipped, r.info.log_dir);
      rc = failed ? 1 : 0;
    }
    unlink(stop_path);
    *log_dir = loom_strdup(r.info.log_dir);
  }
  stop_path[0] = 0;
  loom_point_results_free(r.res, plan->n);
  free(r.pids);
  free(r.started);
  free(r.prior);
  free((char *)r.ctx.cwd);
  loom_sweep_info_free(&r.info);
  return rc;
}

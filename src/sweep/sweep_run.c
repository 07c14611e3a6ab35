/* The sweep runner: makes logs/sweep_<timestamp>/, writes the points' configs there when
 * they come from a sweep file, starts points through the launcher (up to --parallel at once
 * for the local one), waits for them, prints a coloured status line per event on a terminal
 * (plain text otherwise), keeps going past failures unless told to stop, and writes
 * state.tsv, summary.txt and summary.csv. A simulated point out of memory (OOM) is a result,
 * not a failure. */
#include <errno.h>
#include <limits.h>
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

typedef struct {
  const loom_sweep_run_opts *o;
  const loom_sweep_launcher *launcher;
  loom_launch_ctx ctx;
  loom_sweep_info info;
  loom_sweep_plan *plan;
  loom_point_result *res;
  pid_t *pids;          /* per point: running child, or 0 */
  double *started;      /* loom_now() at start */
  bool color;
  int done;             /* points with a final status */
} runner;

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
  if (r->launcher->start(&r->ctx, p, res->log_path, &lr)) {
    res->status = LOOM_PT_FAILED;
    snprintf(res->note, sizeof res->note, "could not start: %s", loom_errmsg());
    loom_err_clear();
    report(r, i, res->status, "FAILED", "%s", res->note);
    r->done++;
  } else if (lr.pid > 0) {
    r->pids[i] = lr.pid;
    res->status = LOOM_PT_PENDING;
    report(r, i, LOOM_PT_PENDING, "RUNNING", "(%d rank%s) log: %s", p->ranks,
           p->ranks == 1 ? "" : "s", res->log_path);
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
  res->wall_s = loom_now() - r->started[i];
  res->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  res->status = res->exit_code == 0 ? LOOM_PT_SUCCESS : LOOM_PT_FAILED;
  if (res->status == LOOM_PT_FAILED) {
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
  int next = 0, running = 0;
  int limit = r->launcher->concurrent && r->o->parallel > 1 ? r->o->parallel : 1;
  bool failed = false;
  while (next < r->plan->n || running > 0) {
    while (running < limit && next < r->plan->n && !(failed && r->o->stop_on_failure)) {
      int i = next++;
      start_point(r, i);
      if (r->pids[i] > 0) running++;
      if (r->res[i].status == LOOM_PT_FAILED) failed = true;
    }
    if (running == 0) break;
    if (reap_one(r, &failed)) running--;
    else break;
  }
  for (int i = next; i < r->plan->n; i++) {
    r->res[i].status = LOOM_PT_SKIPPED;
    snprintf(r->res[i].note, sizeof r->res[i].note, "not run: an earlier point failed and "
             "--stop-on-failure was given");
    report(r, i, LOOM_PT_SKIPPED, "SKIPPED", "(an earlier point failed: --stop-on-failure)");
  }
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
  if (make_log_dir(o->log_root ? o->log_root : "logs", &r->info.log_dir)) return -1;
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) return loom_err("cannot read the current directory");
  r->info.sweep_name = loom_strdup(plan->name);
  const char *slash = strrchr(r->info.log_dir, '/');
  r->info.sweep_id = loom_strdup(slash ? slash + 1 : r->info.log_dir);
  r->info.launcher = loom_strdup(r->launcher->name);
  r->info.parallel = r->launcher->concurrent && o->parallel > 1 ? o->parallel : 1;
  if (plan->n && !plan->points[0].config_path) { /* from a sweep file: keep the configs */
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
  r->res = loom_calloc((size_t)plan->n + 1, sizeof *r->res);
  r->pids = loom_calloc((size_t)plan->n + 1, sizeof *r->pids);
  r->started = loom_calloc((size_t)plan->n + 1, sizeof *r->started);
  for (int i = 0; i < plan->n; i++) {
    r->res[i].exit_code = -1;
    r->res[i].log_path = loom_sprintf("%s/%s.log", r->info.log_dir, plan->points[i].name);
  }
  r->ctx = (loom_launch_ctx){o, r->info.log_dir, r->info.sweep_name, r->info.sweep_id, NULL, NULL};
  r->ctx.cwd = loom_strdup(cwd);
  if (r->launcher->uses_hardware) {
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
  if (!rc) {
    printf("sweep %s: %d point%s, launcher %s, %d at a time; logs in %s\n", plan->name,
           plan->n, plan->n == 1 ? "" : "s", r.launcher->name, r.info.parallel, r.info.log_dir);
    save_state(&r);
    run_all(&r);
    r.info.wall_s = loom_now() - t0;
    save_state(&r);
    rc = loom_sweep_write_summary(&r.info, plan, r.res);
  }
  if (!rc) {
    int failed = 0, ok = 0, skipped = 0, oom = 0;
    for (int i = 0; i < plan->n; i++) {
      failed += r.res[i].status == LOOM_PT_FAILED;
      ok += r.res[i].status == LOOM_PT_SUCCESS;
      skipped += r.res[i].status == LOOM_PT_SKIPPED;
      oom += r.res[i].status == LOOM_PT_OOM;
    }
    char oom_text[48] = "";
    if (oom) snprintf(oom_text, sizeof oom_text, ", %d out of memory", oom);
    printf("done in %.1f s: %d succeeded%s, %d failed, %d skipped; summary: %s/summary.txt\n",
           r.info.wall_s, ok, oom_text, failed, skipped, r.info.log_dir);
    rc = failed ? 1 : 0;
    *log_dir = loom_strdup(r.info.log_dir);
  }
  loom_point_results_free(r.res, plan->n);
  free(r.pids);
  free(r.started);
  free((char *)r.ctx.cwd);
  loom_sweep_info_free(&r.info);
  return rc;
}

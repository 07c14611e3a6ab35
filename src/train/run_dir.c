/* Run-directory management: creating a run's directory or taking it over to resume (locked:
 * one job per run), resolving `--resume` (latest run, newest complete checkpoint), cleaning
 * up after an interrupted job, cutting the metrics of steps a resume redoes, and pruning
 * periodic checkpoints atomically (rename to *.pruned.tmp, sync, delete). Only world rank 0
 * modifies a run directory. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loom/checkpoint.h"
#include "loom/core.h"
#include "loom/fault.h"
#include "loom/run_dir.h"

/* N of "checkpoint_<N>" (digits only, no suffix), or -1. */
static long checkpoint_number(const char *name) {
  if (strncmp(name, "checkpoint_", 11) || !isdigit((unsigned char)name[11])) return -1;
  char *end;
  long n = strtol(name + 11, &end, 10);
  return *end ? -1 : n;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

/* "<anything><infix><digits>" (e.g. "summary.json.tmp.1234") */
static bool has_pid_suffix(const char *name, const char *infix) {
  const char *p = strstr(name, infix);
  if (!p) return false;
  p += strlen(infix);
  if (!*p) return false;
  for (; *p; p++)
    if (!isdigit((unsigned char)*p)) return false;
  return true;
}

static bool mtime_of(const char *path, struct timespec *t) {
  struct stat st;
  if (stat(path, &st) != 0) return false;
  *t = st.st_mtim;
  return true;
}

static int cmp_ts(const struct timespec *a, const struct timespec *b) {
  if (a->tv_sec != b->tv_sec) return a->tv_sec < b->tv_sec ? -1 : 1;
  if (a->tv_nsec != b->tv_nsec) return a->tv_nsec < b->tv_nsec ? -1 : 1;
  return 0;
}

int loom_run_dir_latest(const char *output_dir, char **run_dir) {
  *run_dir = NULL;
  DIR *d = opendir(output_dir);
  if (!d)
    return loom_err("--resume latest: cannot read the runs directory '%s' (run.output_dir): %s",
                    output_dir, strerror(errno));
  struct dirent *e;
  char *best = NULL;
  struct timespec best_t = {0, 0};
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char *dir = loom_sprintf("%s/%s", output_dir, e->d_name);
    char *cfg = loom_sprintf("%s/config.yaml", dir), *log = loom_sprintf("%s/train.log", dir);
    struct timespec t;
    bool run =
        loom_is_dir(dir) && loom_path_exists(cfg) && (mtime_of(log, &t) || mtime_of(cfg, &t));
    /* newest activity wins; equal times: the larger name (names start with a timestamp) */
    if (run && (!best || cmp_ts(&t, &best_t) > 0 ||
                (!cmp_ts(&t, &best_t) && strcmp(dir, best) > 0))) {
      free(best);
      best = dir;
      best_t = t;
      dir = NULL;
    }
    free(dir);
    free(cfg);
    free(log);
  }
  closedir(d);
  if (!best)
    return loom_err("--resume latest: no run under '%s' (run.output_dir; a run directory holds "
                    "config.yaml)", output_dir);
  *run_dir = best;
  return 0;
}

int loom_run_dir_newest_checkpoint(const char *run_dir, char **ckpt, long *step) {
  return loom_ckpt_newest_complete(run_dir, NULL, ckpt, step);
}

int loom_run_dir_newest_periodic(const char *run_dir, long below, char **ckpt, long *step) {
  *ckpt = NULL;
  *step = -1;
  DIR *d = opendir(run_dir);
  if (!d) return loom_err("cannot read the run directory '%s': %s", run_dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d))) {
    long n = checkpoint_number(e->d_name), s;
    if (n < 0 || n >= below || n <= *step) continue;
    char *dir = loom_sprintf("%s/%s", run_dir, e->d_name);
    if (loom_ckpt_check_complete(dir, &s) == 0) {
      free(*ckpt);
      *ckpt = dir;
      *step = n;
    } else {
      free(dir);
    }
  }
  closedir(d);
  loom_err_clear();
  return 0;
}

static char *strip_slashes(const char *path) {
  char *p = loom_strdup(path);
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') p[--n] = 0;
  return p;
}

/* A --resume argument that is a checkpoint directory (trainer state, marker or name). */
static bool names_checkpoint(const char *dir) {
  char *state = loom_sprintf("%s/trainer_state.json", dir);
  char *marker = loom_sprintf("%s/" LOOM_CKPT_MARKER, dir);
  const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
  bool is_ckpt = loom_path_exists(state) || loom_path_exists(marker) ||
                 checkpoint_number(base) >= 0 || !strcmp(base, "final_checkpoint");
  free(state);
  free(marker);
  return is_ckpt;
}

/* --resume naming a checkpoint (dir, taken over): it must be complete; its run is the
 * parent. */
static int resolve_checkpoint(char *dir, char **run_dir, char **ckpt) {
  long s;
  if (loom_ckpt_check_complete(dir, &s)) {
    free(dir);
    return loom_err_prefix("--resume: ");
  }
  char *copy = loom_strdup(dir);
  *run_dir = loom_strdup(dirname(copy));
  free(copy);
  *ckpt = dir;
  return 0;
}

/* --resume naming a directory that is not a checkpoint: it must be a run directory (one
 * with weights only is refused with the way to start from it). */
static int check_run_dir(const char *dir) {
  char *weights = loom_sprintf("%s/model.safetensors", dir);
  bool weights_only = loom_path_exists(weights); /* e.g. `loom ckpt import` output */
  free(weights);
  if (weights_only)
    return loom_err("--resume: '%s' has no trainer_state.json: it holds weights only (as `loom "
                    "ckpt import` writes) and cannot be resumed; start a new run from it with "
                    "checkpoint.init_from=%s", dir, dir);
  char *cfg = loom_sprintf("%s/config.yaml", dir);
  bool is_run = loom_path_exists(cfg);
  free(cfg);
  if (!is_run)
    return loom_err("--resume: '%s' is neither a run directory (no config.yaml) nor a "
                    "checkpoint (no trainer_state.json)", dir);
  return 0;
}

/* A forked run (its config.yaml records run.parent_checkpoint): before a checkpoint of its
 * own it resumes from the one it was forked from (lineage.c). */
static bool forked_run(const char *dir) {
  char *path = loom_sprintf("%s/config.yaml", dir);
  loom_config *cfg = loom_malloc(sizeof *cfg);
  loom_config_defaults(cfg);
  bool forked = loom_config_load(cfg, path) == 0 && cfg->run.parent_checkpoint[0];
  loom_err_clear();
  free(cfg);
  free(path);
  return forked;
}

int loom_run_dir_resolve(const char *arg, const char *output_dir, bool allow_none,
                         char **run_dir, char **ckpt) {
  *run_dir = *ckpt = NULL;
  char *dir = NULL;
  if (!strcmp(arg, "latest")) {
    if (loom_run_dir_latest(output_dir, &dir)) return LOOM_ERR;
  } else {
    if (!loom_is_dir(arg))
      return loom_err("--resume: '%s' is not a directory (give 'latest', a run directory "
                      "runs/<id>, or a checkpoint runs/<id>/checkpoint_<step>)", arg);
    dir = strip_slashes(arg);
    if (names_checkpoint(dir)) return resolve_checkpoint(dir, run_dir, ckpt);
    if (check_run_dir(dir)) {
      free(dir);
      return LOOM_ERR;
    }
  }
  long step;
  if (loom_run_dir_newest_checkpoint(dir, ckpt, &step)) {
    free(dir);
    return LOOM_ERR;
  }
  if (!*ckpt && !allow_none && !forked_run(dir)) {
    loom_err("--resume %s: run '%s' has no complete checkpoint (checkpoint_<step>/ with a "
             "COMPLETE marker); start the run again without --resume", arg, dir);
    free(dir);
    return LOOM_ERR;
  }
  *run_dir = dir;
  return 0;
}

static void append_name(char **list, const char *name) {
  char *s = loom_sprintf("%s%s%s", *list, **list ? ", " : "", name);
  free(*list);
  *list = s;
}

int loom_run_dir_clean(const char *run_dir, char **removed) {
  *removed = loom_strdup("");
  DIR *d = opendir(run_dir);
  if (!d) return loom_err("cannot read the run directory '%s': %s", run_dir, strerror(errno));
  struct dirent *e;
  int rc = 0;
  char **names = NULL;
  int n = 0;
  while ((e = readdir(d))) { /* collect first: no removal while the directory is read */
    const char *nm = e->d_name;
    bool stale =
        ends_with(nm, ".tmp") || has_pid_suffix(nm, ".tmp.") || has_pid_suffix(nm, ".old.");
    if (!stale && (checkpoint_number(nm) >= 0 || !strcmp(nm, "final_checkpoint"))) {
      char *dir = loom_sprintf("%s/%s", run_dir, nm);
      long s;
      stale = loom_is_dir(dir) && loom_ckpt_check_complete(dir, &s) != 0;
      free(dir);
    }
    if (!stale) continue;
    names = loom_realloc(names, (size_t)n + 1, sizeof *names);
    names[n++] = loom_strdup(nm);
  }
  closedir(d);
  loom_err_clear();
  for (int i = 0; i < n; i++) {
    char *p = loom_sprintf("%s/%s", run_dir, names[i]);
    if (!rc) rc = loom_rm_rf(p);
    if (!rc) append_name(removed, names[i]);
    free(p);
    free(names[i]);
  }
  free(names);
  if (!rc && n) rc = loom_fsync_path(run_dir);
  return rc;
}

static int cmp_long_desc(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

int loom_run_dir_prune(const char *run_dir, long keep_last) {
  if (keep_last <= 0) return 0;
  DIR *d = opendir(run_dir);
  if (!d) return loom_err("cannot read the run directory '%s': %s", run_dir, strerror(errno));
  long *steps = NULL;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    long s = checkpoint_number(e->d_name), marked;
    if (s < 0) continue;
    char *dir = loom_sprintf("%s/%s", run_dir, e->d_name);
    if (loom_ckpt_check_complete(dir, &marked) == 0) {
      steps = loom_realloc(steps, (size_t)n + 1, sizeof *steps);
      steps[n++] = s;
    }
    free(dir);
  }
  closedir(d);
  loom_err_clear();
  qsort(steps, (size_t)n, sizeof *steps, cmp_long_desc);
  int rc = 0;
  for (int i = (int)keep_last; i < n && !rc; i++) {
    char *dir = loom_sprintf("%s/checkpoint_%ld", run_dir, steps[i]);
    char *gone = loom_sprintf("%s.pruned.tmp", dir);
    if (loom_rm_rf(gone)) rc = LOOM_ERR; /* a leftover of an earlier interrupted prune */
    if (!rc && rename(dir, gone) != 0)
      rc = loom_err("pruning '%s': cannot rename it: %s", dir, strerror(errno));
    if (!rc) rc = loom_fsync_path(run_dir); /* the name is gone before any file is */
    if (!rc) {
      loom_fault_point("prune", steps[i]);
      rc = loom_rm_rf(gone);
    }
    free(dir);
    free(gone);
  }
  free(steps);
  return rc;
}

int loom_run_dir_lock(const char *run_dir, int *fd) {
  char *path = loom_sprintf("%s/.lock", run_dir);
  *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  int rc = 0;
  if (*fd < 0) {
    rc = loom_err("cannot open '%s': %s", path, strerror(errno));
  } else if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(*fd);
    *fd = -1;
    rc = e == EWOULDBLOCK
             ? loom_err("run '%s' is in use by another loom job (it holds %s); wait for it to "
                        "end or stop it first", run_dir, path)
             : loom_err("cannot lock '%s': %s", path, strerror(e));
  }
  free(path);
  return rc;
}

/* <run.output_dir>/<name>_<YYYYmmdd-HHMMSS>_<tag>, with _1, _2, ... until it does not exist */
static char *new_run_dir(const loom_config *cfg) {
  const char *name = cfg->run.name[0] ? cfg->run.name
                     : cfg->model.preset[0] ? cfg->model.preset : cfg->model.arch;
  char stamp[32];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  unsigned tag = (unsigned)(loom_hash64(&now, sizeof now, (uint64_t)getpid()) & 0xffff);
  for (int k = 0;; k++) {
    char *dir = loom_sprintf("%s/%s_%s_%04x%s%.0d", cfg->run.output_dir, name, stamp, tag,
                             k ? "_" : "", k);
    if (!loom_path_exists(dir)) return dir;
    free(dir);
  }
}

/* The resumed run: locked before anything changes, cleaned, pruned. */
static int take_over(const char *dir, long keep_last, int *lock_fd, char **cleaned) {
  char *removed = NULL;
  if (loom_run_dir_lock(dir, lock_fd)) return LOOM_ERR;
  /* a prune interrupted after the last save: keep_last holds from the start */
  if (loom_run_dir_clean(dir, &removed) || loom_run_dir_prune(dir, keep_last)) {
    free(removed);
    return LOOM_ERR;
  }
  if (removed && *removed)
    *cleaned = loom_sprintf("removed what an interrupted job left: %s", removed);
  free(removed);
  return 0;
}

int loom_run_dir_open(const loom_config *cfg, const char *resume_run, char **dir, int *lock_fd,
                      char **cleaned) {
  *cleaned = NULL;
  if (resume_run) { /* the checkpoint is validated and loaded: now the run may change */
    *dir = loom_strdup(resume_run);
    return take_over(*dir, cfg->checkpoint.keep_last, lock_fd, cleaned);
  }
  *dir = new_run_dir(cfg);
  if (loom_mkdir_p(*dir) || loom_run_dir_lock(*dir, lock_fd)) return LOOM_ERR;
  return 0;
}

int loom_run_dir_truncate_metrics(const char *path, long step) {
  char *data;
  size_t len;
  if (!loom_path_exists(path)) return 0;
  if (loom_read_file(path, &data, &len)) return LOOM_ERR;
  size_t keep = 0;
  for (char *line = data; line < data + len;) {
    char *nl = memchr(line, '\n', (size_t)(data + len - line));
    if (!nl) break; /* a cut last line */
    size_t n = (size_t)(nl - line + 1);
    long s = -1;
    if (sscanf(line, "{\"step\": %ld", &s) != 1 || s > step) break;
    keep += n;
    line += n;
  }
  int rc = loom_write_file_atomic(path, data, keep);
  free(data);
  return rc;
}

bool loom_run_dir_finished(const char *run_dir) {
  char *path = loom_sprintf("%s/summary.json", run_dir);
  json_t *o = json_load_file(path, 0, NULL);
  free(path);
  const char *status = json_string_value(json_object_get(o, "status"));
  bool done = status && (!strcmp(status, "finished") || !strcmp(status, "completed"));
  json_decref(o);
  return done;
}

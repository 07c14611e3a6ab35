/* summary.txt and summary.csv of a sweep. Every number comes from the run's own files:
 * summary.json (steps, final/min loss, average step time with the first step excluded,
 * tokens/s, peak memory of the largest rank) when the run finished, else metrics.jsonl (the
 * same quantities recomputed from the per-step lines). The run directory is found through the
 * registry (sweep_id + name), else through the "run directory:" line of the point's log.
 * MFU is the run's own figure (summary.json's mfu, a fraction, shown in percent: the trainer's
 * loom_mfu over the run's training time; the registry holds the same), absent when
 * the run recorded none; or the simulator's (summary.json's mfu_percent) for points of the
 * sim launcher, whose peak memory is the simulated device memory per rank. Validation losses
 * (final_valid_loss, final_valid_perplexity, min_valid_loss) get columns in both files when a
 * point of the sweep had validation (the last columns of summary.txt's table). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#include "sweep/sweep_internal.h"
#include "sweep/sweep_launch.h"
#include "loom/core.h"
#include "loom/hw.h"
#include "loom/registry.h"
#include "loom/runs.h"

typedef struct {
  char *run_dir;
  char *run_status;     /* registry status, or NULL */
  long steps;           /* -1 = unknown; the rest NAN when unknown */
  double avg_iter, iters_per_s, tokens_per_s, mfu, final_loss, min_loss, peak_mem, tokens;
  double valid[3];      /* final_valid_loss, final_valid_perplexity, min_valid_loss (NAN: none) */
  char error[256];      /* a failed point: the line of its log that says why ("" otherwise) */
} point_metrics;

/* "run directory: X" as the trainer logs it. */
static char *run_dir_from_log(const char *log_path) {
  char *data;
  size_t len;
  if (loom_read_file(log_path, &data, &len)) {
    loom_err_clear();
    return NULL;
  }
  char *found = NULL, *p = data;
  while ((p = strstr(p, "run directory: "))) {
    p += strlen("run directory: ");
    size_t n = strcspn(p, "\n");
    free(found);
    found = loom_malloc(n + 1);
    memcpy(found, p, n);
    found[n] = 0;
  }
  free(data);
  return found;
}

static bool simulated(const loom_sweep_info *info) { return !strcmp(info->launcher, "sim"); }

static void find_run(const loom_sweep_info *info, const loom_sweep_point *p,
                     const loom_point_result *r, point_metrics *m) {
  if (simulated(info)) { /* simulated points are not registered */
    m->run_dir = run_dir_from_log(r->log_path);
    return;
  }
  char *db = loom_registry_path(p->cfg.run.output_dir);
  loom_registry *reg = NULL;
  if (loom_path_exists(db) && loom_registry_open(&reg, db) == 0) {
    loom_registry_detect_crashed(reg, loom_registry_heartbeat_timeout());
    loom_registry_find_sweep_run(reg, info->sweep_id, p->name, &m->run_dir, &m->run_status);
    loom_registry_close(reg);
  }
  loom_err_clear();
  free(db);
  if (!m->run_dir) m->run_dir = run_dir_from_log(r->log_path);
}

char *loom_sweep_point_run_dir(const loom_sweep_info *info, const loom_sweep_point *p,
                               const loom_point_result *r) {
  point_metrics m;
  memset(&m, 0, sizeof m);
  find_run(info, p, r, &m);
  free(m.run_status);
  return m.run_dir;
}

/* Numbers from metrics.jsonl: the fallback when there is no summary.json. */
static void from_metrics(const char *run_dir, point_metrics *m, bool have_summary) {
  char *path = loom_sprintf("%s/metrics.jsonl", run_dir);
  loom_series loss = {0}, dt = {0}, tok = {0};
  bool ok = loom_series_read(path, "loss", "step", &loss) == 0 && loss.n > 0 &&
            loom_series_read(path, "step_time", "step", &dt) == 0 &&
            loom_series_read(path, "tokens", "step", &tok) == 0;
  loom_err_clear();
  free(path);
  if (ok) {
    m->tokens = tok.n ? tok.y[tok.n - 1] : NAN;
    if (!have_summary) {
      m->steps = (long)loss.x[loss.n - 1];
      m->final_loss = loss.y[loss.n - 1];
      m->min_loss = loss.y[0];
      for (int i = 1; i < loss.n; i++) m->min_loss = fmin(m->min_loss, loss.y[i]);
      double sum = 0;
      for (int i = 1; i < dt.n; i++) sum += dt.y[i]; /* the first step warms caches */
      if (dt.n > 1) m->avg_iter = sum / (dt.n - 1);
      if (dt.n > 1 && m->steps > 0) m->tokens_per_s = m->tokens / (double)m->steps / m->avg_iter;
    }
  }
  loom_series_free(&loss), loom_series_free(&dt), loom_series_free(&tok);
}

/* Keys of summary.json beyond the registry's: the simulator's MFU and tokens per step. */
static void simulator_keys(const char *run_dir, point_metrics *m) {
  char *path = loom_sprintf("%s/summary.json", run_dir);
  json_t *o = json_load_file(path, 0, NULL);
  free(path);
  if (!o) return;
  json_t *mfu = json_object_get(o, "mfu_percent"), *tokens = json_object_get(o, "tokens");
  if (json_is_number(mfu)) m->mfu = json_number_value(mfu);
  if (json_is_number(tokens) && !isfinite(m->tokens)) m->tokens = json_number_value(tokens);
  json_decref(o);
}

static void collect(const loom_sweep_info *info, const loom_sweep_point *p,
                    const loom_point_result *r, point_metrics *m) {
  memset(m, 0, sizeof *m);
  m->steps = -1;
  m->avg_iter = m->iters_per_s = m->tokens_per_s = m->mfu = NAN;
  m->final_loss = m->min_loss = m->peak_mem = m->tokens = NAN;
  m->valid[0] = m->valid[1] = m->valid[2] = NAN;
  if (r->status == LOOM_PT_SKIPPED || r->status == LOOM_PT_DRY_RUN) return;
  find_run(info, p, r, m);
  if (!m->run_dir) return;
  loom_registry_metrics s;
  bool have = loom_registry_read_summary(m->run_dir, &s) == 0;
  loom_err_clear();
  if (have) {
    m->steps = s.steps;
    m->final_loss = s.final_loss;
    m->min_loss = s.min_loss;
    m->avg_iter = s.avg_step_time > 0 ? s.avg_step_time : NAN;
    m->tokens_per_s = s.tokens_per_s;
    m->peak_mem = s.peak_rss_mb;
    if (s.mfu > 0 && s.mfu <= 1) m->mfu = 100 * s.mfu; /* the run's own figure, in percent */
    m->valid[0] = s.final_valid_loss;
    m->valid[1] = s.final_valid_perplexity;
    m->valid[2] = s.min_valid_loss;
  }
  from_metrics(m->run_dir, m, have);
  if (m->avg_iter > 0) m->iters_per_s = 1.0 / m->avg_iter;
  if (have) simulator_keys(m->run_dir, m);
}

/* A batch job's exit status from the last line its script wrote to the log, -1 if none. */
static int job_exit_status(const char *log_path) {
  FILE *f = log_path ? fopen(log_path, "r") : NULL;
  if (!f) return -1;
  char line[512];
  int status = -1;
  size_t k = strlen(LOOM_SWEEP_EXIT_MARK);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, LOOM_SWEEP_EXIT_MARK, k) && line[k] == ' ') status = atoi(line + k + 1);
  fclose(f);
  return status;
}

/* Status shown in the summary: for batch jobs, what the registry says by now, or the job's
 * own exit status when it failed (e.g. before its run registered). */
static const char *shown_status(const loom_point_result *r, const point_metrics *m) {
  if (r->status != LOOM_PT_SUBMITTED) return loom_point_status_label(r->status);
  int exit_status = job_exit_status(r->log_path);
  if (exit_status > 0) return "FAILED";
  if (!m->run_status) return exit_status == 0 ? "SUCCESS" : "PENDING";
  if (!strcmp(m->run_status, "finished")) return "SUCCESS";
  if (!strcmp(m->run_status, "running")) return "RUNNING";
  return "FAILED";
}

static void fmt(char *buf, size_t n, const char *f, double v) {
  if (isfinite(v)) snprintf(buf, n, f, v);
  else snprintf(buf, n, "-");
}

/* Shortest text that reads back as the same double, or the given format. */
static void csv_num(FILE *f, double v, const char *format) {
  fputc(',', f);
  if (!isfinite(v)) return;
  if (strcmp(format, "%.17g")) {
    fprintf(f, format, v);
    return;
  }
  char buf[64];
  loom_value x = {.type = LOOM_VAL_REAL, .r = v};
  fputs(loom_value_text(&x, buf, sizeof buf), f);
}

static void csv_text(FILE *f, const char *s, bool first) {
  if (!first) fputc(',', f);
  if (!s) return;
  if (!strpbrk(s, ",\"\n")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

/* Swept keys in first-seen order, for the CSV's configuration columns. */
static int swept_keys(const loom_sweep_plan *plan, char ***keys) {
  int n = 0;
  *keys = NULL;
  for (int i = 0; i < plan->n; i++)
    for (int k = 0; k < plan->points[i].nassign; k++) {
      const char *a = plan->points[i].assign[k];
      size_t len = strcspn(a, "=");
      bool seen = false;
      for (int j = 0; j < n && !seen; j++) seen = strlen((*keys)[j]) == len && !strncmp((*keys)[j], a, len);
      if (seen) continue;
      *keys = loom_realloc(*keys, (size_t)(n + 1), sizeof(char *));
      (*keys)[n] = loom_malloc(len + 1);
      memcpy((*keys)[n], a, len);
      (*keys)[n++][len] = 0;
    }
  return n;
}

static const char *assigned(const loom_sweep_point *p, const char *key) {
  size_t len = strlen(key);
  for (int k = 0; k < p->nassign; k++)
    if (!strncmp(p->assign[k], key, len) && p->assign[k][len] == '=') return p->assign[k] + len + 1;
  return NULL;
}

/* A point had validation: summary.csv and summary.txt get its columns. */
static bool has_validation(const loom_sweep_plan *plan, const point_metrics *m) {
  bool valid = false;
  for (int i = 0; i < plan->n; i++)
    for (int k = 0; k < 3; k++) valid |= isfinite(m[i].valid[k]);
  return valid;
}

static int write_csv(const loom_sweep_info *info, const loom_sweep_plan *plan,
                     const loom_point_result *res, const point_metrics *m) {
  char *path = loom_sprintf("%s/summary.csv", info->log_dir), *tmp = loom_tmp_path(path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    int rc = loom_err("cannot write '%s'", tmp);
    free(path), free(tmp);
    return rc;
  }
  char **keys;
  int nkeys = swept_keys(plan, &keys);
  bool valid = has_validation(plan, m);
  fputs("name,status,ranks,exit_code,wall_s,steps,avg_iter_time_s,iters_per_s,tokens_per_s,"
        "mfu_percent,final_loss,min_loss,peak_mem_mb_per_rank,peak_mem_gib_per_rank,tokens,"
        "run_dir,log,job_id,note,error", f);
  if (valid) fputs(",final_valid_loss,final_valid_perplexity,min_valid_loss", f);
  for (int k = 0; k < nkeys; k++) csv_text(f, keys[k], false);
  fputc('\n', f);
  for (int i = 0; i < plan->n; i++) {
    const loom_sweep_point *p = &plan->points[i];
    csv_text(f, p->name, true);
    csv_text(f, shown_status(&res[i], &m[i]), false);
    fprintf(f, ",%d,%d,%.3f,", p->ranks, res[i].exit_code, res[i].wall_s);
    if (m[i].steps >= 0) fprintf(f, "%ld", m[i].steps);
    csv_num(f, m[i].avg_iter, "%.17g");
    csv_num(f, m[i].iters_per_s, "%.17g");
    csv_num(f, m[i].tokens_per_s, "%.17g");
    csv_num(f, m[i].mfu, "%.6g");
    csv_num(f, m[i].final_loss, "%.17g");
    csv_num(f, m[i].min_loss, "%.17g");
    csv_num(f, m[i].peak_mem, "%.17g");
    csv_num(f, m[i].peak_mem / 1024, "%.17g");
    csv_num(f, m[i].tokens, "%.0f");
    csv_text(f, m[i].run_dir, false);
    csv_text(f, res[i].log_path, false);
    csv_text(f, res[i].job_id, false);
    csv_text(f, res[i].note, false);
    csv_text(f, m[i].error, false);
    for (int k = 0; k < 3 && valid; k++) csv_num(f, m[i].valid[k], "%.17g");
    for (int k = 0; k < nkeys; k++) csv_text(f, assigned(p, keys[k]), false);
    fputc('\n', f);
  }
  for (int k = 0; k < nkeys; k++) free(keys[k]);
  free(keys);
  int rc = fclose(f) ? loom_err("cannot write '%s'", tmp) : 0;
  if (!rc && rename(tmp, path)) rc = loom_err("cannot rename '%s'", tmp);
  free(path), free(tmp);
  return rc;
}

static void text_table(FILE *f, const loom_sweep_plan *plan, const loom_point_result *res,
                       const point_metrics *m) {
  /* the validation columns (summary.csv's final_valid_loss, final_valid_perplexity,
   * min_valid_loss) come last when a point had validation */
  static const char *const heads[] = {"Configuration", "Status", "Ranks", "Avg Iter Time (s)",
                                      "Iters/s", "Tokens/s", "MFU (%)", "Final Loss",
                                      "Peak Mem/Rank (GiB)", "Final Val Loss", "Final Val PPL",
                                      "Min Val Loss"};
  int w0 = (int)strlen(heads[0]);
  for (int i = 0; i < plan->n; i++)
    if ((int)strlen(plan->points[i].name) > w0) w0 = (int)strlen(plan->points[i].name);
  int w[12] = {w0, 9, 5, 17, 9, 10, 7, 10, 19, 14, 13, 12};
  int ncols = has_validation(plan, m) ? 12 : 9;
  int total = 0;
  for (int c = 0; c < ncols; c++) {
    fprintf(f, "%s%-*s", c ? " | " : "", w[c], heads[c]);
    total += w[c] + (c ? 3 : 0);
  }
  fprintf(f, "\n");
  for (int k = 0; k < total; k++) fputc('-', f);
  fprintf(f, "\n");
  for (int i = 0; i < plan->n; i++) {
    char v[7][32];
    fmt(v[0], 32, "%.6f", m[i].avg_iter);
    fmt(v[1], 32, "%.3f", m[i].iters_per_s);
    fmt(v[2], 32, "%.1f", m[i].tokens_per_s);
    fmt(v[3], 32, "%.2f", m[i].mfu);
    fmt(v[4], 32, "%.6f", m[i].final_loss);
    fmt(v[5], 32, "%.3f", m[i].peak_mem / 1024);
    fprintf(f, "%-*s | %-*s | %*d | %*s | %*s | %*s | %*s | %*s | %*s", w[0],
            plan->points[i].name, w[1], shown_status(&res[i], &m[i]), w[2], plan->points[i].ranks,
            w[3], v[0], w[4], v[1], w[5], v[2], w[6], v[3], w[7], v[4], w[8], v[5]);
    for (int c = 9; c < ncols; c++) {
      char val[32];
      fmt(val, sizeof val, c == 10 ? "%.4f" : "%.6f", m[i].valid[c - 9]);
      fprintf(f, " | %*s", w[c], val);
    }
    if (m[i].error[0]) fprintf(f, "  error: %s", m[i].error); /* a failed point: why */
    fputc('\n', f);
  }
  for (int k = 0; k < total; k++) fputc('-', f);
  fprintf(f, "\n");
}

static int write_txt(const loom_sweep_info *info, const loom_sweep_plan *plan,
                     const loom_point_result *res, const point_metrics *m) {
  char *path = loom_sprintf("%s/summary.txt", info->log_dir), *tmp = loom_tmp_path(path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    int rc = loom_err("cannot write '%s'", tmp);
    free(path), free(tmp);
    return rc;
  }
  int count[8] = {0};
  double run_wall = 0, tokens = 0;
  long steps = 0;
  for (int i = 0; i < plan->n; i++) {
    const char *s = shown_status(&res[i], &m[i]);
    count[!strcmp(s, "SUCCESS") ? 0 : !strcmp(s, "FAILED") ? 1 : !strcmp(s, "SKIPPED") ? 2
          : !strcmp(s, "OOM") ? 4 : 3]++;
    run_wall += res[i].wall_s;
    if (m[i].steps > 0) steps += m[i].steps;
    if (isfinite(m[i].tokens)) tokens += m[i].tokens;
  }
  char stamp[32];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  fprintf(f, "loom sweep summary\n\nsweep:    %s (%s)\nlauncher: %s", info->sweep_name,
          info->sweep_id, info->launcher);
  if (!strcmp(info->launcher, "local")) fprintf(f, ", %d at a time", info->parallel);
  if (info->hardware) fprintf(f, ", hardware %s", info->hardware);
  fprintf(f, "\nwritten:  %s\nlogs:     %s\n\n", stamp, info->log_dir);
  text_table(f, plan, res, m);
  char oom[48] = "";
  if (count[4]) snprintf(oom, sizeof oom, ", %d out of memory", count[4]);
  fprintf(f, "Totals: %d runs: %d succeeded%s, %d failed, %d skipped, %d other; %ld steps, %.0f "
             "tokens; sweep wall time %.1f s (runs %.1f s)\n",
          plan->n, count[0], oom, count[1], count[2], count[3], steps, tokens, info->wall_s,
          run_wall);
  if (simulated(info))
    fprintf(f, "Simulated on %s: Avg Iter Time is one optimizer step; Peak Mem/Rank is the "
               "simulated device memory of the fullest rank (OOM: over the profile's usable "
               "memory; the row's times are what the step would take if it fitted); MFU is the "
               "simulator's, the text model's FLOPs against the profile's peak for the "
               "dtype.\n\nRuns:\n", info->hardware ? info->hardware : "?");
  else
    fprintf(f, "Avg Iter Time excludes each run's first (warm-up) step; Peak Mem/Rank is the peak "
               "resident memory of the largest rank; MFU is each run's own (summary.json: model "
               "FLOPs over its training time against the dtype's peak in this machine's "
               "hardware profile; '-' when it recorded none).\n\nRuns:\n");
  for (int i = 0; i < plan->n; i++) {
    const loom_sweep_point *p = &plan->points[i];
    fprintf(f, "  %s:", p->name);
    for (int k = 0; k < p->nassign; k++) fprintf(f, " %s", p->assign[k]);
    fprintf(f, "\n    log: %s\n    run: %s\n", res[i].log_path, m[i].run_dir ? m[i].run_dir : "-");
    if (res[i].note[0]) fprintf(f, "    note: %s\n", res[i].note);
    if (m[i].error[0]) fprintf(f, "    error: %s\n", m[i].error);
  }
  int rc = fclose(f) ? loom_err("cannot write '%s'", tmp) : 0;
  if (!rc && rename(tmp, path)) rc = loom_err("cannot rename '%s'", tmp);
  free(path), free(tmp);
  return rc;
}

int loom_sweep_write_summary(const loom_sweep_info *info, const loom_sweep_plan *plan,
                             const loom_point_result *res) {
  point_metrics *m = loom_calloc((size_t)plan->n + 1, sizeof *m);
  for (int i = 0; i < plan->n; i++) {
    collect(info, &plan->points[i], &res[i], &m[i]);
    if (!strcmp(shown_status(&res[i], &m[i]), "FAILED"))
      loom_sweep_log_error(res[i].log_path, m[i].error, sizeof m[i].error);
  }
  int rc = write_txt(info, plan, res, m);
  if (!rc) rc = write_csv(info, plan, res, m);
  for (int i = 0; i < plan->n; i++) free(m[i].run_dir), free(m[i].run_status);
  free(m);
  return rc;
}

int loom_sweep_summarize_dir(const char *log_dir) {
  loom_sweep_info info;
  loom_sweep_plan plan;
  loom_point_result *res;
  int rc = loom_sweep_state_read(log_dir, &info, &plan, &res);
  if (!rc) rc = loom_sweep_write_summary(&info, &plan, res);
  loom_point_results_free(res, plan.n);
  loom_sweep_plan_free(&plan);
  loom_sweep_info_free(&info);
  return rc;
}

static bool dashes(const char *l) {
  if (!*l) return false;
  for (; *l; l++)
    if (*l != '-' && *l != '=' && *l != ' ') return false;
  return true;
}

void loom_sweep_log_error(const char *log_path, char *out, size_t n) {
  out[0] = 0;
  FILE *f = log_path ? fopen(log_path, "rb") : NULL;
  if (!f) return;
  enum { TAIL = 64 * 1024 };
  char *buf = loom_malloc(TAIL + 1);
  if (fseek(f, 0, SEEK_END) == 0) {
    long size = ftell(f);
    fseek(f, size > TAIL ? size - TAIL : 0, SEEK_SET);
  }
  size_t len = fread(buf, 1, TAIL, f);
  fclose(f);
  buf[len] = 0;
  for (size_t i = 0; i < len; i++) /* ranks' interleaved output can hold NUL bytes */
    if (!buf[i]) buf[i] = '\n';
  const char *own = NULL, *headline = NULL, *error = NULL, *last = NULL;
  bool after_dashes = false;
  for (char *line = buf, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    line[strcspn(line, "\r")] = 0;
    char *t = line;
    while (*t == ' ' || *t == '\t') t++;
    if (!*t || *t == '#') continue; /* blank, or the launcher's "# loom sweep ..." header */
    if (dashes(t)) {
      after_dashes = true;
      continue;
    }
    /* loom's own line; ranks' output can interleave ("loom: " + mpirun's row of dashes) */
    if ((!strncmp(t, "loom ", 5) || !strncmp(t, "loom:", 5)) && !dashes(t + 5)) own = t;
    if (after_dashes) headline = t;
    after_dashes = false;
    for (const char *c = t; *c && error != t; c++) /* "error", any case */
      if (!strncasecmp(c, "error", 5)) error = t;
    last = t;
  }
  const char *pick = own ? own : headline ? headline : error ? error : last;
  if (pick) snprintf(out, n, "%s", pick);
  free(buf);
}

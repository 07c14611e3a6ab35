/* state.tsv of a sweep execution: a header (sweep, id, launcher, hardware of the simulator,
 * parallelism, peak FLOP/s)
 * and one line per point (name, status, exit code, wall time, job id, config, log, note,
 * swept values), rewritten atomically whenever a point changes state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sweep/sweep_internal.h"
#include "loom/core.h"

static const char *const labels[] = {"PENDING", "SUCCESS", "FAILED", "SKIPPED", "SUBMITTED",
                                     "DRY-RUN", "OOM", "STOPPED"};

const char *loom_point_status_label(loom_point_status s) {
  return (unsigned)s < sizeof labels / sizeof labels[0] ? labels[s] : "?";
}

int loom_point_status_parse(const char *label, loom_point_status *s) {
  for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++)
    if (!strcmp(labels[i], label)) return *s = (loom_point_status)i, 0;
  return loom_err("unknown point status '%s'", label);
}

/* Tabs and newlines would break the format. */
static void clean(char *s) {
  for (; *s; s++)
    if (*s == '\t' || *s == '\n' || *s == '\r') *s = ' ';
}

int loom_sweep_state_write(const loom_sweep_info *info, const loom_sweep_plan *plan,
                           const loom_point_result *res) {
  size_t cap = 2048 + (info->hardware ? strlen(info->hardware) : 0);
  for (int i = 0; i < plan->n; i++) {
    cap += 1024 + strlen(plan->points[i].config_path) + strlen(res[i].log_path);
    for (int k = 0; k < plan->points[i].nassign; k++) cap += strlen(plan->points[i].assign[k]) + 1;
  }
  char *t = loom_malloc(cap);
  size_t n = (size_t)snprintf(t, cap,
                              "# loom sweep state\n# sweep: %s\n# sweep_id: %s\n# launcher: %s\n"
                              "%s%s%s# parallel: %d\n# peak_flops: %.17g\n# peak_flops_bf16: %.17g\n"
                              "# wall_s: %.3f\n"
                              "# name\tstatus\texit\twall_s\tjob\tconfig\tlog\tnote\tvalues...\n",
                              info->sweep_name, info->sweep_id, info->launcher,
                              info->hardware ? "# hardware: " : "",
                              info->hardware ? info->hardware : "", info->hardware ? "\n" : "",
                              info->parallel, info->peak_flops[0], info->peak_flops[1],
                              info->wall_s);
  for (int i = 0; i < plan->n; i++) {
    const loom_sweep_point *p = &plan->points[i];
    char note[512];
    snprintf(note, sizeof note, "%s", res[i].note);
    clean(note);
    n += (size_t)snprintf(t + n, cap - n, "%s\t%s\t%d\t%.3f\t%s\t%s\t%s\t%s", p->name,
                          loom_point_status_label(res[i].status), res[i].exit_code,
                          res[i].wall_s, res[i].job_id[0] ? res[i].job_id : "-", p->config_path,
                          res[i].log_path, note[0] ? note : "-");
    for (int k = 0; k < p->nassign; k++) n += (size_t)snprintf(t + n, cap - n, "\t%s", p->assign[k]);
    n += (size_t)snprintf(t + n, cap - n, "\n");
  }
  char *path = loom_sprintf("%s/state.tsv", info->log_dir);
  int rc = loom_write_file_atomic(path, t, n);
  free(path);
  free(t);
  return rc;
}

static int read_line(char *line, loom_sweep_plan *plan, loom_point_result *r, const char *path,
                     int lineno) {
  char *f[8], *save = NULL;
  for (int k = 0; k < 8; k++) {
    f[k] = strtok_r(k ? NULL : line, "\t", &save);
    if (!f[k]) return loom_err("%s:%d: expected at least 8 tab-separated fields", path, lineno);
  }
  loom_sweep_point *p = &plan->points[plan->n];
  memset(p, 0, sizeof *p);
  memset(r, 0, sizeof *r);
  p->name = loom_strdup(f[0]);
  p->config_path = loom_strdup(f[5]);
  r->log_path = loom_strdup(f[6]);
  plan->n++;
  if (loom_point_status_parse(f[1], &r->status)) return loom_err_prefix("%s:%d: ", path, lineno);
  r->exit_code = atoi(f[2]);
  r->wall_s = atof(f[3]);
  if (strcmp(f[4], "-")) snprintf(r->job_id, sizeof r->job_id, "%s", f[4]);
  if (strcmp(f[7], "-")) snprintf(r->note, sizeof r->note, "%s", f[7]);
  for (char *a = strtok_r(NULL, "\t", &save); a; a = strtok_r(NULL, "\t", &save)) {
    p->assign = loom_realloc(p->assign, (size_t)(p->nassign + 1), sizeof(char *));
    p->assign[p->nassign++] = loom_strdup(a);
  }
  loom_config_defaults(&p->cfg);
  if (loom_config_load(&p->cfg, p->config_path)) return loom_err_prefix("%s:%d: ", path, lineno);
  p->ranks = (int)(p->cfg.parallel.dp * p->cfg.parallel.tp * p->cfg.parallel.pp *
                   p->cfg.parallel.sp * p->cfg.parallel.cp);
  return 0;
}

static char *header_value(const char *line, const char *key) {
  size_t n = strlen(key);
  if (strncmp(line, "# ", 2) || strncmp(line + 2, key, n) || line[2 + n] != ':') return NULL;
  return loom_strdup(line + 2 + n + 2);
}

int loom_sweep_state_read(const char *log_dir, loom_sweep_info *info, loom_sweep_plan *plan,
                          loom_point_result **res) {
  memset(info, 0, sizeof *info);
  memset(plan, 0, sizeof *plan);
  *res = NULL;
  char *path = loom_sprintf("%s/state.tsv", log_dir), *data;
  size_t len;
  if (loom_read_file(path, &data, &len)) {
    free(path);
    return loom_err("'%s' is not a sweep log directory (no state.tsv); give the "
                    "logs/sweep_<timestamp> directory that 'loom sweep run' printed", log_dir);
  }
  info->log_dir = loom_strdup(log_dir);
  int rc = 0, lineno = 0, cap = 0;
  char *save = NULL;
  for (char *line = strtok_r(data, "\n", &save); line && !rc; line = strtok_r(NULL, "\n", &save)) {
    lineno++;
    char *v;
    if ((v = header_value(line, "sweep"))) free(info->sweep_name), info->sweep_name = v;
    else if ((v = header_value(line, "sweep_id"))) free(info->sweep_id), info->sweep_id = v;
    else if ((v = header_value(line, "launcher"))) free(info->launcher), info->launcher = v;
    else if ((v = header_value(line, "hardware"))) free(info->hardware), info->hardware = v;
    else if ((v = header_value(line, "parallel"))) info->parallel = atoi(v), free(v);
    else if ((v = header_value(line, "peak_flops_bf16"))) info->peak_flops[1] = atof(v), free(v);
    else if ((v = header_value(line, "peak_flops"))) info->peak_flops[0] = atof(v), free(v);
    else if ((v = header_value(line, "wall_s"))) info->wall_s = atof(v), free(v);
    if (line[0] == '#') continue;
    if (plan->n == cap) {
      cap = cap ? 2 * cap : 16;
      plan->points = loom_realloc(plan->points, (size_t)cap, sizeof *plan->points);
      *res = loom_realloc(*res, (size_t)cap, sizeof **res);
    }
    rc = read_line(line, plan, &(*res)[plan->n], path, lineno);
  }
  free(data);
  free(path);
  if (!info->sweep_name) info->sweep_name = loom_strdup("sweep");
  if (!info->sweep_id) info->sweep_id = loom_strdup("-");
  if (!info->launcher) info->launcher = loom_strdup("local");
  plan->name = loom_strdup(info->sweep_name);
  return rc;
}

void loom_sweep_info_free(loom_sweep_info *info) {
  free(info->sweep_name);
  free(info->sweep_id);
  free(info->launcher);
  free(info->hardware);
  free(info->log_dir);
  memset(info, 0, sizeof *info);
}

void loom_point_results_free(loom_point_result *res, int n) {
  for (int i = 0; res && i < n; i++) free(res[i].log_path);
  free(res);
}

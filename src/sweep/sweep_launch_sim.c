/* Simulator launcher (`loom sweep run SWEEP --launcher sim [--hardware NAME]`): each point's
 * resolved config is replayed on the cluster simulator in this process, as
 * `loom sim CONFIG --hardware NAME --gpus RANKS` would (src/sim), instead of being trained --
 * milliseconds per point. The world is the point's mesh (dp*tp*pp*sp), on as few nodes of the
 * profile as hold it. Each point gets a run directory <log_dir>/sim/<name>/ holding what the
 * summary reads for real runs, summary.json (one simulated optimizer step: avg_step_time,
 * tokens_per_s, peak memory per rank, MFU against the profile's peak), plus config.yaml and
 * sim.json (the simulator's metrics, memory per pipeline stage and the limit); the point's log
 * holds the `loom sim` report. A point over the memory limit is OOM (the sweep goes on); one
 * the simulator rejects (a layout the model cannot be split by, a vision strategy it cannot
 * model) is FAILED with the reason. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sweep/sweep_launch.h"
#include "loom/core.h"
#include "loom/sim.h"

#define DEFAULT_HARDWARE "h100-sxm"

/* A profile by name or file; names are also tried in lower case (H100-SXM = h100-sxm). */
static int load_profile(loom_hw_profile *hw, const char *name) {
  if (loom_hw_load(hw, name) == 0) return 0;
  char lower[256];
  size_t n = strlen(name);
  if (n >= sizeof lower || strchr(name, '/')) return -1;
  for (size_t i = 0; i <= n; i++) lower[i] = (char)tolower((unsigned char)name[i]);
  if (!strcmp(lower, name)) return -1;
  char *first = loom_strdup(loom_errmsg());
  int rc = loom_hw_load(hw, lower);
  if (rc) loom_err("%s", first);
  free(first);
  return rc;
}

static const char *hardware_of(const char *hardware) {
  return hardware ? hardware : DEFAULT_HARDWARE;
}

static int setup_sim(const loom_sweep_run_opts *o, const char *hardware) {
  (void)o;
  loom_hw_profile hw;
  if (load_profile(&hw, hardware_of(hardware)))
    return loom_err_prefix("--launcher sim: hardware profile: ");
  return 0;
}

/* The simulation of one point: 0 with *r filled (OOM in r->oom_rank), or -1 when the
 * simulator rejects the point. The schedule file of the config, if any, sets pp, vpp and
 * the micro-batches, as for loom sim. */
static int simulate(const loom_config *cfg_in, const loom_hw_profile *hw, loom_sim_result *r,
                    loom_sim_strategy *st, loom_model_spec *spec) {
  loom_config cfg = *cfg_in;
  loom_schedule sched;
  memset(&sched, 0, sizeof sched);
  if (loom_model_spec_from_config(spec, &cfg.model)) return -1;
  const char *file = cfg.parallel.schedule_file[0] ? cfg.parallel.schedule_file : NULL;
  if (file) {
    if (loom_sched_load(&sched, file)) return -1;
    cfg.parallel.pp = sched.pp;
    cfg.parallel.vpp = sched.vpp;
    cfg.training.grad_accum = sched.microbatches;
    cfg.training.global_batch_size = 0;
    if (sched.vpp > 1) snprintf(cfg.parallel.schedule, sizeof cfg.parallel.schedule, "interleaved");
  }
  int rc = loom_sim_strategy_from_config(st, &cfg, 0);
  if (!rc && file) snprintf(st->schedule, sizeof st->schedule, "%s", sched.name);
  if (!rc) rc = loom_sim_strategy_check(st, spec);
  if (!rc && !file) rc = loom_sim_schedule(st, NULL, &sched);
  if (!rc) {
    loom_sim_ctx c;
    loom_sim_ctx_init(&c, spec, hw, st);
    loom_sim_opts o = {NULL, false, 0};
    rc = loom_sim_run(&c, &sched, &o, r);
    if (rc && file) loom_err_prefix("%s: ", file);
  }
  loom_sched_free(&sched);
  return rc;
}

static double peak_bytes(const loom_sim_result *r) {
  double peak = 0;
  for (int p = 0; p < r->pp; p++) peak = fmax(peak, r->mem[p].total);
  return peak;
}

/* summary.json in the run directory: the keys loom train writes that a simulation has, and
 * the simulator's own (mfu_percent, memory limit, hardware, oom). */
static int write_summary(const char *dir, const loom_hw_profile *hw, const loom_sim_result *r,
                         const loom_sim_strategy *st) {
  const double gib = 1073741824.0, peak = peak_bytes(r);
  double tokens = (double)st->micro_batch * st->seq * st->microbatches * st->dp;
  char *text = loom_sprintf(
      "{\n  \"simulated\": true,\n  \"hardware\": \"%s\",\n  \"steps\": 1,\n"
      "  \"avg_step_time\": %.9g,\n  \"timed_steps\": 1,\n  \"tokens_per_s\": %.9g,\n"
      "  \"tokens\": %.0f,\n  \"mfu_percent\": %.6g,\n  \"hfu_percent\": %.6g,\n"
      "  \"peak_rss_mb\": %.3f,\n  \"peak_mem_gib\": %.6f,\n  \"mem_limit_gib\": %.6f,\n"
      "  \"oom\": %s,\n  \"world\": %d\n}\n",
      hw->name, r->step_time, r->tokens_per_s, tokens, 100 * r->mfu, 100 * r->hfu,
      peak / 1048576.0, peak / gib, r->mem_limit / gib, r->oom_rank >= 0 ? "true" : "false",
      r->world);
  char *path = loom_sprintf("%s/summary.json", dir);
  int rc = loom_write_file_atomic(path, text, strlen(text));
  free(path);
  free(text);
  return rc;
}

static int write_config(const char *dir, const loom_config *cfg) {
  char *yaml = loom_config_to_yaml(cfg), *path = loom_sprintf("%s/config.yaml", dir);
  int rc = loom_write_file_atomic(path, yaml, strlen(yaml));
  free(path);
  free(yaml);
  return rc;
}

/* The simulator's report (it prints to stdout) into the log. */
static void report_into(FILE *log, const loom_sim_ctx *c, const loom_sim_result *r) {
  fflush(log);
  fflush(stdout);
  int saved = dup(STDOUT_FILENO);
  if (saved < 0) return;
  dup2(fileno(log), STDOUT_FILENO);
  loom_sim_print(c, r);
  fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);
}

static int start_sim(const loom_launch_ctx *c, const loom_sweep_point *p, const char *log_path,
                     loom_launch_result *res) {
  const char *hardware = hardware_of(c->hardware);
  char *cmd = loom_sprintf("loom sim %s --hardware %s --gpus %d", p->config_path, hardware,
                           p->ranks);
  if (c->opts->dry_run) {
    res->status = LOOM_PT_DRY_RUN;
    snprintf(res->note, sizeof res->note, "%s", cmd);
    free(cmd);
    return 0;
  }
  FILE *log = fopen(log_path, "w");
  if (!log) {
    free(cmd);
    return loom_err("cannot write '%s'", log_path);
  }
  fprintf(log, "# loom sweep %s (%s), point %s, %d rank%s, simulated\n# command: %s\n# cwd: %s\n",
          c->sweep_name, c->sweep_id, p->name, p->ranks, p->ranks == 1 ? "" : "s", cmd, c->cwd);
  free(cmd);
  char *dir = loom_sprintf("%s/sim/%s", c->log_dir, p->name);
  loom_hw_profile hw;
  loom_sim_strategy st;
  loom_model_spec spec;
  loom_sim_result r;
  memset(&r, 0, sizeof r);
  int rc = loom_mkdir_p(dir) || write_config(dir, &p->cfg) ? -1 : 0;
  if (!rc) rc = load_profile(&hw, hardware);
  if (rc) { /* not the point's fault: the sweep cannot write or load its profile */
    fclose(log);
    free(dir);
    return -1;
  }
  if (simulate(&p->cfg, &hw, &r, &st, &spec)) {
    res->status = LOOM_PT_FAILED;
    snprintf(res->note, sizeof res->note, "simulator: %s", loom_errmsg());
    fprintf(log, "loom sim: %s\nrun directory: %s\n", loom_errmsg(), dir);
    loom_err_clear();
    fclose(log);
    free(dir);
    return 0;
  }
  loom_sim_ctx ctx;
  loom_sim_ctx_init(&ctx, &spec, &hw, &st);
  report_into(log, &ctx, &r);
  char *json = loom_sprintf("%s/sim.json", dir);
  rc = loom_sim_write_json(&ctx, &r, json) || write_summary(dir, &hw, &r, &st) ? -1 : 0;
  free(json);
  const double gib = 1073741824.0;
  if (r.oom_rank >= 0) {
    res->status = LOOM_PT_OOM;
    snprintf(res->note, sizeof res->note, "%.2f GiB per rank, over the %.2f GiB of %.40s: %.380s",
             peak_bytes(&r) / gib, r.mem_limit / gib, hw.name, r.oom_msg);
  } else {
    res->status = LOOM_PT_SUCCESS;
    snprintf(res->note, sizeof res->note, "%.4f s/step, MFU %.1f%%, %.2f of %.2f GiB per rank",
             r.step_time, 100 * r.mfu, peak_bytes(&r) / gib, r.mem_limit / gib);
  }
  fprintf(log, "run directory: %s\n", dir);
  fclose(log);
  loom_sim_result_free(&r);
  free(dir);
  return rc;
}

const loom_sweep_launcher loom_launcher_sim = {
    .name = "sim",
    .summary = "the cluster simulator in this process (loom sim), milliseconds per point",
    .concurrent = false,
    .uses_hardware = true,
    .setup = setup_sim,
    .start = start_sim,
};

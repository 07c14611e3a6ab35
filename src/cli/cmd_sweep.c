/* `loom sweep`: generate the configs of a sweep file, show its points, run it (locally with
 * mpirun, through Slurm, or on the cluster simulator) with per-run logs and a summary, or
 * rebuild a summary later; KEY=VALUE arguments fix config keys on top of the sweep file.
 * The work is in src/exp/sweep_*.c; this file parses arguments. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "loom/core.h"
#include "loom/sweep.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom sweep <subcommand> ...\n\n"
          "  generate SWEEP.yaml [KEY=VALUE...] [--output-dir DIR] [--force]\n"
          "      one resolved config per point (descriptive names), manifest.txt and an\n"
          "      editable run_sweep.sh (skip flags) in DIR (default configs/<sweep name>)\n"
          "  show SWEEP.yaml|DIR [KEY=VALUE...]   list the points: name, ranks, swept values\n"
          "  run SWEEP.yaml|DIR [KEY=VALUE...] [options]\n"
          "      run every point; logs/sweep_<timestamp>/<name>.log, summary.txt, summary.csv\n"
          "      (`loom sweep SWEEP.yaml [...]` is short for `loom sweep run SWEEP.yaml [...]`)\n"
          "  summary LOGDIR             rebuild summary.txt/csv (e.g. when Slurm jobs ended)\n\n"
          "KEY=VALUE (also +KEY=VALUE, ~KEY) fixes a config key for every point of a sweep file,\n"
          "after its base and overrides: a swept key leaves the sweep (parameters linked with it\n"
          "keep varying together); points that become identical run once.\n\n"
          "run options:\n"
          "  --launcher local|slurm|sim\n"
          "                             local: loom train / mpirun -np RANKS here (default);\n"
          "                             slurm: an sbatch script per point, submitted;\n"
          "                             sim: each point on the cluster simulator (loom sim),\n"
          "                             in this process, milliseconds per point; a point that\n"
          "                             does not fit in memory is marked OOM\n"
          "  --hardware NAME|FILE       sim: hardware profile (default: the sweep file's\n"
          "                             sim: {hardware}, else h100-sxm; loom sim --list-hardware)\n"
          "  --parallel N               local: run N points at once (default 1)\n"
          "  --stop-on-failure          do not start more points after a failure (default:\n"
          "                             continue past failures)\n"
          "  --skip NAME                skip a point (repeatable; run_sweep.sh passes its flags)\n"
          "  --dry-run                  local/sim: print the commands; slurm: write, not submit\n"
          "  --log-dir DIR              parent of sweep_<timestamp>/ (default logs)\n"
          "  --mpirun PATH              MPI launcher (default mpirun)\n"
          "  --mpirun-args \"ARGS\"       extra mpirun arguments, e.g. \"--bind-to none\"\n"
          "  --color auto|always|never  coloured status (default: auto, on a terminal)\n"
          "slurm options (override the sweep file's slurm: section):\n"
          "  --partition P  --account A  --qos Q  --time HH:MM:SS  --mem M  --constraint C\n"
          "  --ntasks-per-node N  --cpus-per-task N  --gpus-per-node N\n"
          "  --srun-args \"ARGS\"  --sbatch PATH\n\n"
          "Each trained run registers in the run registry with the sweep's name ('loom runs\n"
          "--sweep'); simulated points keep their results under LOGDIR/sim/<name>/.\n"
          "exit status of run: 0 all runs succeeded (or were simulated, OOM included), 1 some\n"
          "failed, 2 bad usage or setup\n");
}

/* --name VALUE or --name=VALUE at argv[*i]; advances *i past the value. */
static const char *opt_value(int argc, char **argv, int *i, const char *name) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n)) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != 0) return NULL;
  if (*i + 1 >= argc) {
    fprintf(stderr, "loom sweep: %s needs a value\n", name);
    exit(2);
  }
  return argv[++*i];
}

/* A config override on the command line: KEY=VALUE, +KEY=VALUE or ~KEY. */
static bool is_override(const char *arg) {
  return arg[0] == '~' || (arg[0] != '-' && strchr(arg, '='));
}

/* A sweep file (with command-line overrides) or a generated directory, as a plan. */
static int load_plan(const char *src, char **overrides, int noverrides, loom_sweep_plan *plan) {
  if (loom_is_dir(src)) {
    if (noverrides)
      return loom_err("'%s' is a generated directory whose configs are fixed; KEY=VALUE "
                      "overrides (%s) apply to a sweep file: generate again with them",
                      src, overrides[0]);
    return loom_sweep_read_dir(plan, src);
  }
  loom_sweep_spec spec;
  if (loom_sweep_load(&spec, src)) return -1;
  int rc = 0;
  for (int i = 0; i < noverrides && !rc; i++) rc = loom_sweep_override(&spec, overrides[i]);
  if (!rc) rc = loom_sweep_expand(&spec, plan);
  loom_sweep_spec_free(&spec);
  return rc;
}

static void print_points(const loom_sweep_plan *plan) {
  for (int i = 0; i < plan->n; i++) {
    const loom_sweep_point *p = &plan->points[i];
    printf("%-48s %2d rank%s ", p->name, p->ranks, p->ranks == 1 ? " " : "s");
    for (int k = 0; k < p->nassign; k++) printf(" %s", p->assign[k]);
    printf("\n");
  }
}

static int cmd_generate(int argc, char **argv) {
  const char *src = NULL, *out = NULL, *v;
  bool force = false;
  char **ov = calloc((size_t)argc, sizeof *ov);
  int nov = 0;
  for (int i = 1; i < argc; i++) {
    if ((v = opt_value(argc, argv, &i, "--output-dir"))) out = v;
    else if (!strcmp(argv[i], "--force")) force = true;
    else if (is_override(argv[i])) ov[nov++] = argv[i];
    else if (argv[i][0] == '-' || src) {
      free(ov);
      static const char *const known[] = {"--output-dir", "--force", "--help", NULL};
      return fprintf(stderr, "loom sweep generate: unexpected '%s'%s\n", argv[i],
                     argv[i][0] == '-' ? loom_cli_did_you_mean(argv[i], known) : ""), 2;
    } else src = argv[i];
  }
  if (!src) return free(ov), fprintf(stderr, "loom sweep generate: missing SWEEP.yaml\n"), 2;
  loom_sweep_spec spec;
  loom_sweep_plan plan;
  if (loom_sweep_load(&spec, src)) {
    free(ov);
    return fprintf(stderr, "loom sweep generate: %s\n", loom_errmsg()), 1;
  }
  int rc = 0;
  for (int i = 0; i < nov && !rc; i++) rc = loom_sweep_override(&spec, ov[i]);
  free(ov);
  if (!rc) rc = loom_sweep_expand(&spec, &plan);
  char *dir = out ? loom_strdup(out) : loom_sprintf("configs/%s", spec.name);
  if (!rc) rc = loom_sweep_write(&plan, dir, src, force);
  if (rc) {
    fprintf(stderr, "loom sweep generate: %s\n", loom_errmsg());
  } else {
    print_points(&plan);
    printf("wrote %d configs, manifest.txt and run_sweep.sh to %s\n", plan.n, dir);
    loom_sweep_plan_free(&plan);
  }
  free(dir);
  loom_sweep_spec_free(&spec);
  return rc ? 1 : 0;
}

static int cmd_show(int argc, char **argv) {
  if (argc < 2 || is_override(argv[1]) || argv[1][0] == '-')
    return fprintf(stderr, "usage: loom sweep show SWEEP.yaml|DIR [KEY=VALUE...]\n"), 2;
  for (int i = 2; i < argc; i++)
    if (!is_override(argv[i]))
      return fprintf(stderr, "loom sweep show: unexpected '%s' (after the sweep file: KEY=VALUE "
                     "overrides only)\n", argv[i]), 2;
  loom_sweep_plan plan;
  if (load_plan(argv[1], argv + 2, argc - 2, &plan))
    return fprintf(stderr, "loom sweep show: %s\n", loom_errmsg()), 1;
  printf("sweep %s: %d points\n", plan.name, plan.n);
  print_points(&plan);
  loom_sweep_plan_free(&plan);
  return 0;
}

static int copy_opt(char *dst, size_t cap, const char *v, const char *name) {
  if (strlen(v) >= cap) return fprintf(stderr, "loom sweep run: %s is too long\n", name), 2;
  snprintf(dst, cap, "%s", v);
  return 0;
}

static int int_opt(int *dst, const char *v, const char *name) {
  char *end;
  long n = strtol(v, &end, 10);
  if (*end || n < 1) return fprintf(stderr, "loom sweep run: %s must be a whole number >= 1\n", name), 2;
  *dst = (int)n;
  return 0;
}

/* Slurm options: 0 when argv[*i] was one (or -1 when it was not), 2 on a bad value. */
static int slurm_opt(int argc, char **argv, int *i, loom_slurm_opts *s) {
  const char *v;
  struct {
    const char *name;
    char *dst;
    size_t cap;
    int *num;
  } t[] = {{"--partition", s->partition, sizeof s->partition, NULL},
           {"--account", s->account, sizeof s->account, NULL},
           {"--qos", s->qos, sizeof s->qos, NULL},
           {"--time", s->time, sizeof s->time, NULL},
           {"--mem", s->mem, sizeof s->mem, NULL},
           {"--constraint", s->constraint, sizeof s->constraint, NULL},
           {"--srun-args", s->srun_args, sizeof s->srun_args, NULL},
           {"--ntasks-per-node", NULL, 0, &s->ntasks_per_node},
           {"--cpus-per-task", NULL, 0, &s->cpus_per_task},
           {"--gpus-per-node", NULL, 0, &s->gpus_per_node}};
  for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
    if ((v = opt_value(argc, argv, i, t[k].name)))
      return t[k].num ? int_opt(t[k].num, v, t[k].name) : copy_opt(t[k].dst, t[k].cap, v, t[k].name);
  return -1;
}

/* Options given on the command line replace the sweep file's. */
static void merge_slurm(loom_slurm_opts *dst, const loom_slurm_opts *file, const loom_slurm_opts *cli) {
  *dst = *file;
#define TAKE_S(f) if (cli->f[0]) memcpy(dst->f, cli->f, sizeof dst->f)
#define TAKE_N(f) if (cli->f) dst->f = cli->f
  TAKE_S(partition); TAKE_S(account); TAKE_S(qos); TAKE_S(time); TAKE_S(mem);
  TAKE_S(constraint); TAKE_S(srun_args); TAKE_S(extra);
  TAKE_N(ntasks_per_node); TAKE_N(cpus_per_task); TAKE_N(gpus_per_node);
#undef TAKE_S
#undef TAKE_N
}

static char *self_exe(void) {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return loom_strdup("loom");
  buf[n] = 0;
  return loom_strdup(buf);
}

static int cmd_run(int argc, char **argv) {
  loom_sweep_run_opts o = {.launcher = "local", .parallel = 1, .log_root = "logs", .color = -1};
  loom_slurm_opts cli = {0};
  const char *src = NULL, *v;
  char **skip = NULL, **ov = calloc((size_t)argc, sizeof *ov);
  int rc = 0, nov = 0;
  for (int i = 1; i < argc && !rc; i++) {
    int s = slurm_opt(argc, argv, &i, &cli);
    if (s >= 0) rc = s;
    else if ((v = opt_value(argc, argv, &i, "--launcher"))) o.launcher = v;
    else if ((v = opt_value(argc, argv, &i, "--hardware"))) o.hardware = v;
    else if (is_override(argv[i])) ov[nov++] = argv[i];
    else if ((v = opt_value(argc, argv, &i, "--parallel"))) rc = int_opt(&o.parallel, v, "--parallel");
    else if ((v = opt_value(argc, argv, &i, "--log-dir"))) o.log_root = v;
    else if ((v = opt_value(argc, argv, &i, "--mpirun-args"))) o.mpirun_args = v;
    else if ((v = opt_value(argc, argv, &i, "--mpirun"))) o.mpirun = v;
    else if ((v = opt_value(argc, argv, &i, "--sbatch"))) o.sbatch = v;
    else if ((v = opt_value(argc, argv, &i, "--skip"))) {
      skip = realloc(skip, sizeof(char *) * (size_t)(o.nskip + 1));
      skip[o.nskip++] = (char *)v;
    } else if ((v = opt_value(argc, argv, &i, "--color"))) {
      o.color = !strcmp(v, "always") ? 1 : !strcmp(v, "never") ? 0 : !strcmp(v, "auto") ? -1 : -2;
      if (o.color == -2) rc = (fprintf(stderr, "loom sweep run: --color auto|always|never\n"), 2);
    } else if (!strcmp(argv[i], "--stop-on-failure")) o.stop_on_failure = true;
    else if (!strcmp(argv[i], "--continue-on-failure")) o.stop_on_failure = false;
    else if (!strcmp(argv[i], "--dry-run")) o.dry_run = true;
    else if (argv[i][0] == '-' || src) {
      static const char *const known[] = {
          "--launcher", "--hardware", "--parallel", "--log-dir", "--mpirun-args", "--mpirun",
          "--sbatch", "--skip", "--color", "--stop-on-failure", "--continue-on-failure",
          "--dry-run", "--account", "--constraint", "--mem", "--ntasks-per-node", "--partition",
          "--qos", "--srun-args", "--time", "--help", NULL};
      rc = (fprintf(stderr, "loom sweep run: unexpected '%s'%s (see loom sweep --help)\n", argv[i],
                    argv[i][0] == '-' ? loom_cli_did_you_mean(argv[i], known) : ""), 2);
    }
    else src = argv[i];
  }
  if (!rc && !src) rc = (fprintf(stderr, "loom sweep run: missing SWEEP.yaml or directory\n"), 2);
  loom_sweep_plan plan = {0};
  if (!rc && load_plan(src, ov, nov, &plan))
    rc = (fprintf(stderr, "loom sweep run: %s\n", loom_errmsg()), 2);
  if (!rc) {
    o.skip = skip;
    char *exe = self_exe();
    o.loom_bin = exe;
    merge_slurm(&o.slurm, &plan.slurm, &cli);
    char *log_dir = NULL;
    rc = loom_sweep_run(&plan, &o, &log_dir);
    if (rc < 0) {
      fprintf(stderr, "loom sweep run: %s\n", loom_errmsg());
      rc = 2;
    }
    free(log_dir);
    free(exe);
    loom_sweep_plan_free(&plan);
  }
  free(skip);
  free(ov);
  return rc;
}

static int cmd_summary(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: loom sweep summary LOGDIR\n"), 2;
  if (loom_sweep_summarize_dir(argv[1]))
    return fprintf(stderr, "loom sweep summary: %s\n", loom_errmsg()), 1;
  char *path = loom_sprintf("%s/summary.txt", argv[1]), *text;
  size_t len;
  if (!loom_read_file(path, &text, &len)) {
    fputs(text, stdout);
    free(text);
  }
  free(path);
  return 0;
}

int loom_cmd_sweep(int argc, char **argv) {
  if (argc < 2 || loom_cli_wants_help(2, argv)) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (loom_cli_wants_help(argc, argv)) return usage(stdout), 0;
  const char *sub = argv[1];
  if (!strcmp(sub, "generate")) return cmd_generate(argc - 1, argv + 1);
  if (!strcmp(sub, "show")) return cmd_show(argc - 1, argv + 1);
  if (!strcmp(sub, "run")) return cmd_run(argc - 1, argv + 1);
  if (!strcmp(sub, "summary")) return cmd_summary(argc - 1, argv + 1);
  if (loom_path_exists(sub) && !loom_is_dir(sub)) return cmd_run(argc, argv); /* sweep FILE */
  static const char *const names[] = {"generate", "show", "run", "summary", NULL};
  fprintf(stderr, "loom sweep: unknown subcommand '%s' (nor a sweep file)%s\n\n", sub,
          loom_cli_did_you_mean(sub, names));
  usage(stderr);
  return 2;
}

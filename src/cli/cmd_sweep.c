/* `loom sweep`: generate the configs of a sweep file, show its points, run it (locally with
 * mpirun, through Slurm, or on the cluster simulator) with per-run logs and a summary, or
 * rebuild a summary later; KEY=VALUE arguments fix config keys on top of the sweep file.
 * The work is in src/sweep/; this file parses arguments. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/options.h"
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
          "      run every point (locally with mpirun, through Slurm, or on the simulator);\n"
          "      logs/sweep_<timestamp>/<name>.log, summary.txt, summary.csv\n"
          "      (`loom sweep SWEEP.yaml [...]` is short for `loom sweep run SWEEP.yaml [...]`)\n"
          "  summary LOGDIR             rebuild summary.txt/csv (e.g. when Slurm jobs ended)\n\n"
          "KEY=VALUE (also +KEY=VALUE, ~KEY) fixes a config key for every point of a sweep file,\n"
          "after its base and overrides: a swept key leaves the sweep (parameters linked with it\n"
          "keep varying together); points that become identical run once.\n\n"
          "Run 'loom sweep <subcommand> --help' for its options ('loom sweep run --help': the\n"
          "launchers, Slurm options and exit status).\n");
}

static void usage_generate(FILE *out) {
  fprintf(out,
          "usage: loom sweep generate SWEEP.yaml [KEY=VALUE...] [--output-dir DIR] [--force]\n\n"
          "Expand a sweep file: one resolved config per point (descriptive names),\n"
          "manifest.txt and an editable run_sweep.sh (skip flags) in DIR.\n\n"
          "  KEY=VALUE         fix a config key for every point (also +KEY=VALUE, ~KEY)\n"
          "  --output-dir DIR  where to write (default configs/<sweep name>)\n"
          "  --force           replace a sweep generated there before (its manifest.txt)\n");
}

static void usage_show(FILE *out) {
  fprintf(out,
          "usage: loom sweep show SWEEP.yaml|DIR [KEY=VALUE...]\n\n"
          "List the points of a sweep file (KEY=VALUE fixes a config key for every point) or\n"
          "of a directory written by 'loom sweep generate': name, ranks, swept values.\n");
}

static void usage_run(FILE *out) {
  fprintf(out,
          "usage: loom sweep run SWEEP.yaml|DIR [KEY=VALUE...] [options]\n"
          "       loom sweep SWEEP.yaml [KEY=VALUE...] [options]\n\n"
          "Run every point of a sweep file (KEY=VALUE, +KEY=VALUE, ~KEY fix a config key for\n"
          "every point) or of a generated directory; logs/sweep_<timestamp>/<name>.log,\n"
          "summary.txt, summary.csv.\n\n"
          "options:\n"
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
          "                             continue past failures: --continue-on-failure; the\n"
          "                             last of the two given wins)\n"
          "  --skip NAME                skip a point (repeatable; run_sweep.sh passes its flags)\n"
          "  --dry-run                  local/sim: print the commands; slurm: write, not submit\n"
          "  --log-dir DIR              parent of sweep_<timestamp>/ (default logs)\n"
          "  --resume                   continue the newest execution of this sweep that did\n"
          "                             not finish (stopped by a signal, or its runner killed):\n"
          "                             in its directory, finished points kept, stopped ones\n"
          "                             resumed from their runs' newest complete checkpoint\n"
          "                             (loom train --resume RUN_DIR), the rest started; a\n"
          "                             rerun without options does the same when there is one\n"
          "  --new                      a new execution even when the last one did not finish\n"
          "  --mpirun PATH              MPI launcher (default mpirun)\n"
          "  --mpirun-args \"ARGS\"       extra mpirun arguments, e.g. \"--bind-to none\"\n"
          "  --color auto|always|never  coloured status (default: auto, on a terminal)\n"
          "slurm options (override the sweep file's slurm: section):\n"
          "  --partition P  --account A  --qos Q  --time HH:MM:SS  --mem M  --constraint C\n"
          "  --ntasks-per-node N  --cpus-per-task N  --gpus-per-node N\n"
          "  --srun-args \"ARGS\"  --sbatch PATH\n\n"
          "Each trained run registers in the run registry with the sweep's name ('loom runs\n"
          "--sweep'); simulated points keep their results under LOGDIR/sim/<name>/.\n"
          "SIGINT (Ctrl-C), SIGTERM or SIGUSR1 stops the sweep: the running points finish\n"
          "their step and save a checkpoint (a second signal kills them at once), no more\n"
          "start, state.tsv says STOPPED / PENDING, and the command to continue is printed.\n"
          "exit status: 0 all runs succeeded (or were simulated, OOM included), 1 some\n"
          "failed, 2 bad usage or setup, 128 + the signal when stopped by one (130 Ctrl-C)\n");
}

static void usage_summary(FILE *out) {
  fprintf(out,
          "usage: loom sweep summary LOGDIR\n\n"
          "Rebuild LOGDIR/summary.txt and summary.csv of a sweep run (e.g. when its Slurm jobs\n"
          "ended) from the runs' logs and the registry, and print the table.\n");
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

/* The sweep file (the first positional argument) and the KEY=VALUE overrides after it; 2
 * after printing an error. */
static int split_positional(const char *command, const loom_cli_parser *p, const char **src,
                            char **ov, int *nov) {
  *src = NULL, *nov = 0;
  for (int i = 0; i < p->npos; i++) {
    if (is_override(p->pos[i])) ov[(*nov)++] = p->pos[i];
    else if (!*src) *src = p->pos[i];
    else return fprintf(stderr, "loom %s: unexpected '%s' (one sweep file; then KEY=VALUE "
                        "overrides)\n", command, p->pos[i]), 2;
  }
  return 0;
}

static int cmd_generate(int argc, char **argv) {
  const char *src = NULL, *out = NULL;
  bool force = false;
  char **ov = loom_calloc((size_t)argc, sizeof *ov);
  int nov = 0;
  const loom_cli_opt opts[] = {LOOM_OPT_VALUE("--output-dir", &out),
                               LOOM_OPT_FLAG("--force", &force), {0}};
  loom_cli_parser p = {.command = "sweep generate", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  if (!prc) prc = split_positional("sweep generate", &p, &src, ov, &nov);
  free(p.pos);
  if (prc) {
    free(ov);
    if (prc == LOOM_CLI_HELP) usage_generate(stdout);
    return prc == LOOM_CLI_HELP ? 0 : 2;
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
  const char *src = NULL;
  char **ov = loom_calloc((size_t)argc, sizeof *ov);
  int nov = 0;
  const loom_cli_opt opts[] = {{0}};
  loom_cli_parser p = {.command = "sweep show", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  if (!prc) prc = split_positional("sweep show", &p, &src, ov, &nov);
  if (!prc && !src)
    prc = (fprintf(stderr, "usage: loom sweep show SWEEP.yaml|DIR [KEY=VALUE...]\n"), 2);
  free(p.pos);
  if (prc) {
    free(ov);
    if (prc == LOOM_CLI_HELP) usage_show(stdout);
    return prc == LOOM_CLI_HELP ? 0 : 2;
  }
  loom_sweep_plan plan;
  int rc = load_plan(src, ov, nov, &plan);
  free(ov);
  if (rc) return fprintf(stderr, "loom sweep show: %s\n", loom_errmsg()), 1;
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

/* The Slurm options as given (NULL: not given), copied into loom_slurm_opts after parsing. */
typedef struct {
  const char *partition, *account, *qos, *time, *mem, *constraint, *srun_args;
  const char *ntasks_per_node, *cpus_per_task, *gpus_per_node;
} slurm_args;

/* 0, or 2 after printing the option with a bad value. */
static int slurm_opts_take(const slurm_args *a, loom_slurm_opts *s) {
  struct {
    const char *name, *v;
    char *dst;
    size_t cap;
  } str[] = {{"--partition", a->partition, s->partition, sizeof s->partition},
             {"--account", a->account, s->account, sizeof s->account},
             {"--qos", a->qos, s->qos, sizeof s->qos},
             {"--time", a->time, s->time, sizeof s->time},
             {"--mem", a->mem, s->mem, sizeof s->mem},
             {"--constraint", a->constraint, s->constraint, sizeof s->constraint},
             {"--srun-args", a->srun_args, s->srun_args, sizeof s->srun_args}};
  struct {
    const char *name, *v;
    int *dst;
  } num[] = {{"--ntasks-per-node", a->ntasks_per_node, &s->ntasks_per_node},
             {"--cpus-per-task", a->cpus_per_task, &s->cpus_per_task},
             {"--gpus-per-node", a->gpus_per_node, &s->gpus_per_node}};
  int rc = 0;
  for (size_t k = 0; k < sizeof str / sizeof str[0] && !rc; k++)
    if (str[k].v) rc = copy_opt(str[k].dst, str[k].cap, str[k].v, str[k].name);
  for (size_t k = 0; k < sizeof num / sizeof num[0] && !rc; k++)
    if (num[k].v) rc = int_opt(num[k].dst, num[k].v, num[k].name);
  return rc;
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

/* --skip NAME (repeatable) */
static int take_skip(const char *v, void *ctx) {
  loom_sweep_run_opts *o = ctx;
  char **skip = loom_realloc((char **)o->skip, (size_t)(o->nskip + 1), sizeof(char *));
  skip[o->nskip++] = (char *)v;
  o->skip = skip;
  return 0;
}

static int cmd_run(int argc, char **argv) {
  loom_sweep_run_opts o = {.launcher = "local", .parallel = 1, .log_root = "logs", .color = -1,
                           .resume = -1};
  bool resume = false, fresh = false;
  loom_slurm_opts cli = {0};
  slurm_args sa = {0};
  const char *src = NULL, *parallel = NULL, *color = NULL;
  char **ov = loom_calloc((size_t)argc, sizeof *ov);
  int rc = 0, nov = 0;
  const loom_cli_opt opts[] = {
      LOOM_OPT_VALUE("--launcher", &o.launcher),   LOOM_OPT_VALUE("--hardware", &o.hardware),
      LOOM_OPT_VALUE("--parallel", &parallel),     LOOM_OPT_VALUE("--log-dir", &o.log_root),
      LOOM_OPT_VALUE("--mpirun", &o.mpirun),       LOOM_OPT_VALUE("--mpirun-args", &o.mpirun_args),
      LOOM_OPT_VALUE("--sbatch", &o.sbatch),       LOOM_OPT_EACH("--skip", take_skip),
      LOOM_OPT_VALUE("--color", &color),           LOOM_OPT_FLAG("--dry-run", &o.dry_run),
      LOOM_OPT_FLAG("--stop-on-failure", &o.stop_on_failure), /* the last of the two wins */
      LOOM_OPT_FLAG("--resume", &resume),          LOOM_OPT_FLAG("--new", &fresh),
      LOOM_OPT_OFF("--continue-on-failure", &o.stop_on_failure),
      LOOM_OPT_VALUE("--partition", &sa.partition), LOOM_OPT_VALUE("--account", &sa.account),
      LOOM_OPT_VALUE("--qos", &sa.qos),            LOOM_OPT_VALUE("--time", &sa.time),
      LOOM_OPT_VALUE("--mem", &sa.mem),            LOOM_OPT_VALUE("--constraint", &sa.constraint),
      LOOM_OPT_VALUE("--srun-args", &sa.srun_args),
      LOOM_OPT_VALUE("--ntasks-per-node", &sa.ntasks_per_node),
      LOOM_OPT_VALUE("--cpus-per-task", &sa.cpus_per_task),
      LOOM_OPT_VALUE("--gpus-per-node", &sa.gpus_per_node), {0}};
  loom_cli_parser p = {.command = "sweep run", .opts = opts, .ctx = &o};
  rc = loom_cli_parse(&p, argc, argv, 1);
  if (!rc) rc = split_positional("sweep run", &p, &src, ov, &nov);
  free(p.pos);
  if (rc == LOOM_CLI_HELP) {
    free((char **)o.skip), free(ov);
    return usage_run(stdout), 0;
  }
  if (!rc) rc = slurm_opts_take(&sa, &cli);
  if (!rc && resume && fresh)
    rc = (fprintf(stderr, "loom sweep run: --resume and --new exclude each other\n"), 2);
  o.resume = resume ? 1 : fresh ? 0 : -1;
  if (!rc && parallel) rc = int_opt(&o.parallel, parallel, "--parallel");
  if (!rc && color) {
    o.color = !strcmp(color, "always") ? 1 : !strcmp(color, "never") ? 0 : !strcmp(color, "auto") ? -1 : -2;
    if (o.color == -2) rc = (fprintf(stderr, "loom sweep run: --color auto|always|never\n"), 2);
  }
  char **skip = (char **)o.skip;
  if (!rc && !src) rc = (fprintf(stderr, "loom sweep run: missing SWEEP.yaml or directory\n"), 2);
  loom_sweep_plan plan = {0};
  if (!rc && load_plan(src, ov, nov, &plan))
    rc = (fprintf(stderr, "loom sweep run: %s\n", loom_errmsg()), 2);
  if (!rc) {
    char *exe = self_exe();
    o.loom_bin = exe;
    merge_slurm(&o.slurm, &plan.slurm, &cli);
    char *log_dir = NULL, *again = loom_cli_command_line("sweep run", argc - 1, argv + 1);
    char *hint = resume ? loom_strdup(again) : loom_sprintf("%s --resume", again);
    o.resume_hint = hint;
    rc = loom_sweep_run(&plan, &o, &log_dir);
    free(again), free(hint);
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
  const loom_cli_opt opts[] = {{0}};
  loom_cli_parser p = {.command = "sweep summary", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  const char *dir = p.npos == 1 ? p.pos[0] : NULL;
  free(p.pos);
  if (prc == LOOM_CLI_HELP) return usage_summary(stdout), 0;
  if (prc) return 2;
  if (!dir) return fprintf(stderr, "usage: loom sweep summary LOGDIR\n"), 2;
  if (loom_sweep_summarize_dir(dir))
    return fprintf(stderr, "loom sweep summary: %s\n", loom_errmsg()), 1;
  char *path = loom_sprintf("%s/summary.txt", dir), *text;
  size_t len;
  if (!loom_read_file(path, &text, &len)) {
    fputs(text, stdout);
    free(text);
  }
  free(path);
  return 0;
}

int loom_cmd_sweep(int argc, char **argv) {
  static const char *const names[] = {"generate", "show", "run", "summary", NULL};
  static int (*const fns[])(int, char **) = {cmd_generate, cmd_show, cmd_run, cmd_summary};
  bool named = false;
  for (int k = 0; argc > 1 && names[k]; k++) named = named || !strcmp(argv[1], names[k]);
  if (argc > 1 && !named && loom_path_exists(argv[1]) && !loom_is_dir(argv[1]))
    return cmd_run(argc, argv); /* loom sweep FILE: loom sweep run FILE */
  int sub = loom_cli_subcommand("sweep", argc, argv, names, " (nor a sweep file)");
  if (sub >= 0) return fns[sub](argc - 1, argv + 1);
  if (sub == LOOM_CLI_SUB_HELP) return usage(stdout), 0;
  if (sub == LOOM_CLI_SUB_BAD) fputc('\n', stderr);
  usage(stderr);
  return 2;
}

/* `loom train`: load the config (file + overrides), validate it, and run training. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "cli/commands.h"
#include "cli/options.h"

#include "loom/config.h"
#include "loom/core.h"
#include "loom/hf.h"
#include "loom/mesh.h"
#include "loom/train.h"
#include "loom/sweep.h"
#include "loom/lineage.h"
#include "loom/run_dir.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom train [CONFIG.yaml] [KEY=VALUE ...] [options]\n\n"
          "Train a model. The run goes to <run.output_dir>/<run id>/ with config.yaml,\n"
          "metrics.jsonl, train.log, checkpoint_<step>/ and final_checkpoint/.\n\n"
          "  CONFIG.yaml         run config (every key has a default: 'loom config schema')\n"
          "  KEY=VALUE           override a key (training.lr=1e-3, +key=v, ~key to reset)\n"
          "  GROUP=OPTION        choose a config group option: model=tiny-llama loads\n"
          "                      configs/model/tiny-llama.yaml (search path: the config's\n"
          "                      directory, ./configs, loom's configs/; see 'loom config --help')\n"
          "  -m, --multirun      KEY=A,B,C or KEY=range(START,STOP[,STEP]) overrides become a\n"
          "                      grid sweep run by the sweep runner (one run per point, logs,\n"
          "                      summary.txt and registry rows in logs/sweep_<time>/)\n"
          "  --resume WHAT       continue a run: 'latest' (the newest run under run.output_dir),\n"
          "                      a run directory (its newest complete checkpoint) or a\n"
          "                      checkpoint directory; without CONFIG, the checkpoint's\n"
          "                      config.yaml is used. Losses continue bitwise identically to\n"
          "                      an uninterrupted run. A checkpoint that fails validation\n"
          "                      leaves the run untouched. With the run's config (keys like\n"
          "                      training.log_every aside) the run continues under its id;\n"
          "                      any other change (training.steps=70, parallel.dp=2, ...)\n"
          "                      forks a new run that records run.parent and leaves the\n"
          "                      parent's files as they are (docs/EXPERIMENTS.md)\n"
          "  --nproc N           start N ranks with mpirun and supervise them: a job that ends\n"
          "                      without loom's report (a rank killed) is recorded as failed\n"
          "  --max-restarts K    relaunch the job up to K times after a rank dies or a\n"
          "                      collective times out, from the newest complete checkpoint\n"
          "                      (config key run.max_restarts; default 0; docs/RELIABILITY.md)\n"
          "  --stop-after N      stop after step N (as if interrupted; for testing resume)\n"
          "  --trace FILE        write a Chrome trace (one row per rank: instructions, and\n"
          "                      collectives with their bytes); open in chrome://tracing\n"
          "  --quiet             no progress output\n"
          "  -h, --help          this text\n\n"
          "examples:\n"
          "  loom train configs/demo.yaml training.steps=50 training.dtype=bf16\n"
          "  loom train configs/demo_groups.yaml model=tiny-llama optim=constant\n"
          "  loom train -m configs/demo.yaml training.lr=1e-3,3e-3 +exp.hypothesis=lr\n"
          "  mpirun -np 4 loom train configs/demo.yaml parallel.dp=2 parallel.tp=2\n"
          "  loom train run.yaml checkpoint.init_from=hf/gpt2   # fine-tune: loom checkpoint or\n"
          "                                                    # Hugging Face directory\n"
          "  loom train configs/demo.yaml --nproc 4 parallel.dp=4 --max-restarts 3\n"
          "  loom train --resume latest\n"
          "  loom train --resume runs/<id>/checkpoint_30 training.steps=70   # a fork\n");
}

/* The command that re-runs this one, shell-quoted (ranks started by mpirun: with --nproc).
 * argv is copied unchanged, not parsed: the record is the command as typed. */
static char *recorded_command(int argc, char **argv) {
  char **args = loom_calloc((size_t)argc + 2, sizeof *args), world[16];
  for (int i = 1; i < argc; i++) args[i - 1] = argv[i];
  int n = argc - 1;
  if (loom_dist_world() > 1) {
    snprintf(world, sizeof world, "%d", loom_dist_world());
    args[n++] = "--nproc", args[n++] = world;
  }
  char *s = loom_cli_command_line("train", n, args);
  free(args);
  return s;
}

/* defaults, the config file (if any), then the KEY=VALUE overrides in order; validated
 * unless only run.output_dir is wanted (to find `--resume latest`). run_config: the file is
 * the config.yaml of the run being resumed. argv[1..argc): the positional arguments (options
 * already taken out by the parser; Hydra-style KEY=VALUE and GROUP=OPTION are positional by
 * design, told apart here). */
static int load_config(loom_config *cfg, const char *path, int argc, char **argv,
                       bool validate, bool run_config) {
  loom_config_defaults(cfg);
  loom_hf_init_model_mark(cfg); /* did the run name its model? (checkpoint.init_from=HF_DIR) */
  char **choices = loom_calloc((size_t)argc + 1, sizeof *choices); /* GROUP=OPTION */
  int nchoices = 0;
  for (int i = 1; i < argc; i++)
    if (loom_config_is_group_choice(argv[i])) choices[nchoices++] = argv[i];
  int rc = path || nchoices ? loom_config_load_composed(cfg, path, choices, nchoices) : 0;
  free(choices);
  /* a resumed run's config.yaml records the grad_accum its global batch gave under its dp:
   * the global batch decides again under the dp of this resume (unless grad_accum is given) */
  if (!rc && run_config && cfg->training.global_batch_size > 0) cfg->training.grad_accum = 1;
  for (int i = 1; i < argc && !rc; i++) {
    if (loom_config_is_group_choice(argv[i])) continue;
    if (strchr(argv[i], '=') || argv[i][0] == '~') rc = loom_config_override(cfg, argv[i]);
  }
  if (rc || !validate) {
    loom_hf_init_model_unmark(cfg);
    return rc;
  }
  /* checkpoint.init_from=HF_DIR and no model.preset/arch: the directory's model */
  rc = loom_hf_init_model(cfg, NULL);
  if (!rc) rc = loom_config_validate(cfg);
  if (!rc) rc = loom_config_resolve_grad_accum(cfg); /* training.global_batch_size */
  char *init_abs = !rc && cfg->checkpoint.init_from[0] ? realpath(cfg->checkpoint.init_from, NULL)
                                                      : NULL;
  if (init_abs && strlen(init_abs) < sizeof cfg->checkpoint.init_from) /* recorded absolute */
    snprintf(cfg->checkpoint.init_from, sizeof cfg->checkpoint.init_from, "%s", init_abs);
  free(init_abs);
  return rc;
}

/* This process's rank under mpirun/srun, before MPI is started (0 without a launcher). */
static long env_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                     "SLURM_PROCID", NULL};
  for (int i = 0; vars[i]; i++)
    if (getenv(vars[i]) && *getenv(vars[i])) return atol(getenv(vars[i]));
  return 0;
}

/* The error line, once; and to the supervisor (LOOM_REPORT_FILE): loom reported it itself,
 * so the job is not relaunched (a bad config or a full disk fails again). */
static void report_error(const char *msg) {
  fprintf(stderr, "loom train: error: %s\n", msg);
  fflush(stderr);
  const char *path = getenv("LOOM_REPORT_FILE");
  FILE *f = path && *path ? fopen(path, "a") : NULL;
  if (!f) return;
  fprintf(f, "failed\n");
  fclose(f);
}

static bool under_launcher(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK") ||
         getenv("SLURM_PROCID");
}

/* -m / --multirun: the overrides as an in-memory sweep through the sweep runner. argv: the
 * positional arguments, as for load_config. */
static int multirun(const char *config_path, int argc, char **argv, bool quiet) {
  char **choices = loom_calloc((size_t)argc + 1, sizeof *choices), **ov = loom_calloc((size_t)argc + 1,
                                                                              sizeof *ov);
  int nchoices = 0, nov = 0;
  for (int i = 1; i < argc; i++)
    if (loom_config_is_group_choice(argv[i])) choices[nchoices++] = argv[i];
    else if (strchr(argv[i], '=') || argv[i][0] == '~') ov[nov++] = argv[i];
  loom_sweep_spec spec;
  loom_sweep_plan plan = {0};
  int rc = loom_sweep_multirun_spec(&spec, config_path, choices, nchoices, ov, nov);
  free(choices);
  free(ov);
  if (rc) {
    fprintf(stderr, "loom train -m: %s\n", loom_errmsg());
    return 2;
  }
  rc = loom_sweep_expand(&spec, &plan);
  loom_sweep_spec_free(&spec);
  if (rc) {
    fprintf(stderr, "loom train -m: %s\n", loom_errmsg());
    return 2;
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  loom_sweep_run_opts o = {.launcher = "local", .parallel = 1, .log_root = "logs",
                           .color = quiet ? 0 : -1, .loom_bin = n > 0 ? exe : "loom"};
  char *log_dir = NULL;
  rc = loom_sweep_run(&plan, &o, &log_dir);
  if (rc < 0) fprintf(stderr, "loom train -m: %s\n", loom_errmsg());
  else printf("multirun: %d run%s; sweep directory %s\n", plan.n, plan.n == 1 ? "" : "s",
              log_dir);
  free(log_dir);
  loom_sweep_plan_free(&plan);
  return rc < 0 ? 2 : rc;
}

int loom_cmd_train(int argc, char **argv) {
  loom_train_opts opts = {0};
  const char *config_path = NULL, *nproc = NULL, *restarts = NULL, *stop_after = NULL;
  bool multi = false;
  loom_config cfg;
  const loom_cli_opt table[] = {
      LOOM_OPT_VALUE("--resume", &opts.resume),     LOOM_OPT_VALUE("--nproc", &nproc),
      LOOM_OPT_VALUE("--max-restarts", &restarts),  LOOM_OPT_VALUE("--stop-after", &stop_after),
      LOOM_OPT_VALUE("--trace", &opts.trace),       LOOM_OPT_FLAG("--quiet", &opts.quiet),
      {.name = "--multirun", .alias = "-m", .flag = &multi}, {0}};
  loom_cli_parser p = {.command = "train", .opts = table};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  /* pos[0] = "train", then the positional arguments: config file, KEY=VALUE, GROUP=OPTION */
  char **pos = loom_calloc((size_t)p.npos + 2, sizeof *pos);
  pos[0] = argv[0];
  for (int i = 0; i < p.npos; i++) pos[i + 1] = p.pos[i];
  int npos = p.npos + 1;
  free(p.pos);
  for (int i = 1; i < npos && !prc; i++) {
    if (strchr(pos[i], '=') || pos[i][0] == '~') continue;
    if (config_path) {
      fprintf(stderr, "loom train: two config files given ('%s' and '%s')\n", config_path,
              pos[i]);
      prc = LOOM_CLI_BAD;
    }
    config_path = pos[i];
  }
  char *end = NULL;
  if (!prc && stop_after) {
    opts.stop_after = strtol(stop_after, &end, 10);
    if (*end || end == stop_after || opts.stop_after < 1) {
      fprintf(stderr, "loom train: --stop-after needs a step number >= 1, not '%s'\n",
              stop_after);
      prc = LOOM_CLI_BAD;
    }
  }
  if (prc) {
    free(pos);
    if (prc == LOOM_CLI_HELP) usage(stdout);
    return prc == LOOM_CLI_HELP ? 0 : 2;
  }
  if (multi) {
    if (opts.resume || nproc || restarts || opts.stop_after || opts.trace) {
      fprintf(stderr, "loom train: -m/--multirun takes a config and overrides only (set ranks "
              "with parallel.* keys; --resume, --nproc, --max-restarts, --stop-after and "
              "--trace are per run)\n");
      free(pos);
      return 2;
    }
    int mrc = multirun(config_path, npos, pos, opts.quiet);
    free(pos);
    return mrc;
  }
  long max_restarts = restarts ? strtol(restarts, &end, 10) : -1;
  if (restarts && (*end || max_restarts < 0 || end == restarts)) {
    fprintf(stderr, "loom train: --max-restarts needs a whole number >= 0, not '%s'\n", restarts);
    free(pos);
    return 2;
  }
  /* Errors up to here are the same on every rank: rank 0 tells, the others stay silent. */
  bool quiet_rank = env_rank() != 0;
  int rc = 0;
  char *run_dir = NULL, *ckpt = NULL, *cfg_file = NULL;
  if (opts.resume) { /* which run and checkpoint; "latest" needs run.output_dir first */
    rc = load_config(&cfg, config_path, npos, pos, false, false);
    if (!rc) rc = loom_run_dir_resolve(opts.resume, cfg.run.output_dir,
                                       getenv("LOOM_RESTART") != NULL, &run_dir, &ckpt);
    if (!rc && !config_path) /* the checkpoint's config (or the run's, before any checkpoint) */
      config_path = cfg_file = loom_sprintf("%s/config.yaml", ckpt ? ckpt : run_dir);
  }
  if (!rc) rc = load_config(&cfg, config_path, npos, pos, true, cfg_file != NULL);
  free(pos);
  if (rc) {
    if (!quiet_rank) report_error(loom_errmsg());
    free(run_dir), free(ckpt), free(cfg_file);
    return 1;
  }
  if (max_restarts < 0) max_restarts = cfg.run.max_restarts;
  if ((nproc || max_restarts > 0) && !under_launcher() && !getenv("LOOM_SUPERVISED")) {
    free(run_dir), free(ckpt), free(cfg_file);
    return loom_cli_train_supervise(table, argc, argv, nproc, max_restarts, cfg.run.output_dir);
  }
  /* same config: continue the run; any other: a new run recording its parent (lineage.h) */
  char lineage_note[4096];
  if (loom_lineage_resolve(&cfg, &run_dir, &ckpt, lineage_note, sizeof lineage_note)) {
    if (!quiet_rank) report_error(loom_errmsg());
    free(run_dir), free(ckpt), free(cfg_file);
    return 1;
  }
  opts.lineage_note = lineage_note;
  opts.resume = ckpt;
  opts.resume_run = run_dir;
  loom_train_signals_install(); /* SIGINT/SIGTERM/SIGUSR1: stop cleanly after the step */
  if (loom_dist_init(&argc, &argv)) {
    fprintf(stderr, "loom train: error: %s\n", loom_errmsg());
    return 1;
  }
  opts.command_line = recorded_command(argc, argv);
  loom_train_failure failure = {false, false, -1};
  int stop_signal = 0;
  opts.failure = &failure;
  opts.stop_signal = &stop_signal;
  rc = loom_train_run(&cfg, &opts);
  free((char *)opts.command_line);
  free(run_dir), free(ckpt), free(cfg_file);
  if (rc) {
    /* one report: an error every rank knows is printed by rank 0 (loom_train_run put the
     * failing rank into the text); otherwise by the failing rank, which then takes the
     * other ranks down (they may wait in a collective) */
    if (!failure.agreed && loom_dist_world() > 1) {
      fprintf(stderr, "loom train: error: %s\n", loom_errmsg());
      fflush(stderr);
      loom_dist_abort_quiet(1);
    }
    if (loom_dist_rank() == 0) report_error(loom_errmsg());
    loom_dist_finalize();
    return 1;
  }
  loom_dist_finalize();
  return stop_signal ? 128 + stop_signal : 0; /* stopped on a signal: 130, 143, 138 */
}

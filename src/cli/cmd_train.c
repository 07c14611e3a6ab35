/* `loom train`: load the config (file + overrides), validate it, and run training. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include <unistd.h>

#include "loom/config.h"
#include "loom/core.h"
#include "loom/mesh.h"
#include "loom/train.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom train [CONFIG.yaml] [KEY=VALUE ...] [options]\n\n"
          "Train a model. The run goes to <run.output_dir>/<run id>/ with config.yaml,\n"
          "metrics.jsonl, train.log, checkpoint_<step>/ and final_checkpoint/.\n\n"
          "  CONFIG.yaml         run config (every key has a default: 'loom config schema')\n"
          "  KEY=VALUE           override a key (training.lr=1e-3, +key=v, ~key to reset)\n"
          "  --resume DIR        continue from a checkpoint directory; without CONFIG, the\n"
          "                      checkpoint's config.yaml is used. Losses continue bitwise\n"
          "                      identically to an uninterrupted run.\n"
          "  --nproc N           start N ranks with mpirun (same as 'mpirun -np N loom train ...')\n"
          "  --stop-after N      stop after step N (as if interrupted; for testing resume)\n"
          "  --trace FILE        write a Chrome trace (one row per rank: instructions, and\n"
          "                      collectives with their bytes); open in chrome://tracing\n"
          "  --quiet             no progress output\n"
          "  -h, --help          this text\n\n"
          "examples:\n"
          "  loom train configs/demo.yaml training.steps=50 training.dtype=bf16\n"
          "  mpirun -np 4 loom train configs/demo.yaml parallel.dp=2 parallel.tp=2\n"
          "  loom train run.yaml checkpoint.init_from=hf/gpt2   # fine-tune: loom checkpoint or\n"
          "                                                    # Hugging Face directory\n");
}

/* The command that re-runs this one, shell-quoted (ranks started by mpirun: with --nproc). */
static char *recorded_command(int argc, char **argv) {
  char **args = calloc((size_t)argc + 2, sizeof *args), world[16];
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

int loom_cmd_train(int argc, char **argv) {
  if (loom_cli_wants_help(argc, argv)) {
    usage(stdout);
    return 0;
  }
  loom_train_opts opts = {0};
  const char *config_path = NULL, *nproc = NULL;
  loom_config cfg;
  loom_config_defaults(&cfg);
  /* first pass: options and the config file */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--resume") || !strcmp(argv[i], "--stop-after") ||
        !strcmp(argv[i], "--nproc") || !strcmp(argv[i], "--trace")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "loom train: %s needs a value\n", argv[i]);
        return 2;
      }
      if (argv[i][2] == 'r') opts.resume = argv[++i];
      else if (argv[i][2] == 'n') nproc = argv[++i];
      else if (argv[i][2] == 't') opts.trace = argv[++i];
      else opts.stop_after = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--quiet")) {
      opts.quiet = true;
    } else if (argv[i][0] == '-' && argv[i][1] == '-') {
      static const char *const known[] = {"--resume", "--stop-after", "--nproc", "--trace",
                                          "--quiet", "--help", NULL};
      fprintf(stderr, "loom train: unknown option '%s'%s (see loom train --help)\n", argv[i],
              loom_cli_did_you_mean(argv[i], known));
      return 2;
    } else if (!strchr(argv[i], '=') && argv[i][0] != '~') {
      if (config_path) {
        fprintf(stderr, "loom train: two config files given ('%s' and '%s')\n", config_path,
                argv[i]);
        return 2;
      }
      config_path = argv[i];
    }
  }
  if (nproc && !getenv("OMPI_COMM_WORLD_SIZE")) return loom_cli_exec_mpirun("train", argc, argv, nproc, false);
  if (loom_dist_init(&argc, &argv)) {
    fprintf(stderr, "loom train: %s\n", loom_errmsg());
    return 1;
  }
  bool quiet_rank = loom_dist_rank() != 0;
  char *resume_cfg = NULL;
  if (opts.resume && !loom_is_dir(opts.resume)) {
    fprintf(stderr, "loom train: --resume: checkpoint '%s' is not a directory (expected "
            "runs/<id>/checkpoint_<step> or runs/<id>/final_checkpoint)\n", opts.resume);
    return 1;
  }
  if (!config_path && opts.resume) {
    resume_cfg = loom_sprintf("%s/config.yaml", opts.resume);
    config_path = resume_cfg;
  }
  int rc = config_path ? loom_config_load(&cfg, config_path) : 0;
  /* second pass: overrides, in order */
  for (int i = 1; i < argc && !rc; i++) {
    if (!strcmp(argv[i], "--resume") || !strcmp(argv[i], "--stop-after") ||
        !strcmp(argv[i], "--nproc") || !strcmp(argv[i], "--trace")) {
      i++;
      continue;
    }
    if (strchr(argv[i], '=') || argv[i][0] == '~') rc = loom_config_override(&cfg, argv[i]);
  }
  if (!rc) rc = loom_config_validate(&cfg);
  if (!rc) rc = loom_config_resolve_grad_accum(&cfg); /* training.global_batch_size */
  char *init_abs = !rc && cfg.checkpoint.init_from[0] ? realpath(cfg.checkpoint.init_from, NULL)
                                                     : NULL;
  if (init_abs && strlen(init_abs) < sizeof cfg.checkpoint.init_from) /* recorded absolute */
    snprintf(cfg.checkpoint.init_from, sizeof cfg.checkpoint.init_from, "%s", init_abs);
  free(init_abs);
  free(resume_cfg);
  if (rc) { /* the same on every rank: rank 0 tells */
    if (!quiet_rank) fprintf(stderr, "loom train: %s\n", loom_errmsg());
    loom_dist_finalize();
    return 1;
  }
  opts.command_line = recorded_command(argc, argv);
  rc = loom_train_run(&cfg, &opts);
  free((char *)opts.command_line);
  if (rc) {
    if (loom_dist_world() > 1) /* other ranks may wait in a collective: take them down */
      loom_dist_abort("train: rank %d: error: %s", loom_dist_rank(), loom_errmsg());
    fprintf(stderr, "loom train: error: %s\n", loom_errmsg());
    return 1;
  }
  loom_dist_finalize();
  return 0;
}

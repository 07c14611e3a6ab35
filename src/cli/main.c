/* `loom` entry point: dispatches to subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/core.h"
#include "loom/kernels.h"

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *summary;
} commands[] = {
    {"train", loom_cmd_train, "train a model from a YAML config (loom train run.yaml a.b=c ...)"},
    {"eval", loom_cmd_eval, "validation loss and perplexity of a checkpoint (loom or Hugging Face)"},
    {"data", loom_cmd_data, "prepare data: text corpora, tokenizers, token shards, VQA sets"},
    {"ckpt", loom_cmd_ckpt, "inspect, compare, export and import checkpoints (Hugging Face)"},
    {"config", loom_cmd_config, "show a resolved config or the schema of every key"},
    {"model", loom_cmd_model, "list model presets and parameter counts"},
    {"sweep", loom_cmd_sweep, "generate and run sweeps (grid/random; local mpirun or Slurm), summaries"},
    {"runs", loom_cmd_runs, "the run registry: list, show, compare, diff, plot, serve, delete, gc"},
    {"sched", loom_cmd_sched, "show and validate pipeline schedules (gpipe, 1f1b, interleaved, files)"},
    {"sim", loom_cmd_sim, "simulate a training step on a hardware profile (time, MFU, memory, trace)"},
    {"plan", loom_cmd_plan, "search the fastest parallel strategy that fits (table, why, config)"},
    {"generate", loom_cmd_generate, "sample text from a checkpoint with a KV cache (or ask a VLM about an image)"},
    {"bench", loom_cmd_bench, "calibrate this machine into a hardware profile for sim/plan"},
};

static const struct {
  const char *name, *summary;
} subcommands[] = {
    {"data synth-text", "write a deterministic synthetic story corpus"},
    {"data train-tokenizer", "train a byte-level BPE tokenizer.json"},
    {"data tokenize", "encode text files into a token shard (.bin)"},
    {"data encode", "print the token ids of a text"},
    {"data decode", "print the text of token ids"},
    {"data inspect-shard", "show a shard's header and first tokens"},
    {"data synth-vqa", "write the synthetic shapes VQA set (tar shards)"},
    {"data prepare", "index tar shards: write .nv-meta/ (Energon style)"},
    {"data inspect", "show a VQA dataset's splits and samples"},
    {"ckpt inspect", "tensors, dtypes, shapes, norms and metadata of a checkpoint"},
    {"ckpt export", "checkpoint -> Hugging Face directory (text models and VLMs)"},
    {"ckpt import", "Hugging Face directory -> weights-only checkpoint"},
    {"ckpt compare", "compare the weights of two checkpoints (any layouts)"},
    {"ckpt grad-norms", "per-tensor norms of a checkpoint's saved gradients"},
    {"config show", "the resolved config of a YAML file and overrides"},
    {"config schema", "every config key with its type, default and meaning"},
    {"model list", "the model presets with dimensions and parameter counts"},
    {"sweep generate", "expand a sweep file into its runs' configs"},
    {"sweep show", "the runs a sweep file expands to"},
    {"sweep run", "run a sweep (local mpirun, Slurm or the simulator)"},
    {"sweep summary", "summary table of a finished sweep directory"},
    {"runs list", "list runs: --filter (repeatable, AND), --sort-by, --show, --format"},
    {"runs show", "one run: config, metrics, checkpoints, log path"},
    {"runs compare", "config differences and metrics of several runs"},
    {"runs set-metric", "add custom metrics to a run"},
    {"runs export", "the runs table as CSV for pandas"},
    {"runs plot", "metric curves of several runs (SVG or PNG)"},
    {"runs diff", "two runs' per-step curves compared (numpy.allclose), overlay plot"},
    {"runs serve", "live web dashboard of the registry"},
    {"runs delete", "remove runs from the registry (--files: and their directories)"},
    {"runs gc", "drop the rows of runs whose run directory is gone (--dry-run)"},
    {"sched show", "print a generated or loaded pipeline schedule (text or grid)"},
    {"sched validate", "check a user-written schedule file"},
    {"bench model", "time a model's training step and write a hardware profile"},
};

static void usage(FILE *out) {
  fprintf(out,
          "loom %s - train, simulate and plan transformer training\n\n"
          "usage: loom <command> [options]\n\ncommands:\n",
          LOOM_VERSION_STRING);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "  %-8s %s\n  %-8s %s\n", "version", "print the version", "help",
          "this text (or 'loom help <command>')");
  /* every subcommand with its summary: what `loom <command> --help` details */
  fprintf(out, "\nsubcommands:\n");
  for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
    fprintf(out, "  %-22s %s\n", subcommands[i].name, subcommands[i].summary);
  fprintf(out, "\nRun 'loom <command> --help' for the options of a command.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  (void)loom_kernels_simd(); /* a bad LOOM_SIMD is refused now, before a command writes anything */
  const char *cmd = argv[1];
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    const loom_cli_opt none[] = {{0}}; /* loom help [COMMAND]: no options */
    loom_cli_parser p = {.command = "help", .opts = none};
    int prc = loom_cli_parse(&p, argc - 1, argv + 1, 1);
    free(p.pos);
    if (prc == LOOM_CLI_HELP) return usage(stdout), 0;
    if (prc) return 2;
    if (argc >= 3) {
      for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[2], commands[i].name)) {
          char *args[] = {argv[2], "--help", NULL};
          return commands[i].fn(2, args);
        }
      const char *names[sizeof commands / sizeof commands[0] + 1] = {0};
      for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) names[i] = commands[i].name;
      fprintf(stderr, "loom help: unknown command '%s'%s\n\n", argv[2],
              loom_cli_did_you_mean(argv[2], names));
      usage(stderr);
      return 2;
    }
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    const loom_cli_opt none[] = {{0}};
    loom_cli_parser p = {.command = "version", .opts = none};
    int prc = loom_cli_parse(&p, argc - 1, argv + 1, 1);
    if (prc == LOOM_CLI_OK && p.npos)
      fprintf(stderr, "loom version: takes no arguments ('%s' given)\n", p.pos[0]), prc = LOOM_CLI_BAD;
    free(p.pos);
    if (prc == LOOM_CLI_HELP) printf("usage: loom version\n\nPrint loom's version.\n");
    if (prc) return prc == LOOM_CLI_HELP ? 0 : 2;
    printf("loom %s\n", LOOM_VERSION_STRING);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(cmd, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  const char *names[sizeof commands / sizeof commands[0] + 3] = {"help", "version"};
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) names[i + 2] = commands[i].name;
  if (cmd[0] == '-')
    fprintf(stderr, "loom: unknown option '%s' (options follow the command: loom <command> "
            "--help)\n\n", cmd);
  else
    fprintf(stderr, "loom: unknown command '%s'%s\n\n", cmd, loom_cli_did_you_mean(cmd, names));
  usage(stderr);
  return 2;
}

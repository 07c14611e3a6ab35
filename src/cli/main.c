/* `loom` entry point: dispatches to subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "loom/core.h"

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *summary;
} commands[] = {
    {"train", loom_cmd_train, "train a model from a YAML config (loom train run.yaml a.b=c ...)"},
    {"eval", loom_cmd_eval, "validation loss and perplexity of a checkpoint (loom or Hugging Face)"},
    {"data", loom_cmd_data, "prepare data: synth-text, train-tokenizer, tokenize, encode, decode"},
    {"ckpt", loom_cmd_ckpt, "inspect checkpoints (tensors, dtypes, shapes, norms)"},
    {"config", loom_cmd_config, "show a resolved config or the schema of every key"},
    {"model", loom_cmd_model, "list model presets and parameter counts"},
    {"sweep", loom_cmd_sweep, "generate and run sweeps (grid/random; local mpirun or Slurm), summaries"},
    {"runs", loom_cmd_runs, "the run registry: list/filter/sort runs, show, compare, plot, export"},
    {"sched", loom_cmd_sched, "show and validate pipeline schedules (gpipe, 1f1b, interleaved, files)"},
    {"sim", loom_cmd_sim, "simulate a training step on a hardware profile (time, MFU, memory, trace)"},
    {"plan", loom_cmd_plan, "search the fastest parallel strategy that fits (table, why, config)"},
    {"generate", loom_cmd_generate, "sample text from a checkpoint with a KV cache (or ask a VLM about an image)"},
    {"bench", loom_cmd_bench, "calibrate this machine into a hardware profile for sim/plan"},
};

static void usage(FILE *out) {
  fprintf(out,
          "loom %s - train, simulate and plan transformer training\n\n"
          "usage: loom <command> [options]\n\ncommands:\n",
          LOOM_VERSION_STRING);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "  %-8s %s\n  %-8s %s\n\nRun 'loom <command> --help' for the options of a command.\n",
          "version", "print the version", "help", "this text (or 'loom help <command>')");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    if (argc >= 3) {
      for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[2], commands[i].name)) {
          char *args[] = {argv[2], "--help", NULL};
          return commands[i].fn(2, args);
        }
    }
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    if (argc >= 3 && loom_cli_wants_help(argc - 1, argv + 1)) {
      printf("usage: loom version\n\nPrint loom's version.\n");
      return 0;
    }
    printf("loom %s\n", LOOM_VERSION_STRING);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(cmd, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "loom: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return 2;
}

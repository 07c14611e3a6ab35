/* Subcommands of the `loom` executable. Each takes argv after the subcommand name
 * (argv[0] is the subcommand itself), prints its own --help, and returns the exit code. */
#ifndef LOOM_CLI_COMMANDS_H
#define LOOM_CLI_COMMANDS_H
#include <stdbool.h>

#include "cli/options.h"
int loom_cmd_train(int argc, char **argv);   /* src/cli/cmd_train.c */
int loom_cmd_data(int argc, char **argv);    /* src/cli/cmd_data.c */
int loom_cmd_eval(int argc, char **argv);    /* src/cli/cmd_eval.c */
int loom_cmd_ckpt(int argc, char **argv);    /* src/cli/cmd_ckpt.c */
int loom_cmd_config(int argc, char **argv);  /* src/cli/cmd_config.c */
int loom_cmd_model(int argc, char **argv);   /* src/cli/cmd_model.c */
int loom_cmd_ckpt_compare(int argc, char **argv); /* src/cli/cmd_ckpt_compare.c */
int loom_cmd_ckpt_export(int argc, char **argv);  /* src/cli/cmd_ckpt_hf.c */
int loom_cmd_ckpt_import(int argc, char **argv);  /* src/cli/cmd_ckpt_hf.c */
/* `loom ckpt grad-norms PATH [--sort] [--json]` (src/cli/cmd_ckpt_grad_norms.c) */
int loom_cmd_ckpt_grad_norms(int argc, char **argv);
int loom_cmd_data_prepare(int argc, char **argv);   /* src/cli/cmd_data_vqa.c */
int loom_cmd_data_inspect(int argc, char **argv);   /* src/cli/cmd_data_vqa.c */
int loom_cmd_data_synth_vqa(int argc, char **argv); /* src/cli/cmd_data_vqa.c */
int loom_cmd_sched(int argc, char **argv);   /* src/cli/cmd_sched.c */
int loom_cmd_sweep(int argc, char **argv);   /* src/cli/cmd_sweep.c */
int loom_cmd_runs(int argc, char **argv);    /* src/cli/cmd_runs.c */
int loom_cmd_sim(int argc, char **argv);     /* src/cli/cmd_sim.c */
int loom_cmd_bench(int argc, char **argv);   /* src/cli/cmd_bench.c */
int loom_cmd_bench_model(int argc, char **argv); /* src/cli/cmd_bench_model.c: loom bench model */
int loom_cmd_plan(int argc, char **argv);    /* src/cli/cmd_plan.c */
int loom_cmd_generate(int argc, char **argv); /* src/cli/cmd_generate.c */
/* "; did you mean 'X'?" for the name in names (NULL-terminated) nearest to word (edit
 * distance, src/config/config_suggest.c), or "" when none is near. Static buffer. */
const char *loom_cli_did_you_mean(const char *word, const char *const *names);
/* "loom <command> argv..." with every argument shell-quoted where needed: pasted into a shell
 * it runs the same command (malloc'd). */
char *loom_cli_command_line(const char *command, int argc, char **argv);
/* What `loom eval` / `loom generate` read for CKPT: a run directory (config.yaml with its
 * train.log or metrics.jsonl, no COMPLETE marker: runs/<id>) stands for its newest complete
 * checkpoint (final_checkpoint of a finished run), found as --resume finds it
 * (loom_run_dir_newest_checkpoint); anything else is itself. *ckpt is malloc'd; error when a
 * run directory has no complete checkpoint yet. */
int loom_cli_checkpoint_arg(const char *arg, char **ckpt);
/* Width of the output: $COLUMNS, else the terminal's (TIOCGWINSZ), else 100. */
int loom_cli_terminal_width(void);
/* loom train --nproc/--max-restarts: run the job under a supervising launcher that reports
 * unreported failures and relaunches from the newest complete checkpoint (train_supervisor.c).
 * opts: train's option table, which reads argv to leave those options out of the ranks'. */
int loom_cli_train_supervise(const loom_cli_opt *opts, int argc, char **argv, const char *nproc,
                             long max_restarts, const char *output_dir);
/* --nproc N: re-run `loom <command> argv...` (without --nproc, read with the command's option
 * table opts) under mpirun with N ranks (adding --oversubscribe past the core count and Open
 * MPI's root consent). Returns only on failure. */
int loom_cli_exec_mpirun(const char *command, const loom_cli_opt *opts, int argc, char **argv,
                         const char *nproc, bool single_threaded_ranks);
#endif

/* `loom sched`: `show` prints a generated (or loaded) pipeline schedule in its text form or
 * as a per-rank timeline grid, with its bubble fraction and peak in-flight micro-batches;
 * `validate` checks a user-written schedule file. Errors go to stderr: exit 1 for an invalid
 * schedule, 2 for bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/core.h"
#include "loom/sched.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom sched show --pp N --microbatches M [--schedule NAME] [--vpp V]\n"
          "                       [--format text|grid]\n"
          "       loom sched show --file FILE [--format text|grid]\n"
          "       loom sched validate FILE\n\n"
          "show      print a pipeline schedule: each rank's instruction list in the text form\n"
          "          (which 'validate' and parallel.schedule_file accept) or a timeline grid,\n"
          "          then its bubble fraction and peak in-flight micro-batches per rank\n"
          "validate  check a schedule file (matching sends/recvs, forward/backward once each\n"
          "          and in order, no deadlock); prints OK or the error (exit status 1)\n\n"
          "Schedules: none (pp = 1), gpipe, 1f1b, interleaved (vpp >= 2). The text form is\n"
          "described in docs/SCHEDULES.md. Run 'loom sched show --help' for show's options.\n");
}

static void usage_show(FILE *out) {
  fprintf(out,
          "usage: loom sched show --pp N --microbatches M [--schedule NAME] [--vpp V]\n"
          "                       [--format text|grid]\n"
          "       loom sched show --file FILE [--format text|grid]\n\n"
          "  --pp N            pipeline ranks (required unless --file)\n"
          "  --microbatches M  micro-batches per optimizer step (required unless --file)\n"
          "  --schedule NAME   none | gpipe | 1f1b | interleaved (default 1f1b)\n"
          "  --vpp V           chunks per rank, interleaved only (default 1; interleaved "
          "needs >= 2)\n"
          "  --file FILE       show a schedule file instead of generating one (validated)\n"
          "  --format FMT      text (default): the text form, parseable by 'loom sched "
          "validate';\n"
          "                    grid: one row per rank, one cell per unit of time (forward 1,\n"
          "                    backward 2), '.' where the rank idles\n\n"
          "Both formats end with '#' comment lines: the bubble fraction (idle time over busy\n"
          "time summed over ranks, forward 1, backward 2, communication 0 -- Megatron's\n"
          "(pp-1)/m for 1F1B) and the peak number of micro-batches in flight on each rank.\n");
}

static void usage_validate(FILE *out) {
  fprintf(out,
          "usage: loom sched validate FILE\n\n"
          "Parse FILE (the text form of docs/SCHEDULES.md) and check it: every send matched by\n"
          "one recv on the peer, every forward and backward once per chunk and micro-batch and\n"
          "in order, inputs received before use, no deadlock when sends are asynchronous and\n"
          "receives block. Prints 'OK: ...' (exit 0) or the error naming the rank, the\n"
          "instruction and the reason (exit 1).\n");
}

static int parse_count(const char *opt, const char *val, int *out) {
  char *end = NULL;
  long v = val ? strtol(val, &end, 10) : 0;
  if (!val || !*val || *end || v < 1 || v > 1000000) {
    fprintf(stderr, "loom sched show: %s needs a positive integer, got '%s'\n", opt,
            val ? val : "(nothing)");
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* The '#' lines after the schedule: bubble fraction and peak in-flight micro-batches. */
static void print_metrics(const loom_schedule *s) {
  double bubble = loom_sched_bubble_fraction(s, 1, 2);
  printf("# bubble fraction: %.4f (idle / busy time over all ranks; forward 1, backward 2, "
         "comm 0); %.1f%% of the step is idle\n", bubble, 100 * bubble / (1 + bubble));
  printf("# peak in-flight micro-batches per rank:");
  for (int r = 0; r < s->pp; r++) printf(" %d", loom_sched_peak_inflight(s, r));
  printf("\n");
}

static int cmd_show(int argc, char **argv) {
  int pp = 0, vpp = 1, m = 0;
  const char *name = "1f1b", *format = "text", *file = NULL;
  const char *pp_s = NULL, *vpp_s = NULL, *m_s = NULL;
  const loom_cli_opt opts[] = {
      LOOM_OPT_VALUE("--pp", &pp_s),         LOOM_OPT_VALUE("--vpp", &vpp_s),
      LOOM_OPT_VALUE("--microbatches", &m_s), LOOM_OPT_VALUE("--schedule", &name),
      LOOM_OPT_VALUE("--format", &format),   LOOM_OPT_VALUE("--file", &file),
      {0}};
  loom_cli_parser p = {.command = "sched show", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  if (!prc && p.npos) {
    fprintf(stderr, "loom sched show: unexpected argument '%s' (see loom sched show --help)\n",
            p.pos[0]);
    prc = LOOM_CLI_BAD;
  }
  free(p.pos);
  if (prc == LOOM_CLI_HELP) return usage_show(stdout), 0;
  if (prc) return 2;
  if ((pp_s && parse_count("--pp", pp_s, &pp)) || (vpp_s && parse_count("--vpp", vpp_s, &vpp)) ||
      (m_s && parse_count("--microbatches", m_s, &m)))
    return 2;
  if (strcmp(format, "text") && strcmp(format, "grid")) {
    fprintf(stderr, "loom sched show: --format must be text or grid, got '%s'\n", format);
    return 2;
  }
  loom_schedule s;
  if (file) {
    if (loom_sched_load(&s, file) || loom_sched_validate(&s)) {
      fprintf(stderr, "loom sched show: %s\n", loom_errmsg());
      loom_sched_free(&s);
      return 1;
    }
  } else {
    if (!pp || !m) {
      fprintf(stderr, "loom sched show: --pp and --microbatches are required (or --file); see "
              "loom sched show --help\n");
      return 2;
    }
    if (loom_sched_generate(&s, name, pp, vpp, m)) {
      fprintf(stderr, "loom sched show: %s\n", loom_errmsg());
      return 1;
    }
  }
  char *out = !strcmp(format, "grid") ? loom_sched_to_grid(&s) : loom_sched_to_text(&s);
  if (!out) {
    fprintf(stderr, "loom sched show: %s\n", loom_errmsg());
    loom_sched_free(&s);
    return 1;
  }
  fputs(out, stdout);
  free(out);
  print_metrics(&s);
  loom_sched_free(&s);
  return 0;
}

static int cmd_validate(int argc, char **argv) {
  const loom_cli_opt opts[] = {{0}};
  loom_cli_parser p = {.command = "sched validate", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  const char *file = p.npos == 1 ? p.pos[0] : NULL;
  free(p.pos);
  if (prc == LOOM_CLI_HELP) return usage_validate(stdout), 0;
  if (prc) return 2;
  if (!file) {
    usage_validate(stderr);
    return 2;
  }
  loom_schedule s;
  if (loom_sched_load(&s, file) || loom_sched_validate(&s)) {
    fprintf(stderr, "loom sched validate: %s\n", loom_errmsg());
    loom_sched_free(&s);
    return 1;
  }
  long total = 0;
  for (int r = 0; r < s.pp; r++) total += s.count[r];
  printf("OK: %s: schedule %s, pp=%d vpp=%d microbatches=%d, %ld instructions, bubble "
         "fraction %.4f\n", file, s.name, s.pp, s.vpp, s.microbatches, total,
         loom_sched_bubble_fraction(&s, 1, 2));
  loom_sched_free(&s);
  return 0;
}

int loom_cmd_sched(int argc, char **argv) {
  static const char *const names[] = {"show", "validate", NULL};
  int sub = loom_cli_subcommand("sched", argc, argv, names, NULL);
  if (sub >= 0) return (sub == 0 ? cmd_show : cmd_validate)(argc - 1, argv + 1);
  if (sub == LOOM_CLI_SUB_HELP) return usage(stdout), 0;
  if (sub == LOOM_CLI_SUB_BAD) fputc('\n', stderr);
  usage(stderr);
  return 2;
}

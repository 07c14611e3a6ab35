/* Private to src/sweep/sweep_*.c: linked parameters and `${key}` values of sweep files, what the
 * runner knows about each point once it is done with it, the state file that keeps it
 * (state.tsv in the sweep's log directory, so summaries can be rebuilt later, e.g. after
 * Slurm jobs end), and the summary writer. */
#ifndef LOOM_SWEEP_INTERNAL_H
#define LOOM_SWEEP_INTERNAL_H
#include <stdbool.h>
#include <stddef.h>

#include "loom/sweep.h"

/* "${some.key}" -> true with "some.key" in key; anything else -> false. */
bool loom_sweep_interp_key(const char *value, char *key, size_t cap);
/* Group linked parameters (params[i].group), check that each group has one count of values
 * and plain lists, and that interpolations do not refer to interpolated parameters. */
int loom_sweep_link_groups(loom_sweep_spec *s);

typedef struct {
  loom_point_status status;
  int exit_code;        /* process exit status; 128 + signal; -1 when not run */
  double wall_s;        /* seconds from start to end (0 when not run) */
  char job_id[64];      /* batch job id */
  char note[512];       /* why it failed / was skipped, the dry-run command, ... */
  char *log_path;       /* absolute */
} loom_point_result;

typedef struct {
  char *sweep_name, *sweep_id, *launcher, *log_dir;
  char *hardware;       /* sim launcher: the hardware profile (NULL otherwise) */
  int parallel;
  double peak_flops[2]; /* one thread's fp32 / bf16 peak in this machine's hardware profile
                         * (loom bench; its instruction peak where it has one, else the
                         * library's GEMM figure: loom_mfu_peak), for the MFU estimate (0 = none:
                         * no MFU) */
  double wall_s;        /* whole sweep */
} loom_sweep_info;

const char *loom_point_status_label(loom_point_status s);
int loom_point_status_parse(const char *label, loom_point_status *s);

/* state.tsv: write after every change (atomic), read back for loom_sweep_summarize_dir. */
int loom_sweep_state_write(const loom_sweep_info *info, const loom_sweep_plan *plan,
                           const loom_point_result *res);
int loom_sweep_state_read(const char *log_dir, loom_sweep_info *info, loom_sweep_plan *plan,
                          loom_point_result **res);
void loom_sweep_info_free(loom_sweep_info *info);
void loom_point_results_free(loom_point_result *res, int n);

/* The line of a failed point's log that says why (into out, "" when the log has none): the
 * last line loom itself printed ("loom train: ..."), else the headline of the last Open MPI /
 * srun message block (the first line after a row of dashes, e.g. "mpirun has detected an
 * attempt to run as root."), else the last line with "error" in it (any case: "mpirun: Error:
 * unknown option", "srun: error: ..."), else the last non-empty line. Reads the log's last
 * 64 KiB. */
void loom_sweep_log_error(const char *log_path, char *out, size_t n);

/* The run directory of a point's run (malloc'd), NULL when it has none yet: the registry's run
 * of the sweep execution with the point's name, else the last "run directory:" line of its log. */
char *loom_sweep_point_run_dir(const loom_sweep_info *info, const loom_sweep_point *p,
                               const loom_point_result *r);

/* summary.txt and summary.csv from each run's summary.json / metrics.jsonl. */
int loom_sweep_write_summary(const loom_sweep_info *info, const loom_sweep_plan *plan,
                             const loom_point_result *res);
#endif

/* Private to src/sweep/sweep_*.c: the launcher interface of the sweep runner. A launcher starts
 * one point: either as a child process the runner waits for (local mpirun), or synchronously
 * with a final status (Slurm submission, the simulator run in this process). */
#ifndef LOOM_SWEEP_LAUNCH_H
#define LOOM_SWEEP_LAUNCH_H
#include <sys/types.h>

#include "loom/sweep.h"

typedef struct {
  const loom_sweep_run_opts *opts;
  const char *log_dir;      /* absolute logs/sweep_<ts> */
  const char *sweep_name;
  const char *sweep_id;     /* basename of log_dir */
  const char *cwd;          /* directory the sweep was started from */
  const char *hardware;     /* sim: the hardware profile (name or file) */
  const char *stop_file;    /* local: LOOM_STOP_FILE of the points (the runner writes the
                               signal's number there to stop them cleanly) */
  bool append;              /* a continued sweep: points' logs are appended to */
} loom_launch_ctx;

typedef struct {
  pid_t pid;                /* > 0: a child process to wait for */
  loom_point_status status; /* pid == 0: the final status */
  char job_id[64];          /* batch job id */
  char note[512];           /* shown next to the status, kept in the summary */
} loom_launch_result;

struct loom_sweep_launcher {
  const char *name;
  const char *summary;
  bool concurrent;          /* honours --parallel (children run at once) */
  bool uses_hardware;       /* takes --hardware / the sweep file's sim: {hardware} */
  /* optional: check the options before anything is written (0, or -1 with the message) */
  int (*setup)(const loom_sweep_run_opts *o, const char *hardware);
  /* 0 with *r filled, or -1 (error message set) when the point could not be started */
  int (*start)(const loom_launch_ctx *c, const loom_sweep_point *p, const char *log_path,
               loom_launch_result *r);
};

/* The last line a Slurm point's script writes to its log: this text, a space, srun's status. */
#define LOOM_SWEEP_EXIT_MARK "# loom sweep point exit status"

extern const loom_sweep_launcher loom_launcher_local;
extern const loom_sweep_launcher loom_launcher_slurm;
extern const loom_sweep_launcher loom_launcher_sim;
/* By name; an error listing the known launchers otherwise. */
const loom_sweep_launcher *loom_sweep_launcher_find(const char *name);
/* 'text' quoted for a POSIX shell (malloc'd). */
char *loom_shell_quote(const char *text);
#endif

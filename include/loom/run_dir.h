/* Run-directory management: creating a run's directory or taking one over to resume it,
 * which run and checkpoint `--resume` means (latest run, newest complete checkpoint), removal
 * of what an interrupted job left behind, the metrics of steps a resume redoes, and pruning
 * of old periodic checkpoints by rename-then-delete. See docs/RELIABILITY.md. */
#ifndef LOOM_RUN_DIR_H
#define LOOM_RUN_DIR_H
#include <stdbool.h>

#include "loom/config.h"

/* The newest run under output_dir: the sub-directory holding config.yaml whose train.log
 * (else config.yaml) was modified last. Error when there is none. */
int loom_run_dir_latest(const char *output_dir, char **run_dir);

/* The complete checkpoint (checkpoint_<N>/ or final_checkpoint/ with a valid COMPLETE marker)
 * of run_dir with the highest step: *ckpt (malloc'd) and *step, or *ckpt = NULL when the run
 * has none. */
int loom_run_dir_newest_checkpoint(const char *run_dir, char **ckpt, long *step);

/* The complete checkpoint_<N> of run_dir with the highest N < below (*ckpt NULL if none). */
int loom_run_dir_newest_periodic(const char *run_dir, long below, char **ckpt, long *step);

/* What `--resume ARG` names: "latest" (the newest run under output_dir), a run directory, or
 * a checkpoint directory. Sets *run_dir and *ckpt (malloc'd); *ckpt is the newest complete
 * checkpoint of a run directory, NULL when it has none and allow_none is set (a restart
 * before the first checkpoint: the run starts again from step 0) or the run is a fork (it
 * resumes from run.parent_checkpoint: loom_lineage_resolve), else an error. A named
 * checkpoint must be complete. */
int loom_run_dir_resolve(const char *arg, const char *output_dir, bool allow_none,
                         char **run_dir, char **ckpt);

/* Remove what an interrupted job of this run left: "*.tmp" entries (checkpoints being
 * written or pruned), "*.tmp.<pid>" files (atomic writes), "*.old.<pid>" directories
 * (a replaced final_checkpoint) and checkpoint directories without a valid COMPLETE marker.
 * *removed: a malloc'd, comma-separated list of the names removed ("" when none). */
int loom_run_dir_clean(const char *run_dir, char **removed);

/* Keep the newest keep_last complete checkpoint_<N>/ directories; each older one is renamed
 * to checkpoint_<N>.pruned.tmp (atomic: it is never seen half-deleted under its name), the
 * directory synced, then deleted. keep_last <= 0 keeps all. */
int loom_run_dir_prune(const char *run_dir, long keep_last);

/* One job per run directory: an exclusive flock on <run_dir>/.lock, held while *fd stays
 * open (released by the kernel when the process ends, also on SIGKILL). Error when another
 * job holds it. */
int loom_run_dir_lock(const char *run_dir, int *fd);

/* World rank 0, before config.yaml is written: a new run (resume_run NULL) gets a new
 * directory <run.output_dir>/<run.name, else the preset or arch>_<date-time>_<tag>, locked;
 * a resumed one is locked (before anything changes), cleaned (loom_run_dir_clean; *cleaned:
 * the train.log line saying what went, NULL when nothing did) and pruned to keep_last (a
 * prune interrupted after the last save). *dir (malloc'd) is set even on error once known;
 * *lock_fd holds the lock (-1: none). */
int loom_run_dir_open(const loom_config *cfg, const char *resume_run, char **dir, int *lock_fd,
                      char **cleaned);

/* The run's summary.json says it finished ("finished"; "completed" in runs of an older
 * loom). */
bool loom_run_dir_finished(const char *run_dir);

/* A resumed run's metrics.jsonl keeps the lines of steps <= step (a resumed run rewrites
 * what follows); a last line cut by a crash or a full disk (no newline) is dropped. Nothing
 * when the file does not exist. */
int loom_run_dir_truncate_metrics(const char *path, long step);
#endif

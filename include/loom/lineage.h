/* Run lineage: does a resume continue the run, or fork a new one? The rule (written down in
 * docs/EXPERIMENTS.md "Resume and lineage"): the resumed config is compared key by key with
 * the run's own config.yaml; keys that cannot change the training trajectory (bookkeeping:
 * where and how often things are logged or saved, labels, timeouts) are left out. Same
 * config: the run continues in its directory under its id. Any other difference (steps,
 * layout, lr, data, model, seed, name, a +user key, ...): a new run, which records its parent
 * run and checkpoint (run.parent, run.parent_checkpoint) and leaves the parent untouched. */
#ifndef LOOM_LINEAGE_H
#define LOOM_LINEAGE_H
#include <stdbool.h>
#include <stddef.h>

#include "loom/config.h"

/* True for config keys that cannot change the training trajectory (a change continues the
 * run): run.output_dir, run.max_restarts, run.tags, run.notes, run.parent,
 * run.parent_checkpoint, training.log_every, training.eval_every, checkpoint.every,
 * checkpoint.keep_last, checkpoint.save_final, checkpoint.save_gradients, parallel.timeout_s. */
bool loom_lineage_bookkeeping_key(const char *key);

/* Compare cfg with the config of run (a loaded config.yaml). *fork: a trajectory key or a
 * user key differs. changed: "training.steps 30 -> 70, +exp.note (added)" for the trajectory
 * differences, bookkeeping: the same for the bookkeeping keys (empty when none; both cut at
 * their size with "..."). */
void loom_lineage_compare(const loom_config *cfg, const loom_config *run, bool *fork,
                          char *changed, size_t nchanged, char *bookkeeping, size_t nbook);

/* Load the config a run was trained with: run_dir/config.yaml, else (a checkpoint outside a
 * run directory) ckpt/config.yaml. Error naming the file when neither loads. */
int loom_lineage_load_run_config(const char *run_dir, const char *ckpt, loom_config *out);

/* What --resume does with cfg, decided before training (every rank alike, from the same
 * files). *run_dir and *ckpt as loom_run_dir_resolve gave them (both NULL without --resume).
 * Continue: cfg takes the run's run.parent/run.parent_checkpoint; a forked run restarted
 * before its first checkpoint of its own resumes from run.parent_checkpoint (*ckpt set). A
 * checkpoint of a finished run (summary.json finished) is always a fork, same config or not:
 * a finished run's files are never rewritten.
 * Fork: cfg->run.parent = the run's id, cfg->run.parent_checkpoint = the checkpoint's
 * absolute path, *run_dir freed and NULL (a new run directory). Without --resume, a
 * run.parent of the config (a forked run's config.yaml trained again) is cleared: that run
 * starts from step 0 and is nobody's child. note: one line for train.log ("" if none). */
int loom_lineage_resolve(loom_config *cfg, char **run_dir, char **ckpt, char *note, size_t n);
#endif

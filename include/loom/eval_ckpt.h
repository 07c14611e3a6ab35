/* Scoring a checkpoint on validation data without training (eval_ckpt.c; `loom eval`). */
#ifndef LOOM_EVAL_CKPT_H
#define LOOM_EVAL_CKPT_H
#include "loom/config.h"
#include "loom/eval_loss.h"

/* Every rank of the job: build cfg's layout (parallel.*, vision.parallel.*), load the
 * parameters of the loom checkpoint `dir` (any layout: one process, multi-rank pieces, or a
 * weights-only import) into it, and evaluate cfg's validation data (data.val_shards,
 * data.val_fraction or a vqa val split; training.eval_batches). describe receives the data
 * line (cap bytes). The result is the same on every rank. */
int loom_eval_checkpoint(const loom_config *cfg, const char *dir, loom_eval_loss_result *r,
                         char *describe, size_t cap);
#endif

/* Evaluation of a trained model on held-out data. */
#ifndef LOOM_EVAL_H
#define LOOM_EVAL_H
#include "loom/config.h"
#include "loom/exec.h"
#include "loom/mesh.h"

/* Answer accuracy (teacher-forced exact match of every answer token) of a vision-language
 * model over up to max_batches micro-batches (0: one epoch) of `split` of data.vqa_path. */
int loom_eval_vqa(loom_executor *ex, const loom_config *cfg, const loom_mesh *m,
                  const char *split, long max_batches, double *accuracy, long *samples);
#endif

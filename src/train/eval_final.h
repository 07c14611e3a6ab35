/* Answer accuracy at the end of a vision-language run in any layout, and its lines in
 * train.log (eval_final.c). */
#ifndef LOOM_TRAIN_EVAL_FINAL_H
#define LOOM_TRAIN_EVAL_FINAL_H
#include "loom/eval.h"
#include "loom/exec.h"
#include "loom/mesh.h"
#include "train/progress.h"

/* Every rank of the job calls it; m is the text decoder's mesh, final_ckpt the run's final
 * checkpoint (NULL if none was written). The result is meaningful on world rank 0. */
int loom_eval_vqa_final(loom_executor *ex, const loom_config *cfg, const loom_model_spec *spec,
                        const loom_mesh *m, const loom_comm *job, const char *final_ckpt,
                        loom_eval_vqa_result *res);

/* Every rank, at the end of a vision-language run: loom_eval_vqa_final (from
 * <run_dir>/final_checkpoint when the layout needs it and checkpoint.save_final wrote it),
 * then the lines of train.log: the accuracy by question type and overall, against the
 * majority answer. A run that cannot be evaluated says why in a line: not an error. */
void loom_eval_vqa_final_note(loom_executor *ex, const loom_config *cfg,
                              const loom_model_spec *spec, const loom_mesh *m,
                              const loom_comm *job, const char *run_dir, loom_progress *p,
                              loom_eval_vqa_result *res);
#endif

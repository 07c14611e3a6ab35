/* Answer accuracy at the end of a vision-language run in any layout (eval_final.c). */
#ifndef LOOM_TRAIN_EVAL_FINAL_H
#define LOOM_TRAIN_EVAL_FINAL_H
#include "loom/eval.h"
#include "loom/exec.h"
#include "loom/mesh.h"

/* Every rank of the job calls it; m is the text decoder's mesh, final_ckpt the run's final
 * checkpoint (NULL if none was written). The result is meaningful on world rank 0. */
int loom_eval_vqa_final(loom_executor *ex, const loom_config *cfg, const loom_model_spec *spec,
                        const loom_mesh *m, const loom_comm *job, const char *final_ckpt,
                        loom_eval_vqa_result *res);
#endif

/* Validation loss and perplexity of the model an executor holds, on a fixed set of
 * validation batches, in any layout (eval_loss.c). */
#ifndef LOOM_EVAL_LOSS_H
#define LOOM_EVAL_LOSS_H
#include "loom/comm.h"
#include "loom/config.h"
#include "loom/exec.h"
#include "loom/mesh.h"
#include "loom/model.h"

typedef struct {
  double loss;        /* sum of token losses / targets counted, over every batch and rank */
  double perplexity;  /* exp(loss) */
  double tokens;      /* targets counted (the denominator) */
  long batches;       /* batches scored (each a step's global batch) */
  double seconds;     /* wall time of the evaluation */
} loom_eval_loss_result;

typedef struct loom_evaluator loom_evaluator;

/* Every rank of the job calls it: opens the validation data (loom_data_open_val) for this
 * rank's data-parallel group and checks that training.eval_batches whole batches exist.
 * *out = NULL (and 0) when the config has no validation data. m: the text decoder's mesh. */
int loom_evaluator_open(loom_evaluator **out, const loom_config *cfg, const loom_model_spec *spec,
                        loom_executor *ex, const loom_mesh *m);
/* Every rank of the job together: rewind the validation data (the same batches every time),
 * run the forward-only schedule over each batch, reduce. The result is the same on every rank
 * (job: every rank of the job). Communication of the evaluation is not counted in the
 * training's traffic statistics. */
int loom_evaluator_run(loom_evaluator *e, const loom_comm *job, loom_eval_loss_result *r);
/* "data/val.bin, 20000 tokens; 4 batches of 8 x 64 tokens" */
const char *loom_evaluator_describe(const loom_evaluator *e);
void loom_evaluator_free(loom_evaluator *e);
#endif

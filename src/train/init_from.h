/* checkpoint.init_from: start a run from the weights of a loom checkpoint (one process's
 * model.safetensors, or the pieces of several ranks with index.json) or of a Hugging Face
 * model directory (config.json + model.safetensors or the sharded index), in any parallel
 * layout; fresh optimizer, step 0, fresh data position (init_from.c). */
#ifndef LOOM_TRAIN_INIT_FROM_H
#define LOOM_TRAIN_INIT_FROM_H
#include <stddef.h>

#include "loom/comm.h"
#include "loom/config.h"
#include "loom/exec.h"
#include "loom/model.h"

/* Every rank of the job (job) calls it, before the run directory exists. Checks that the
 * weights are of the run's model (family, dimensions: errors name the config key, a tensor,
 * the shape found and the shape expected) and loads them into the executor's text decoder
 * and vision encoder (whatever slices this rank holds). A Hugging Face directory is imported
 * by rank 0 into a temporary directory under run.output_dir, removed before returning. On
 * error every rank returns the same message. desc (cap bytes) receives a line for
 * train.log saying which weights were loaded. */
int loom_init_from_load(const loom_config *cfg, const loom_model_spec *spec, loom_executor *ex,
                        const loom_comm *job, char *desc, size_t cap);

/* What setup() of the run driver calls, every rank, before the run directory exists: with
 * --resume (resume != NULL), refuse a weights-only checkpoint (no trainer_state.json: say to
 * use init_from) and check loom_init_from_check_resume; without, load checkpoint.init_from
 * when set. desc receives the train.log line ("" when nothing was loaded). */
int loom_init_from_setup(const loom_config *cfg, const char *resume, const loom_model_spec *spec,
                         loom_executor *ex, const loom_comm *job, char *desc, size_t cap);

/* --resume together with checkpoint.init_from: resuming wins (the resumed weights already
 * descend from init_from) when the resumed checkpoint's config names the same init_from;
 * another value is refused, as the run would claim weights it did not start from. */
int loom_init_from_check_resume(const loom_config *cfg, const char *resume_dir);
#endif

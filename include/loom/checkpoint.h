/* Training checkpoints, sharded by rank and loadable into any parallel layout.
 *
 * A checkpoint is a directory written under a temporary name and renamed into place:
 *   model.safetensors | model-r<rank>.safetensors        fp32 parameters (loom names)
 *   optimizer.safetensors | optimizer-r<rank>.safetensors AdamW moments exp_avg.* / exp_avg_sq.*
 *   gradients.safetensors | gradients-r<rank>.safetensors with checkpoint.save_gradients
 *   trainer_state.json   step, RNG, data position, config hash, tokens seen, layout
 *   config.yaml          the resolved config of the run
 *   index.json           (multi-rank) the mesh and the list of files
 *   COMPLETE             written last: step and every file with its size (a checkpoint
 *                        without a valid marker is incomplete and never loaded)
 * One process writes the un-suffixed names. Each tensor entry is a piece of a global tensor:
 * the safetensors metadata key "loom.pieces" maps entry names to {tensor, gshape, lshape,
 * split_dim, split_start, begin}: the entry holds elements [begin, begin+numel) (row-major)
 * of this rank's tensor-parallel slice (lshape, starting at split_start along split_dim) of
 * the global tensor. Entries without a description are whole, unsplit tensors. Loading maps
 * every piece onto whatever slice and owned range the loading rank holds, so a checkpoint
 * written by one layout (dp/tp/pp/zero, or one process) loads into any other. */
#ifndef LOOM_CHECKPOINT_H
#define LOOM_CHECKPOINT_H
#include <stdint.h>

#include "loom/config.h"
#include "loom/decoder.h"
#include "loom/exec.h"
#include "loom/loader.h"
#include "loom/mesh.h"
#include "loom/optim.h"

typedef struct {
  long step;                 /* optimizer steps completed */
  loom_rng rng;              /* trainer RNG */
  loom_loader_state loader;  /* position of the data loader (of data-parallel rank 0) */
  long loader_batch_windows; /* windows per loader call over all data-parallel ranks (B*dp) */
  uint64_t config_hash;      /* loom_config_hash of the run's config */
  long tokens_seen;
  long skipped_bad;          /* bad samples skipped so far, all data-parallel ranks
                                (data.skip_bad_samples) */
  double elapsed;            /* training seconds before this checkpoint */
} loom_train_state;

/* Every rank of the job calls these together; m is the text decoder's mesh, job the
 * communicator of every rank (rank 0 writes the trainer state and index). */
int loom_ckpt_save(const char *dir, loom_executor *ex, const loom_mesh *m, const loom_comm *job,
                   const loom_train_state *ts, const loom_config *cfg);
/* Refuses a checkpoint without a valid COMPLETE marker (loom_ckpt_check_complete). */
int loom_ckpt_load(const char *dir, loom_executor *ex, const loom_mesh *m, loom_train_state *ts);
#define LOOM_CKPT_MARKER "COMPLETE"
/* 0 when dir holds a valid COMPLETE marker and every file it lists has the listed size
 * (*step: the marker's step); else an error naming what is missing or damaged. */
int loom_ckpt_check_complete(const char *dir, long *step);
/* Before a tool reads a checkpoint (eval, generate, export, compare, inspect): when dir holds a
 * COMPLETE marker it must check out (loom_ckpt_check_complete); the error then also names the
 * newest complete checkpoint of the same run directory to use instead. A directory without a
 * marker (`loom ckpt import` output, a checkpoint of a loom before markers) passes. */
int loom_ckpt_check_readable(const char *dir);
/* The newest complete checkpoint (checkpoint_<N> or final_checkpoint, by the marker's step) of
 * run_dir other than the directory `except` (may be NULL): *ckpt malloc'd "run_dir/<name>", or
 * NULL and *step -1 when there is none. Error only when run_dir cannot be read. */
int loom_ckpt_newest_complete(const char *run_dir, const char *except, char **ckpt, long *step);
/* Before loading anything: dir is complete and its model files hold exactly the tensors of
 * spec with their global shapes; errors name the tensor, the expected and the found shape. */
int loom_ckpt_validate(const char *dir, const loom_model_spec *spec);
/* Parameters only, into any decoder (any shard, or the whole model); checks the marker first
 * (loom_ckpt_check_readable). */
int loom_ckpt_load_params(const char *dir, loom_decoder *d);
#endif

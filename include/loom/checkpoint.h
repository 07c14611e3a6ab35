/* Training checkpoints: a directory written under a temporary name and renamed into place,
 * holding model.safetensors (fp32 parameters, loom names), optimizer.safetensors (AdamW
 * moments exp_avg.<name> / exp_avg_sq.<name>), trainer_state.json (step, RNG, data position,
 * config hash, tokens seen) and config.yaml (the resolved config of the run). */
#ifndef LOOM_CHECKPOINT_H
#define LOOM_CHECKPOINT_H
#include <stdint.h>

#include "loom/config.h"
#include "loom/decoder.h"
#include "loom/loader.h"
#include "loom/train.h"

typedef struct {
  long step;                 /* optimizer steps completed */
  loom_rng rng;              /* trainer RNG */
  loom_loader_state loader;  /* position of the data loader */
  uint64_t config_hash;      /* loom_config_hash of the run's config */
  long tokens_seen;
  double elapsed;            /* training seconds before this checkpoint */
} loom_train_state;

int loom_ckpt_save(const char *dir, const loom_decoder *d, const loom_adamw_state *opt,
                   const loom_train_state *ts, const loom_config *cfg);
/* Load parameters (shapes must match the model's layout exactly), optimizer moments and
 * trainer state. Errors name the file and tensor. */
int loom_ckpt_load(const char *dir, loom_decoder *d, loom_adamw_state *opt,
                   loom_train_state *ts);
#endif

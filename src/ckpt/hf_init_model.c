/* checkpoint.init_from of a Hugging Face directory without model.* keys in the run: the run's
 * model is the directory's (its config.json), and the model.* keys the run does set are laid
 * over it, so that a training setting (model.moe.aux_loss_coef, model.init_std) can be added
 * and a key that contradicts the weights (model.hidden=64 for a 128-wide model) still reaches
 * checkpoint.init_from's check, which refuses it naming both values. A run that names its
 * model (sets model.preset or model.arch, to any value: told by a mark put in the defaults
 * before the run's file and overrides are applied) is left as it is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/config_schema.h"
#include "loom/core.h"
#include "loom/hf.h"

static bool is_hf_dir(const char *dir) {
  char *json = loom_sprintf("%s/config.json", dir), *yaml = loom_sprintf("%s/config.yaml", dir);
  bool yes = loom_is_dir(dir) && loom_path_exists(json) && !loom_path_exists(yaml);
  free(json), free(yaml);
  return yes;
}

/* The mark: a value no config can hold (the schema's parser never stores a control byte). */
#define MARK "\x01"

void loom_hf_init_model_mark(loom_config *cfg) {
  snprintf(cfg->model.preset, sizeof cfg->model.preset, MARK);
  snprintf(cfg->model.arch, sizeof cfg->model.arch, MARK);
}

/* Whether the run set model.preset or model.arch; their defaults back where it did not. */
static bool unmark(loom_config *cfg) {
  loom_config def;
  loom_config_defaults(&def);
  bool named = false;
  if (!strcmp(cfg->model.preset, MARK)) memcpy(cfg->model.preset, def.model.preset,
                                               sizeof def.model.preset);
  else named = true;
  if (!strcmp(cfg->model.arch, MARK)) memcpy(cfg->model.arch, def.model.arch,
                                             sizeof def.model.arch);
  else named = true;
  return named;
}

void loom_hf_init_model_unmark(loom_config *cfg) { unmark(cfg); }

int loom_hf_init_model(loom_config *cfg, bool *taken) {
  if (taken) *taken = false;
  bool named = unmark(cfg);
  const char *dir = cfg->checkpoint.init_from;
  if (named || !dir[0] || !is_hf_dir(dir))
    return 0; /* a run that names its model: init_from checks the weights against it */
  loom_config def;
  loom_config_defaults(&def);
  const loom_config_key *preset = loom_config_key_find("model.preset");
  const loom_config_key *arch = loom_config_key_find("model.arch");
  LOOM_ASSERT(preset && arch);
  loom_config *hf = loom_malloc(sizeof *hf);
  int rc = loom_hf_dir_model(dir, hf);
  if (rc) {
    free(hf);
    return loom_err_prefix("checkpoint.init_from: the model of the Hugging Face directory "
                           "'%s' (the run sets no model.preset): ", dir);
  }
  for (size_t i = 0; i < loom_config_nkeys; i++) {
    const loom_config_key *k = &loom_config_keys[i];
    if (strncmp(k->name, "model.", 6) || k == preset || k == arch) continue;
    if (loom_config_key_equal(cfg, &def, k)) continue; /* not set by the run */
    memcpy((char *)hf + k->offset, (const char *)cfg + k->offset, k->size);
  }
  cfg->model = hf->model;
  free(hf);
  if (taken) *taken = true;
  return 0;
}

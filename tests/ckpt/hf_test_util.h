/* Helpers shared by the Hugging Face export/import tests and tests/ckpt/hf_helper.c: a
 * random tiny model from config overrides (norm weights and biases perturbed so that every
 * tensor carries signal), saved as a loom checkpoint directory (weights and config). */
#ifndef LOOM_TEST_HF_UTIL_H
#define LOOM_TEST_HF_UTIL_H
#include <stdio.h>
#include <stdlib.h>

#include "loom/config.h"
#include "loom/decoder.h"
#include "loom/safetensors.h"

/* Config from overrides ("model.hidden=32", ...) over the defaults; exits on bad input. */
static inline void hf_test_config(loom_config *cfg, int n, const char *const *overrides) {
  loom_config_defaults(cfg);
  for (int i = 0; i < n; i++)
    if (loom_config_override(cfg, overrides[i])) {
      fprintf(stderr, "override '%s': %s\n", overrides[i], loom_errmsg());
      exit(2);
    }
  if (loom_config_validate(cfg)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    exit(2);
  }
}

/* Decoder of cfg's model for (1, T) with random weights from seed. */
static inline loom_decoder *hf_test_model(const loom_config *cfg, int T, uint64_t seed) {
  loom_model_spec spec;
  loom_decoder *d;
  if (loom_model_spec_from_config(&spec, &cfg->model) ||
      loom_decoder_create(&d, &spec, 1, T, false, false)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    exit(2);
  }
  loom_decoder_init_params(d, seed);
  loom_rng rng;
  loom_rng_seed(&rng, seed + 7);
  for (int i = 0; i < d->layout.count; i++) {
    const loom_param *p = &d->layout.params[i];
    if (p->ndim == 1)
      for (size_t j = 0; j < p->numel; j++)
        d->params[p->offset + j] += (float)(0.1 * loom_rng_normal(&rng));
  }
  loom_decoder_params_updated(d);
  return d;
}

/* The part of a single-process loom checkpoint directory that export reads (see
 * include/loom/checkpoint.h): model.safetensors with whole fp32 tensors under loom names and
 * config.yaml. Written directly because loom_ckpt_save needs a whole executor and mesh.
 * Exits on failure. */
static inline void hf_test_save(const char *dir, const loom_decoder *d, const loom_config *cfg) {
  char *m = loom_sprintf("%s/model.safetensors", dir), *c = loom_sprintf("%s/config.yaml", dir);
  loom_st_writer *w = loom_st_writer_create();
  loom_st_writer_set_metadata(w, "format", "loom");
  int rc = loom_mkdir_p(dir);
  for (int i = 0; i < d->layout.count && !rc; i++) {
    const loom_param *p = &d->layout.params[i];
    int64_t shape[2] = {p->shape[0], p->shape[1]};
    rc = loom_st_writer_add(w, p->name, LOOM_DT_F32, p->ndim, shape, d->params + p->offset);
  }
  if (rc || loom_st_writer_write(w, m) || loom_config_save(cfg, c)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    exit(2);
  }
  loom_st_writer_free(w);
  free(m), free(c);
}
/* Random values for every parameter of lay from seed (uniform in [-1, 1), so that bf16 and
 * layout mistakes show), except the vocabulary padding rows of embed/lm_head (zero, as loom
 * keeps them). */
static inline void hf_test_fill(const loom_model_spec *spec, const loom_param_layout *lay,
                                float *params, uint64_t seed) {
  loom_rng rng;
  loom_rng_seed(&rng, seed);
  for (int i = 0; i < lay->count; i++) {
    const loom_param *p = &lay->params[i];
    bool vocab = !strcmp(p->name, "embed.weight") || !strcmp(p->name, "lm_head.weight");
    size_t real = vocab ? (size_t)spec->vocab_size * (size_t)p->shape[1] : p->numel;
    for (size_t j = 0; j < p->numel; j++)
      params[p->offset + j] = j < real ? (float)(2.0 * loom_rng_uniform(&rng) - 1.0) : 0.0f;
  }
}

/* hf_test_save for a bare flat buffer of layout lay. */
static inline void hf_test_save_flat(const char *dir, const loom_param_layout *lay,
                                     const float *params, const loom_config *cfg) {
  char *m = loom_sprintf("%s/model.safetensors", dir), *c = loom_sprintf("%s/config.yaml", dir);
  loom_st_writer *w = loom_st_writer_create();
  loom_st_writer_set_metadata(w, "format", "loom");
  int rc = loom_mkdir_p(dir);
  for (int i = 0; i < lay->count && !rc; i++) {
    const loom_param *p = &lay->params[i];
    int64_t shape[2] = {p->shape[0], p->shape[1]};
    rc = loom_st_writer_add(w, p->name, LOOM_DT_F32, p->ndim, shape, params + p->offset);
  }
  if (rc || loom_st_writer_write(w, m) || loom_config_save(cfg, c)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    exit(2);
  }
  loom_st_writer_free(w);
  free(m), free(c);
}
#endif

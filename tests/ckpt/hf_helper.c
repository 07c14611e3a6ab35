/* Helper executable for tests/ckpt/hf_check.py and hf_moe_check.py (not a test itself):
 *   ckpt_hf_helper make CKPT_DIR SEED [a.b=c ...]     random tiny model -> loom checkpoint
 *   ckpt_hf_helper flat CKPT_DIR SEED [a.b=c ...]     the same from the parameter layout alone
 *       (every value random, vocabulary padding zero; no decoder is built, so any model the
 *       layout describes, Mixture-of-Experts included)
 *   ckpt_hf_helper logits CKPT_DIR OUT.safetensors T0,T1,...
 *       load CKPT_DIR/config.yaml and its weights (loom_ckpt_load_weights), run loom's
 *       forward over the tokens (one sequence) and write "logits" (T, padded_vocab) as F32.
 * Exit 0 on success, 1 with the loom error message on stderr. */
#include <stdio.h>
#include <stdlib.h>

#include "hf_test_util.h"
#include "loom/hf.h"
#include "loom/safetensors.h"

static int make(const char *dir, const char *seed, int n, char **overrides) {
  loom_config cfg;
  hf_test_config(&cfg, n, (const char *const *)overrides);
  loom_decoder *d = hf_test_model(&cfg, 1, strtoull(seed, NULL, 10));
  hf_test_save(dir, d, &cfg);
  loom_decoder_free(d);
  return 0;
}

static int flat(const char *dir, const char *seed, int n, char **overrides) {
  loom_config cfg;
  hf_test_config(&cfg, n, (const char *const *)overrides);
  loom_model_spec spec;
  loom_param_layout lay;
  if (loom_model_spec_from_config(&spec, &cfg.model) || loom_param_layout_build(&lay, &spec))
    return LOOM_ERR;
  float *params = loom_alloc(lay.total * sizeof(float));
  hf_test_fill(&spec, &lay, params, strtoull(seed, NULL, 10));
  hf_test_save_flat(dir, &lay, params, &cfg);
  loom_free(params);
  loom_param_layout_free(&lay);
  return 0;
}

static int logits(const char *dir, const char *out, const char *list) {
  int32_t tokens[1024], targets[1024];
  int T = 0;
  for (const char *p = list; *p && T < 1024; T++) {
    char *end;
    tokens[T] = (int32_t)strtol(p, &end, 10);
    p = *end == ',' ? end + 1 : end;
  }
  for (int t = 0; t < T; t++) targets[t] = t + 1 < T ? tokens[t + 1] : 0;
  loom_config cfg;
  loom_model_spec spec;
  loom_decoder *d = NULL;
  char *cpath = loom_sprintf("%s/config.yaml", dir);
  loom_config_defaults(&cfg);
  int rc = loom_config_load(&cfg, cpath) || loom_model_spec_from_config(&spec, &cfg.model) ||
           loom_decoder_create(&d, &spec, 1, T, false, false) || loom_ckpt_load_weights(dir, d);
  free(cpath);
  if (rc) return LOOM_ERR;
  double loss;
  int count;
  loom_decoder_forward(d, tokens, targets, &loss, &count);
  loom_st_writer *w = loom_st_writer_create();
  int64_t shape[2] = {T, spec.padded_vocab};
  rc = loom_st_writer_add(w, "logits", LOOM_DT_F32, 2, shape, d->logits) ||
       loom_st_writer_write(w, out);
  loom_st_writer_free(w);
  loom_decoder_free(d);
  return rc ? LOOM_ERR : 0;
}

int main(int argc, char **argv) {
  int rc = 2;
  if (argc >= 4 && !strcmp(argv[1], "make")) rc = make(argv[2], argv[3], argc - 4, argv + 4);
  else if (argc >= 4 && !strcmp(argv[1], "flat")) rc = flat(argv[2], argv[3], argc - 4, argv + 4);
  else if (argc == 5 && !strcmp(argv[1], "logits")) rc = logits(argv[2], argv[3], argv[4]);
  else
    fprintf(stderr, "usage: ckpt_hf_helper make|flat DIR SEED [a.b=c ...] | logits DIR OUT T0,...\n");
  if (rc == LOOM_ERR) fprintf(stderr, "ckpt_hf_helper: %s\n", loom_errmsg());
  return rc ? 1 : 0;
}

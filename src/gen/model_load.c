/* Loading a model for generation: a loom checkpoint directory (config.yaml + model.safetensors
 * or the multi-rank pieces of a parallel run, assembled into one process) or a Hugging Face
 * directory (config.json + safetensors, converted by the `loom ckpt import` code into a
 * temporary loom checkpoint that is removed after loading). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "loom/checkpoint.h"
#include "loom/generate.h"
#include "loom/hf.h"

/* Generation never touches the decoder's gradient buffer (as large as the weights): hand its
 * whole pages back to the OS (they read as zeros if ever touched again), as ZeRO-3 does with
 * parameters it does not hold. */
static void release_grads(loom_decoder *d) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)d->grads, b = a + d->layout.total * sizeof(float);
  uintptr_t first = (a + page - 1) & ~(uintptr_t)(page - 1), last = b & ~(uintptr_t)(page - 1);
  if (last > first) madvise((void *)first, last - first, MADV_DONTNEED);
}

static int load_loom_dir(loom_gen_model *m, const char *dir) {
  char *cfg_path = loom_sprintf("%s/config.yaml", dir);
  int rc = 0;
  loom_config_defaults(&m->cfg);
  if (loom_config_load(&m->cfg, cfg_path) || loom_model_spec_from_config(&m->spec, &m->cfg.model))
    rc = loom_err_prefix("%s: ", cfg_path);
  free(cfg_path);
  if (rc) return rc;
  if (loom_decoder_create(&m->d, &m->spec, 1, 1, false, false)) return LOOM_ERR;
  release_grads(m->d);
  if (loom_ckpt_load_weights(dir, m->d)) return loom_err_prefix("loading weights of %s: ", dir);
  return 0;
}

int loom_gen_model_load(loom_gen_model *m, const char *dir) {
  memset(m, 0, sizeof *m);
  if (!loom_path_exists(dir))
    return loom_err("checkpoint '%s' does not exist (give a checkpoint directory such as "
                    "runs/<id>/final_checkpoint, or a Hugging Face model directory)", dir);
  if (!loom_is_dir(dir))
    return loom_err("checkpoint '%s' is not a directory (give a checkpoint directory such as "
                    "runs/<id>/final_checkpoint, or a Hugging Face model directory)", dir);
  m->dir = loom_strdup(dir);
  char *yaml = loom_sprintf("%s/config.yaml", dir), *json = loom_sprintf("%s/config.json", dir);
  bool is_loom = loom_path_exists(yaml), is_hf = !is_loom && loom_path_exists(json);
  free(yaml);
  free(json);
  int rc;
  if (is_loom) {
    rc = load_loom_dir(m, dir);
  } else if (is_hf) {
    m->from_hf = true;
    char tmpl[] = "/tmp/loom-generate.XXXXXX";
    if (!mkdtemp(tmpl)) return loom_err("cannot create a temporary directory under /tmp");
    char *out = loom_sprintf("%s/ckpt", tmpl);
    loom_hf_import_opts o = {NULL, false};
    rc = loom_hf_import(dir, out, &o);
    if (rc) loom_err_prefix("reading the Hugging Face directory %s: ", dir);
    else rc = load_loom_dir(m, out);
    free(out);
    char *msg = rc ? loom_strdup(loom_errmsg()) : NULL;
    loom_rm_rf(tmpl);
    if (msg) {
      loom_err("%s", msg);
      free(msg);
    }
  } else {
    rc = loom_err("'%s' holds neither config.yaml (a loom checkpoint) nor config.json (a Hugging "
                  "Face model): give a checkpoint directory such as runs/<id>/final_checkpoint",
                  dir);
  }
  if (rc) {
    char *msg = loom_strdup(loom_errmsg());
    bool hf = m->from_hf;
    loom_gen_model_free(m);
    m->from_hf = hf;
    loom_err("%s", msg);
    free(msg);
  }
  return rc;
}

void loom_gen_model_free(loom_gen_model *m) {
  loom_decoder_free(m->d);
  free(m->dir);
  memset(m, 0, sizeof *m);
}

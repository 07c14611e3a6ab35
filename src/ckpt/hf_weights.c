/* Weights-only loading: DIR/model.safetensors (loom names, any float dtype, whole tensors)
 * into a decoder's parameters, for starting a run from a trained or imported checkpoint; a
 * sharded decoder (tensor/pipeline parallel) takes its slices. Vocabulary padding rows may
 * differ from the model's (they are zeroed); everything else must match exactly. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/checkpoint.h"
#include "loom/core.h"
#include "loom/hf.h"

static bool is_vocab_matrix(const char *name) {
  return !strcmp(name, "embed.weight") || !strcmp(name, "lm_head.weight");
}

static const char *hf_hint(const loom_st_file *f) {
  if (loom_st_find(f, "wte.weight") >= 0 || loom_st_find(f, "model.embed_tokens.weight") >= 0 ||
      loom_st_find(f, "transformer.wte.weight") >= 0)
    return "; this is a Hugging Face checkpoint: give its directory to checkpoint.init_from "
           "as it is, or convert it first with `loom ckpt import`";
  return "; the checkpoint was written for a different model (check model.* in the config)";
}

/* One parameter p of the layout from tensor idx of f: the whole tensor, or this rank's
 * tensor-parallel slice of it (p->gshape is the global shape, split_dim/split_start the
 * slice). Vocabulary matrices may have any number of rows >= vocab_size; the rows the
 * model holds at or beyond vocab_size are padding and set to zero. */
static int load_one(const loom_st_file *f, int idx, const loom_model_spec *spec,
                    const loom_param *p, float *dst) {
  const char *path = loom_st_path(f);
  const int64_t *sh = loom_st_shape(f, idx);
  int nd = loom_st_ndim(f, idx);
  bool vocab = is_vocab_matrix(p->name);
  bool exact = nd == p->ndim && sh[0] == p->gshape[0] && (nd < 2 || sh[1] == p->gshape[1]);
  bool vocab_ok = vocab && nd == 2 && sh[1] == p->gshape[1] && sh[0] >= spec->vocab_size;
  if (!exact && !vocab_ok)
    return loom_err("%s: tensor '%s' has shape [%lld%s%lld] but the model expects [%d%s%d]%s",
                    path, p->name, (long long)sh[0], nd > 1 ? ", " : "",
                    nd > 1 ? (long long)sh[1] : 0LL, p->gshape[0], p->ndim > 1 ? ", " : "",
                    p->ndim > 1 ? p->gshape[1] : 0, hf_hint(f));
  if (exact && p->split_dim < 0) return loom_st_read_f32(f, p->name, dst, p->numel);
  size_t frows = (size_t)sh[0], fcols = nd > 1 ? (size_t)sh[1] : 1;
  float *tmp = loom_malloc(frows * fcols * sizeof(float) + 1);
  int rc = loom_st_read_f32(f, p->name, tmp, frows * fcols);
  size_t r0 = p->split_dim == 0 ? (size_t)p->split_start : 0;
  size_t c0 = p->split_dim == 1 ? (size_t)p->split_start : 0;
  size_t rows = (size_t)p->shape[0], cols = p->ndim > 1 ? (size_t)p->shape[1] : 1;
  for (size_t r = 0; r < rows && !rc; r++) {
    size_t g = r0 + r;
    if (g >= frows || (vocab && g >= (size_t)spec->vocab_size))
      memset(dst + r * cols, 0, cols * sizeof(float));
    else
      memcpy(dst + r * cols, tmp + g * fcols + c0, cols * sizeof(float));
  }
  free(tmp);
  return rc;
}

int loom_weights_read(const char *dir, const loom_model_spec *spec,
                      const loom_param_layout *lay, float *params) {
  if (!loom_is_dir(dir))
    return loom_err("checkpoint '%s' is not a directory (expected a directory holding "
                    "model.safetensors, e.g. runs/<id>/final_checkpoint)", dir);
  char *path = loom_sprintf("%s/model.safetensors", dir);
  if (!loom_path_exists(path)) {
    char *idx = loom_sprintf("%s/model.safetensors.index.json", dir);
    bool sharded = loom_path_exists(idx);
    free(idx);
    loom_err("%s does not exist%s", path,
             sharded ? "; this is a sharded Hugging Face checkpoint: give its directory to "
                       "checkpoint.init_from as it is, or convert it first with `loom ckpt "
                       "import`" : "; is this a loom checkpoint directory?");
    free(path);
    return LOOM_ERR;
  }
  loom_st_file *f;
  int rc = loom_st_open(&f, path);
  for (int i = 0; i < lay->count && !rc; i++) {
    const loom_param *p = &lay->params[i];
    int idx = loom_st_find(f, p->name);
    if (idx < 0)
      rc = loom_err("%s: tensor '%s' is missing%s", path, p->name, hf_hint(f));
    else
      rc = load_one(f, idx, spec, p, params + p->offset);
  }
  loom_param_layout full; /* names of the whole model: a pipeline shard holds a subset */
  loom_param_layout_build(&full, spec);
  int extra = 0;
  char names[400] = "";
  size_t k = 0;
  for (int i = 0; !rc && i < loom_st_count(f); i++) {
    if (loom_param_find(&full, loom_st_name(f, i))) continue;
    if (extra < 5 && k < sizeof names)
      k += (size_t)snprintf(names + k, sizeof names - k, "%s'%s'", extra ? ", " : "",
                            loom_st_name(f, i));
    extra++;
  }
  char more[32] = "";
  if (extra > 5) snprintf(more, sizeof more, " and %d more", extra - 5);
  if (extra)
    rc = loom_err("%s: %d tensor%s not parameters of this model: %s%s; the checkpoint was "
                  "written for a different model (check model.* in the config)", path, extra,
                  extra > 1 ? "s are" : " is", names, more);
  loom_param_layout_free(&full);
  loom_st_close(f);
  free(path);
  return rc;
}

bool loom_ckpt_is_multi_rank(const char *dir) {
  char *single = loom_sprintf("%s/model.safetensors", dir);
  char *index = loom_sprintf("%s/index.json", dir);
  bool multi = !loom_path_exists(single) && loom_path_exists(index);
  free(single), free(index);
  return multi;
}

int loom_ckpt_load_weights(const char *dir, loom_decoder *d) {
  if (loom_ckpt_check_readable(dir)) return LOOM_ERR; /* a damaged training checkpoint */
  if (loom_ckpt_is_multi_rank(dir)) /* pieces of several ranks: the checkpoint module maps them */
    return loom_ckpt_load_params(dir, d) ? loom_err_prefix("loading weights from '%s': ", dir) : 0;
  if (loom_weights_read(dir, &d->spec, &d->layout, d->params))
    return loom_err_prefix("loading weights from '%s': ", dir);
  loom_decoder_params_updated(d);
  return 0;
}

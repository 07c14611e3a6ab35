/* The Mixture-of-Experts part of a model spec: model.moe.* over the preset's values, the
 * checks that refuse what loom does not run (naming the key), which layers are MoE layers
 * (Hugging Face's rule: not in mlp_only_layers and (l+1) % decoder_sparse_step == 0), and the
 * parameters a token uses. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/model.h"
#include "model/spec_internal.h"

bool loom_model_layer_is_moe(const loom_model_spec *s, int layer) {
  const loom_moe_spec *m = &s->moe;
  if (m->experts <= 0 || layer < 0) return false;
  if (layer < 256 && (m->dense_mask[layer / 64] >> (layer % 64) & 1)) return false;
  return (layer + 1) % (m->sparse_step > 0 ? m->sparse_step : 1) == 0;
}

int loom_model_moe_layers(const loom_model_spec *s) {
  int n = 0;
  for (int l = 0; l < s->layers; l++) n += loom_model_layer_is_moe(s, l);
  return n;
}

size_t loom_model_count_active_params(const loom_model_spec *s) {
  size_t all = loom_model_count_params(s, false);
  const loom_moe_spec *m = &s->moe;
  size_t idle = (size_t)(m->experts - m->top_k) * 3 * (size_t)m->intermediate * (size_t)s->hidden;
  return all - (size_t)loom_model_moe_layers(s) * idle;
}

/* "0,5,7" -> bits of dense_mask; "none" clears it. Errors name the key and the entry. */
static int parse_dense_layers(const char *text, loom_moe_spec *m) {
  memset(m->dense_mask, 0, sizeof m->dense_mask);
  if (!strcmp(text, "none")) return 0;
  const char *p = text;
  while (*p) {
    while (*p == ' ') p++;
    char *end;
    errno = 0;
    long l = strtol(p, &end, 10);
    if (end == p || errno || l < 0 || l > 255)
      return loom_err("model.moe.mlp_only_layers = '%s': expected comma-separated layer "
                      "numbers 0..255 (or \"none\"), found '%.*s'", text,
                      (int)strcspn(p, ","), p);
    m->dense_mask[l / 64] |= (uint64_t)1 << (l % 64);
    p = end;
    while (*p == ' ') p++;
    if (*p == ',') p++;
    else if (*p)
      return loom_err("model.moe.mlp_only_layers = '%s': expected a comma after %ld", text, l);
  }
  return 0;
}

static int int_key(const char *key, long v, long lo, int *out) {
  if (v < lo || v > INT_MAX)
    return loom_err("%s = %ld is out of range: it must be between %ld and %d", key, v, lo,
                    INT_MAX);
  *out = (int)v;
  return 0;
}

int loom_moe_spec_from_config(loom_model_spec *s, const loom_config_model *mc) {
  const loom_config_moe *c = &mc->moe;
  loom_moe_spec *m = &s->moe;
  if (c->experts && int_key("model.moe.experts", c->experts, 0, &m->experts)) return LOOM_ERR;
  if (c->top_k && int_key("model.moe.top_k", c->top_k, 0, &m->top_k)) return LOOM_ERR;
  if (c->intermediate && int_key("model.moe.intermediate", c->intermediate, 0, &m->intermediate))
    return LOOM_ERR;
  if (c->shared_intermediate != -1 &&
      int_key("model.moe.shared_intermediate", c->shared_intermediate, 0,
              &m->shared_intermediate))
    return LOOM_ERR;
  if (c->sparse_step && int_key("model.moe.sparse_step", c->sparse_step, 1, &m->sparse_step))
    return LOOM_ERR;
  if (m->experts > 0 && m->sparse_step == 0) m->sparse_step = 1; /* HF's decoder_sparse_step */
  if (c->norm_topk[0]) m->norm_topk = !strcmp(c->norm_topk, "true");
  if (c->mlp_only_layers[0] && parse_dense_layers(c->mlp_only_layers, m)) return LOOM_ERR;
  const struct {
    const char *key;
    double v;
    double *out;
  } reals[] = {{"model.moe.aux_loss_coef", c->aux_loss_coef, &m->aux_loss_coef},
               {"model.moe.z_loss_coef", c->z_loss_coef, &m->z_loss_coef},
               {"model.moe.capacity_factor", c->capacity_factor, &m->capacity_factor},
               {"model.moe.bias_update_rate", c->bias_update_rate, &m->bias_update_rate}};
  for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
    if (reals[i].v == -1) continue; /* the preset's */
    if (!(reals[i].v >= 0) || reals[i].v > 1e6)
      return loom_err("%s = %g is out of range: it must be 0 or more (-1 = the preset's)",
                      reals[i].key, reals[i].v);
    *reals[i].out = reals[i].v;
  }
  m->drop_by_position = !strcmp(c->drop_policy, "position");
  return 0;
}

int loom_moe_spec_check(const loom_model_spec *s) {
  const loom_moe_spec *m = &s->moe;
  if (m->experts == 0) {
    if (m->top_k || m->intermediate || m->shared_intermediate)
      return loom_err("model.moe.top_k/intermediate/shared_intermediate are set but "
                      "model.moe.experts is 0 (a dense model): set model.moe.experts");
    return 0;
  }
  if (s->arch != LOOM_ARCH_LLAMA)
    return loom_err("Mixture-of-Experts layers need the llama family (SwiGLU experts); "
                    "model.arch is gpt2");
  if (m->experts > LOOM_MOE_MAX_EXPERTS)
    return loom_err("model.moe.experts = %d is past the limit of %d", m->experts,
                    LOOM_MOE_MAX_EXPERTS);
  if (m->top_k < 1 || m->top_k > m->experts)
    return loom_err("model.moe.top_k = %d must be between 1 and model.moe.experts = %d",
                    m->top_k, m->experts);
  if (m->intermediate < 1)
    return loom_err("model.moe.intermediate must be positive, found %d (each expert's SwiGLU "
                    "inner size)", m->intermediate);
  if (m->sparse_step < 1) return loom_err("model.moe.sparse_step must be 1 or more");
  if ((unsigned __int128)3 * (unsigned)m->intermediate * (unsigned)s->hidden *
          (unsigned)m->experts > INT_MAX * (unsigned __int128)64)
    return loom_err("model.moe.experts * intermediate * hidden is too large for one layer");
  if (loom_model_moe_layers(s) == 0)
    return loom_err("model.moe.experts = %d but no layer is an MoE layer (model.moe.sparse_step "
                    "= %d, model.moe.mlp_only_layers): check both", m->experts, m->sparse_step);
  return 0;
}

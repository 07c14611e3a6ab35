/* The model keys a preset fills in, resolved: a copy of the config whose model keys left at
 * "from the preset" (0, "", -1) hold the values the model is built with. `loom config show`
 * prints them (marked as the preset's), and a run's config.yaml names them in comments. */
#include <stdio.h>
#include <string.h>

#include "loom/train.h"

/* "true" / "false" for a tri-state key left "" (the preset's). */
static void tri(char *dst, size_t n, bool v) {
  if (!dst[0]) snprintf(dst, n, "%s", v ? "true" : "false");
}

/* r->model with every key that means "from the preset" (0, "", -1) set to the value the model
 * is built with (spec, resolved from r->model by loom_model_spec_from_config). */
static void fill_model(loom_config *r, const loom_model_spec *s) {
  loom_config_model *m = &r->model;
  if (!m->arch[0])
    snprintf(m->arch, sizeof m->arch, "%s", s->arch == LOOM_ARCH_GPT2 ? "gpt2" : "llama");
  long *dims[] = {&m->vocab_size, &m->hidden, &m->layers, &m->heads, &m->kv_heads, &m->head_dim,
                  &m->intermediate, &m->max_seq};
  int vals[] = {s->vocab_size, s->hidden, s->layers, s->heads, s->kv_heads, s->head_dim,
                s->intermediate, s->max_seq};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (!*dims[i]) *dims[i] = vals[i];
  if (m->norm_eps <= 0) m->norm_eps = s->norm_eps;
  if (m->rope_theta <= 0 && s->arch == LOOM_ARCH_LLAMA) m->rope_theta = s->rope_theta;
  tri(m->qkv_bias, sizeof m->qkv_bias, s->qkv_bias);
  tri(m->tied_embeddings, sizeof m->tied_embeddings, s->tied_embeddings);
  tri(m->qk_norm, sizeof m->qk_norm, s->qk_norm);
  const loom_moe_spec *e = &s->moe;
  if (e->experts == 0) return; /* a dense model: the MoE keys do not apply */
  loom_config_moe *c = &m->moe;
  if (!c->experts) c->experts = e->experts;
  if (!c->top_k) c->top_k = e->top_k;
  if (!c->intermediate) c->intermediate = e->intermediate;
  if (c->shared_intermediate == -1) c->shared_intermediate = e->shared_intermediate;
  if (!c->sparse_step) c->sparse_step = e->sparse_step;
  tri(c->norm_topk, sizeof c->norm_topk, e->norm_topk);
  if (!c->mlp_only_layers[0]) /* the preset's dense layers, "0,5" */
    for (int l = 0; l < 256; l++) {
      size_t len = strlen(c->mlp_only_layers);
      if (e->dense_mask[l / 64] >> (l % 64) & 1 && len + 16 < sizeof c->mlp_only_layers)
        snprintf(c->mlp_only_layers + len, sizeof c->mlp_only_layers - len, "%s%d",
                 len ? "," : "", l);
    }
  double *reals[] = {&c->aux_loss_coef, &c->z_loss_coef, &c->capacity_factor,
                     &c->bias_update_rate};
  double rvals[] = {e->aux_loss_coef, e->z_loss_coef, e->capacity_factor, e->bias_update_rate};
  for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
    if (*reals[i] == -1) *reals[i] = rvals[i];
}

void loom_train_config_resolved(const loom_config *cfg, const loom_model_spec *spec,
                                loom_config *out, char *origin, size_t n) {
  *out = *cfg;
  fill_model(out, spec);
  if (cfg->model.preset[0]) snprintf(origin, n, "from model.preset %s", cfg->model.preset);
  else snprintf(origin, n, "the %s default", out->model.arch);
}

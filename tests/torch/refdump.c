/* loom_refdump: runs loom's model on random weights and data and writes everything the
 * PyTorch reference (check_refdump.py) needs into one safetensors file: initial parameters,
 * the batches, step-0 logits/loss/gradients, and a short AdamW training run (losses, learning
 * rates, gradient norms, final parameters and AdamW moments). training.param_dtype /
 * training.optim_dtype (the precision policy) apply as in the trainer. Qwen3 (model.qk_norm)
 * and Mixture-of-Experts models (model.moe.*) add their metadata and, per step, the router's
 * aux and z losses and the loads (selections per MoE layer and expert) the balancing bias
 * follows.
 *
 * usage: loom_refdump OUT.safetensors [config overrides a.b=c ...]   */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/config.h"
#include "loom/decoder.h"
#include "loom/kernels.h"
#include "loom/safetensors.h"
#include "loom/optim.h"

static void put_meta(loom_st_writer *w, const char *k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#include <stdarg.h>
static void put_meta(loom_st_writer *w, const char *k, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  loom_st_writer_set_metadata(w, k, buf);
}

static void add_params(loom_st_writer *w, const loom_param_layout *lay, const float *buf,
                       const char *prefix) {
  for (int i = 0; i < lay->count; i++) {
    const loom_param *p = &lay->params[i];
    int64_t shape[2] = {p->shape[0], p->shape[1]};
    char name[96];
    snprintf(name, sizeof name, "%s.%s", prefix, p->name);
    loom_st_writer_add(w, name, LOOM_DT_F32, p->ndim, shape, buf + p->offset);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: loom_refdump OUT.safetensors [a.b=c ...]\n");
    return 2;
  }
  loom_config cfg;
  loom_config_defaults(&cfg);
  snprintf(cfg.training.lr_schedule, sizeof cfg.training.lr_schedule, "cosine");
  cfg.training.steps = 10;
  cfg.training.warmup_steps = 2;
  cfg.training.micro_batch_size = 2;
  cfg.training.seq_len = 16;
  for (int i = 2; i < argc; i++)
    if (loom_config_override(&cfg, argv[i]) || loom_config_validate(&cfg)) {
      fprintf(stderr, "loom_refdump: %s\n", loom_errmsg());
      return 1;
    }
  loom_model_spec spec;
  if (loom_model_spec_from_config(&spec, &cfg.model)) {
    fprintf(stderr, "loom_refdump: %s\n", loom_errmsg());
    return 1;
  }
  const loom_config_training *t = &cfg.training;
  int B = (int)t->micro_batch_size, T = (int)t->seq_len, A = (int)t->grad_accum;
  int S = (int)t->steps;
  bool bf16 = !strcmp(t->dtype, "bf16");
  loom_decoder *d;
  if (loom_decoder_create(&d, &spec, B, T, bf16, t->activation_checkpointing) ||
      (!strcmp(t->param_dtype, "bf16") && loom_decoder_set_param_bf16(d))) {
    fprintf(stderr, "loom_refdump: %s\n", loom_errmsg());
    return 1;
  }
  loom_decoder_init_params(d, (uint64_t)cfg.run.seed);
  /* perturb norm weights and biases so that every gradient path carries signal */
  loom_rng rng;
  loom_rng_seed(&rng, (uint64_t)cfg.run.seed + 99);
  for (int i = 0; i < d->layout.count; i++) {
    const loom_param *p = &d->layout.params[i];
    if (p->ndim == 1)
      for (size_t j = 0; j < p->numel; j++)
        d->params[p->offset + j] += (float)(0.1 * loom_rng_normal(&rng));
  }
  loom_decoder_params_updated(d);
  size_t P = d->layout.total, BT = (size_t)B * T, n_tok = (size_t)S * A * BT;
  float *init = malloc(P * sizeof(float));
  memcpy(init, d->params, P * sizeof(float));
  int32_t *tokens = malloc(n_tok * sizeof(int32_t)), *targets = malloc(n_tok * sizeof(int32_t));
  for (size_t i = 0; i < n_tok; i++) {
    tokens[i] = (int32_t)loom_rng_below(&rng, (uint64_t)spec.vocab_size);
    targets[i] = loom_rng_uniform(&rng) < 0.1 ? LOOM_IGNORE_INDEX
                                               : (int32_t)loom_rng_below(&rng, (uint64_t)spec.vocab_size);
  }
  /* data.pack_documents: documents of ~6 tokens end with token vocab_size - 1, whose target
   * is ignored (as the loader writes them); the decoder splits attention and positions */
  int32_t eod = cfg.data.pack_documents ? spec.vocab_size - 1 : -1;
  for (size_t i = 0; eod >= 0 && i < n_tok; i++) {
    if (tokens[i] == eod) tokens[i] = 0;
    if (loom_rng_uniform(&rng) < 1.0 / 6) tokens[i] = eod, targets[i] = LOOM_IGNORE_INDEX;
  }
  loom_decoder_set_doc_eod(d, eod);
  /* step 0, micro-batch 0 alone: logits, loss, gradients */
  double loss_sum;
  int count;
  loom_decoder_zero_grads(d);
  loom_decoder_forward(d, tokens, targets, &loss_sum, &count);
  size_t n_logits = BT * (size_t)spec.padded_vocab;
  float *logits = malloc(n_logits * sizeof(float)), *grads = malloc(P * sizeof(float));
  memcpy(logits, d->logits, n_logits * sizeof(float));
  float loss0 = (float)(loss_sum / count);
  loom_decoder_backward(d, 1.0f / (float)count);
  memcpy(grads, d->grads, P * sizeof(float));
  /* the training run */
  float *losses = malloc(S * sizeof(float)), *lrs = malloc(S * sizeof(float));
  float *norms = malloc(S * sizeof(float));
  float *aux = malloc(S * sizeof(float)), *zl = malloc(S * sizeof(float));
  int nmoe = loom_model_moe_layers(&spec), E = spec.moe.experts;
  int32_t *loads = malloc(((size_t)S * nmoe * E + 1) * sizeof(int32_t)); /* (S, nmoe, E) */
  int32_t *dropped = malloc(((size_t)S * nmoe + 1) * sizeof(int32_t));    /* (S, nmoe) */
  loom_adamw_state opt;
  loom_adamw_state_init_dtype(&opt, P, !strcmp(t->optim_dtype, "bf16"));
  for (int s = 0; s < S; s++) {
    loom_step_result r;
    loom_train_step(d, &opt, t, tokens + (size_t)s * A * BT, targets + (size_t)s * A * BT, A, &r);
    losses[s] = (float)r.loss;
    lrs[s] = (float)r.lr;
    norms[s] = (float)r.grad_norm;
    const loom_moe_step_stats *ms = loom_decoder_moe_stats(d);
    aux[s] = (float)ms->aux_loss;
    zl[s] = (float)ms->z_loss;
    for (size_t i = 0; i < (size_t)nmoe * E; i++)
      loads[(size_t)s * nmoe * E + i] = (int32_t)ms->load[i];
    for (int i = 0; i < nmoe; i++) dropped[(size_t)s * nmoe + i] = (int32_t)ms->dropped[i];
  }
  loom_st_writer *w = loom_st_writer_create();
  put_meta(w, "arch", "%s", spec.arch == LOOM_ARCH_GPT2 ? "gpt2" : "llama");
  put_meta(w, "vocab_size", "%d", spec.vocab_size);
  put_meta(w, "padded_vocab", "%d", spec.padded_vocab);
  put_meta(w, "hidden", "%d", spec.hidden);
  put_meta(w, "layers", "%d", spec.layers);
  put_meta(w, "heads", "%d", spec.heads);
  put_meta(w, "kv_heads", "%d", spec.kv_heads);
  put_meta(w, "head_dim", "%d", spec.head_dim);
  put_meta(w, "intermediate", "%d", spec.intermediate);
  put_meta(w, "max_seq", "%d", spec.max_seq);
  put_meta(w, "norm_eps", "%.17g", spec.norm_eps);
  put_meta(w, "rope_theta", "%.17g", spec.rope_theta);
  put_meta(w, "qkv_bias", "%s", spec.qkv_bias ? "true" : "false");
  put_meta(w, "tied_embeddings", "%s", spec.tied_embeddings ? "true" : "false");
  put_meta(w, "B", "%d", B);
  put_meta(w, "T", "%d", T);
  put_meta(w, "grad_accum", "%d", A);
  put_meta(w, "steps", "%d", S);
  put_meta(w, "dtype", "%s", t->dtype);
  put_meta(w, "param_dtype", "%s", t->param_dtype);
  put_meta(w, "optim_dtype", "%s", t->optim_dtype);
  put_meta(w, "lr", "%.17g", t->lr);
  put_meta(w, "min_lr_ratio", "%.17g", t->min_lr_ratio);
  put_meta(w, "lr_schedule", "%s", t->lr_schedule);
  put_meta(w, "warmup_steps", "%ld", loom_lr_warmup_steps(t));
  put_meta(w, "weight_decay", "%.17g", t->weight_decay);
  put_meta(w, "beta1", "%.17g", t->beta1);
  put_meta(w, "beta2", "%.17g", t->beta2);
  put_meta(w, "eps", "%.17g", t->eps);
  put_meta(w, "grad_clip", "%.17g", t->grad_clip);
  put_meta(w, "decay_norms_and_biases", "%s", t->decay_norms_and_biases ? "true" : "false");
  put_meta(w, "activation_checkpointing", "%s", t->activation_checkpointing ? "true" : "false");
  if (eod >= 0) put_meta(w, "doc_eod", "%d", (int)eod);
  put_meta(w, "qk_norm", "%s", spec.qk_norm ? "true" : "false");
  if (E > 0) {
    const loom_moe_spec *m = &spec.moe;
    char dense[1024] = "";
    for (int l = 0, n = 0; l < spec.layers && l < 256; l++)
      if (m->dense_mask[l / 64] >> (l % 64) & 1)
        n += snprintf(dense + n, sizeof dense - (size_t)n, "%s%d", n ? "," : "", l);
    put_meta(w, "moe_experts", "%d", E);
    put_meta(w, "moe_top_k", "%d", m->top_k);
    put_meta(w, "moe_intermediate", "%d", m->intermediate);
    put_meta(w, "moe_shared_intermediate", "%d", m->shared_intermediate);
    put_meta(w, "moe_sparse_step", "%d", m->sparse_step);
    put_meta(w, "moe_mlp_only_layers", "%s", dense);
    put_meta(w, "moe_norm_topk", "%s", m->norm_topk ? "true" : "false");
    put_meta(w, "moe_aux_coef", "%.17g", m->aux_loss_coef);
    put_meta(w, "moe_z_coef", "%.17g", m->z_loss_coef);
    put_meta(w, "moe_capacity_factor", "%.17g", m->capacity_factor);
    put_meta(w, "moe_drop_by_position", "%s", m->drop_by_position ? "true" : "false");
    put_meta(w, "moe_bias_rate", "%.17g", m->bias_update_rate);
  }
  add_params(w, &d->layout, init, "param");
  add_params(w, &d->layout, grads, "grad");
  add_params(w, &d->layout, d->params, "final");
  float *moments = malloc(2 * P * sizeof(float)); /* m then v, widened from bf16 if so */
  loom_adamw_state_get(&opt, moments);
  add_params(w, &d->layout, moments, "exp_avg");
  add_params(w, &d->layout, moments + P, "exp_avg_sq");
  add_params(w, &d->layout, d->grads, "last_grad"); /* the last step's (stored) gradient */
  int64_t tok_shape[4] = {S, A, B, T}, logit_shape[3] = {B, T, spec.padded_vocab};
  int64_t one = 1, s_shape = S;
  loom_st_writer_add(w, "tokens", LOOM_DT_I32, 4, tok_shape, tokens);
  loom_st_writer_add(w, "targets", LOOM_DT_I32, 4, tok_shape, targets);
  loom_st_writer_add(w, "logits", LOOM_DT_F32, 3, logit_shape, logits);
  loom_st_writer_add(w, "loss0", LOOM_DT_F32, 1, &one, &loss0);
  loom_st_writer_add(w, "losses", LOOM_DT_F32, 1, &s_shape, losses);
  loom_st_writer_add(w, "lrs", LOOM_DT_F32, 1, &s_shape, lrs);
  loom_st_writer_add(w, "grad_norms", LOOM_DT_F32, 1, &s_shape, norms);
  if (E > 0) {
    int64_t load_shape[3] = {S, nmoe, E};
    loom_st_writer_add(w, "aux_losses", LOOM_DT_F32, 1, &s_shape, aux);
    loom_st_writer_add(w, "z_losses", LOOM_DT_F32, 1, &s_shape, zl);
    loom_st_writer_add(w, "loads", LOOM_DT_I32, 3, load_shape, loads);
    loom_st_writer_add(w, "dropped", LOOM_DT_I32, 2, load_shape, dropped);
  }
  int rc = loom_st_writer_write(w, argv[1]);
  if (rc) fprintf(stderr, "loom_refdump: %s\n", loom_errmsg());
  loom_st_writer_free(w);
  loom_adamw_state_free(&opt);
  loom_decoder_free(d);
  free(init), free(tokens), free(targets), free(logits), free(grads), free(losses), free(lrs);
  free(norms), free(moments), free(aux), free(zl), free(loads), free(dropped);
  return rc ? 1 : 0;
}

/* The single-process optimizer step: every micro-batch's forward and backward with the loss
 * scaled by the whole step's target count, clipping folded into the AdamW pass. The
 * reference the tests and `loom bench model` use; the parallel step is the executor's. */
#include <math.h>

#include "loom/kernels.h"
#include "loom/optim.h"

void loom_train_step(loom_decoder *d, loom_adamw_state *opt, const loom_config_training *t,
                     const int32_t *tokens, const int32_t *targets, int A,
                     loom_step_result *r) {
  size_t BT = (size_t)d->B * d->T;
  int counted = 0;
  for (size_t i = 0; i < (size_t)A * BT; i++) counted += targets[i] != LOOM_IGNORE_INDEX;
  float scale = counted ? 1.0f / (float)counted : 0.0f;
  loom_decoder_zero_grads(d);
  loom_decoder_moe_begin_step(d, A); /* MoE router losses: means over the A micro-batches */
  double loss_sum = 0;
  for (int a = 0; a < A; a++) {
    double part = 0;
    loom_decoder_forward(d, tokens + a * BT, targets + a * BT, &part, NULL);
    loss_sum += part;
    loom_decoder_backward(d, scale);
  }
  if (d->param_bf16) /* the step's gradient is stored in bf16 (training.param_dtype) */
    loom_round_bf16_f32(d->grads, d->grads, d->layout.total);
  r->loss = counted ? loss_sum / counted : 0.0;
  r->counted = counted;
  r->tokens = (long)A * (long)BT;
  /* clip (PyTorch's clip_grad_norm_ rule, as loom_grad_clip) folded into the AdamW pass */
  double norm = sqrt(loom_sumsq_f32(d->grads, d->layout.total));
  float coef = t->grad_clip > 0 ? (float)(t->grad_clip / (norm + 1e-6)) : 1.0f;
  r->grad_norm = norm;
  r->lr = loom_lr_at(t, opt->step);
  loom_adamw_apply_clipped(opt, d, t, r->lr, coef < 1.0f ? coef : 1.0f);
  loom_decoder_moe_end_step(d, NULL, NULL, d->params, 0, d->layout.total); /* MoE balancing bias */
}

/* AdamW applied tensor by tensor over the flat buffers (weight decay only on tensors marked
 * decay unless configured otherwise), with the precision policy: moments in fp32 or bf16,
 * parameters and gradients in fp32 or bf16; global-norm gradient clipping. */
#include <math.h>
#include <string.h>

#include "loom/kernels.h"
#include "loom/optim.h"

void loom_adamw_state_init_dtype(loom_adamw_state *st, size_t total, bool bf16) {
  memset(st, 0, sizeof *st);
  st->n = total;
  if (bf16) {
    /* zeroed: bf16 0 is 0x0000 */
    st->m16 = loom_alloc_for(2 * total * sizeof(loom_bf16), "AdamW moments (bf16 m, v)");
    st->v16 = st->m16 + total;
  } else {
    st->m = loom_alloc_for(2 * total * sizeof(float), "AdamW moments (m, v)");
    st->v = st->m + total;
  }
}

void loom_adamw_state_init(loom_adamw_state *st, size_t total) {
  loom_adamw_state_init_dtype(st, total, false);
}

void loom_adamw_state_free(loom_adamw_state *st) {
  loom_free(st->m);
  loom_free(st->m16);
  memset(st, 0, sizeof *st);
}

size_t loom_adamw_state_bytes(const loom_adamw_state *st) {
  return 2 * st->n * (st->m16 ? sizeof(loom_bf16) : sizeof(float));
}

void loom_adamw_state_get(const loom_adamw_state *st, float *dst) {
  if (!st->m16) {
    memcpy(dst, st->m, 2 * st->n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < 2 * st->n; i++) dst[i] = loom_bf16_to_f32(st->m16[i]);
}

void loom_adamw_state_set(loom_adamw_state *st, const float *src) {
  if (!st->m16) {
    memcpy(st->m, src, 2 * st->n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < 2 * st->n; i++) st->m16[i] = loom_f32_to_bf16(src[i]);
}

void loom_adamw_state_update(loom_adamw_state *st, float *p, const float *g, bool round_p,
                             uint16_t *p16, size_t base, const loom_adamw_segment *seg,
                             int n_seg, float clip, double lr, const loom_config_training *t) {
  loom_adamw_flat(p, g, st->m, st->v, st->m16, st->v16, round_p, p16, base, seg, n_seg, clip, lr,
                  t->beta1, t->beta2, t->eps, st->step);
}

/* AdamW over every trained tensor in one pass over the flat buffer (loom_adamw_flat_f32: the
 * per-tensor update, bitwise, with the clipping factor applied on the fly), then the bf16
 * weights refreshed. Segments live on the stack: nothing is allocated per step. */
void loom_adamw_apply_clipped(loom_adamw_state *st, loom_decoder *d,
                              const loom_config_training *t, double lr, float clip) {
  st->step++;
  int n = 0;
  loom_adamw_segment seg[d->layout.count > 0 ? d->layout.count : 1];
  for (int i = 0; i < d->layout.count; i++) {
    const loom_param *p = &d->layout.params[i];
    if (p->frozen || p->numel == 0) continue;
    double wd = (p->decay || t->decay_norms_and_biases) ? t->weight_decay : 0.0;
    seg[n++] = (loom_adamw_segment){p->offset, p->offset + p->numel, wd};
  }
  uint16_t *w16 = loom_decoder_weights16_for_step(d); /* refreshed by the same pass */
  loom_adamw_state_update(st, d->params, d->grads, d->param_bf16, w16, 0, seg, n, clip, lr, t);
  loom_decoder_params_stepped(d, w16 != NULL);
}

void loom_adamw_apply(loom_adamw_state *st, loom_decoder *d, const loom_config_training *t,
                      double lr) {
  loom_adamw_apply_clipped(st, d, t, lr, 1.0f);
}

double loom_grad_clip(loom_decoder *d, double max_norm) {
  double norm = sqrt(loom_sumsq_f32(d->grads, d->layout.total));
  if (max_norm > 0) {
    float coef = (float)(max_norm / (norm + 1e-6));
    if (coef < 1.0f)
      for (size_t i = 0; i < d->layout.total; i++) d->grads[i] *= coef;
  }
  return norm;
}

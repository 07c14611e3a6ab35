/* The optimizer, on flat buffers (as llm.c keeps AdamW a component of its own): learning-rate
 * schedules, AdamW moments over the same flat layout as the parameters with the precision
 * policy (fp32 or bf16 moments, fp32 or bf16 parameters), global-norm gradient clipping, and
 * the single-process optimizer step over grad_accum micro-batches (loss = global token mean)
 * that tests and `loom bench model` use as the reference.
 *
 * Layering: above the model (it updates a loom_decoder's buffers), below gradient
 * synchronisation (src/sync/: the ZeRO owner's update) and the executor (src/exec/). */
#ifndef LOOM_OPTIM_H
#define LOOM_OPTIM_H
#include <stdbool.h>
#include <stdint.h>

#include "loom/config.h"
#include "loom/decoder.h"
#include "loom/kernels.h"

/* Warmup length: warmup_steps when > 0, else round(warmup_ratio * steps). */
long loom_lr_warmup_steps(const loom_config_training *t);
/* Learning rate of optimizer step s (0-based):
 *   s < W: lr * (s+1) / W;   else p = (s-W) / max(1, steps-W) and
 *   constant: lr;  linear: lr * (m + (1-m)(1-p));  cosine: lr * (m + (1-m) * (1+cos(pi p))/2)
 * with m = min_lr_ratio. */
double loom_lr_at(const loom_config_training *t, long s);

/* AdamW moments over the same flat layout as the parameters, in training.optim_dtype: fp32
 * (m, v; m16 = v16 = NULL) or bf16 (m16, v16; m = v = NULL). */
typedef struct {
  float *m, *v;           /* (n) fp32 moments, or NULL */
  loom_bf16 *m16, *v16;   /* (n) bf16 moments, or NULL */
  size_t n;               /* elements of each moment */
  long step;              /* optimizer steps taken */
} loom_adamw_state;

void loom_adamw_state_init(loom_adamw_state *st, size_t total); /* fp32 moments */
/* bf16: moments stored in bf16 (training.optim_dtype=bf16). */
void loom_adamw_state_init_dtype(loom_adamw_state *st, size_t total, bool bf16);
void loom_adamw_state_free(loom_adamw_state *st); /* a zeroed state is fine */
/* Bytes the moments occupy (what training.optim_dtype changes). */
size_t loom_adamw_state_bytes(const loom_adamw_state *st);
/* The moments as fp32 (dst: 2 * st->n floats, m then v) / back from fp32 (bf16 moments: rounded
 * to nearest even, exact for values that came from bf16): checkpoints and tests. */
void loom_adamw_state_get(const loom_adamw_state *st, float *dst);
void loom_adamw_state_set(loom_adamw_state *st, const float *src);
/* One pass of the policy's AdamW (loom_adamw_flat) over flat [segments) of params p (indexed
 * from base) with the state's moments (indexed from base too); round_p: bf16 parameters;
 * p16 (or NULL, indexed like p): bf16 copies of the updated parameters, written in the pass. */
void loom_adamw_state_update(loom_adamw_state *st, float *p, const float *g, bool round_p,
                             uint16_t *p16, size_t base, const loom_adamw_segment *seg,
                             int n_seg, float clip, double lr, const loom_config_training *t);
/* One AdamW update of every tensor with weight decay on tensors marked decay (or on all when
 * decay_norms_and_biases), using d->grads; then refreshes the bf16 weights. */
void loom_adamw_apply(loom_adamw_state *st, loom_decoder *d, const loom_config_training *t,
                      double lr);
/* The same with the gradients multiplied by clip (<= 1, the clipping coefficient) in the pass. */
void loom_adamw_apply_clipped(loom_adamw_state *st, loom_decoder *d,
                              const loom_config_training *t, double lr, float clip);

/* Global L2 norm of the gradients (double accumulation); clip to max_norm with PyTorch's
 * clip_grad_norm_ rule (coef = max/(norm+1e-6), applied when < 1). Returns the norm. */
double loom_grad_clip(loom_decoder *d, double max_norm);

typedef struct {
  double loss;       /* global token mean over the step's micro-batches */
  double grad_norm;  /* before clipping */
  double lr;
  long tokens;       /* tokens processed (B*T*A) */
  int counted;       /* targets counted in the loss */
} loom_step_result;

/* One optimizer step: zero grads, forward+backward every micro-batch a of tokens/targets
 * (A, B, T) with loss scale 1/(targets counted in the whole step), clip, AdamW. */
void loom_train_step(loom_decoder *d, loom_adamw_state *opt, const loom_config_training *t,
                     const int32_t *tokens, const int32_t *targets, int A,
                     loom_step_result *r);

#endif

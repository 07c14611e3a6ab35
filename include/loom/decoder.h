/* The single-process decoder: parameters, gradients and activations of a GPT-2 or
 * Llama/Qwen2 model for a planned micro-batch shape (B, T), with forward, backward,
 * activation checkpointing and bf16 mixed-precision matmuls.
 *
 * Memory is planned once in loom_decoder_create: the flat parameter and gradient buffers
 * (layout in model.h) and one activation arena; forward/backward allocate nothing.
 *
 * Mixed precision (bf16): every linear layer and the LM head multiply bf16-rounded inputs
 * (activations and a bf16-rounded copy of the weights) with fp32 accumulation, in forward and
 * backward (dx = bf16(dy) @ bf16(W), dW = bf16(dy)^T @ bf16(x)); norms, attention, softmax,
 * the loss, master weights, gradients and optimizer state stay fp32. */
#ifndef LOOM_DECODER_H
#define LOOM_DECODER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/core.h"
#include "loom/model.h"

typedef struct loom_layer_acts loom_layer_acts;

typedef struct {
  loom_model_spec spec;
  loom_param_layout layout;
  int B, T;                 /* planned micro-batch shape */
  bool bf16;                /* mixed-precision matmuls */
  bool recompute;           /* activation checkpointing: keep only block inputs */

  float *params;            /* (layout.total) fp32 master weights */
  float *grads;             /* (layout.total) accumulated gradients */
  float *params_lp;         /* (layout.total) bf16-rounded weights (bf16 mode) else == params */

  /* activations, all (N = B*T rows) */
  float *resid;             /* (L+1, N, C): input of each block, last = input of final norm */
  loom_layer_acts *layer;   /* L entries (1 reused entry when recompute) */
  float *lnf, *lnf_mean, *lnf_rstd; /* (N,C), (N), (N) */
  float *logits;            /* (N, Vp) */
  float *losses;            /* (N) per-token loss, 0 where ignored */
  const int32_t *tokens, *targets; /* (B,T) of the last forward (not owned) */

  /* backward scratch */
  float *dlogits;           /* (N, Vp) */
  float *dres;              /* (N, C) gradient of the residual stream */
  float *d_norm, *d_q, *d_k, *d_v, *d_att, *d_act, *d_a, *d_b; /* per-block scratch */
  float *tmp;               /* (N, C) */
  float *round_x, *round_dy; /* bf16 rounding scratch */

  void *arena;              /* one allocation holding every activation buffer */
  size_t arena_bytes;
} loom_decoder;

int loom_decoder_create(loom_decoder **out, const loom_model_spec *spec, int B, int T,
                        bool bf16, bool recompute);
void loom_decoder_free(loom_decoder *d);
/* Initialise parameters from seed: N(0, init_std) for matrices (GPT-2: output projections
 * scaled by 1/sqrt(2L)), ones for norm weights, zeros for biases and vocab padding rows. */
void loom_decoder_init_params(loom_decoder *d, uint64_t seed);
/* After params change (optimizer step, load): refresh the bf16 copy. */
void loom_decoder_params_updated(loom_decoder *d);
/* Forward over tokens (B,T). With targets (B,T) fills losses and returns their sum in
 * *loss_sum and the number of counted targets in *count (either may be NULL). */
void loom_decoder_forward(loom_decoder *d, const int32_t *tokens, const int32_t *targets,
                          double *loss_sum, int *count);
/* Backward of loss_scale * sum(losses) of the last forward, accumulated into d->grads. */
void loom_decoder_backward(loom_decoder *d, float loss_scale);
void loom_decoder_zero_grads(loom_decoder *d);
/* Model FLOPs per token for a training step (forward+backward, no recompute), as in
 * Megatron: 6 * matmul params + the causal attention term 6 * L * T * Hq * D. */
double loom_decoder_flops_per_token(const loom_model_spec *spec, int T);
#endif

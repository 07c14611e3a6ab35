/* The vision encoder as a module with its own parallel strategy (src/exec/vision_module.c): mesh,
 * parameters, gradient synchronisation, optimizer state, and the hand-off of vision tokens
 * and their gradients between the encoder's ranks and the text decoder's. */
#ifndef LOOM_VISION_MODULE_H
#define LOOM_VISION_MODULE_H
#include "loom/config.h"
#include "loom/grad_sync.h"
#include "loom/mesh.h"
#include "loom/optim.h"
#include "loom/vision.h"
#include "loom/vqa.h"

/* The resolved strategy (vision.parallel.* with the text's where they say "follow"). */
typedef struct {
  int dp, tp, sp, cp, zero; /* cp: the encoder's context-parallel ring (exclusive with sp) */
  int g_v, g_t;        /* ranks per data-parallel group: encoder (cp*sp*tp), text (cp*sp*tp) */
  bool megatron_sp;    /* the text decoder uses Megatron sequence parallelism */
  bool separate;       /* vision.parallel.placement = separate */
  int text_ranks;      /* pp*dp*cp*sp*tp of the text decoder */
  int first;           /* world rank of the encoder's first rank */
} loom_vmod_plan;

typedef struct loom_vmod loom_vmod;

/* Resolve and check vision.parallel against the text strategy and the model (no MPI). */
int loom_vmod_resolve(const loom_config *cfg, const loom_model_spec *spec, int world,
                      loom_vmod_plan *plan);
/* Every rank calls it (communicators are split collectively). */
int loom_vmod_create(loom_vmod **out, const loom_config *cfg, const loom_model_spec *spec,
                     const loom_mesh *text);
void loom_vmod_free(loom_vmod *vm);
const loom_vmod_plan *loom_vmod_get_plan(const loom_vmod *vm);
const loom_mesh *loom_vmod_mesh(const loom_vmod *vm);    /* .member: this rank encodes */
loom_decoder *loom_vmod_decoder(loom_vmod *vm);          /* parameters (members), else NULL */
loom_grad_sync *loom_vmod_grad_sync(loom_vmod *vm);      /* members, else NULL */
loom_adamw_state *loom_vmod_optimizer(loom_vmod *vm);
/* Activation, scratch and hand-off buffers of this rank's part of the module, in bytes. */
size_t loom_vmod_buffer_bytes(const loom_vmod *vm);
/* Forward of micro-batch mb (a loom_vqa_batch): encoders encode and hand the tokens over;
 * returns the (n, Ct) tokens on the first pipeline stage's ranks, NULL elsewhere. */
const float *loom_vmod_forward(loom_vmod *vm, const void *batch, int mb);
/* Right before the decoder's backward of a micro-batch: the (n, Ct) buffer for its token
 * gradients, zeroed (a rank writes only the rows it holds). NULL off the first stage. */
float *loom_vmod_grads_for(loom_vmod *vm, const void *batch);
/* Backward of micro-batch mb: token gradients to the encoders, encoder backward (its forward
 * recomputed first when other micro-batches were encoded since, as under pipelining). */
void loom_vmod_backward(loom_vmod *vm, const void *batch, int mb);
/* Step plumbing: zero gradients; finish reductions; the squared gradient norm of the whole
 * model on every rank of the job (text_sumsq: the text decoder's, counted from the rank where
 * text_root is true); AdamW with the global norm. */
void loom_vmod_begin_step(loom_vmod *vm);
void loom_vmod_reduce(loom_vmod *vm);
double loom_vmod_total_sumsq(loom_vmod *vm, double text_sumsq, bool text_root);
/* Every rank of the job (both modules' ranks). */
const loom_comm *loom_vmod_job_comm(const loom_vmod *vm);
void loom_vmod_step(loom_vmod *vm, const loom_config_training *t, double lr, double norm);
void loom_vmod_init_params(loom_vmod *vm, uint64_t seed);
void loom_vmod_params_loaded(loom_vmod *vm);
#endif

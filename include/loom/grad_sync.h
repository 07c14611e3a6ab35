/* Gradient synchronisation and the optimizer step across the mesh:
 *  - Megatron sequence parallelism: gradients of tp-replicated tensors (norms, row-parallel
 *    biases, positions) are partial per tp rank and are all-reduced over tp;
 *  - tied embeddings with pipeline parallelism: the first and last stage both hold
 *    embed.weight; their gradients are summed over the embed communicator;
 *  - data parallelism (dp x sp replicas): ZeRO-0 all-reduces gradient buckets (groups of
 *    consecutive layers, about parallel.bucket_mb each) as soon as the last backward of their
 *    layers finishes, overlapping with the rest of the backward; ZeRO-1/2 reduce-scatter the
 *    flat gradient buffer so that each replica owns 1/n of it (ZeRO-2 after every micro-batch,
 *    so only the owned shard accumulates), keep AdamW moments for the owned range only, and
 *    all-gather the updated parameters;
 *  - ZeRO-3 (zero3.c): parameters partitioned too, gathered per layer just before use with
 *    the next layer prefetched, released after; gradients reduce-scattered per layer;
 *  - expert parallelism: the routed experts a rank holds (the layout's expert region, after
 *    every other tensor) are outside the dense buckets and partitions: their gradients are
 *    summed over the expert-data-parallel group (edp: the dp ranks holding the same experts)
 *    once per step — all-reduced and updated in place on every rank of it, or under ZeRO 1-3
 *    reduce-scattered, each rank updating its share and the weights all-gathered over edp
 *    (the experts' weights stay whole on every rank); their moments follow the owned
 *    range's in the optimizer state;
 *  - global gradient-norm clipping with every element counted once (tp-replicated tensors on
 *    tp rank 0 only, the tied embedding on the first stage only, each expert on the first
 *    rank of its expert-data-parallel group only). */
#ifndef LOOM_GRAD_SYNC_H
#define LOOM_GRAD_SYNC_H
#include "loom/comm.h"
#include "loom/config.h"
#include "loom/decoder.h"
#include "loom/mesh.h"
#include "loom/optim.h"

typedef struct loom_grad_sync loom_grad_sync;

int loom_grad_sync_create(loom_grad_sync **out, loom_decoder *d, const loom_mesh *m,
                          const loom_config_parallel *p);
void loom_grad_sync_free(loom_grad_sync *g);
/* training.reduce_dtype=bf16: data-parallel gradient reductions (buckets, ZeRO reduce-scatters)
 * send bf16 words and sum them in bf16 (include/loom/comm_bf16.h); tensor-parallel, sequence-
 * parallel and tied-embedding reductions stay fp32. Call before the first step. */
void loom_grad_sync_set_reduce_bf16(loom_grad_sync *g, bool bf16);
/* The ZeRO stage this synchroniser runs. */
int loom_grad_sync_zero(const loom_grad_sync *g);
/* Flat range [begin, end) of the dense region this rank's optimizer owns (the whole dense
 * region without ZeRO; everything without expert parallelism). */
void loom_grad_sync_owned(const loom_grad_sync *g, size_t *begin, size_t *end);
/* Expert parallelism: the expert region [begin, end) (this rank's routed experts, owned by
 * every rank of its expert-data-parallel group; empty, begin = end, without ep), and edp, the
 * communicator of that group (NULL: no other rank holds them). Set edp before the first step. */
void loom_grad_sync_experts(const loom_grad_sync *g, size_t *begin, size_t *end);
void loom_grad_sync_set_experts(loom_grad_sync *g, const loom_comm *edp);
/* The part [begin, end) of the expert region whose AdamW moments and reduced gradients this
 * rank keeps: under ZeRO 1-3 its share of the region over edp, else the whole region. */
void loom_grad_sync_experts_owned(const loom_grad_sync *g, size_t *begin, size_t *end);
/* The experts' reduced gradients of that part: element of flat index i at [i - begin]. */
float *loom_grad_sync_expert_grads(loom_grad_sync *g);
/* Whether this rank writes the expert region to checkpoints (the first rank of its group). */
bool loom_grad_sync_writes_experts(const loom_grad_sync *g);
/* Elements of the optimizer state: the owned range, then the expert region. */
size_t loom_grad_sync_owned_count(const loom_grad_sync *g);
/* Parameters as the optimizer owns them: under ZeRO-3 the owned shard (element of flat index
 * i at [i - begin]), otherwise the whole flat buffer (index i at [i]). */
float *loom_grad_sync_owned_params(loom_grad_sync *g);
/* After the flat parameter buffer was filled (init or checkpoint load): ZeRO-3 keeps its owned
 * range and releases the rest. No-op for other stages. */
void loom_grad_sync_params_loaded(loom_grad_sync *g);
/* Reduced gradients of the owned range: element of flat index i at [i - begin]. */
float *loom_grad_sync_owned_grads(loom_grad_sync *g);
/* Start of a step: nothing reduced yet. */
void loom_grad_sync_begin_step(loom_grad_sync *g);
/* The decoder's per-layer callback target while the last backward of a chunk runs. */
void loom_grad_sync_layer_done(void *g, int layer);
/* After each micro-batch's backward on this rank (ZeRO-2 reduces here when pp == 1). */
void loom_grad_sync_microbatch_done(loom_grad_sync *g);
/* REDUCE_GRADS: finish every reduction. */
void loom_grad_sync_reduce(loom_grad_sync *g);
/* OPTIMIZER_STEP: global norm (before clipping) returned; clip; AdamW on the owned range;
 * all-gather parameters under ZeRO; refresh bf16 weights. */
double loom_grad_sync_step(loom_grad_sync *g, loom_adamw_state *opt,
                           const loom_config_training *t, double lr);
/* The same step with the global norm given (a model of several modules, each with its own
 * synchroniser, clips by the norm over all of them). */
void loom_grad_sync_step_norm(loom_grad_sync *g, loom_adamw_state *opt,
                              const loom_config_training *t, double lr, double norm);
/* Sum of squares of the reduced gradients counted once across the whole mesh. */
double loom_grad_sync_global_sumsq(loom_grad_sync *g);
#endif

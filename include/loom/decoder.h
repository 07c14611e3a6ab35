/* The decoder on one rank: parameters, gradients and activations of a GPT-2, Llama/Qwen2 or
 * Qwen3 model (per-head q/k norms), dense or Mixture-of-Experts (or of the shard this rank
 * holds: tensor-parallel slices, Megatron or Ulysses sequence parallelism, pipeline chunks),
 * with forward, backward, activation checkpointing and bf16 mixed-precision matmuls; and the
 * same layers' forward over a KV cache for generation (loom_decoder_forward_cached).
 * MoE layers run without a sequence or context split (every token of the tensor-parallel
 * group routed on each tp rank, the experts' inner dimension split over tp; expert
 * parallelism over ep_comm; loom_decoder_create_shard refuses the others); their router
 * losses and balancing are described with loom_decoder_moe_begin_step below.
 *
 * Memory is planned once in loom_decoder_create: the flat parameter and gradient buffers
 * (layout in model.h), `slots` activation sets (one per micro-batch chunk in flight, as the
 * pipeline schedule needs) and shared backward scratch; forward/backward allocate nothing.
 *
 * Mixed precision (bf16): every linear layer and the LM head multiply bf16-rounded inputs
 * (activations and a bf16-rounded copy of the weights) with fp32 accumulation, in forward and
 * backward (dx = bf16(dy) @ bf16(W), dW = bf16(dy)^T @ bf16(x)); norms, attention, softmax,
 * the loss, master weights, gradients and optimizer state stay fp32.
 *
 * Rows: a micro-batch has B sequences of T tokens. N = B*T rows enter attention and the
 * column-parallel linears; with Ulysses each rank holds B x T/sp tokens, with context
 * parallelism B x T/cp tokens (chunks cp_rank and 2cp-1-cp_rank of 2cp per sequence,
 * include/loom/ring_attention.h), and with Megatron sequence parallelism the residual stream
 * holds N/tp rows per rank. */
#ifndef LOOM_DECODER_H
#define LOOM_DECODER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/comm.h"
#include "loom/core.h"
#include "loom/model.h"

typedef struct loom_layer_acts loom_layer_acts;

#define LOOM_UNIT_ENDS (-1)
enum { LOOM_PARAMS_ACQUIRE_FWD, LOOM_PARAMS_ACQUIRE_BWD, LOOM_PARAMS_RELEASE,
       LOOM_PARAMS_GRADS_DONE };

/* Activations of one chunk for one micro-batch. */
typedef struct {
  int chunk;                /* local chunk index, -1 when free */
  int mb;
  float *resid;             /* (nl+1, Nr, C): input of each block of the chunk, then its output */
  loom_layer_acts *layer;   /* nl sets, or NULL with recompute (decoder scratch is used) */
  float *lnf, *lnf_mean, *lnf_rstd; /* (Nr,C), (Nr), (Nr) head chunk only */
  float *lnf_full;          /* (N,C) all-gathered final norm output (== lnf without seq-par) */
  float *logits;            /* (N, Vloc) this rank's vocabulary slice */
  float *row_max, *row_sumexp; /* (N) softmax statistics over the whole vocabulary */
  float *losses;            /* (N) per-token loss, 0 where ignored */
  const int32_t *tokens;    /* (B, T) whole sequences of the micro-batch (not owned) */
  const int32_t *targets;   /* (B, T) */
  /* vision-language models (set by the caller before forward; not owned) */
  const int32_t *mrope_pos; /* (3, B, T) multimodal rotary positions, NULL: plain 1D */
  const int *inject_slot;   /* (B*T) row of inject_feats replacing that token's embedding, or -1 */
  const float *inject_feats; /* (n, C) vision tokens */
  float *inject_grads;      /* (n, C) receives their gradients in backward */
  double *mcos, *msin;      /* (N, D/2) rotary table of mrope_pos (planned when the model has
                               multimodal rotary sections) */
  /* packed documents (allocated by loom_decoder_set_doc_eod, filled from tokens by the
   * forward): the attention segments and positions of every token of the micro-batch */
  int *seg_lo, *seg_hi;     /* (B*T) first and last position of each token's document */
  int *doc_pos;             /* (B*T) position of each token within its document */
  int *row_pos;             /* (N) doc_pos of this rank's attention rows (Ulysses: its tokens) */
  struct loom_moe_mb *moe;  /* MoE models: this micro-batch's router statistics (private) */
} loom_acts;

typedef struct {
  loom_model_spec spec;
  loom_shard shard;
  loom_param_layout layout;
  int B, T;                 /* micro-batch shape (whole sequences) */
  int N;                    /* rows through attention: B*T (Ulysses: B*T/sp, context
                               parallelism: B*T/cp local tokens) */
  int Nr;                   /* rows of the residual stream (N/tp with Megatron SP) */
  int lh, lkv, li, vloc;    /* local heads, kv heads, intermediate, vocabulary rows */
  int lie, lis;             /* local routed / shared expert inner size (MoE; split over tp) */
  int v0;                   /* first global vocabulary row of this rank */
  int pos0;                 /* position of this rank's first token (Ulysses) */
  int32_t doc_eod;          /* packed documents: the end-of-document token; -1: none (a window
                               is one sequence: full causal attention, positions 0..T-1) */
  bool bf16, recompute;
  bool param_bf16;          /* training.param_dtype=bf16: params and grads hold bf16 values */
  const loom_comm *tp_comm, *sp_comm; /* NULL when not parallel */
  const loom_comm *cp_comm; /* the context-parallel ring (NULL when shard.cp == 1) */
  const loom_comm *ep_comm; /* expert-parallel peers (shard.ep ranks; NULL: experts local) */

  float *params;            /* (layout.total) fp32 master weights */
  float *grads;             /* (layout.total) accumulated gradients */
  float *params_lp;         /* (layout.total) bf16-rounded weights (bf16 mode) else == params;
                               == params when param_bf16 (the parameters are bf16 values).
                               In mixed bf16 NULL where nothing reads it (beside native bf16
                               GEMMs); after an optimizer step it may be stale: read it
                               through loom_decoder_params_lp */

  int n_slots;
  loom_acts *slots;         /* activation sets */
  loom_acts *last;          /* slot of the last forward that computed the loss */
  float *logits;            /* == last->logits (single-process convenience) */

  void *scratch;            /* backward scratch, rounding, gathers, all-to-all buffers */
  struct loom_decoder_scratch *s;
  void *arena;
  size_t arena_bytes;
  /* ZeRO-3 parameter management, called around every use of a unit's parameters: unit is a
   * global layer index or LOOM_UNIT_ENDS (embedding, positions, final norm, LM head); event
   * LOOM_PARAMS_ACQUIRE_FWD/_BWD before, LOOM_PARAMS_RELEASE after, LOOM_PARAMS_GRADS_DONE
   * when a block's backward has produced its gradients. NULL: parameters always resident. */
  void (*param_hook)(void *ctx, int unit, int event);
  void *param_hook_ctx;
  /* called after each block's backward (layer index global) for overlapping gradient
   * reduction; may be NULL */
  void (*on_layer_grads)(void *ctx, int layer);
  void *on_layer_grads_ctx;
  /* called after each block's forward and backward (the pipeline executor polls its pending
   * sends, which over TCP move only when polled); may be NULL */
  void (*on_block_done)(void *ctx);
  void *on_block_done_ctx;
} loom_decoder;

/* Whole model on one process, one activation slot. */
int loom_decoder_create(loom_decoder **out, const loom_model_spec *spec, int B, int T,
                        bool bf16, bool recompute);
/* A shard of the model with `slots` activation sets. tp_comm/sp_comm/cp_comm may be NULL
 * when shard->tp == 1 / shard->sp == 1 / shard->cp <= 1. */
int loom_decoder_create_shard(loom_decoder **out, const loom_model_spec *spec,
                              const loom_shard *shard, int B, int T, bool bf16, bool recompute,
                              int slots, const loom_comm *tp_comm, const loom_comm *sp_comm,
                              const loom_comm *cp_comm);
void loom_decoder_free(loom_decoder *d);
/* Packed documents (data.pack_documents): from now on every forward splits each sequence
 * after each token equal to eod (loom_attn_doc_segments): attention is causal within a
 * document only and positions (rotary, or GPT-2's learned table) restart at 0 per document.
 * Every rank derives the same segments from the whole micro-batch's tokens, so tensor,
 * sequence (Megatron, Ulysses) and pipeline parallelism need no extra communication. eod < 0
 * turns it off. Allocates the per-slot tables (outside forward/backward). A forward with
 * multimodal rotary positions (vqa batches, which are not packed: the config refuses the
 * combination) asserts. */
void loom_decoder_set_doc_eod(loom_decoder *d, int32_t eod);
/* Initialise parameters from seed, identically for every layout: each global tensor is drawn
 * from its own stream (seed, tensor name) — N(0, init_std) for matrices (GPT-2: output
 * projections scaled by 1/sqrt(2L)), ones for norm weights, zeros for biases and vocabulary
 * padding rows — and this rank keeps its slice. */
void loom_decoder_init_params(loom_decoder *d, uint64_t seed);
/* After params change (load, initialisation): refresh the bf16-rounded copy now. */
void loom_decoder_params_updated(loom_decoder *d);
/* After an optimizer step: the same, except that a separate rounded copy (params_lp !=
 * params) is rounded only when something reads it, through loom_decoder_params_lp. The
 * native bf16 GEMMs convert their weights from params (bf16(x) is bf16 of the rounded x), so
 * in that configuration nothing reads it and a pass of 8 bytes per parameter goes away.
 * w16_written: the step wrote the native GEMMs' bf16 weights itself (into the buffer
 * loom_decoder_weights16_for_step gave), so they need no conversion. */
void loom_decoder_params_stepped(loom_decoder *d, bool w16_written);
/* The native bf16 GEMMs' weights (layout.total, indexed like params) for an optimizer step
 * that updates every parameter it trains to write in the same pass; NULL when there are none
 * or they do not match the parameters now (not converted since the last change), in which
 * case they are converted at their next use. */
uint16_t *loom_decoder_weights16_for_step(loom_decoder *d);
/* params_lp, allocated first if nothing read it yet and rounded first if a step left it
 * stale. */
const float *loom_decoder_params_lp(loom_decoder *d);
/* Allocate (and round) the separate rounded copy now, for a path that will read it: the
 * decoder's matmuls without native bf16 GEMMs, the vision encoder, ZeRO-3 (whose layer gathers
 * write ranges of it). Declared at setup so the memory report counts it. No-op when it exists
 * or is params itself (fp32, bf16 parameters). */
void loom_decoder_params_lp_reserve(loom_decoder *d);
/* training.param_dtype=bf16, right after creation (before init, load or a gradient
 * synchroniser): parameters hold bf16 values in fp32 words, with no second rounded copy
 * (params_lp == params); every update rounds them. Needs a bf16 decoder (error otherwise). */
int loom_decoder_set_param_bf16(loom_decoder *d);
/* Bytes of parameter storage: the fp32 words, the rounded copy (mixed precision, once
 * something has read it) and the native GEMMs' bf16 weights. Gradients: layout.total floats. */
size_t loom_decoder_param_bytes(const loom_decoder *d);
void loom_decoder_zero_grads(loom_decoder *d);

/* Activation slots for pipelined execution. */
loom_acts *loom_decoder_slot_get(loom_decoder *d, int chunk, int mb); /* existing or new */
loom_acts *loom_decoder_slot_find(loom_decoder *d, int chunk, int mb); /* NULL if absent */
void loom_decoder_slot_release(loom_decoder *d, loom_acts *a);
/* Input rows of a chunk (Nr, C): where recv-act writes for a non-first chunk. */
float *loom_acts_input(loom_acts *a);
/* Output rows of a chunk (Nr, C): what send-act sends for a non-last chunk. */
float *loom_acts_output(loom_decoder *d, loom_acts *a);

/* Mixture-of-Experts models under a pipeline split: a micro-batch's router statistics (its
 * selections and probabilities pooled over every MoE layer, which the aux loss's gradient in
 * each layer needs) travel with it, as loom_decoder_moe_mb_doubles() doubles (0 for a dense
 * model). A chunk that does not embed continues the statistics of the chunk before it (load
 * them into its slot before its forward); the head chunk's forward completes them, and every
 * other chunk's backward needs those totals in its slot (load them before its backward). */
size_t loom_decoder_moe_mb_doubles(const loom_decoder *d);
void loom_decoder_moe_mb_save(const loom_decoder *d, const loom_acts *a, double *out);
void loom_decoder_moe_mb_load(const loom_decoder *d, loom_acts *a, const double *in);

/* Forward of local chunk c over micro-batch (tokens, targets) whole sequences (B,T): the
 * first chunk embeds tokens, others start from loom_acts_input(a). The head chunk computes
 * the loss when targets != NULL: *loss_sum (sum over this rank's tokens) and *count. */
void loom_decoder_forward_chunk(loom_decoder *d, loom_acts *a, const int32_t *tokens,
                                const int32_t *targets, double *loss_sum, int *count);
/* Backward of the chunk held in a. dout (Nr,C): gradient of the chunk's output (NULL for the
 * head chunk, which starts from loss_scale * sum(losses)); dinput (Nr,C): receives the
 * gradient of the chunk's input (ignored for the first chunk; may be NULL there). */
void loom_decoder_backward_chunk(loom_decoder *d, loom_acts *a, const float *dout,
                                 float *dinput, float loss_scale);

/* Single-process convenience over the whole model (slot 0). */
void loom_decoder_forward(loom_decoder *d, const int32_t *tokens, const int32_t *targets,
                          double *loss_sum, int *count);
void loom_decoder_backward(loom_decoder *d, float loss_scale);

/* The matmul precision of an idle decoder (no activation slot in use, parameters resident,
 * fp32 parameters): bf16 as loom_decoder_create's bf16 makes it (the native GEMMs' bf16
 * weights, or the rounded fp32 copy without them), or back to fp32; the activations are
 * planned again. What generation's --dtype sets on a loaded model. Error otherwise. */
int loom_decoder_set_bf16(loom_decoder *d, bool bf16);

/* ---- the cached forward of generation (src/model/decoder_cached.c) -----------------------
 * The decoder's own layers (the block, embedding and head code the training forward runs) on
 * the new tokens of a ragged batch whose earlier keys and values sit in a KV cache, as
 * Hugging Face's forward with past_key_values: prefill a prompt once, then one token per step.
 * Rows are ragged: each batch row keeps its own length and positions, no padding. Needs the
 * whole model on one process (no tensor, sequence, context or pipeline split; resident
 * parameters); fp32 or bf16 as the decoder is (loom_decoder_set_bf16). */
typedef struct loom_kv_work loom_kv_work;
typedef struct {
  int layers, batch, kv_heads, max_seq, head_dim; /* L, B, Hkv, S, D */
  float *k, *v;         /* (L, B, Hkv, S, D) each: slot s of row b holds the key/value of that
                           row's s-th token (bf16 values in a bf16 decoder) */
  int *len;             /* (B) slots filled per row */
  loom_kv_work *work;   /* the forward's scratch, grown to the largest call */
} loom_kv_cache;
/* A cache of `batch` rows of max_seq slots (at most the model's max_seq) for decoder d. */
int loom_kv_cache_create(loom_kv_cache *c, const loom_decoder *d, int batch, int max_seq);
void loom_kv_cache_free(loom_kv_cache *c);
/* pointer to K (or V) of (layer, row, kv head), slot 0: (S, D) */
float *loom_kv_cache_k(const loom_kv_cache *c, int layer, int row, int head);
float *loom_kv_cache_v(const loom_kv_cache *c, int layer, int row, int head);

/* The new tokens of one cached forward: count[i] tokens appended to cache row row[i] for each
 * of n_rows rows, the tokens of all rows concatenated (M = sum count). Token j of row i sits in
 * slot len[row] + j and attends to the slots of its row up to its own; its rotary position is
 * the slot + rope_delta[row] (text: delta 0), or the three M-RoPE components from mrope
 * (3, M) when given; GPT-2's learned position is the slot. Tokens where inject[m] >= 0 take
 * embeds[inject[m]] (C) instead of the token embedding (vision tokens). */
typedef struct {
  int n_rows;
  const int *row;            /* (n_rows) cache row of each row */
  const int *count;          /* (n_rows) new tokens, >= 1 */
  const int32_t *tokens;     /* (M) */
  const int32_t *mrope;      /* (3, M) or NULL */
  const int *rope_delta;     /* (B, indexed by cache row) or NULL (0) */
  const int *inject;         /* (M) or NULL */
  const float *embeds;       /* (n, C) */
  bool all_logits;           /* logits of every new token, else of each row's last */
} loom_kv_batch;
/* Runs the layers on b's new tokens, appends their keys and values to the cache, and writes
 * logits (V real vocabulary columns, row stride V) for the last new token of each row
 * (n_rows rows) or, with all_logits, for every new token (M rows). Errors (bad row, token id,
 * a row past max_seq) leave the cache as it was. */
int loom_decoder_forward_cached(loom_decoder *d, loom_kv_cache *c, const loom_kv_batch *b,
                                float *logits);

/* ---- Mixture-of-Experts: router losses, statistics, balancing (src/model/decoder_moe_step.c)
 * The objective of a step is the cross-entropy (the token mean over every micro-batch and
 * data-parallel rank, the loss_scale of the backward) plus
 *   aux_loss_coef * mean over micro-batches of aux  (Hugging Face's load_balancing_loss_func
 *                   over the router rows of every MoE layer of the micro-batch pooled)
 * + z_loss_coef   * mean over micro-batches of z    (Megatron's z-loss: per layer the mean over
 *                   tokens of logsumexp(logits)^2, summed over the layers),
 * the means over the step's micro-batches on every data-parallel rank (grad_accum x dp, whose
 * gradients the data-parallel reduction sums). The forward of each micro-batch records its
 * router statistics (not again when activation checkpointing recomputes a layer); its
 * backward adds the two terms' gradients. */
typedef struct {
  int layers;             /* MoE layers (0: a dense model) */
  int experts;            /* E */
  const int *layer;       /* (layers) global index of each */
  long micro_batches;     /* micro-batches recorded this step (every dp rank's after end_step) */
  double aux_loss;        /* mean over them of the load-balancing loss, before its coefficient */
  double z_loss;          /* mean over them of the z-loss, before its coefficient */
  const int64_t *load;    /* (layers, E) (token, slot) pairs that chose each expert */
  const int64_t *dropped; /* (layers) pairs the capacity dropped */
} loom_moe_step_stats;
/* Start of an optimizer step: the aux and z terms are means over micro_batches micro-batches
 * (grad_accum x data-parallel ranks); the statistics start from zero and are recorded from
 * now on. Without a call the mean is over 1 and nothing is recorded per step. No-op for a
 * dense model. */
void loom_decoder_moe_begin_step(loom_decoder *d, int micro_batches);
/* After the step's optimizer update: the statistics summed over the data-parallel ranks (dp,
 * NULL: this process alone), then over the pipeline stages (pp, NULL: one stage; each holds
 * its own layers' loads, the head stage the aux and z terms) and recording stopped; with
 * model.moe.bias_update_rate > 0 each MoE layer's balancing bias (layers.{l}.moe.router.bias,
 * used for choosing experts only, not trained by the optimizer) moves by -rate * sign(load_e -
 * mean load) over the step's loads,
 * DeepSeek-V3's auxiliary-loss-free balancing: in `owned`, the parameters this rank's
 * optimizer updates (flat index i at owned[i - begin] for i in [begin, end): the whole buffer
 * d->params, 0, layout.total, or ZeRO-3's owned shard). Bias values are rounded to bf16 with
 * bf16 parameters. No-op for a dense model. */
void loom_decoder_moe_end_step(loom_decoder *d, const loom_comm *dp, const loom_comm *pp,
                               float *owned, size_t begin, size_t end);
/* The last step's statistics (layers == 0 for a dense model). */
const loom_moe_step_stats *loom_decoder_moe_stats(const loom_decoder *d);

/* Model FLOPs per token for a training step (forward+backward, no recompute), as in
 * Megatron: 6 * matmul params + the causal attention term 6 * L * T * Hq * D. Every layer is
 * counted with the dense MLP of model.intermediate; loom_sim_flops_per_token (sim.h) puts an
 * MoE layer's routed and shared experts in its place. */
double loom_decoder_flops_per_token(const loom_model_spec *spec, int T);
#endif

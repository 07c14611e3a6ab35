/* Private to the decoder: the activations a transformer block saves for its backward, the
 * shared backward scratch, and helpers shared by the decoder's source files. */
#ifndef LOOM_DECODER_INTERNAL_H
#define LOOM_DECODER_INTERNAL_H
#include "loom/decoder.h"
#include "loom/kernels_moe.h"

#define NONE ((size_t)-1)

/* One Mixture-of-Experts layer's activations (decoder_moe.c) for N tokens: the router's
 * output, the dispatch plan, the routed experts' and the shared expert's intermediate values.
 * Shapes: N tokens, E experts, k per token, C hidden, Ie / Is the routed / shared inner size. */
typedef struct dec_moe_acts {
  float *logits;               /* (N,E) the router's logits */
  float *probs;                /* (N,E) their softmax */
  float *lse;                  /* (N) their logsumexp (the z-loss) */
  int32_t *idx;                /* (N,k) chosen experts, best first */
  float *w;                    /* (N,k) their routing weights */
  loom_moe_plan plan;          /* the (token, slot) pairs in expert-major order */
  float *xp, *yp;              /* (N*k, C) permuted rows into and out of the experts */
  float *hg, *hu, *act;        /* (N*k, Ie) gate, up, silu(gate) * up */
  float *sh_g, *sh_u, *sh_act; /* (N, Is) the shared expert (NULL without one) */
  float *sh_y;                 /* (N, C) its output before the gate */
  float *sh_s;                 /* (N) the shared gate's logit */
  bool dropless;               /* no capacity whatever model.moe.capacity_factor (generation) */
  /* expert parallelism (shard.ep > 1): the rows this rank's El = E/ep experts received from
   * the ep ranks, expert-major (expert, source rank, token), up to ep*N*k of them */
  int *rc;                     /* (ep, El) rows received from each rank for each local expert */
  int *lcount;                 /* (El) rows of each local expert */
  int lrows;                   /* rows received in all */
  float *xl, *yl;              /* (ep*N*k, C) local rows into and out of the experts */
} dec_moe_acts;

struct loom_layer_acts {
  float *ln1, *ln1_mean, *ln1_rstd; /* (Nr,C), (Nr), (Nr) */
  float *ln1_full;                  /* (N,C) all-gathered rows (== ln1 without seq-par) */
  float *q, *k, *v;                 /* (N,lh*D), (N,lkv*D), (N,lkv*D); q,k after rope */
  float *qh, *kh, *vh;              /* Ulysses: (B*T, lh/sp*D) ... full sequences, local heads;
                                       == q,k,v otherwise */
  float *atth;                      /* attention output in the attention layout */
  float *att;                       /* (N,lh*D) input of the output projection */
  float *lse;                       /* (B, heads in attention, T or T/cp) */
  float *mid;                       /* (Nr,C) residual after attention */
  float *ln2, *ln2_mean, *ln2_rstd; /* (Nr,C), (Nr), (Nr) */
  float *ln2_full;                  /* (N,C) */
  float *gate, *up, *act;           /* (N,li): llama gate/up/silu(gate)*up; gpt2 up/gelu(up) */
  float *q_pre, *k_pre;             /* qk_norm: (N,lh*D), (N,lkv*D) the projections before the
                                       per-head norms (NULL without qk_norm or when not kept) */
  float *q_rstd, *k_rstd;           /* qk_norm: (N*lh), (N*lkv) the norms' 1/rms */
  dec_moe_acts *moe;                /* an MoE layer's, in place of gate/up/act (NULL: dense) */
  /* bf16 mode: bf16 copies of the four GEMM inputs, made by the forward's conversion and
   * read by the backward's weight gradients (no second conversion): (N,C) of ln1_full,
   * (N,lh*D) of att, (N,C) of ln2_full, (N,li) of act; NULL in fp32 */
  uint16_t *ln1_16, *att16, *ln2_16, *act16;
};

struct loom_decoder_scratch {
  float *dres;        /* (Nr,C) gradient of the residual stream */
  float *d_norm;      /* (N,C) gradient of a norm output before the tp reduction */
  float *d_norm_r;    /* (Nr,C) after it */
  float *full;        /* (N,C) gathered rows / partial sums of row-parallel outputs */
  float *d_q, *d_k, *d_v, *d_att;     /* (N, lh*D | lkv*D) */
  float *d_qh, *d_kh, *d_vh, *d_atth; /* Ulysses attention layout */
  float *d_act, *d_a, *d_b;           /* (N, li) */
  float *dlogits;     /* (N, vloc) */
  float *round_x, *round_dy;          /* bf16 rounding scratch */
  float *a2a;         /* all-to-all staging */
  loom_layer_acts rec;                /* the one set used with activation checkpointing */
  /* fast paths (decoder_ops.c, decoder_ends.c) */
  float *attn_work;   /* (B, heads in attention, T) flash attention backward scratch */
  float *ring_work;   /* context parallelism: the ring's K/V and dK/dV blocks and block
                         scratch (loom_ring_attention_work_floats), NULL when cp == 1 */
  uint16_t *w16;      /* (layout.total) bf16 weights for native bf16 GEMMs, converted from
                         params once per parameter update (NULL: not native) */
  unsigned long epoch, w16_epoch, lp_epoch; /* parameter updates / epoch w16, params_lp
                                               were made at */
  const float *x16_src;               /* input whose bf16 copy x16_buf holds (same-x reuse) */
  size_t x16_n;
  const uint16_t *x16_buf;            /* round_x or a layer's saved copy */
  /* fused classifier + cross-entropy (tp == 1, one activation slot): the head's gradient is
   * computed in the forward in row chunks of head_rows (fp32: unscaled; bf16: with the guessed
   * loss scale) and only applied by the backward (bf16 recomputes when the guess was wrong) */
  bool head_fused, keep_logits; /* keep_logits: a->logits (N, vloc) exists (d->logits) */
  int head_rows;      /* rows per chunk */
  float *head_chunk;  /* (head_rows, vloc) logits of a chunk, then their gradient */
  float *head_dx;     /* (N, C) unscaled gradient of the head's input */
  float *head_dw;     /* (vloc, C) unscaled gradient of the head's weight */
  bool head_pre;      /* the last forward precomputed head_dx / head_dw ... */
  float head_scale;   /* ... with this scale (bf16: the guessed loss scale; fp32: 1) */
  bool head_guess;    /* bf16: keep guessing the scale (false after a wrong guess) */
  int32_t *row_targets; /* (N) target of each head row in this rank's vocabulary slice */
  /* qk_norm backward: the projections' gradients (N, lh*D), (N, lkv*D) and the two norms'
   * weight gradients of one micro-batch (2D) before they join grads */
  float *d_qn, *d_kn, *qk_dw;
  bool recomputing;   /* activation checkpointing: a block's forward again, in its backward */
  struct block_offsets *offs; /* (L) loom_block_offsets of every layer, found once */
  struct dec_moe_state *moe; /* Mixture-of-Experts bookkeeping, NULL for a dense model */
};

/* The decoder's Mixture-of-Experts state (decoder_moe.c, decoder_moe_step.c): which layers are
 * MoE layers, the backward's scratch (one MoE layer at a time) and the step's statistics. */
typedef struct dec_moe_state {
  int n;                  /* MoE layers of the model */
  int *index;             /* (L) position of layer l among them, -1 for a dense layer */
  int *layer;             /* (n) global index of each */
  loom_moe_plan cand;     /* its scratch holds the candidates a plan sorts (every plan's) */
  /* backward scratch, in the arena (N tokens, E experts, k, C, Is); the permuted rows'
   * gradients go into the layer's own xp and yp */
  float *d_logits;        /* (N,E) */
  float *d_w;             /* (N,k) */
  float *work;            /* loom_moe_experts_work_floats(N*k) */
  float *d_sh;            /* (N, C) then (N): the shared expert's output and gate gradients */
  float *d_inner;         /* (3, N, Is) */
  double *aux_grad;       /* (E) d(aux term)/d probs of the micro-batch in its backward */
  float *a2a;             /* (ep*N*k, C) expert parallelism: rows in exchange order */
  /* the optimizer step's statistics (loom_decoder_moe_begin_step .. _end_step) */
  bool collecting;
  double micro_batches;   /* the aux and z terms are means over this many micro-batches */
  double aux_sum, z_sum;  /* over the micro-batches of this rank */
  long mbs;
  int64_t *load;          /* (n, E) pairs choosing each expert */
  int64_t *dropped;       /* (n) pairs dropped by the capacity */
  loom_moe_step_stats stats;
} dec_moe_state;

/* A micro-batch's router statistics (one per activation slot): what its backward's aux-loss
 * gradient and the step's aux and z losses are made of. */
struct loom_moe_mb {
  int64_t *selected;      /* (E) pairs choosing each expert, all MoE layers pooled */
  double *prob_sum;       /* (E) router probabilities summed over the tokens of every layer */
  double z;               /* sum over layers of the mean over tokens of lse^2 */
  int layers;             /* MoE layers recorded */
};

/* Activation memory is carved out of one arena: measured first (base NULL), then carved. */
typedef struct {
  char *base; /* NULL while measuring */
  size_t used;
} dec_carver;
static inline void *dec_carve_bytes(dec_carver *c, size_t bytes) {
  void *p = c->base ? c->base + c->used : NULL;
  c->used += (bytes + 63) & ~(size_t)63;
  return p;
}
static inline float *dec_carve(dec_carver *c, size_t floats) {
  return (float *)dec_carve_bytes(c, floats * sizeof(float));
}

/* dec_linear_*_ex flags */
enum {
  LIN_SAME_X = 1,       /* x is the previous call's x, unchanged: reuse its bf16 copy */
  LIN_DX_OVERWRITE = 2, /* dx = ... instead of dx += ... (no zeroing pass needed) */
  LIN_X16_KEPT = 4,     /* keep16 already holds bf16(x), written by the kernel that made x */
};

/* Offsets of one block's tensors in the flat buffers (NONE when absent). */
typedef struct block_offsets {
  size_t n1w, n1b, qw, qb, kw, kb, vw, vb, ow, ob, n2w, n2b, gw, uw, ub, dw, db;
  size_t qn, kn;          /* qk_norm: attn.q_norm / k_norm weights (D) */
  /* an MoE layer: router (E,C) and balancing bias (E); expert e's gate, up (Ie,C) at eg, eu
   * + e * ews and down (C,Ie) at ed + e * ews; the shared expert and its gate (1,C) */
  size_t rw, rb, eg, eu, ed, ews, sg, su, sd, sgate;
} block_offsets;
block_offsets loom_block_offsets(const loom_decoder *d, int layer);
size_t loom_param_offset(const loom_decoder *d, const char *name); /* NONE when absent */

static inline void dec_params(loom_decoder *d, int unit, int event) {
  if (d->param_hook) d->param_hook(d->param_hook_ctx, unit, event);
}

/* decoder_ops.c */
void dec_linear_fwd(loom_decoder *d, float *y, const float *x, size_t w_off, size_t b_off,
                    int M, int K, int N);
void dec_linear_bwd(loom_decoder *d, float *dx, size_t w_off, size_t b_off, const float *dy,
                    const float *x, int M, int K, int N);
/* the same with LIN_* flags */
void dec_linear_fwd_ex(loom_decoder *d, float *y, const float *x, size_t w_off, size_t b_off,
                       int M, int K, int N, int flags);
void dec_linear_bwd_ex(loom_decoder *d, float *dx, size_t w_off, size_t b_off, const float *dy,
                       const float *x, int M, int K, int N, int flags);
/* The same, keeping x's bf16 copy for the backward: the forward converts x into keep16 (M*K
 * bf16, a layer's saved copy) instead of round_x, and the backward reads x16 = that copy
 * instead of converting x again. Without native bf16 GEMMs both are the calls above. */
void dec_linear_fwd_keep(loom_decoder *d, float *y, const float *x, uint16_t *keep16,
                         size_t w_off, size_t b_off, int M, int K, int N, int flags);
void dec_linear_bwd_kept(loom_decoder *d, float *dx, size_t w_off, size_t b_off,
                         const float *dy, const float *x, const uint16_t *x16, int M, int K,
                         int N, int flags);
/* The bf16 GEMMs of dec_linear_bwd_kept with dy already in bf16 (native bf16 GEMMs only:
 * dec_weights16 not NULL; no bias): dx (+)= dy16 W, dW += dy16^T x16. */
void dec_linear_bwd16(loom_decoder *d, float *dx, size_t w_off, const uint16_t *dy16,
                      const uint16_t *x16, int M, int K, int N, int flags);
/* bf16 weights of the native bf16 GEMMs (refreshed when parameters changed), or NULL when
 * this decoder multiplies fp32 (or bf16-rounded fp32) weights */
const uint16_t *dec_weights16(loom_decoder *d);
/* bf16 copy of x (M,K) in round_x's storage (reused with LIN_SAME_X) */
const uint16_t *dec_input16(loom_decoder *d, const float *x, size_t n, int flags);
void dec_norm_fwd(loom_decoder *d, float *y, float *mean, float *rstd, const float *x,
                  size_t w_off, size_t b_off, int rows);
/* r (rows,C) = x + res (+ bias), y = norm(r) in one pass (r may alias x or res) */
void dec_residual_norm_fwd(loom_decoder *d, float *r, float *y, float *mean, float *rstd,
                           const float *x, const float *res, size_t bias_off, size_t w_off,
                           size_t b_off, int rows);
void dec_norm_bwd(loom_decoder *d, float *dx, const float *dy, const float *x,
                  const float *mean, const float *rstd, size_t w_off, size_t b_off, int rows);
void dec_add_bias_rows(float *y, const float *b, int rows, int C);
void dec_bias_grad_rows(float *db, const float *dy, int rows, int C);
/* rows (Nr,C) -> (N,C): all-gather over tp with sequence parallelism, else a copy/alias */
const float *dec_gather_rows(loom_decoder *d, const float *x, float *full);
/* partial sums (N,C) -> reduced (Nr,C): reduce-scatter with sequence parallelism, else an
 * all-reduce over tp (in place, out == in allowed) */
void dec_reduce_rows(loom_decoder *d, float *partial, float *out);
/* Ulysses: (B, T/sp, H, D) local tokens, all heads <-> (B, T, H/sp, D) all tokens, local heads */
void dec_ulysses_to_heads(loom_decoder *d, const float *x, float *y, int H, int D);
void dec_ulysses_to_tokens(loom_decoder *d, const float *x, float *y, int H, int D);

/* decoder_block.c: a block's forward and backward for the training forward (a micro-batch of
 * B x T tokens, any parallel layout) ... */
void dec_block_forward(loom_decoder *d, loom_acts *a, int layer, int idx);
void dec_block_backward(loom_decoder *d, loom_acts *a, int layer, int idx);
/* ... and the steps of its forward around attention, which the cached forward of generation
 * (decoder_cached.c) runs as well. Rows: N into the linears, Nr of the residual stream; L
 * holds the step's activations (the cached forward's one set for M new tokens). */
/* ln1 = norm(x) (Nr,C); q (N,lh*D), k, v (N,lkv*D) = ln1 (gathered) W^T + b */
void dec_block_qkv(loom_decoder *d, loom_layer_acts *L, const block_offsets *o, const float *x,
                   int N, int Nr);
/* The rotary positions of the rows of q and k: a per-row table (multimodal positions), a
 * position per row (packed documents, generation), or neither: the training layout's
 * consecutive positions (Ulysses offset, context-parallel chunks). */
typedef struct {
  const double *cos, *sin;  /* (N, D/2) or NULL */
  const int *pos;           /* (N) or NULL */
} dec_positions;
/* Rotary embedding of q (N, H, D) and k (N, Hkv, D) in place (backward: the inverse rotation
 * of their gradients); nothing for GPT-2, whose positions are learned (the embedding). */
void dec_block_rope(loom_decoder *d, float *q, float *k, int N, const dec_positions *p,
                    bool backward);
/* From attention's output L->att (N,lh*D) to the block's output: mid = x + att Wo^T + bo
 * (reduced over tp), ln2 = norm(mid), out (Nr,C) = mid + MLP(ln2) (GELU or SwiGLU); out may
 * alias x. */
void dec_block_mlp(loom_decoder *d, loom_layer_acts *L, const block_offsets *o, const float *x,
                   float *out, int N, int Nr);

/* decoder_moe.c: the MoE layer in place of the MLP (tp == 1: N rows are the residual rows) */
/* Carve one layer's MoE activations for N tokens (cand: a plan whose sorting scratch, sized
 * for at least N tokens, every plan shares) */
dec_moe_acts *dec_moe_plan_acts(const loom_decoder *d, dec_carver *c, size_t N,
                                loom_moe_plan *cand);
/* Carve the MoE backward scratch of d->s->moe (N = d->N) */
void dec_moe_plan_scratch(loom_decoder *d, dec_carver *c);
/* The decoder's MoE state (NULL for a dense model), and its release */
dec_moe_state *dec_moe_state_create(const loom_decoder *d);
void dec_moe_state_free(dec_moe_state *m);
/* y (N,C) = MoE(h (N,C)), h the MLP norm's output; h16: its bf16 copy slot (ln2_16) */
void dec_moe_forward(loom_decoder *d, dec_moe_acts *m, const block_offsets *o, const float *h,
                     uint16_t *h16, float *y, int N);
/* dh (N,C) = the gradient of h for the output gradient dy (N,C) and the micro-batch's aux and
 * z-loss terms (aux_grad (E) or NULL, z_grad), the layer's weight gradients added */
void dec_moe_backward(loom_decoder *d, dec_moe_acts *m, const block_offsets *o,
                      const float *h, const uint16_t *h16, const float *dy, float *dh, int N,
                      const double *aux_grad, double z_grad);
/* decoder_moe_step.c: the micro-batch's statistics after layer `layer`'s forward (not
 * during a recompute), its backward's loss gradients, the step's sums */
void dec_moe_mb_reset(loom_decoder *d, loom_acts *a);
void dec_moe_record(loom_decoder *d, loom_acts *a, int layer, const dec_moe_acts *m);
void dec_moe_mb_done(loom_decoder *d, loom_acts *a);
/* The gradients of micro-batch a's aux and z terms for its backward: the aux term's by each
 * probability (E, in d->s->moe->aux_grad; NULL when aux_loss_coef is 0) returned, the z term's
 * by each row's lse^2 in *z_grad */
const double *dec_moe_loss_grads(loom_decoder *d, const loom_acts *a, double *z_grad);
/* struct loom_moe_mb of each slot, carved */
struct loom_moe_mb *dec_moe_plan_mb(const loom_decoder *d, dec_carver *c);

/* decoder.c: cs, sn (D/2) = cos, sin of a multimodal rotary position: pair i takes component
 * k (pos[k * stride]: temporal, height, width) by its section (Qwen2-VL's mrope_section),
 * angle pos * theta^(-2i/D) */
void dec_mrope_row(const loom_model_spec *s, double *cs, double *sn, const int32_t *pos,
                   size_t stride);

/* decoder_ends.c */
/* The embedding tables: token rows (this rank's vocabulary slice) and learned positions */
typedef struct {
  const float *wte;   /* (vloc, C) */
  const float *wpe;   /* (max_seq, C), NULL without learned positions */
  int C;
} dec_embedding;
dec_embedding dec_embedding_of(const loom_decoder *d);
/* out (C) = wte[token] (+ wpe[pos]), or inject (C) when not NULL (a vision token in place of
 * its placeholder); token in this rank's slice (tp == 1: any) */
void dec_embed_row(const dec_embedding *e, float *out, int token, int pos, const float *inject);
/* y (rows,C) = final_norm(x) */
void dec_final_norm(loom_decoder *d, float *y, float *mean, float *rstd, const float *x,
                    int rows);
/* logits (rows, V) = h (rows,C) W^T over the first V rows of this rank's LM head */
void dec_head_logits(loom_decoder *d, float *logits, const float *h, int rows, int V);
void dec_embed_forward(loom_decoder *d, loom_acts *a, float *out);
void dec_embed_backward(loom_decoder *d, loom_acts *a, const float *dres);
void dec_head_forward(loom_decoder *d, loom_acts *a, const float *x, double *loss_sum, int *count);
void dec_head_backward(loom_decoder *d, loom_acts *a, const float *x, float *dres, float scale);
/* global token position and index into (B,T) arrays of local attention row r (context
 * parallelism: rows b*Tl + j hold chunk cp_rank then chunk 2cp-1-cp_rank of sequence b) */
int dec_row_token_index(const loom_decoder *d, int r);
int dec_resid_row_token_index(const loom_decoder *d, int r);
/* Position of token tok (index into the (B,T) micro-batch): tok % T, or its position within
 * its document with packed documents. */
static inline int dec_token_position(const loom_decoder *d, const loom_acts *a, int tok) {
  return d->doc_eod >= 0 ? a->doc_pos[tok] : tok % d->T;
}
#endif

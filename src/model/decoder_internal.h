/* Private to the decoder: the activations a transformer block saves for its backward, the
 * shared backward scratch, and helpers shared by the decoder's source files. */
#ifndef LOOM_DECODER_INTERNAL_H
#define LOOM_DECODER_INTERNAL_H
#include "loom/decoder.h"

#define NONE ((size_t)-1)

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
};

/* dec_linear_*_ex flags */
enum {
  LIN_SAME_X = 1,       /* x is the previous call's x, unchanged: reuse its bf16 copy */
  LIN_DX_OVERWRITE = 2, /* dx = ... instead of dx += ... (no zeroing pass needed) */
  LIN_X16_KEPT = 4,     /* keep16 already holds bf16(x), written by the kernel that made x */
};

/* Offsets of one block's tensors in the flat buffers (NONE when absent). */
typedef struct {
  size_t n1w, n1b, qw, qb, kw, kb, vw, vb, ow, ob, n2w, n2b, gw, uw, ub, dw, db;
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

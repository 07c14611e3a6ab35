/* loom kernels: the ops a transformer step is made of, forward and backward.
 *
 * Every op exists as a plain reference implementation instantiated for float (_f32, what the
 * trainer runs) and double (_f64, what the finite-difference tests check), from one source
 * (src/kernels/ref_ops.inc). Fast paths (BLAS GEMM, fused kernels) are compared against them.
 *
 * Conventions:
 *  - Row-major. Token-major activations: (B, T, C) is stored as B*T rows of C.
 *  - Linear weights are (out, in) like torch.nn.Linear: y = x @ W^T + b.
 *  - Backward functions ACCUMULATE (+=) into every gradient they produce (input and parameter
 *    gradients), so residual branches and gradient accumulation need no extra adds.
 *    Callers zero gradient buffers when they start a new accumulation.
 *  - Exception: loom_rope_backward rotates the gradient in place (it is a pure rotation).
 *  - Optional arguments that may be NULL: LayerNorm b, db, dw; attention dq/dk/dv; SwiGLU
 *    dgate/dup; embedding wpe/dwpe/dwte; linear dx/dw/db and b.
 *  - Cross-entropy targets equal to LOOM_IGNORE_INDEX contribute no loss and no gradient.
 */
#ifndef LOOM_KERNELS_H
#define LOOM_KERNELS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/core.h"

#define LOOM_IGNORE_INDEX (-100)

#define LOOM_KERNEL_DECLS(T, S)                                                                \
  /* y(M,N) = x(M,K) @ w(N,K)^T + b(N); b may be NULL. */                                      \
  void loom_linear_forward_##S(T *y, const T *x, const T *w, const T *b, int M, int K, int N);  \
  /* dx(M,K) += dy(M,N) @ w(N,K); dw(N,K) += dy^T @ x; db(N) += sum_rows dy.                   \
   * Any of dx, dw, db may be NULL to skip it. */                                             \
  void loom_linear_backward_##S(T *dx, T *dw, T *db, const T *dy, const T *x, const T *w,       \
                                int M, int K, int N);                                         \
  /* LayerNorm over the last dim: y(N,C); mean(N), rstd(N) saved for backward. */             \
  void loom_layernorm_forward_##S(T *y, T *mean, T *rstd, const T *x, const T *w, const T *b,   \
                                  int N, int C, T eps);                                       \
  void loom_layernorm_backward_##S(T *dx, T *dw, T *db, const T *dy, const T *x, const T *w,    \
                                   const T *mean, const T *rstd, int N, int C);               \
  /* RMSNorm: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps); rstd(N) saved. */             \
  void loom_rmsnorm_forward_##S(T *y, T *rstd, const T *x, const T *w, int N, int C, T eps);   \
  void loom_rmsnorm_backward_##S(T *dx, T *dw, const T *dy, const T *x, const T *w,            \
                                 const T *rstd, int N, int C);                                \
  /* GELU, tanh approximation (GPT-2's "gelu_new"), elementwise over n values. */              \
  void loom_gelu_forward_##S(T *y, const T *x, size_t n);                                      \
  void loom_gelu_backward_##S(T *dx, const T *dy, const T *x, size_t n);                       \
  /* SwiGLU: y(N,H) = silu(gate) * up, gate(N,H), up(N,H). */                                  \
  void loom_swiglu_forward_##S(T *y, const T *gate, const T *up, size_t n);                    \
  void loom_swiglu_backward_##S(T *dgate, T *dup, const T *dy, const T *gate, const T *up,     \
                                size_t n);                                                    \
  /* Rotary embedding, in place, "rotate_half" convention of Llama/Qwen2 in Hugging Face:      \
   * x(B,T,H,D) pairs (i, i+D/2) rotated by angle pos * theta^(-2i/D), pos = t + pos_offset.  \
   * The backward rotates the gradient by the negative angle, also in place. Positions >= 0;  \
   * cos and sin come from a per-thread table of (position, pair), kept across calls. */      \
  void loom_rope_forward_##S(T *x, int B, int Tn, int H, int D, double theta, int pos_offset); \
  void loom_rope_backward_##S(T *dx, int B, int Tn, int H, int D, double theta,                \
                              int pos_offset);                                                \
  /* The same rotation with a position per row: x (rows,H,D), row r at angle pos[r] *         \
   * theta^(-2i/D) (packed documents: positions restart per document). Bitwise equal to       \
   * loom_rope_forward when pos[b*Tn+t] = t + pos_offset. */                                  \
  void loom_rope_pos_forward_##S(T *x, int rows, int H, int D, double theta, const int *pos);  \
  void loom_rope_pos_backward_##S(T *dx, int rows, int H, int D, double theta, const int *pos); \
  /* Causal scaled-dot-product attention with grouped-query heads:                             \
   * q(B,T,Hq,D), k(B,T,Hkv,D), v(B,T,Hkv,D) -> out(B,T,Hq,D); query head h uses kv head       \
   * h / (Hq/Hkv). lse(B,Hq,T) = logsumexp of each score row, saved so that the backward       \
   * recomputes probabilities instead of storing (T,T) matrices. scale = 1/sqrt(D). */         \
  void loom_attention_forward_##S(T *out, T *lse, const T *q, const T *k, const T *v, int B,    \
                                  int Tn, int Hq, int Hkv, int D);                            \
  void loom_attention_backward_##S(T *dq, T *dk, T *dv, const T *dout, const T *out,           \
                                   const T *lse, const T *q, const T *k, const T *v, int B,    \
                                   int Tn, int Hq, int Hkv, int D);                           \
  /* Cross-entropy over logits(N,Vp) where only the first V columns are real (the rest is      \
   * vocabulary padding, excluded from the softmax). losses(N) = -log p[target], 0 for         \
   * ignored rows. Returns the number of non-ignored rows. */                                 \
  int loom_xent_forward_##S(T *losses, const T *logits, const int32_t *targets, int N, int V,   \
                            int Vp);                                                          \
  /* dlogits(N,Vp) += scale * (softmax - onehot) on real columns; padding columns and          \
   * ignored rows get nothing. scale is usually 1/(number of valid targets in the batch). */   \
  void loom_xent_backward_##S(T *dlogits, const T *logits, const int32_t *targets, int N,      \
                              int V, int Vp, T scale);                                        \
  /* Token (+ optional learned position) embedding: y(B,T,C) = wte[tok] + wpe[t]. */           \
  void loom_embedding_forward_##S(T *y, const int32_t *tokens, const T *wte, const T *wpe,     \
                                  int B, int Tn, int C);                                      \
  void loom_embedding_backward_##S(T *dwte, T *dwpe, const T *dy, const int32_t *tokens,       \
                                   int B, int Tn, int C);

LOOM_KERNEL_DECLS(float, f32)
LOOM_KERNEL_DECLS(double, f64)

/* AdamW on n contiguous values (PyTorch's torch.optim.AdamW semantics, decoupled decay):
 *   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)        (t = step, from 1) */
void loom_adamw_f32(float *p, const float *g, float *m, float *v, size_t n, double lr,
                    double beta1, double beta2, double eps, double weight_decay, long step);
/* The hyper-parameters are doubles as Python floats are in PyTorch: scalars such as 1-beta1
 * are formed in double and rounded to float once, exactly as torch does. */

/* Round n floats to the nearest bf16 value (stored as float), for mixed-precision matmuls. */
void loom_round_bf16_f32(float *dst, const float *src, size_t n);

/* sum of squares in double (for global gradient norms). */
double loom_sumsq_f32(const float *x, size_t n);


/* ======== Fast paths: what the decoder runs ==================================================
 * Each is checked against the reference instantiation above (tests/kernels/test_fast_*.c).
 * Vectorised with AVX-512 where the CPU has it (chosen at run time), with AVX2 + FMA on
 * machines without it (norms, GELU, SwiGLU, cross-entropy, AdamW, flash attention's tiles;
 * residual adds and bias gradients stay portable there), portable C otherwise;
 * OpenMP over independent outputs in a fixed order, so results do not depend on the number
 * of threads (the GEMM libraries excepted). Unlike the reference backward functions, fast
 * kernels documented as "writes" overwrite their outputs (no zeroing pass needed). */

/* Code path of the fast kernels: "avx512", "avx2" (no AVX-512: the AVX2 loops where there are
 * some, portable C elsewhere) or "generic" (portable C; LOOM_SIMD=generic forces it).
 * loom_kernels_force_generic(1) switches to the portable path, (0) back to detection;
 * loom_kernels_force_avx2(1) (or LOOM_SIMD=avx2) to the AVX2 paths where the CPU also has
 * AVX-512 (tests), (0) back to detection. */
const char *loom_kernels_simd(void);
void loom_kernels_force_generic(int on);
void loom_kernels_force_avx2(int on);
/* Whether loom's AMX kernels (tdpbf16ps tiles: the bf16 GEMM of src/kernels/gemm_amx.c) run in
 * this process: the CPU has AMX-TILE, AMX-BF16 and AVX512-BF16, and Linux granted the tile
 * state (src/kernels/amx.c asks once). LOOM_AMX=0, or loom_kernels_force_no_amx(1) (tests,
 * benchmarks), says no and bf16 GEMMs go to oneDNN; (0) back to the answer. */
int loom_kernels_amx(void);
void loom_kernels_force_no_amx(int on);

/* ---- GEMM backends (src/kernels/gemm.c, gemm_onednn.c) ----------------------------------- */
typedef enum { LOOM_GEMM_ONEDNN = 0, LOOM_GEMM_OPENBLAS = 1 } loom_gemm_backend;
/* The backend in use: set by loom_gemm_set_backend, else LOOM_GEMM=onednn|openblas from the
 * environment, else oneDNN. Set it before the first GEMM of a process (bench switches it). */
loom_gemm_backend loom_gemm_get_backend(void);
void loom_gemm_set_backend(loom_gemm_backend b);
const char *loom_gemm_backend_name(loom_gemm_backend b);
/* Parse "onednn" | "openblas"; -1 when unknown. */
int loom_gemm_backend_parse(const char *s);
/* 1 when bf16 GEMMs run natively (oneDNN: AMX, AVX512-BF16 or its avx512_core emulation);
 * 0 when the caller must widen bf16 values to fp32 and use loom_gemm_f32 (OpenBLAS). */
int loom_gemm_bf16_native(void);
/* The instruction set oneDNN dispatches to ("avx512_core_amx", "avx512_core_bf16", ...).
 * AMX is enabled at first use unless ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA say otherwise. */
const char *loom_gemm_isa(void);
/* C(M,N) = op(A) @ op(B) (+ bias(N) on every row) + beta * C, row-major, fp32 accumulation.
 * op(A) is (M,K): A stored (M,K) with row stride lda, or when ta (K,M) with row stride lda;
 * op(B) is (K,N): B stored (K,N) with row stride ldb, or when tb (N,K) with row stride ldb.
 * bias may be NULL (and must be NULL when beta != 0). A linear layer's forward is
 * (ta=0, tb=1), its input gradient (0,0) and its weight gradient (1,0). */
void loom_gemm_f32(int ta, int tb, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, const float *bias, float beta, float *C, int ldc);
/* loom_gemm_f32 without bias for products whose M and K change from call to call (the routed
 * experts' rows): oneDNN runs one primitive with M and K given at run time for them all, not
 * one per shape (creating a primitive costs ~0.2 ms). */
void loom_gemm_f32_ragged(int ta, int tb, int M, int N, int K, const float *A, int lda,
                          const float *B, int ldb, float beta, float *C, int ldc);
/* Same with bf16 operands (uint16 bit patterns) and fp32 C; only when loom_gemm_bf16_native.
 * Where loom_kernels_amx(), loom's AMX kernel computes it (and the _w form below): every
 * element summed by one thread in a fixed order, so bitwise the same on any thread count and
 * for a row whatever M is (a cached decode's row equals the prefill's). */
void loom_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                    const uint16_t *B, int ldb, const float *bias, float beta, float *C,
                    int ldc);
/* The same where B is a weight W that stays unchanged until loom_gemm_weights_changed covers
 * it: oneDNN may keep W in its blocked layout (packed once per change instead of on every
 * call), chosen per shape by timing both at first use; the bits are the same either way.
 * loom's AMX kernel always keeps op(W) packed in its tile layout (once per change and
 * transpose), whatever loom_gemm_pack_force says: the same bits as loom_gemm_bf16. */
void loom_gemm_bf16_w(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                      const uint16_t *W, int ldw, const float *bias, float beta, float *C,
                      int ldc);
/* Weights in [base, base + bytes) changed: packed copies are refreshed at their next use. */
void loom_gemm_weights_changed(const void *base, size_t bytes);
/* Every loom_gemm_bf16_w plain (0), packed where oneDNN has a packed layout (1), or chosen
 * by measurement (-1, the default; LOOM_GEMM_PACK=0/1 sets 0/1 at start): tests, benchmarks. */
void loom_gemm_pack_force(int mode);
/* Weights in [base, base + bytes) are going away: their packed copies are freed. */
void loom_gemm_weights_release(const void *base, size_t bytes);
/* Primitive cache of the oneDNN backend (one entry per shape and role), for bench output. */
int loom_gemm_cache_entries(void);

/* ---- bf16 conversion (src/kernels/fast_bf16.c) ------------------------------------------- */
/* dst(n) = bf16(src(n)), round to nearest even, NaN kept quiet, subnormals kept (exactly
 * loom_f32_to_bf16 of core.h). dst may overlay src when dst == (uint16_t *)src (in place,
 * the bf16 values land in the first half of the float storage). */
void loom_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
/* rows of a (rows, cols) matrix with row strides ld_src floats / ld_dst bf16 values */
void loom_f32_to_bf16_rows(uint16_t *dst, size_t ld_dst, const float *src, size_t ld_src,
                           int rows, int cols);
/* dst (cols, rows) = src (rows, cols)^T, bf16 values (any 16-bit values) moved unchanged. */
void loom_bf16_transpose(uint16_t *dst, const uint16_t *src, int rows, int cols);

/* ---- flash attention (src/kernels/flash_fwd.c, flash_bwd.c, flash_tile*.c) ---------------- */
/* Which keys s a query t of the same sequence sees:
 *   causal = 1: s <= t;  window > 0: additionally t - s < window (causal sliding window:
 *   s in [t-window+1, t]) or |t - s| < window when not causal (bidirectional window, vision);
 *   window = 0: no window (causal = 0, window = 0: full attention). */
typedef struct {
  int causal;
  int window;
  /* Segments (packed documents, varlen attention like cu_seqlens; NULL: one segment per
   * sequence): the token at position p of sequence b belongs to the segment of positions
   * [seg_lo[b*S+p], seg_hi[b*S+p]] (inclusive), S = seg_stride (0: T); a query sees only
   * keys of its own segment, within the causal/window rule above. Segments are contiguous.
   * A call may hold a block of longer sequences (ring attention): query row t is at position
   * q_off + t and key row s at k_off + s (the causal/window rule stays in row numbers); a
   * query that sees no key of the block gets out = 0 and lse = -inf. */
  const int *seg_lo, *seg_hi; /* (B*S) */
  int seg_stride;
  int q_off, k_off;
} loom_attn_mask;
/* Segments of packed documents from the input tokens (B,T): a document ends at each token
 * equal to eod (the end-of-document token belongs to the document it ends) and at the end of
 * the sequence; the next one starts after it. Writes seg_lo, seg_hi (B*T) as loom_attn_mask
 * wants them and, when pos != NULL, pos (B*T) = t - seg_lo (position within the document). */
void loom_attn_doc_segments(int *seg_lo, int *seg_hi, int *pos, const int32_t *tokens, int B,
                            int T, int32_t eod);
/* Queries (and keys) per tile of the flash attention kernels: a causal tile on the diagonal
 * is computed whole (the simulator's tile grid, loom bench) */
int loom_flash_attention_tile(void);
/* q (B,T,Hq,D), k, v (B,T,Hkv,D) -> out (B,T,Hq,D), lse (B,Hq,T), scale 1/sqrt(D), GQA as
 * loom_attention_forward_f32. Tiled with an online softmax: nothing of size T x T is stored,
 * key tiles outside the mask are skipped. Writes out and lse. */
void loom_flash_attention_forward_f32(float *out, float *lse, const float *q, const float *k,
                                      const float *v, int B, int T, int Hq, int Hkv, int D,
                                      loom_attn_mask mask);
/* Writes dq (B,T,Hq,D), dk, dv (B,T,Hkv,D) (any of them may be NULL). work: B*Hq*T floats of
 * scratch (the per-row dout.out). Parallel over (batch, kv head); deterministic. D <= 256
 * (tiles live on the stack); AVX-512 tiles when D % 16 == 0, portable ones otherwise. */
void loom_flash_attention_backward_f32(float *dq, float *dk, float *dv, const float *dout,
                                       const float *out, const float *lse, const float *q,
                                       const float *k, const float *v, int B, int T, int Hq,
                                       int Hkv, int D, loom_attn_mask mask, float *work);
/* bf16 flash attention (flash_fwd_bf16.c, flash_bwd_bf16.c), what training.dtype=bf16 runs:
 * the same shapes, masks, schedule and outputs as the fp32 kernels above, with every product
 * on bf16 operands and fp32 accumulation (vdpbf16ps on AVX512-BF16): q, k, v (and dout) are
 * rounded to bf16 (to nearest even) as tiles are loaded — so fp32 tensors holding bf16 values
 * are taken exactly —; the forward rounds P = exp(s - m) (m the running row maximum, the final
 * one when T <= 64) before it weights v and divides by the row sum after; the backward rounds
 * P = exp(s - lse) and dS = P (dP - delta) / sqrt(D) as operands of dV, dK and dQ; delta =
 * rowsum(bf16(dout) out); scores, softmax statistics (lse) and outputs are fp32.
 * Without AVX512-BF16 the same arithmetic runs on AVX-512F, or without AVX-512 (or D % 16
 * != 0) on AVX2 + FMA (D % 8 == 0; the products and packs bitwise the portable ones, exp the
 * vectorised one), else portable C; loom_kernels_attn_bf16_path() names the path. */
void loom_flash_attention_forward_bf16(float *out, float *lse, const float *q, const float *k,
                                       const float *v, int B, int T, int Hq, int Hkv, int D,
                                       loom_attn_mask mask);
void loom_flash_attention_backward_bf16(float *dq, float *dk, float *dv, const float *dout,
                                        const float *out, const float *lse, const float *q,
                                        const float *k, const float *v, int B, int T, int Hq,
                                        int Hkv, int D, loom_attn_mask mask, float *work);
/* "amx" (the products of 16-row blocks and 16-pair steps on AMX tiles, the rest on vdpbf16ps:
 * where loom_kernels_amx()), "avx512_bf16" (vdpbf16ps), "avx512" (emulated on AVX-512F: no AVX512-BF16 on this CPU, or
 * LOOM_SIMD=avx512), "avx2" (no AVX-512) or "generic". loom_kernels_force_no_bf16(1) takes the AVX-512F path even
 * where AVX512-BF16 exists (tests), (0) back to detection. */
const char *loom_kernels_attn_bf16_path(void);
void loom_kernels_force_no_bf16(int on);
/* Both flash backwards sum a work item's dK and dV in private rows of 2 T D floats per thread
 * up to a bound (64 MiB), in the output rows themselves above it; the same bits either way.
 * loom_kernels_force_kv_in_place(1) takes the in-place path at every size (tests), (0) back. */
void loom_kernels_force_kv_in_place(int on);
/* Reference of the same masks in double, for the tests (checked by finite differences there):
 * the explicit masked softmax row by row; the backward accumulates (+=) like every reference. */
void loom_attention_masked_forward_f64(double *out, double *lse, const double *q,
                                       const double *k, const double *v, int B, int T, int Hq,
                                       int Hkv, int D, loom_attn_mask mask);
void loom_attention_masked_backward_f64(double *dq, double *dk, double *dv, const double *dout,
                                        const double *out, const double *lse, const double *q,
                                        const double *k, const double *v, int B, int T, int Hq,
                                        int Hkv, int D, loom_attn_mask mask);

/* ---- fused memory-bound kernels (src/kernels/fast_norm.c, fast_act.c, fast_misc.c) -------- */
/* Residual + norm forward over N rows of C: r = x + res (+ bias) (res and bias may be NULL;
 * r may alias x or res; with res == NULL and bias == NULL r is not written and may be NULL),
 * then y = LayerNorm(r; w, b) with mean, rstd saved (b may be NULL), or when mean == NULL
 * y = RMSNorm(r; w) with rstd saved. */
void loom_add_norm_forward_f32(float *r, float *y, float *mean, float *rstd, const float *x,
                               const float *res, const float *bias, const float *w,
                               const float *b, int N, int C, float eps);
/* Norm backward, same contract as the reference (dx, dw, db accumulate; mean == NULL: RMSNorm,
 * db ignored). */
void loom_norm_backward_fast_f32(float *dx, float *dw, float *db, const float *dy, const float *x,
                                 const float *w, const float *mean, const float *rstd, int N,
                                 int C);
/* Residual add: y = x + a (+ bias on every row) over (N,C) (y may alias x or a; bias may be
 * NULL). */
void loom_residual_add_f32(float *y, const float *x, const float *a, const float *bias, int N,
                           int C);
/* y = s * x over n values (y may alias x) */
void loom_scale_f32(float *y, const float *x, float s, size_t n);
/* db(C) += column sums of dy (N,C); deterministic for any thread count */
void loom_bias_grad_f32(float *db, const float *dy, int N, int C);
/* loom_bias_grad_f32 and, in the same pass over dy, dy16 (N,C) = loom_f32_to_bf16_n of dy: the
 * same bits as the two calls, one read of dy instead of two. */
void loom_bias_grad_bf16_out(float *db, uint16_t *dy16, const float *dy, int N, int C);
/* Bias + GELU (tanh form): u += bias (per row of C, bias may be NULL), then act = gelu(u). */
void loom_bias_gelu_forward_f32(float *u, float *act, const float *bias, int N, int C);
/* The same with act written only as bf16, act16 (N,C) = loom_f32_to_bf16 of the act above (for a
 * bf16 GEMM that reads nothing else of it). */
void loom_bias_gelu_forward_bf16_out(float *u, uint16_t *act16, const float *bias, int N, int C);
/* Writes du = dact * gelu'(u) (n values). */
void loom_gelu_backward_fast_f32(float *du, const float *dact, const float *u, size_t n);
/* SwiGLU: writes y = silu(gate) * up; backward writes dgate and dup. */
void loom_swiglu_forward_fast_f32(float *y, const float *gate, const float *up, size_t n);
/* The same with y written only as bf16: y16 = loom_f32_to_bf16 of the y above. */
void loom_swiglu_forward_bf16_out(uint16_t *y16, const float *gate, const float *up, size_t n);
void loom_swiglu_backward_fast_f32(float *dgate, float *dup, const float *dy, const float *gate,
                                   const float *up, size_t n);
/* The same with both gradients written only as bf16 (loom_f32_to_bf16 of the values above), for
 * bf16 GEMMs that read nothing else of them (no bias). */
void loom_swiglu_backward_bf16_out(uint16_t *dgate16, uint16_t *dup16, const float *dy,
                                   const float *gate, const float *up, size_t n);

/* ---- classifier + cross-entropy in row chunks (src/kernels/fast_xent.c) ------------------- */
/* Over rows of logits l (R, V) whose first `real` columns are real tokens: row max and sum of
 * exp(l - max) (only the real columns), and with targets t (R) the loss log(sum) + max - l[t]
 * (0 when t < 0: LOOM_IGNORE_INDEX, or -1 for a target held by another vocabulary shard).
 * Any output may be NULL (targets too when losses is). */
void loom_xent_stats_f32(float *row_max, float *row_sumexp, float *losses, const float *l,
                         const int32_t *targets, int R, int V, int real);
/* The logit gradient, in place or not: g = scale * (exp(l - max) / sumexp - onehot(t)) on real
 * columns with the given (possibly vocabulary-global) statistics, 0 on padding columns and on
 * rows with t == LOOM_IGNORE_INDEX; t = -1: no target column in this shard (no onehot).
 * l, g (R, V) may alias. */
void loom_xent_grad_f32(float *g, const float *l, const float *row_max,
                        const float *row_sumexp, const int32_t *targets, int R, int V, int real,
                        float scale);
/* The same gradient rounded to bf16 (exactly loom_f32_to_bf16 of loom_xent_grad_f32's values),
 * rows of g with stride ldg values; g may be (uint16_t *)l with ldg = 2 V (each row's bf16
 * values in the first half of its own fp32 storage). For the bf16 head: no fp32 gradient
 * written, no conversion pass. */
void loom_xent_grad_bf16(uint16_t *g, size_t ldg, const float *l, const float *row_max,
                         const float *row_sumexp, const int32_t *targets, int R, int V, int real,
                         float scale);

/* ---- one-pass AdamW over the flat buffer (src/kernels/fast_adamw.c) ----------------------- */
/* One tensor's range of the flat buffer and its weight decay. */
typedef struct {
  size_t begin, end;
  double weight_decay;
} loom_adamw_segment;
/* loom_adamw_f32 on every segment, in one parallel pass over all of them, with the gradient
 * multiplied by clip (1 = none; as the clip pass of loom_grad_clip would) and, when p_lp is not
 * NULL, p_lp = bf16-rounded p refreshed in the same pass. Bitwise equal to the per-tensor loop
 * (same float operations per element). p, g, m, v, p_lp are indexed by the segments' ranges
 * shifted by -base (the owned range of a ZeRO shard starts at base). */
void loom_adamw_flat_f32(float *p, const float *g, float *m, float *v, float *p_lp, size_t base,
                         const loom_adamw_segment *seg, int n_seg, float clip, double lr,
                         double beta1, double beta2, double eps, long step);
/* The precision policy's AdamW (training.param_dtype / optim_dtype): m16 == NULL: fp32 moments
 * m, v; else bf16 moments m16, v16 (m, v unused), widened to fp32, updated in fp32 as above and
 * stored rounded to nearest even. round_p: p holds bf16 values (in fp32 words) and the updated
 * p is rounded to bf16. Each value is computed in fp32 from the stored ones and rounded once
 * when stored (PyTorch's fused AdamW rule). p16 (or NULL, indexed like p): the bf16 of each
 * updated parameter (round to nearest even), written in the same pass — the native bf16
 * GEMMs' weights, without a conversion pass of their own. LOOM_ADAMW_GENERIC=1 forces the
 * portable loops. */
void loom_adamw_flat(float *p, const float *g, float *m, float *v, loom_bf16 *m16, loom_bf16 *v16,
                     bool round_p, uint16_t *p16, size_t base, const loom_adamw_segment *seg,
                     int n_seg, float clip, double lr, double beta1, double beta2, double eps,
                     long step);

#endif

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
#include <stddef.h>
#include <stdint.h>

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
   * The backward rotates the gradient by the negative angle, also in place. */               \
  void loom_rope_forward_##S(T *x, int B, int Tn, int H, int D, double theta, int pos_offset); \
  void loom_rope_backward_##S(T *dx, int B, int Tn, int H, int D, double theta,                \
                              int pos_offset);                                                \
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

#endif

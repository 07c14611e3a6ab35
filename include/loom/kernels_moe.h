/* loom Mixture-of-Experts kernels: the router (softmax, top-k, load-balancing and z-loss
 * gradients), the dispatch plan (token rows permuted into expert-major order, optional
 * capacity dropping), gather and weighted combine, the routed experts' SwiGLUs over the
 * permuted rows as one grouped pass, and the whole MoE layer of one process composed of them.
 *
 * The formulas are Hugging Face's (transformers: Qwen3MoeSparseMoeBlock, Qwen2MoeSparseMoeBlock,
 * MixtralSparseMoeBlock, load_balancing_loss_func) and Megatron-LM's (z_loss_func, capacity):
 *   logits (N,E) = x (N,C) @ router (E,C)^T                          (no bias)
 *   probs        = softmax(logits) over all E                        (fp32 at least)
 *   idx (N,k)    = top-k of probs + sel_bias (sel_bias (E) or none: DeepSeek-V3's auxiliary-
 *                  loss-free balancing, used for choosing only), best first, a tie going to
 *                  the lower expert index
 *   w (N,k)      = probs[idx], divided by their sum when norm_topk (Qwen: norm_topk_prob;
 *                  Mixtral always; the weights never see sel_bias)
 *   y_t          = sum_j w[t,j] * down_e(silu(gate_e(x_t)) * up_e(x_t)),  e = idx[t,j]
 *                  (+ sigmoid(x_t . shared_gate) * shared SwiGLU(x_t) with a shared expert)
 *   aux          = E * sum_e f_e P_e over the router rows of every MoE layer pooled (R rows):
 *                  f_e = (selections of e) / R (HF's tokens_per_expert is (k,E), each slot a
 *                  row of it, summed with P: so sum_e f_e = k), P_e = sum_rows probs[.,e] / R;
 *                  the selections are constants: the gradient flows through P only
 *   z            = mean over rows of logsumexp(logits)^2 (ST-MoE; Megatron's z_loss_func)
 *   capacity     = ceil(capacity_factor * N * k / E) (token, slot) pairs per expert; beyond it
 *                  the pairs of lowest weight (ties: the later token) or the latest tokens are
 *                  dropped: they contribute nothing and their weight gets no gradient.
 *
 * Conventions are kernels.h's: row-major, (out, in) weights, reference kernels for float and
 * double from one source (src/kernels/moe_ops.inc), backward functions ACCUMULATE into the
 * gradients they produce, except where a function says it writes. Everything is deterministic
 * for any thread count: each output element is computed by one thread in a fixed order (a
 * token sums its k slots in slot order), plans are built on one thread.
 *
 * Expert parallelism: the plan orders the (token, slot) pairs expert-major (the rows of
 * expert 0 in token order, then expert 1, ...), so the rows bound for the experts [e0, e1)
 * that one rank holds are the contiguous range offset[e0] .. offset[e1] — what an
 * MPI_Alltoallv sends — and the experts' kernels take any number of consecutive experts with
 * their weights as consecutive matrices (the layout's moe.experts.{e}: every gate, then every
 * up, then every down, src/model/layout.c), `ws` values apart. */
#ifndef LOOM_KERNELS_MOE_H
#define LOOM_KERNELS_MOE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the dispatch plan (src/kernels/moe_plan.c builds its storage) ------------------------- */
typedef struct {
  int max_tokens, k, E; /* sizes the storage was made for */
  int N;                /* tokens of the last build */
  int capacity;         /* most pairs an expert keeps in the last build; 0: no limit */
  int rows;             /* pairs kept = offset[E] */
  int dropped;          /* pairs dropped by the capacity */
  int *selected;        /* (E) pairs that chose each expert, before dropping (aux's counts) */
  int *count;           /* (E) rows kept per expert */
  int *offset;          /* (E+1) first permuted row of each expert */
  int32_t *row_token;   /* (max_tokens*k) permuted row -> token */
  int32_t *row_pair;    /* (max_tokens*k) permuted row -> pair token*k + slot */
  int32_t *pair_row;    /* (max_tokens*k) pair -> permuted row, -1 when dropped */
  void *scratch;        /* (max_tokens*k) candidates of one expert, for dropping by weight */
} loom_moe_plan;

/* Storage for plans of up to max_tokens tokens, k slots, E experts (loom_alloc: never NULL). */
void loom_moe_plan_init(loom_moe_plan *p, int max_tokens, int k, int E);
void loom_moe_plan_free(loom_moe_plan *p);
/* ceil(capacity_factor * N * k / E), the product formed in double; 0 when capacity_factor
 * <= 0 (no dropping). */
int loom_moe_capacity(double capacity_factor, int N, int k, int E);

/* ---- the auxiliary losses, from statistics pooled over layers and ranks -------------------- */
/* Load-balancing loss coef * E * sum_e (selected_e / rows) (prob_sum_e / rows), returned;
 * grad (E, may be NULL) = its derivative by each probability probs[r][e] of any pooled row,
 * coef * E * selected_e / rows^2 (the router backward's aux_grad). rows: router rows pooled
 * (tokens x MoE layers, over every rank that pooled its statistics). */
double loom_moe_aux_loss(double *grad, const int64_t *selected, const double *prob_sum, int E,
                         int64_t rows, double coef);
/* Router z-loss coef * lse_sq_sum / rows, returned; *grad (may be NULL) = coef / rows, its
 * derivative by each row's logsumexp^2 (the router backward's z_grad). Megatron adds one
 * z-loss per MoE layer, each the mean over that layer's tokens: pool lse_sq_sum over layers
 * with rows = the tokens of one layer (the aux loss instead pools rows too). */
double loom_moe_z_loss(double *grad, double lse_sq_sum, int64_t rows, double coef);

/* ---- reference kernels, float and double (src/kernels/moe_ops.inc) ------------------------- */
#define LOOM_MOE_KERNEL_DECLS(T, S)                                                            \
  /* Router forward over N rows of E logits: probs (N,E) = softmax, lse (N) = logsumexp      \
   * (the z-loss), idx (N,k) the chosen experts by descending probs + sel_bias (sel_bias (E)  \
   * may be NULL; ties: the lower expert), w (N,k) their probs, divided by their sum (added   \
   * in slot order) when norm_topk. Writes all four. */                                      \
  void loom_moe_router_forward_##S(T *probs, T *lse, int32_t *idx, T *w, const T *logits,    \
                                   const T *sel_bias, int N, int E, int k, bool norm_topk);  \
  /* Statistics for the auxiliary losses, accumulated (+=): selected (E) = pairs that chose   \
   * each expert, prob_sum (E) = column sums of probs (rows in order), *lse_sq_sum = sum of    \
   * lse^2. Any may be NULL. */                                                              \
  void loom_moe_router_stats_##S(int64_t *selected, double *prob_sum, double *lse_sq_sum,     \
                                 const T *probs, const T *lse, const int32_t *idx, int N,    \
                                 int E, int k);                                              \
  /* dlogits (N,E) += the gradient of  sum dw * w  +  sum_{r,e} aux_grad[e] probs[r][e]       \
   * +  z_grad * sum_r lse_r^2  (dw (N,k) = dL/dw from the combine, may be NULL; aux_grad (E)  \
   * from loom_moe_aux_loss, may be NULL; z_grad from loom_moe_z_loss). The selection is a    \
   * constant (top-k has no gradient). */                                                    \
  void loom_moe_router_backward_##S(T *dlogits, const T *dw, const T *probs, const T *lse,   \
                                    const int32_t *idx, const T *w, const double *aux_grad,  \
                                    double z_grad, int N, int E, int k, bool norm_topk);     \
  /* Build the plan of N <= max_tokens tokens from idx (N,k) and, when dropping by weight,     \
   * w (N,k): per expert its pairs in token order; over capacity (> 0) only the capacity       \
   * pairs of largest w (ties: the earlier token) or, drop_by_position, the earliest tokens    \
   * are kept, still in token order. */                                                       \
  void loom_moe_plan_build_##S(loom_moe_plan *p, const int32_t *idx, const T *w, int N,       \
                               int capacity, bool drop_by_position);                         \
  /* xp (rows,C) = the token row of each permuted row of x (N,C). Writes. */                  \
  void loom_moe_gather_##S(T *xp, const T *x, const loom_moe_plan *p, int C);                \
  /* dx (N,C) += for each token its kept slots' rows of dxp (rows,C), in slot order. */        \
  void loom_moe_gather_backward_##S(T *dx, const T *dxp, const loom_moe_plan *p, int C);      \
  /* y (N,C) = sum over each token's kept slots j, in slot order, of w[t,j] * yp[row] (0 for   \
   * a token whose slots were all dropped). Writes. */                                        \
  void loom_moe_combine_##S(T *y, const T *yp, const T *w, const loom_moe_plan *p, int C);    \
  /* dyp (rows,C) = w[pair] * dy[token] (writes every row; dyp may be yp itself: each row's    \
   * dot product is taken before the row is overwritten); dw (N,k) += <dy[token], yp[row]>    \
   * on kept pairs (dropped pairs: nothing). */                                               \
  void loom_moe_combine_backward_##S(T *dyp, T *dw, const T *dy, const T *yp, const T *w,     \
                                     const loom_moe_plan *p, int C);                         \
  /* The routed experts over permuted rows: n_exp consecutive experts, expert j owning the     \
   * count[j] rows after those of experts 0..j-1, with gate_j = wg + j*ws, up_j = wu + j*ws    \
   * (Ie,C) and down_j = wd + j*ws (C,Ie) (ws >= Ie*C values: the layout may pad tensors).     \
   * yp (rows,C) = down_j(silu(hg) * hu), hg = gate_j(xp), hu = up_j(xp) (rows,Ie) kept for    \
   * the backward. Writes yp, hg, hu. One reference linear per expert and matrix. */          \
  void loom_moe_experts_forward_##S(T *yp, T *hg, T *hu, const T *xp, const T *wg,            \
                                    const T *wu, const T *wd, size_t ws, const int *count,    \
                                    int n_exp, int C, int Ie);                               \
  /* dxp (rows,C) += d xp; dwg, dwu, dwd += the weight gradients (same layout as the weights,  \
   * ws apart; an expert without rows gets nothing). */                                       \
  void loom_moe_experts_backward_##S(T *dxp, T *dwg, T *dwu, T *dwd, const T *dyp,            \
                                     const T *xp, const T *hg, const T *hu, const T *wg,      \
                                     const T *wu, const T *wd, size_t ws, const int *count,   \
                                     int n_exp, int C, int Ie);

LOOM_MOE_KERNEL_DECLS(float, f32)
LOOM_MOE_KERNEL_DECLS(double, f64)

/* ---- the grouped experts, fast path (src/kernels/moe_experts.c) ---------------------------- */
/* The same experts as loom_moe_experts_forward_f32 in one grouped pass. With the OpenBLAS
 * backend the experts run in parallel, largest first, each expert's products on one thread
 * (per-expert row counts are small, where one product split over threads scales badly); with
 * oneDNN (whose primitives share one scratchpad) expert after expert through loom_gemm_f32,
 * threads inside each product. Either way the bits do not depend on the thread count.
 * acts: hg, hu (rows,Ie) the pre-activations and act (rows,Ie) = silu(hg) * hu, kept for the
 * backward. bf16 = training.dtype=bf16 on a backend without native bf16 GEMMs, as the dense
 * MLP runs it: xp and the weights must already hold bf16 values (gather from a rounded x; the
 * decoder's params_lp), act is stored rounded to bf16, and the backward rounds the output
 * gradient dyp and the SwiGLU gradients before their products; products accumulate in fp32. */
typedef struct {
  float *hg, *hu, *act; /* (rows, Ie) each */
} loom_moe_expert_acts;
void loom_moe_experts_forward_fast_f32(float *yp, const loom_moe_expert_acts *a,
                                       const float *xp, const float *wg, const float *wu,
                                       const float *wd, size_t ws, const int *count, int n_exp,
                                       int C, int Ie, bool bf16);
/* Floats of work the backward needs for rows permuted rows: rows * (3 Ie (+ C in bf16)), the
 * scratch of a dense SwiGLU backward of inner size k Ie over the same tokens. */
size_t loom_moe_experts_work_floats(int rows, int C, int Ie, bool bf16);
/* dxp (rows,C) is WRITTEN (every row), after the weight gradients of each expert are
 * accumulated (dwg, dwu, dwd +=), so dxp may be xp itself. work: loom_moe_experts_work_floats
 * of the rows. */
void loom_moe_experts_backward_fast_f32(float *dxp, float *dwg, float *dwu, float *dwd,
                                        const float *dyp, const loom_moe_expert_acts *a,
                                        const float *xp, const float *wg, const float *wu,
                                        const float *wd, size_t ws, const int *count, int n_exp,
                                        int C, int Ie, bool bf16, float *work);

/* ---- the whole MoE layer in one process (src/kernels/moe_block.inc) ------------------------
 * Router, plan, gather, experts, combine and the shared expert composed as above, all E
 * experts local: generation and the tests use it; the decoder composes the same kernels around
 * the experts' all-to-all. The f32 block runs the fast experts and loom_gemm_f32 (bf16: every
 * product's operands rounded to bf16 like the dense layers; the weights given must hold bf16
 * values), the f64 block the reference kernels. */
typedef struct {
  int C, E, k, Ie;         /* hidden, routed experts, experts per token, expert inner size */
  int Is;                  /* shared expert's inner size, 0: none */
  bool norm_topk;          /* renormalise the k weights */
  double capacity_factor;  /* 0: no dropping */
  bool drop_by_position;   /* over capacity drop the latest tokens (else the lowest weights) */
} loom_moe_shape;

#define LOOM_MOE_BLOCK_DECLS(T, S)                                                             \
  /* The layer's weights: router (E,C), sel_bias (E) or NULL, the experts as loom_moe_experts_ \
   * (wg, wu (Ie,C), wd (C,Ie), ws values apart), the shared expert sg, su (Is,C), sd (C,Is),  \
   * sgate (1,C) (NULL without one). Gradients: the same fields (sel_bias none). */            \
  typedef struct {                                                                             \
    const T *router, *sel_bias, *wg, *wu, *wd, *sg, *su, *sd, *sgate;                          \
    size_t ws;                                                                                 \
  } loom_moe_params_##S;                                                                       \
  typedef struct {                                                                             \
    T *router, *wg, *wu, *wd, *sg, *su, *sd, *sgate;                                           \
  } loom_moe_grads_##S;                                                                        \
  /* One layer's activations (what the backward reads) and scratch, for up to max_tokens. */   \
  typedef struct {                                                                             \
    loom_moe_shape s;                                                                          \
    int max_tokens, N;                                                                         \
    bool bf16;                                                                                 \
    T *xr;                          /* (N,C) x rounded to bf16 (bf16 only) */                  \
    T *logits, *probs;              /* (N,E) */                                                \
    T *lse;                         /* (N) */                                                  \
    int32_t *idx;                   /* (N,k) */                                                \
    T *w;                           /* (N,k) */                                                \
    loom_moe_plan plan;                                                                        \
    T *xp, *yp;                     /* (N*k,C) permuted rows in and out */                     \
    T *hg, *hu, *act;               /* (N*k,Ie) */                                             \
    T *sh_g, *sh_u, *sh_act;        /* (N,Is) shared expert */                                 \
    T *sh_y;                        /* (N,C) shared expert's output before its gate */         \
    T *sh_s;                        /* (N) shared gate's logit */                              \
    T *d_logits, *d_w, *d_rows, *d_sh, *d_inner, *work; /* backward scratch */                 \
  } loom_moe_block_##S;                                                                        \
  loom_moe_block_##S *loom_moe_block_create_##S(const loom_moe_shape *s, int max_tokens,       \
                                                bool bf16);                                    \
  void loom_moe_block_free_##S(loom_moe_block_##S *b);                                         \
  /* y (N,C) = the layer on x (N,C), N <= max_tokens. Writes y; keeps what the backward and    \
   * loom_moe_router_stats need (probs, lse, idx, plan: selected, dropped). */                 \
  void loom_moe_block_forward_##S(loom_moe_block_##S *b, T *y, const T *x,                     \
                                  const loom_moe_params_##S *p, int N);                        \
  /* After the forward on the same x: dx (N,C) += dL/dx and every gradient += its part, for    \
   * L = <dy, y> + the aux and z losses whose derivatives aux_grad (E, may be NULL) and z_grad \
   * loom_moe_aux_loss / loom_moe_z_loss give. */                                             \
  void loom_moe_block_backward_##S(loom_moe_block_##S *b, T *dx, const loom_moe_grads_##S *g,  \
                                   const T *dy, const T *x, const loom_moe_params_##S *p,      \
                                   const double *aux_grad, double z_grad);

LOOM_MOE_BLOCK_DECLS(float, f32)
LOOM_MOE_BLOCK_DECLS(double, f64)

#endif

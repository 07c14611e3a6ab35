/* Reference kernels the vision encoder and multimodal rotary embeddings need, instantiated for
 * float (_f32) and double (_f64) from one source (src/kernels/vision_ops.inc), with the same
 * conventions as kernels.h (row-major, backward ops accumulate, double checked by finite
 * differences):
 *  - bidirectional attention inside segments (image windows, whole images): varlen attention;
 *  - rotary embedding from a per-row table of angles (2D vision RoPE, multimodal M-RoPE, or
 *    1D RoPE alike): the caller computes cos/sin once per batch;
 *  - GELU with the exact erf (torch.nn.GELU(), used by the patch merger and projectors). */
#ifndef LOOM_KERNELS_VISION_H
#define LOOM_KERNELS_VISION_H
#include <stddef.h>

#define LOOM_VISION_KERNEL_DECLS(T, S)                                                          \
  /* q, k, v (S_rows, H, D) -> out (S_rows, H, D); rows [seg[i], seg[i+1]) attend to each other \
   * (no mask inside a segment, nothing across); lse (H, S_rows) saved for backward.           \
   * scale = 1/sqrt(D). */                                                                     \
  void loom_seg_attention_forward_##S(T *out, T *lse, const T *q, const T *k, const T *v,      \
                                      int rows, int H, int D, const int *seg, int n_seg);       \
  void loom_seg_attention_backward_##S(T *dq, T *dk, T *dv, const T *dout, const T *out,       \
                                       const T *lse, const T *q, const T *k, const T *v,       \
                                       int rows, int H, int D, const int *seg, int n_seg);      \
  /* x (rows, H, D) rotated in place: pair (i, i+D/2) of row r by the angle whose cos/sin are  \
   * cos[r*D/2 + i], sin[r*D/2 + i] (rotate_half convention). backward: rotate the gradient by \
   * the negative angle (in place). */                                                         \
  void loom_rope_table_forward_##S(T *x, const double *cos, const double *sin, int rows, int H, \
                                   int D);                                                     \
  void loom_rope_table_backward_##S(T *dx, const double *cos, const double *sin, int rows,      \
                                    int H, int D);                                             \
  /* y = x * Phi(x) with the exact normal CDF; dx += dy * (Phi(x) + x * phi(x)). */             \
  void loom_gelu_erf_forward_##S(T *y, const T *x, size_t n);                                   \
  void loom_gelu_erf_backward_##S(T *dx, const T *dy, const T *x, size_t n);

LOOM_VISION_KERNEL_DECLS(float, f32)
LOOM_VISION_KERNEL_DECLS(double, f64)
#endif

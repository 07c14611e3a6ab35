/* Private to the fast kernels: the run-time choice between the AVX-512 and the portable code
 * paths, and the OpenMP work threshold. */
#ifndef LOOM_FAST_INTERNAL_H
#define LOOM_FAST_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

/* Loops with less work than this run on one thread (thread start-up is not free). */
#define FAST_PAR_MIN 32768

/* 1 when the CPU has AVX-512 F/BW/DQ/VL (and LOOM_SIMD is not "generic"). */
int fast_avx512(void);
/* 1 when the CPU has AVX2 (and LOOM_SIMD is not "generic"): the AVX2 loops of machines
 * without AVX-512 */
int fast_avx2(void);
/* 1 when fast_avx2() and the CPU has FMA: flash attention's AVX2 tiles */
int fast_avx2_fma(void);
/* 1 when fast_avx512() and the CPU has AVX512-BF16 (and LOOM_SIMD is not "avx512"). */
int fast_avx512_bf16(void);
/* SwiGLU on AVX2 + FMA (fast_act_avx2.c; fast_avx2_fma() machines): y = silu(gate) up; the
 * backward writes dgate, dup (either NULL: not computed) */
void fast_swiglu_fwd_avx2(float *y, const float *gate, const float *up, size_t n);
void fast_swiglu_bwd_avx2(float *dgate, float *dup, const float *dy, const float *gate,
                          const float *up, size_t n);
/* bias + GELU of one row of C on AVX2 + FMA (ur += bias when bias; act = gelu(ur)), and GELU's
 * backward du = dact gelu'(u) (written) */
void fast_bias_gelu_row_avx2(float *ur, float *act, const float *bias, int C);
void fast_gelu_bwd_avx2(float *du, const float *dact, const float *u, size_t n);
/* Cross-entropy rows on AVX2 + FMA (fast_xent_avx2.c): max and sum of exp over the real
 * columns; the gradient scale * softmax (fp32; bf16 with the target's -scale, g may overlay l) */
void fast_xent_row_stats_avx2(const float *l, int real, float *mx_out, float *sum_out);
void fast_xent_row_grad_avx2(float *g, const float *l, int V, int real, float mx, float inv,
                             float scale);
void fast_xent_row_grad16_avx2(uint16_t *g, const float *l, int V, int real, float mx, float inv,
                               float scale, int t);
/* Norms on AVX2 + FMA (fast_norm_avx2.c): one row of residual + norm (orow NULL: r not written;
 * mean_n NULL: RMSNorm), and rows [r0, r1) of the backward (dx +=; partial rows qw, qb +=) */
void fast_add_norm_row_avx2(float *orow, float *yr, float *mean_n, float *rstd_n,
                            const float *xr, const float *rr, const float *bias, const float *w,
                            const float *b, int C, float eps);
void fast_norm_bwd_rows_avx2(float *dx, float *qw, float *qb, const float *dy, const float *x,
                             const float *w, const float *mean, const float *rstd, int r0,
                             int r1, int C);
/* dst(n) = bf16(src(n)) exactly as loom_f32_to_bf16, on this thread (fast_bf16.c) */
void fast_f32_to_bf16_row(uint16_t *dst, const float *src, size_t n);
/* out (C) += the partial rows part (nch, C) summed in row order (AVX-512 only; fast_act.c): the
 * last step of the reductions over fixed row ranges, whose bits do not depend on the threads */
void fast_add_partials(float *out, const float *part, int nch, int C, int par);
#endif

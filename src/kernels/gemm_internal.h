/* Private to the GEMM backends: the oneDNN entry points gemm.c dispatches to. */
#ifndef LOOM_GEMM_INTERNAL_H
#define LOOM_GEMM_INTERNAL_H
/* C (M,N) = op(A) op(B) (+ bias) + beta C with fp32 (bf16 = 0) or bf16 (bf16 = 1) operands,
 * through a cached oneDNN matmul primitive of this exact shape, strides and beta. */
void gemm_onednn(int bf16, int ta, int tb, int M, int N, int K, const void *A, int lda,
                 const void *B, int ldb, const float *bias, float beta, float *C, int ldc);
/* 1 when oneDNN can build a bf16 matmul on this CPU (checked once). */
int gemm_onednn_bf16_ok(void);
#endif

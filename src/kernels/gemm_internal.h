/* Private to the GEMM backends: the oneDNN entry points gemm.c dispatches to. */
#ifndef LOOM_GEMM_INTERNAL_H
#define LOOM_GEMM_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
/* C (M,N) = op(A) op(B) (+ bias) + beta C with fp32 (bf16 = 0) or bf16 (bf16 = 1) operands,
 * through a cached oneDNN matmul primitive of this exact shape, strides and beta. */
void gemm_onednn(int bf16, int ta, int tb, int M, int N, int K, const void *A, int lda,
                 const void *B, int ldb, const float *bias, float beta, float *C, int ldc);
/* The same for a B operand that is a weight (unchanged until gemm_onednn_weights_changed
 * covers it): B may run from a packed copy in oneDNN's blocked layout, chosen per shape by
 * measurement at first use (gemm_onednn.c). */
void gemm_onednn_w(int bf16, int ta, int tb, int M, int N, int K, const void *A, int lda,
                   const void *B, int ldb, const float *bias, float beta, float *C, int ldc);
/* fp32 C (M,N) = op(A) op(B) + beta C where M and K change from call to call (no bias): one
 * primitive with runtime M and K for every call of the same transposes, N, leading dimensions
 * and beta (gemm_onednn when oneDNN cannot build it). */
void gemm_onednn_ragged(int ta, int tb, int M, int N, int K, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc);
/* Packed copies of weights in [base, base + bytes): marked stale (release = 0) or freed. */
void gemm_onednn_weights_changed(const void *base, size_t bytes, int release);
/* Every weights call plain (0), packed where a packed layout exists (1), or measured (-1). */
void gemm_onednn_pack_force(int mode);
/* 1 when oneDNN can build a bf16 matmul on this CPU (checked once). */
int gemm_onednn_bf16_ok(void);
/* loom's AMX bf16 GEMM (gemm_amx.c): C (M,N) = op(A) op(B) (+ bias) + beta C with bf16
 * operands and fp32 C, any M, N, K > 0 and leading dimensions; only where loom_kernels_amx().
 * Each element summed by one thread in a fixed order: bitwise the same for any thread count. */
void gemm_amx_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                   const uint16_t *B, int ldb, const float *bias, float beta, float *C, int ldc);
/* The same where B is a weight W unchanged until gemm_amx_weights_changed covers it: op(W) is
 * packed whole once per change (per transpose and shape) and kept; the same bits as
 * gemm_amx_bf16. */
void gemm_amx_bf16_w(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                     const uint16_t *W, int ldw, const float *bias, float beta, float *C,
                     int ldc);
/* Packed weights whose source lies in [base, base + bytes): marked stale (release = 0) or
 * freed. */
void gemm_amx_weights_changed(const void *base, size_t bytes, int release);
#endif

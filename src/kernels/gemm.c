/* GEMM backend selection and the OpenBLAS backend. loom_gemm_f32/bf16 dispatch to oneDNN
 * (gemm_onednn.c: cached matmul primitives, bf16 on AVX512-BF16; bf16 on AMX goes to loom's
 * own tile kernel, gemm_amx.c, unless LOOM_AMX=0) or to OpenBLAS's
 * cblas_sgemm; the backend is chosen at run time (loom_gemm_set_backend, LOOM_GEMM).
 * Shapes: op(A) (M,K), op(B) (K,N), C (M,N), row-major with leading dimensions. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"

static int backend = -1; /* -1: not chosen yet */

int loom_gemm_backend_parse(const char *s) {
  if (!s) return -1;
  if (!strcmp(s, "onednn") || !strcmp(s, "dnnl")) return LOOM_GEMM_ONEDNN;
  if (!strcmp(s, "openblas") || !strcmp(s, "blas")) return LOOM_GEMM_OPENBLAS;
  return -1;
}

loom_gemm_backend loom_gemm_get_backend(void) {
  if (backend < 0) {
    int b = loom_gemm_backend_parse(getenv("LOOM_GEMM"));
    backend = b < 0 ? LOOM_GEMM_ONEDNN : b;
  }
  return (loom_gemm_backend)backend;
}

void loom_gemm_set_backend(loom_gemm_backend b) { backend = (int)b; }

const char *loom_gemm_backend_name(loom_gemm_backend b) {
  return b == LOOM_GEMM_OPENBLAS ? "openblas" : "onednn";
}

int loom_gemm_bf16_native(void) {
  return loom_gemm_get_backend() == LOOM_GEMM_ONEDNN && gemm_onednn_bf16_ok();
}

/* C (M,N) rows = bias, for the BLAS path (beta must then be 1 in the call that follows) */
static void fill_bias(float *C, int ldc, const float *bias, int M, int N) {
#pragma omp parallel for schedule(static) if ((size_t)M * N >= 65536)
  for (int m = 0; m < M; m++) memcpy(C + (size_t)m * ldc, bias, (size_t)N * sizeof(float));
}

void loom_gemm_f32_ragged(int ta, int tb, int M, int N, int K, const float *A, int lda,
                          const float *B, int ldb, float beta, float *C, int ldc) {
  if (loom_gemm_get_backend() != LOOM_GEMM_ONEDNN || M <= 0 || N <= 0 || K <= 0 ||
      K > 16384) { /* (long sums: loom_gemm_f32 blocks them) */
    loom_gemm_f32(ta, tb, M, N, K, A, lda, B, ldb, NULL, beta, C, ldc);
    return;
  }
  gemm_onednn_ragged(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void loom_gemm_f32(int ta, int tb, int M, int N, int K, const float *A, int lda,
                   const float *B, int ldb, const float *bias, float beta, float *C, int ldc) {
  LOOM_ASSERT(!(bias && beta != 0.0f));
  if (M <= 0 || N <= 0) return;
  if (K <= 0) { /* empty sum: C = bias or beta * C */
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N; n++)
        C[(size_t)m * ldc + n] = (bias ? bias[n] : 0.0f) + (beta != 0.0f ? beta * C[(size_t)m * ldc + n] : 0.0f);
    return;
  }
  if (loom_gemm_get_backend() == LOOM_GEMM_ONEDNN) {
    /* oneDNN's fp32 matmul loses a quarter of its rate on very long reductions: the LM head's
     * data gradient dx (R, 768) = G (R, 50304) W (50304, 768) ran at 166-175 GFLOP/s on Zen 4
     * with 2 threads, 87 with 1, against 216-225 and 111 when the sum is cut into blocks of
     * ONEDNN_KBLOCK accumulated into C (OpenBLAS: no difference; bf16 is at its peak either
     * way). The blocks are fixed by K alone: same bits on every run. */
    enum { ONEDNN_KBLOCK = 8192 };
    if (K > 2 * ONEDNN_KBLOCK) {
      for (int k0 = 0; k0 < K; k0 += ONEDNN_KBLOCK) {
        int kb = K - k0 < ONEDNN_KBLOCK ? K - k0 : ONEDNN_KBLOCK;
        const float *Ak = ta ? A + (size_t)k0 * lda : A + k0; /* op(A) columns k0.. */
        const float *Bk = tb ? B + k0 : B + (size_t)k0 * ldb; /* op(B) rows k0.. */
        gemm_onednn(0, ta, tb, M, N, kb, Ak, lda, Bk, ldb, k0 ? NULL : bias, k0 ? 1.0f : beta,
                    C, ldc);
      }
      return;
    }
    gemm_onednn(0, ta, tb, M, N, K, A, lda, B, ldb, bias, beta, C, ldc);
    return;
  }
  if (bias) {
    fill_bias(C, ldc, bias, M, N);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

/* loom_gemm_bf16 (weights = 0) and loom_gemm_bf16_w (weights = 1) */
static void gemm_bf16(int weights, int ta, int tb, int M, int N, int K, const uint16_t *A,
                      int lda, const uint16_t *B, int ldb, const float *bias, float beta,
                      float *C, int ldc) {
  LOOM_ASSERT(!(bias && beta != 0.0f));
  LOOM_ASSERT(loom_gemm_bf16_native());
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    loom_gemm_f32(ta, tb, M, N, 0, NULL, 1, NULL, 1, bias, beta, C, ldc);
    return;
  }
  if (loom_kernels_amx()) { /* loom's own tiles (gemm_amx.c); LOOM_AMX=0 leaves it to oneDNN */
    if (weights) gemm_amx_bf16_w(ta, tb, M, N, K, A, lda, B, ldb, bias, beta, C, ldc);
    else gemm_amx_bf16(ta, tb, M, N, K, A, lda, B, ldb, bias, beta, C, ldc);
  } else if (weights) gemm_onednn_w(1, ta, tb, M, N, K, A, lda, B, ldb, bias, beta, C, ldc);
  else gemm_onednn(1, ta, tb, M, N, K, A, lda, B, ldb, bias, beta, C, ldc);
}

void loom_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                    const uint16_t *B, int ldb, const float *bias, float beta, float *C,
                    int ldc) {
  gemm_bf16(0, ta, tb, M, N, K, A, lda, B, ldb, bias, beta, C, ldc);
}

void loom_gemm_bf16_w(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                      const uint16_t *W, int ldw, const float *bias, float beta, float *C,
                      int ldc) {
  gemm_bf16(1, ta, tb, M, N, K, A, lda, W, ldw, bias, beta, C, ldc);
}

void loom_gemm_weights_changed(const void *base, size_t bytes) {
  gemm_onednn_weights_changed(base, bytes, 0);
  gemm_amx_weights_changed(base, bytes, 0);
}

void loom_gemm_pack_force(int mode) { gemm_onednn_pack_force(mode); }

void loom_gemm_weights_release(const void *base, size_t bytes) {
  gemm_onednn_weights_changed(base, bytes, 1);
  gemm_amx_weights_changed(base, bytes, 1);
}

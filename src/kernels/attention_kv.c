/* Attention of new tokens over a KV cache (include/loom/kernels_kv.h): one query row against
 * the n cached keys of its sequence per (token, head), parallel over tokens and heads. The
 * scores of a row are kept (n floats of thread scratch), exponentiated after their maximum is
 * known and used as weights of the values: two passes over n floats, the keys and values
 * streamed once each.
 * Shapes: M new tokens, Hq / Hkv heads, D head dim, S cache slots, n[m] slots attended. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>

#include "kernels/fast_internal.h"
#include "loom/core.h"
#include "loom/kernels_kv.h"

size_t loom_attention_kv_work_floats(int S, int D) {
  return (size_t)omp_get_max_threads() * ((size_t)S + (size_t)D);
}

/* One query row against n cached keys/values of one head: o (D) = softmax(q K^T * scale) V,
 * sc (n) scratch. Portable form: per-key dot products summed in order. bf16: the weights
 * exp(s - max) rounded to bf16, the sum normalised after. */
static void attend_generic(float *o, float *sc, const float *q, const float *K, const float *V,
                           int n, int D, float scale, bool bf16) {
  float mx = -INFINITY;
  for (int j = 0; j < n; j++) {
    const float *kj = K + (size_t)j * D;
    float dot = 0;
    for (int e = 0; e < D; e++) dot += q[e] * kj[e];
    sc[j] = dot * scale;
    if (sc[j] > mx) mx = sc[j];
  }
  float sum = 0;
  for (int j = 0; j < n; j++) {
    sc[j] = expf(sc[j] - mx);
    sum += sc[j];
  }
  float inv = 1.0f / sum;
  for (int e = 0; e < D; e++) o[e] = 0;
  for (int j = 0; j < n; j++) {
    const float *vj = V + (size_t)j * D;
    float p = bf16 ? loom_bf16_round(sc[j]) : sc[j] * inv;
    for (int e = 0; e < D; e++) o[e] += p * vj[e];
  }
  if (bf16)
    for (int e = 0; e < D; e++) o[e] *= inv;
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
/* The same with AVX-512: the dot products 16 lanes wide (masked tail when D % 16 != 0), the
 * weighted sum of values in registers (D <= 256). */
static void attend_avx512(float *o, float *sc, const float *q, const float *K, const float *V,
                          int n, int D, float scale, bool bf16) {
  int nv = (D + 15) / 16;
  __mmask16 tail = (D % 16) ? (__mmask16)((1u << (D % 16)) - 1) : (__mmask16)0xffff;
  __m512 qv[16];
  for (int c = 0; c < nv; c++)
    qv[c] = _mm512_maskz_loadu_ps(c == nv - 1 ? tail : (__mmask16)0xffff, q + 16 * c);
  float mx = -INFINITY;
  for (int j = 0; j < n; j++) {
    const float *kj = K + (size_t)j * D;
    __m512 acc = _mm512_setzero_ps();
    for (int c = 0; c < nv; c++)
      acc = _mm512_fmadd_ps(
          qv[c], _mm512_maskz_loadu_ps(c == nv - 1 ? tail : (__mmask16)0xffff, kj + 16 * c), acc);
    sc[j] = _mm512_reduce_add_ps(acc) * scale;
    if (sc[j] > mx) mx = sc[j];
  }
  float sum = 0;
  for (int j = 0; j < n; j++) {
    sc[j] = expf(sc[j] - mx);
    sum += sc[j];
  }
  float inv = 1.0f / sum;
  __m512 ov[16];
  for (int c = 0; c < nv; c++) ov[c] = _mm512_setzero_ps();
  for (int j = 0; j < n; j++) {
    const float *vj = V + (size_t)j * D;
    __m512 p = _mm512_set1_ps(bf16 ? loom_bf16_round(sc[j]) : sc[j] * inv);
    for (int c = 0; c < nv; c++)
      ov[c] = _mm512_fmadd_ps(
          p, _mm512_maskz_loadu_ps(c == nv - 1 ? tail : (__mmask16)0xffff, vj + 16 * c), ov[c]);
  }
  __m512 vinv = _mm512_set1_ps(bf16 ? inv : 1.0f); /* bf16: normalised after the sum */
  for (int c = 0; c < nv; c++)
    _mm512_mask_storeu_ps(o + 16 * c, c == nv - 1 ? tail : (__mmask16)0xffff,
                          bf16 ? _mm512_mul_ps(ov[c], vinv) : ov[c]);
}
#pragma GCC pop_options

static void attention_kv(float *out, const float *q, const float *k, const float *v, int M, int Hq,
                         int Hkv, int S, int D, const int *row, const int *n, float *work,
                         bool bf16) {
  int group = Hq / Hkv;
  float scale = (float)(1.0 / sqrt((double)D));
  bool vec = fast_avx512() && D <= 256;
  long total = 0;
  for (int m = 0; m < M; m++) total += (long)n[m] * Hq * D;
#pragma omp parallel if (total >= FAST_PAR_MIN)
  {
    float *sc = work + (size_t)omp_get_thread_num() * ((size_t)S + D); /* (S) scores */
    float *q16 = sc + S;                                               /* (D) bf16(q) */
#pragma omp for collapse(2) schedule(static)
    for (int m = 0; m < M; m++)
      for (int h = 0; h < Hq; h++) {
        const float *qh = q + ((size_t)m * Hq + h) * D; /* (D) */
        if (bf16) {
          for (int e = 0; e < D; e++) q16[e] = loom_bf16_round(qh[e]);
          qh = q16;
        }
        size_t blk = ((size_t)row[m] * Hkv + h / group) * S * D;
        const float *K = k + blk, *V = v + blk; /* (S, D) */
        float *o = out + ((size_t)m * Hq + h) * D;
        if (vec) attend_avx512(o, sc, qh, K, V, n[m], D, scale, bf16);
        else attend_generic(o, sc, qh, K, V, n[m], D, scale, bf16);
      }
  }
}

void loom_attention_kv_forward_f32(float *out, const float *q, const float *k, const float *v,
                                   int M, int Hq, int Hkv, int S, int D, const int *row,
                                   const int *n, float *work) {
  attention_kv(out, q, k, v, M, Hq, Hkv, S, D, row, n, work, false);
}

void loom_attention_kv_forward_bf16(float *out, const float *q, const float *k, const float *v,
                                    int M, int Hq, int Hkv, int S, int D, const int *row,
                                    const int *n, float *work) {
  attention_kv(out, q, k, v, M, Hq, Hkv, S, D, row, n, work, true);
}

/* One-pass AdamW over the flat parameter buffer: every tensor (segment with its own weight
 * decay) in one parallel loop over fixed chunks of the flat range, the gradient-clipping
 * factor applied on the fly (no separate pass over the gradients) and the bf16 copy of the
 * weights refreshed in the same pass. Per element the float operations are exactly those of
 * loom_adamw_f32 (no FMA contraction, IEEE sqrt and division), so results are bitwise equal
 * to the per-tensor loop for any thread count. Shapes: p, g, m, v, p_lp indexed by flat
 * offset - base over the segments' ranges.
 *
 * loom_adamw_flat: the same update for the precision policy (docs/TRAINING.md "Precision"):
 * bf16 parameters (round_p: p is rounded to bf16 after the update, held in fp32 words) and/or
 * bf16 moments (m16, v16: loaded as fp32, updated in fp32, stored rounded to nearest even).
 * Every value is computed in fp32 from the stored values and rounded once when stored: the
 * rule of PyTorch's fused AdamW (opmath fp32, storage bf16), with the per-element float
 * operations of loom_adamw_f32 (= torch.optim.AdamW on fp32 tensors). */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/fast_internal.h"
#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/prof.h"

typedef struct {
  float step_size, bc2_sqrt, b1, b2, eps, one_m_b1, one_m_b2, clip;
} adam_k;

static void range_generic(float *p, const float *g, float *m, float *v, float *p_lp,
                          uint16_t *p16, size_t n, const adam_k *k, int decay_on, float decay) {
  for (size_t i = 0; i < n; i++) {
    float pi = p[i], gi = g[i];
    if (k->clip != 1.0f) gi *= k->clip;
    if (decay_on) pi *= decay;
    float mi = k->b1 * m[i] + k->one_m_b1 * gi;
    float vi = k->b2 * v[i] + k->one_m_b2 * (gi * gi);
    float denom = sqrtf(vi) / k->bc2_sqrt + k->eps;
    pi = pi - k->step_size * (mi / denom);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (p_lp) p_lp[i] = loom_bf16_round(pi);
    if (p16) p16[i] = loom_f32_to_bf16(pi);
  }
}

/* bf16 moments: m16, v16 widened to fp32, the fp32 update above, stored rounded */
static void range16_generic(float *p, const float *g, loom_bf16 *m16, loom_bf16 *v16, int round_p,
                            uint16_t *p16, size_t n, const adam_k *k, int decay_on, float decay) {
  for (size_t i = 0; i < n; i++) {
    float pi = p[i], gi = g[i];
    if (k->clip != 1.0f) gi *= k->clip;
    if (decay_on) pi *= decay;
    float mi = k->b1 * loom_bf16_to_f32(m16[i]) + k->one_m_b1 * gi;
    float vi = k->b2 * loom_bf16_to_f32(v16[i]) + k->one_m_b2 * (gi * gi);
    float denom = sqrtf(vi) / k->bc2_sqrt + k->eps;
    pi = pi - k->step_size * (mi / denom);
    p[i] = round_p ? loom_bf16_round(pi) : pi;
    if (p16) p16[i] = loom_f32_to_bf16(pi);
    m16[i] = loom_f32_to_bf16(mi);
    v16[i] = loom_f32_to_bf16(vi);
  }
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
#include "kernels/vmath_avx512.h"

static inline __m512 round_bf16_v(__m512 x) {
  __m512i u = _mm512_castps_si512(x);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(0x7f800000));
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
  return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
}

static inline void store_bf16_v(loom_bf16 *x, __mmask16 mk, __m512 f) {
  __m512i r = _mm512_srli_epi32(_mm512_castps_si512(round_bf16_v(f)), 16);
  _mm256_mask_storeu_epi16(x, mk, _mm512_cvtepi32_epi16(r));
}

static void range_avx512(float *p, const float *g, float *m, float *v, float *p_lp,
                         uint16_t *p16, size_t n, const adam_k *k, int decay_on, float decay) {
  const __m512 ss = _mm512_set1_ps(k->step_size), bc = _mm512_set1_ps(k->bc2_sqrt);
  const __m512 b1 = _mm512_set1_ps(k->b1), b2 = _mm512_set1_ps(k->b2), eps = _mm512_set1_ps(k->eps);
  const __m512 c1 = _mm512_set1_ps(k->one_m_b1), c2 = _mm512_set1_ps(k->one_m_b2);
  const __m512 clip = _mm512_set1_ps(k->clip), dec = _mm512_set1_ps(decay);
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 mk = v_tail(n - i);
    __m512 pi = _mm512_maskz_loadu_ps(mk, p + i), gi = _mm512_maskz_loadu_ps(mk, g + i);
    if (k->clip != 1.0f) gi = _mm512_mul_ps(gi, clip);
    if (decay_on) pi = _mm512_mul_ps(pi, dec);
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_maskz_loadu_ps(mk, m + i)), _mm512_mul_ps(c1, gi));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(mk, v + i)),
                              _mm512_mul_ps(c2, _mm512_mul_ps(gi, gi)));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc), eps);
    pi = _mm512_sub_ps(pi, _mm512_mul_ps(ss, _mm512_div_ps(mi, denom)));
    _mm512_mask_storeu_ps(p + i, mk, pi);
    _mm512_mask_storeu_ps(m + i, mk, mi);
    _mm512_mask_storeu_ps(v + i, mk, vi);
    if (p_lp) _mm512_mask_storeu_ps(p_lp + i, mk, round_bf16_v(pi));
    if (p16) store_bf16_v(p16 + i, mk, pi);
  }
}

static inline __m512 load_bf16_v(__mmask16 mk, const loom_bf16 *x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, x)), 16));
}

static void range16_avx512(float *p, const float *g, loom_bf16 *m16, loom_bf16 *v16, int round_p,
                           uint16_t *p16, size_t n, const adam_k *k, int decay_on, float decay) {
  const __m512 ss = _mm512_set1_ps(k->step_size), bc = _mm512_set1_ps(k->bc2_sqrt);
  const __m512 b1 = _mm512_set1_ps(k->b1), b2 = _mm512_set1_ps(k->b2), eps = _mm512_set1_ps(k->eps);
  const __m512 c1 = _mm512_set1_ps(k->one_m_b1), c2 = _mm512_set1_ps(k->one_m_b2);
  const __m512 clip = _mm512_set1_ps(k->clip), dec = _mm512_set1_ps(decay);
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 mk = v_tail(n - i);
    __m512 pi = _mm512_maskz_loadu_ps(mk, p + i), gi = _mm512_maskz_loadu_ps(mk, g + i);
    if (k->clip != 1.0f) gi = _mm512_mul_ps(gi, clip);
    if (decay_on) pi = _mm512_mul_ps(pi, dec);
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, load_bf16_v(mk, m16 + i)), _mm512_mul_ps(c1, gi));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, load_bf16_v(mk, v16 + i)),
                              _mm512_mul_ps(c2, _mm512_mul_ps(gi, gi)));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc), eps);
    pi = _mm512_sub_ps(pi, _mm512_mul_ps(ss, _mm512_div_ps(mi, denom)));
    _mm512_mask_storeu_ps(p + i, mk, round_p ? round_bf16_v(pi) : pi);
    if (p16) store_bf16_v(p16 + i, mk, pi);
    store_bf16_v(m16 + i, mk, mi);
    store_bf16_v(v16 + i, mk, vi);
  }
}
#pragma GCC pop_options

/* AVX2 without FMA (machines without AVX-512): 8 lanes of the same float operations, the
 * remainder by the portable loop */
#pragma GCC push_options
#pragma GCC target("avx2")
static inline __m256 round_bf16_8(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                   _mm256_set1_epi32(0x7f800000));
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
  return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

static inline __m256 load_bf16_8(const loom_bf16 *x) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static inline void store_bf16_8(loom_bf16 *x, __m256 f) {
  __m256i r = _mm256_srli_epi32(_mm256_castps_si256(round_bf16_8(f)), 16); /* 8 x [0, 65535] */
  __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  _mm_storeu_si128((__m128i *)x, _mm256_castsi256_si128(packed));
}

/* one 8-lane step of loom_adamw_f32's update: p, m, v in, updated in place */
static inline void adam8(__m256 *p, __m256 *m, __m256 *v, __m256 g, const adam_k *k,
                         int decay_on, float decay) {
  if (k->clip != 1.0f) g = _mm256_mul_ps(g, _mm256_set1_ps(k->clip));
  if (decay_on) *p = _mm256_mul_ps(*p, _mm256_set1_ps(decay));
  *m = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(k->b1), *m),
                     _mm256_mul_ps(_mm256_set1_ps(k->one_m_b1), g));
  *v = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(k->b2), *v),
                     _mm256_mul_ps(_mm256_set1_ps(k->one_m_b2), _mm256_mul_ps(g, g)));
  __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(*v), _mm256_set1_ps(k->bc2_sqrt)),
                               _mm256_set1_ps(k->eps));
  *p = _mm256_sub_ps(*p, _mm256_mul_ps(_mm256_set1_ps(k->step_size), _mm256_div_ps(*m, denom)));
}

static void range_avx2(float *p, const float *g, float *m, float *v, float *p_lp,
                       uint16_t *p16, size_t n, const adam_k *k, int decay_on, float decay) {
  size_t n8 = n / 8 * 8;
  for (size_t i = 0; i < n8; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i), mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i);
    adam8(&pi, &mi, &vi, _mm256_loadu_ps(g + i), k, decay_on, decay);
    _mm256_storeu_ps(p + i, pi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    if (p_lp) _mm256_storeu_ps(p_lp + i, round_bf16_8(pi));
    if (p16) store_bf16_8(p16 + i, pi);
  }
  range_generic(p + n8, g + n8, m + n8, v + n8, p_lp ? p_lp + n8 : NULL, p16 ? p16 + n8 : NULL,
                n - n8, k, decay_on, decay);
}

static void range16_avx2(float *p, const float *g, loom_bf16 *m16, loom_bf16 *v16, int round_p,
                         uint16_t *p16, size_t n, const adam_k *k, int decay_on, float decay) {
  size_t n8 = n / 8 * 8;
  for (size_t i = 0; i < n8; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i), mi = load_bf16_8(m16 + i), vi = load_bf16_8(v16 + i);
    adam8(&pi, &mi, &vi, _mm256_loadu_ps(g + i), k, decay_on, decay);
    _mm256_storeu_ps(p + i, round_p ? round_bf16_8(pi) : pi);
    if (p16) store_bf16_8(p16 + i, pi);
    store_bf16_8(m16 + i, mi);
    store_bf16_8(v16 + i, vi);
  }
  range16_generic(p + n8, g + n8, m16 + n8, v16 + n8, round_p, p16 ? p16 + n8 : NULL, n - n8, k,
                  decay_on, decay);
}
#pragma GCC pop_options

/* LOOM_ADAMW_GENERIC=1: the portable loops even on AVX-512 or AVX2 (tests compare them
 * bitwise) */
static int getenv_generic(void) {
  const char *e = getenv("LOOM_ADAMW_GENERIC");
  return e && *e == '1';
}

/* first segment whose end is beyond flat offset a (segments sorted, disjoint) */
static int first_seg(const loom_adamw_segment *seg, int n, size_t a) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (seg[mid].end <= a) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The shared driver: m16 == NULL: fp32 moments m, v (p_lp as loom_adamw_flat_f32); else bf16
 * moments m16, v16 and round_p. p16 (or NULL): bf16 of each updated parameter. */
static void adamw_flat(float *p, const float *g, float *m, float *v, float *p_lp, uint16_t *p16,
                       loom_bf16 *m16, loom_bf16 *v16, int round_p, size_t base,
                       const loom_adamw_segment *seg,
                       int n_seg, float clip, double lr, double beta1, double beta2, double eps,
                       long step) {
  LOOM_ASSERT(step >= 1);
  if (n_seg <= 0) return;
  LOOM_PROF_PUSH(LOOM_PART_ADAMW);
  /* scalars exactly as loom_adamw_f32 forms them */
  const double bc1 = 1.0 - pow(beta1, (double)step);
  const double bc2 = 1.0 - pow(beta2, (double)step);
  adam_k k = {(float)(lr / bc1), (float)sqrt(bc2), (float)beta1, (float)beta2, (float)eps,
              (float)(1.0 - beta1), (float)(1.0 - beta2), clip};
  const size_t lo = seg[0].begin, hi = seg[n_seg - 1].end;
  enum { CH = 1 << 14 };
  const size_t nch = (hi - lo + CH - 1) / CH;
  int generic = getenv_generic(), simd = fast_avx512() && !generic;
  int avx2 = !simd && !generic && fast_avx2();
#pragma omp parallel for schedule(static) if (hi - lo >= FAST_PAR_MIN)
  for (size_t c = 0; c < nch; c++) {
    size_t a = lo + c * CH, b = a + CH < hi ? a + CH : hi;
    for (int s = first_seg(seg, n_seg, a); s < n_seg && seg[s].begin < b; s++) {
      size_t x0 = seg[s].begin > a ? seg[s].begin : a, x1 = seg[s].end < b ? seg[s].end : b;
      if (x1 <= x0) continue;
      double wd = seg[s].weight_decay;
      float decay = (float)(1.0 - lr * wd);
      size_t o = x0 - base, n = x1 - x0;
      uint16_t *q16 = p16 ? p16 + o : NULL;
      if (m16) {
        if (simd)
          range16_avx512(p + o, g + o, m16 + o, v16 + o, round_p, q16, n, &k, wd != 0.0, decay);
        else if (avx2)
          range16_avx2(p + o, g + o, m16 + o, v16 + o, round_p, q16, n, &k, wd != 0.0, decay);
        else
          range16_generic(p + o, g + o, m16 + o, v16 + o, round_p, q16, n, &k, wd != 0.0, decay);
        continue;
      }
      float *plp = p_lp ? p_lp + o : NULL;
      if (simd) range_avx512(p + o, g + o, m + o, v + o, plp, q16, n, &k, wd != 0.0, decay);
      else if (avx2) range_avx2(p + o, g + o, m + o, v + o, plp, q16, n, &k, wd != 0.0, decay);
      else range_generic(p + o, g + o, m + o, v + o, plp, q16, n, &k, wd != 0.0, decay);
    }
  }
  /* compulsory traffic per element: p, m, v read and written (4 or 2 bytes each), g read
   * (+ p_lp, p16 written) */
  LOOM_PROF_POP(0, (double)(hi - lo) * ((m16 ? 20 : 28) + (p_lp ? 4 : 0) + (p16 ? 2 : 0)));
}

void loom_adamw_flat_f32(float *p, const float *g, float *m, float *v, float *p_lp, size_t base,
                         const loom_adamw_segment *seg, int n_seg, float clip, double lr,
                         double beta1, double beta2, double eps, long step) {
  adamw_flat(p, g, m, v, p_lp, NULL, NULL, NULL, 0, base, seg, n_seg, clip, lr, beta1, beta2, eps,
             step);
}

void loom_adamw_flat(float *p, const float *g, float *m, float *v, loom_bf16 *m16, loom_bf16 *v16,
                     bool round_p, uint16_t *p16, size_t base, const loom_adamw_segment *seg,
                     int n_seg, float clip, double lr, double beta1, double beta2, double eps,
                     long step) {
  /* fp32 moments: p_lp = p stores the rounded value over the fp32 one (same pass) */
  adamw_flat(p, g, m, v, round_p && !m16 ? p : NULL, p16, m16, v16, round_p, base, seg, n_seg,
             clip, lr, beta1, beta2, eps, step);
}

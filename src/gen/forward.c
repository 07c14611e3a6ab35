/* The inference forward of generation over a ragged batch with a KV cache: the new tokens of
 * every row go through the linears together (one GEMM of M rows per weight, on the GEMM
 * backend of src/kernels), keys and values are appended to each row's cache slots, and every
 * new token attends to the slots of its own row up to its own (causal). Only the logits the
 * caller needs are computed (last token of each row, or all new tokens).
 * Shapes: M new tokens, C hidden, D head dim, Hq/Hkv heads, I intermediate, V real vocab. */
#include <cblas.h>
#undef I /* complex.h, through OpenBLAS cblas.h */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include <immintrin.h>

#include "loom/generate.h"
#include "loom/kernels.h"

typedef struct {
  const float *n1w, *n1b, *qw, *qb, *kw, *kb, *vw, *vb, *ow, *ob, *n2w, *n2b, *gw, *uw, *ub,
      *dw, *db;
} layer_w;

struct loom_gen_ctx {
  const loom_gen_model *m;
  loom_kv_cache cache;
  layer_w *lw;             /* (L) */
  const float *wte, *wpe, *fnw, *fnb, *head; /* head: (V, C) rows of embed or lm_head */
  double *inv_freq;        /* (D/2) theta^(-2i/D) */
  int cap;                 /* new tokens the scratch holds */
  float *x, *h, *q, *k, *v, *att, *tmp, *gate, *up, *act; /* (M, C | Hq*D | Hkv*D | I) */
  float *mean, *rstd;      /* (M) */
  float *cosv, *sinv;      /* (M, D/2) */
  int *slot, *crow;        /* (M) cache slot and cache row of each new token */
  float *hsel;             /* (M, C) final-norm rows whose logits are wanted */
  int n_threads;
  float *scores;           /* (threads, S) */
  uint16_t *w16;           /* bf16 mode: (layout.total) bf16 copy of the parameters */
  uint16_t *x16;           /* bf16 mode: (M, max(C, Hq*D, I)) bf16 matmul inputs */
};

static const float *param(const loom_decoder *d, const char *fmt, int l) {
  char name[64];
  snprintf(name, sizeof name, fmt, l);
  const loom_param *p = loom_param_find(&d->layout, name);
  return p ? d->params + p->offset : NULL;
}

int loom_gen_ctx_create(loom_gen_ctx **out, const loom_gen_model *m, int batch, int max_seq) {
  *out = NULL;
  const loom_model_spec *s = &m->spec;
  if (m->bf16 && !loom_gemm_bf16_native())
    return loom_err("bf16 generation needs native bf16 GEMMs (oneDNN on a CPU with AVX512-BF16 "
                    "or AMX, backend '%s' here): run in fp32", loom_gemm_backend_name(
                    loom_gemm_get_backend()));
  if (max_seq > s->max_seq)
    return loom_err("generation needs %d positions but the model has max_seq %d", max_seq,
                    s->max_seq);
  loom_gen_ctx *g = calloc(1, sizeof *g);
  LOOM_ASSERT(g);
  g->m = m;
  if (loom_kv_cache_create(&g->cache, s, batch, max_seq)) {
    free(g);
    return LOOM_ERR;
  }
  const loom_decoder *d = m->d;
  g->lw = calloc((size_t)s->layers, sizeof *g->lw);
  LOOM_ASSERT(g->lw);
  for (int l = 0; l < s->layers; l++) {
    layer_w *w = &g->lw[l];
    w->n1w = param(d, "layers.%d.attn_norm.weight", l);
    w->n1b = param(d, "layers.%d.attn_norm.bias", l);
    w->qw = param(d, "layers.%d.attn.q.weight", l);
    w->qb = param(d, "layers.%d.attn.q.bias", l);
    w->kw = param(d, "layers.%d.attn.k.weight", l);
    w->kb = param(d, "layers.%d.attn.k.bias", l);
    w->vw = param(d, "layers.%d.attn.v.weight", l);
    w->vb = param(d, "layers.%d.attn.v.bias", l);
    w->ow = param(d, "layers.%d.attn.o.weight", l);
    w->ob = param(d, "layers.%d.attn.o.bias", l);
    w->n2w = param(d, "layers.%d.mlp_norm.weight", l);
    w->n2b = param(d, "layers.%d.mlp_norm.bias", l);
    w->gw = param(d, "layers.%d.mlp.gate.weight", l);
    w->uw = param(d, "layers.%d.mlp.up.weight", l);
    w->ub = param(d, "layers.%d.mlp.up.bias", l);
    w->dw = param(d, "layers.%d.mlp.down.weight", l);
    w->db = param(d, "layers.%d.mlp.down.bias", l);
    LOOM_ASSERT(w->n1w && w->qw && w->kw && w->vw && w->ow && w->n2w && w->uw && w->dw);
  }
  g->wte = param(d, "embed.weight", 0);
  g->wpe = param(d, "pos_embed.weight", 0);
  g->fnw = param(d, "final_norm.weight", 0);
  g->fnb = param(d, "final_norm.bias", 0);
  g->head = s->tied_embeddings ? g->wte : param(d, "lm_head.weight", 0);
  LOOM_ASSERT(g->wte && g->fnw && g->head);
  int half = s->head_dim / 2;
  g->inv_freq = calloc((size_t)(half ? half : 1), sizeof(double));
  for (int i = 0; i < half; i++) g->inv_freq[i] = pow(s->rope_theta, -2.0 * i / s->head_dim);
  g->n_threads = omp_get_max_threads();
  g->scores = loom_alloc((size_t)g->n_threads * max_seq * sizeof(float));
  if (m->bf16) {
    g->w16 = loom_alloc(d->layout.total * sizeof(uint16_t));
    loom_f32_to_bf16_n(g->w16, d->params, d->layout.total);
  }
  *out = g;
  return 0;
}

static void free_scratch(loom_gen_ctx *g) {
  float *bufs[] = {g->x,    g->h,    g->q,    g->k,   g->v,    g->att,  g->tmp, g->gate,
                   g->up,   g->act,  g->mean, g->rstd, g->cosv, g->sinv, g->hsel};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) loom_free(bufs[i]);
  free(g->slot);
  free(g->crow);
  loom_free(g->x16);
}

/* scratch for M new tokens */
static void reserve(loom_gen_ctx *g, int M) {
  if (M <= g->cap) return;
  free_scratch(g);
  const loom_model_spec *s = &g->m->spec;
  size_t C = s->hidden, QD = (size_t)s->heads * s->head_dim, KD = (size_t)s->kv_heads * s->head_dim;
  size_t I = s->intermediate, half = s->head_dim / 2, Mz = (size_t)M;
  g->x = loom_alloc(Mz * C * sizeof(float));
  g->h = loom_alloc(Mz * C * sizeof(float));
  g->tmp = loom_alloc(Mz * C * sizeof(float));
  g->hsel = loom_alloc(Mz * C * sizeof(float));
  g->q = loom_alloc(Mz * QD * sizeof(float));
  g->att = loom_alloc(Mz * QD * sizeof(float));
  g->k = loom_alloc(Mz * KD * sizeof(float));
  g->v = loom_alloc(Mz * KD * sizeof(float));
  g->gate = loom_alloc(Mz * I * sizeof(float));
  g->up = loom_alloc(Mz * I * sizeof(float));
  g->act = loom_alloc(Mz * I * sizeof(float));
  g->mean = loom_alloc(Mz * sizeof(float));
  g->rstd = loom_alloc(Mz * sizeof(float));
  g->cosv = loom_alloc(Mz * (half ? half : 1) * sizeof(float));
  g->sinv = loom_alloc(Mz * (half ? half : 1) * sizeof(float));
  if (g->w16) {
    size_t wide = C > QD ? C : QD;
    wide = wide > I ? wide : I;
    g->x16 = loom_alloc(Mz * wide * sizeof(uint16_t));
  }
  g->slot = calloc(Mz, sizeof(int));
  g->crow = calloc(Mz, sizeof(int));
  LOOM_ASSERT(g->slot && g->crow);
  g->cap = M;
}

void loom_gen_ctx_free(loom_gen_ctx *g) {
  if (!g) return;
  free_scratch(g);
  loom_kv_cache_free(&g->cache);
  free(g->lw);
  free(g->inv_freq);
  loom_free(g->scores);
  loom_free(g->w16);
  free(g);
}

loom_kv_cache *loom_gen_ctx_cache(loom_gen_ctx *g) { return &g->cache; }

/* y (M,N) = x (M,K) @ W (N,K)^T + b. fp32: one row (a single-stream decode step) by BLAS
 * sgemv, which streams W without packing it (2-5x faster than a one-row GEMM of oneDNN on
 * GPT-2's matrices, see docs/PERFORMANCE.md); more rows by the GEMM backend. bf16: x rounded
 * to bf16, W from the bf16 copy (half the bytes to stream), fp32 accumulation (oneDNN). */
static void linear(loom_gen_ctx *g, float *y, const float *x, const float *w, const float *b,
                   int M, int K, int N) {
  if (g->w16) {
    const uint16_t *w16 = g->w16 + (w - g->m->d->params);
    loom_f32_to_bf16_n(g->x16, x, (size_t)M * K);
    loom_gemm_bf16(0, 1, M, N, K, g->x16, K, w16, K, b, 0.0f, y, N);
    return;
  }
  if (M == 1) {
    if (b) memcpy(y, b, (size_t)N * sizeof(float));
    cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, w, K, x, 1, b ? 1.0f : 0.0f, y, 1);
    return;
  }
  loom_gemm_f32(0, 1, M, N, K, x, K, w, K, b, 0.0f, y, N);
}

/* LayerNorm (gpt2, with mean) or RMSNorm of x (M,C) into y */
static void norm(loom_gen_ctx *g, float *y, const float *x, const float *w, const float *b, int M) {
  const loom_model_spec *s = &g->m->spec;
  bool ln = s->arch == LOOM_ARCH_GPT2;
  loom_add_norm_forward_f32(NULL, y, ln ? g->mean : NULL, g->rstd, x, NULL, NULL, w, b, M,
                            s->hidden, (float)s->norm_eps);
}

/* rotary tables of the M new tokens: pair i of token m turned by pos * theta^(-2i/D), pos
 * from the M-RoPE section of pair i (Qwen2-VL's mrope_section) or slot + delta */
static void rope_tables(loom_gen_ctx *g, const loom_gen_batch *b, int M) {
  const loom_model_spec *s = &g->m->spec;
  int half = s->head_dim / 2;
  const int *sec = s->vision.mrope_section;
  for (int m = 0; m < M; m++)
    for (int i = 0; i < half; i++) {
      double pos;
      if (b->mrope) {
        int k = i < sec[0] ? 0 : i < sec[0] + sec[1] ? 1 : 2;
        pos = b->mrope[(size_t)k * M + m];
      } else {
        pos = g->slot[m] + (b->rope_delta ? b->rope_delta[g->crow[m]] : 0);
      }
      double angle = pos * g->inv_freq[i];
      g->cosv[(size_t)m * half + i] = (float)cos(angle);
      g->sinv[(size_t)m * half + i] = (float)sin(angle);
    }
}

/* rotate x (M, H, D) in place with the tables (rotate_half convention) */
static void rope_apply(loom_gen_ctx *g, float *x, int M, int H) {
  int D = g->m->spec.head_dim, half = D / 2;
#pragma omp parallel for schedule(static) if ((size_t)M * H * D >= 65536)
  for (int m = 0; m < M; m++)
    for (int h = 0; h < H; h++) {
      float *p = x + ((size_t)m * H + h) * D;
      const float *c = g->cosv + (size_t)m * half, *sn = g->sinv + (size_t)m * half;
      for (int i = 0; i < half; i++) {
        float x0 = p[i], x1 = p[i + half];
        p[i] = x0 * c[i] - x1 * sn[i];
        p[i + half] = x1 * c[i] + x0 * sn[i];
      }
    }
}

/* One query row against n cached keys/values of one head: o (D) = softmax(q K^T * scale) V,
 * sc (n) scratch. Portable form: per-key dot products summed in order. */
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
 * weighted sum of values in registers for D <= 256. */
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
      acc = _mm512_fmadd_ps(qv[c], _mm512_maskz_loadu_ps(c == nv - 1 ? tail : (__mmask16)0xffff,
                                                         kj + 16 * c), acc);
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
      ov[c] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(c == nv - 1 ? tail : (__mmask16)0xffff,
                                                       vj + 16 * c), ov[c]);
  }
  __m512 vinv = _mm512_set1_ps(bf16 ? inv : 1.0f); /* bf16: normalised after the sum */
  for (int c = 0; c < nv; c++)
    _mm512_mask_storeu_ps(o + 16 * c, c == nv - 1 ? tail : (__mmask16)0xffff,
                          bf16 ? _mm512_mul_ps(ov[c], vinv) : ov[c]);
}
#pragma GCC pop_options

/* att (M, Hq, D): token m attends to slots [0, slot[m]] of its row in layer l's cache */
static void attention(loom_gen_ctx *g, int l, int M) {
  const loom_model_spec *s = &g->m->spec;
  int Hq = s->heads, Hkv = s->kv_heads, D = s->head_dim, group = Hq / Hkv, S = g->cache.max_seq;
  float scale = (float)(1.0 / sqrt((double)D));
  bool vec = !strcmp(loom_kernels_simd(), "avx512") && D <= 256; /* the fast kernels' choice */
  /* bf16 mode, as training's bf16 flash attention: q, k, v rounded to bf16 (k, v when stored
   * in the cache), and exp(s - max) rounded before it weights v, normalised after the sum */
  bool bf16 = g->m->bf16;
  if (bf16) loom_round_bf16_f32(g->q, g->q, (size_t)M * Hq * D);
  long work = 0;
  for (int m = 0; m < M; m++) work += (long)(g->slot[m] + 1) * Hq * D;
#pragma omp parallel if (work >= 32768)
  {
    float *sc = g->scores + (size_t)omp_get_thread_num() * S; /* (S) */
#pragma omp for collapse(2) schedule(static)
    for (int m = 0; m < M; m++)
      for (int h = 0; h < Hq; h++) {
        int n = g->slot[m] + 1, kvh = h / group;
        const float *q = g->q + ((size_t)m * Hq + h) * D;
        const float *K = loom_kv_cache_k(&g->cache, l, g->crow[m], kvh); /* (S, D) */
        const float *Vv = loom_kv_cache_v(&g->cache, l, g->crow[m], kvh);
        float *o = g->att + ((size_t)m * Hq + h) * D;
        if (vec) attend_avx512(o, sc, q, K, Vv, n, D, scale, bf16);
        else attend_generic(o, sc, q, K, Vv, n, D, scale, bf16);
      }
  }
}

/* copy the new keys/values (M, Hkv, D) into their cache slots */
static void cache_store(loom_gen_ctx *g, int l, int M) {
  int Hkv = g->m->spec.kv_heads, D = g->m->spec.head_dim;
  for (int m = 0; m < M; m++)
    for (int h = 0; h < Hkv; h++) {
      size_t src = ((size_t)m * Hkv + h) * D, dst = (size_t)g->slot[m] * D;
      float *kd = loom_kv_cache_k(&g->cache, l, g->crow[m], h) + dst;
      float *vd = loom_kv_cache_v(&g->cache, l, g->crow[m], h) + dst;
      memcpy(kd, g->k + src, D * sizeof(float));
      memcpy(vd, g->v + src, D * sizeof(float));
      if (g->m->bf16) /* bf16 attention operands (see attention) */
        loom_round_bf16_f32(kd, kd, (size_t)D), loom_round_bf16_f32(vd, vd, (size_t)D);
    }
}

int loom_gen_forward(loom_gen_ctx *g, const loom_gen_batch *b, float *logits) {
  const loom_model_spec *s = &g->m->spec;
  int C = s->hidden, D = s->head_dim, QD = s->heads * D, KD = s->kv_heads * D;
  int I = s->intermediate, V = s->vocab_size, M = 0;
  for (int i = 0; i < b->n_rows; i++) {
    int r = b->row[i];
    if (r < 0 || r >= g->cache.batch || b->count[i] < 1)
      return loom_err("generation forward: bad row %d or token count %d", r, b->count[i]);
    if (g->cache.len[r] + b->count[i] > g->cache.max_seq)
      return loom_err("sequence of row %d would reach %d tokens but at most %d fit (max_seq)",
                      r, g->cache.len[r] + b->count[i], g->cache.max_seq);
    M += b->count[i];
  }
  reserve(g, M);
  for (int i = 0, m = 0; i < b->n_rows; i++)
    for (int j = 0; j < b->count[i]; j++, m++) {
      g->crow[m] = b->row[i];
      g->slot[m] = g->cache.len[b->row[i]] + j;
    }
  for (int m = 0; m < M; m++)
    if (b->tokens[m] < 0 || b->tokens[m] >= V)
      return loom_err("token id %d at new position %d is outside the vocabulary [0, %d)",
                      b->tokens[m], m, V);
  /* embedding (M, C) */
  for (int m = 0; m < M; m++) {
    float *x = g->x + (size_t)m * C;
    if (b->inject && b->inject[m] >= 0) {
      memcpy(x, b->embeds + (size_t)b->inject[m] * C, C * sizeof(float));
      continue;
    }
    memcpy(x, g->wte + (size_t)b->tokens[m] * C, C * sizeof(float));
    if (g->wpe)
      for (int c = 0; c < C; c++) x[c] += g->wpe[(size_t)g->slot[m] * C + c];
  }
  bool llama = s->arch == LOOM_ARCH_LLAMA;
  if (llama) rope_tables(g, b, M);
  for (int l = 0; l < s->layers; l++) {
    const layer_w *w = &g->lw[l];
    norm(g, g->h, g->x, w->n1w, w->n1b, M);
    linear(g, g->q, g->h, w->qw, w->qb, M, C, QD);
    linear(g, g->k, g->h, w->kw, w->kb, M, C, KD);
    linear(g, g->v, g->h, w->vw, w->vb, M, C, KD);
    if (llama) {
      rope_apply(g, g->q, M, s->heads);
      rope_apply(g, g->k, M, s->kv_heads);
    }
    cache_store(g, l, M);
    attention(g, l, M);
    linear(g, g->tmp, g->att, w->ow, NULL, M, QD, C);
    /* x = x + attention + bias; h = norm(x) */
    loom_add_norm_forward_f32(g->x, g->h, llama ? NULL : g->mean, g->rstd, g->x, g->tmp, w->ob,
                              w->n2w, w->n2b, M, C, (float)s->norm_eps);
    if (llama) {
      linear(g, g->gate, g->h, w->gw, NULL, M, C, I);
      linear(g, g->up, g->h, w->uw, NULL, M, C, I);
      loom_swiglu_forward_fast_f32(g->act, g->gate, g->up, (size_t)M * I);
    } else {
      linear(g, g->up, g->h, w->uw, NULL, M, C, I);
      loom_bias_gelu_forward_f32(g->up, g->act, w->ub, M, I);
    }
    linear(g, g->tmp, g->act, w->dw, NULL, M, I, C);
    loom_residual_add_f32(g->x, g->x, g->tmp, w->db, M, C);
  }
  for (int i = 0; i < b->n_rows; i++) g->cache.len[b->row[i]] += b->count[i];
  /* head: final norm and logits of the rows wanted */
  int R = 0;
  if (b->all_logits) {
    memcpy(g->hsel, g->x, (size_t)M * C * sizeof(float));
    R = M;
  } else {
    for (int i = 0, m = 0; i < b->n_rows; i++) {
      m += b->count[i];
      memcpy(g->hsel + (size_t)R++ * C, g->x + (size_t)(m - 1) * C, C * sizeof(float));
    }
  }
  norm(g, g->h, g->hsel, g->fnw, g->fnb, R);
  linear(g, logits, g->h, g->head, NULL, R, C, V);
  return 0;
}

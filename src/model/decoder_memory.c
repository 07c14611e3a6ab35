/* Decoder memory plan and parameter initialisation: one allocation for parameters and
 * gradients, one arena for every activation and scratch buffer, sized from (spec, B, T). */
#include <math.h>
#include <stdlib.h>

#include "loom/decoder.h"
#include "loom/kernels.h"

#include "model/decoder_internal.h"

typedef struct {
  char *base; /* NULL while measuring */
  size_t used;
} carver;

static float *carve(carver *c, size_t floats) {
  size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
  float *p = c->base ? (float *)(c->base + c->used) : NULL;
  c->used += bytes;
  return p;
}

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static void plan(loom_decoder *d, carver *c) {
  const loom_model_spec *s = &d->spec;
  size_t N = (size_t)d->B * d->T, C = s->hidden, D = s->head_dim;
  size_t QD = s->heads * D, KD = s->kv_heads * D, I = s->intermediate, Vp = s->padded_vocab;
  bool llama = s->arch == LOOM_ARCH_LLAMA;
  d->resid = carve(c, (size_t)(s->layers + 1) * N * C);
  int n_sets = d->recompute ? 1 : s->layers;
  for (int l = 0; l < n_sets; l++) {
    loom_layer_acts *a = &d->layer[l];
    a->ln1 = carve(c, N * C);
    a->ln1_mean = carve(c, N);
    a->ln1_rstd = carve(c, N);
    a->q = carve(c, N * QD);
    a->k = carve(c, N * KD);
    a->v = carve(c, N * KD);
    a->att = carve(c, N * QD);
    a->lse = carve(c, N * s->heads);
    a->mid = carve(c, N * C);
    a->ln2 = carve(c, N * C);
    a->ln2_mean = carve(c, N);
    a->ln2_rstd = carve(c, N);
    a->gate = llama ? carve(c, N * I) : NULL;
    a->up = carve(c, N * I);
    a->act = carve(c, N * I);
  }
  d->lnf = carve(c, N * C);
  d->lnf_mean = carve(c, N);
  d->lnf_rstd = carve(c, N);
  d->logits = carve(c, N * Vp);
  d->losses = carve(c, N);
  d->dlogits = carve(c, N * Vp);
  d->dres = carve(c, N * C);
  d->d_norm = carve(c, N * C);
  d->d_q = carve(c, N * QD);
  d->d_k = carve(c, N * KD);
  d->d_v = carve(c, N * KD);
  d->d_att = carve(c, N * QD);
  d->d_act = carve(c, N * I);
  d->d_a = carve(c, N * I);
  d->d_b = carve(c, N * I);
  d->tmp = carve(c, N * C);
  size_t widest_in = max3(C, I, QD);
  size_t widest_out = max3(max3(C, I, QD), KD, Vp);
  d->round_x = d->bf16 ? carve(c, N * widest_in) : NULL;
  d->round_dy = d->bf16 ? carve(c, N * widest_out) : NULL;
}

int loom_decoder_create(loom_decoder **out, const loom_model_spec *spec, int B, int T,
                        bool bf16, bool recompute) {
  if (loom_model_spec_check(spec)) return LOOM_ERR;
  if (B < 1 || T < 1) return loom_err("micro-batch shape must be positive, got B=%d T=%d", B, T);
  if (T > spec->max_seq)
    return loom_err("training.seq_len (%d) exceeds model.max_seq (%d); lower seq_len or raise "
                    "max_seq", T, spec->max_seq);
  loom_decoder *d = calloc(1, sizeof *d);
  LOOM_ASSERT(d);
  d->spec = *spec;
  d->B = B;
  d->T = T;
  d->bf16 = bf16;
  d->recompute = recompute;
  loom_param_layout_build(&d->layout, spec);
  size_t P = d->layout.total;
  d->params = loom_alloc((bf16 ? 3 : 2) * P * sizeof(float));
  d->grads = d->params + P;
  d->params_lp = bf16 ? d->params + 2 * P : d->params;
  d->layer = calloc((size_t)(recompute ? 1 : spec->layers), sizeof *d->layer);
  LOOM_ASSERT(d->layer);
  carver c = {NULL, 0};
  plan(d, &c);
  d->arena_bytes = c.used;
  d->arena = loom_alloc(c.used);
  c.base = d->arena;
  c.used = 0;
  plan(d, &c);
  *out = d;
  return 0;
}

void loom_decoder_free(loom_decoder *d) {
  if (!d) return;
  loom_free(d->params);
  loom_free(d->arena);
  free(d->layer);
  loom_param_layout_free(&d->layout);
  free(d);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

void loom_decoder_init_params(loom_decoder *d, uint64_t seed) {
  const loom_model_spec *s = &d->spec;
  loom_rng rng;
  loom_rng_seed(&rng, seed);
  double scaled = s->init_std / sqrt(2.0 * s->layers);
  memset(d->params, 0, d->layout.total * sizeof(float));
  for (int i = 0; i < d->layout.count; i++) {
    const loom_param *p = &d->layout.params[i];
    float *w = d->params + p->offset;
    if (p->ndim == 1) {
      bool is_norm = ends_with(p->name, "norm.weight");
      for (size_t j = 0; j < p->numel; j++) w[j] = is_norm ? 1.0f : 0.0f;
      continue;
    }
    bool residual_out = ends_with(p->name, "attn.o.weight") || ends_with(p->name, "mlp.down.weight");
    double std = residual_out && s->arch == LOOM_ARCH_GPT2 ? scaled : s->init_std;
    size_t rows = (size_t)p->shape[0], cols = (size_t)p->shape[1];
    bool vocab = !strcmp(p->name, "embed.weight") || !strcmp(p->name, "lm_head.weight");
    size_t real_rows = vocab ? (size_t)s->vocab_size : rows;
    for (size_t r = 0; r < real_rows; r++)
      for (size_t j = 0; j < cols; j++) w[r * cols + j] = (float)(std * loom_rng_normal(&rng));
  }
  loom_decoder_params_updated(d);
}

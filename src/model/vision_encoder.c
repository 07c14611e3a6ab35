/* The vision encoder, forward and backward (see vision.h): patch embedding, pre-norm blocks
 * with bidirectional attention inside windows or whole images (2D rotary positions for Qwen,
 * learned positions for LLaVA), and the merger/projector to the text hidden size. Shapes:
 * P patches, M = P/merge^2 tokens, Cv vision hidden, I MLP size, Ct text hidden. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/kernels.h"
#include "loom/kernels_vision.h"
#include "model/vision_internal.h"

static size_t off(const loom_vision *v, const char *fmt, int i) {
  char name[96];
  snprintf(name, sizeof name, fmt, i);
  size_t o = loom_param_offset(v->d, name);
  LOOM_ASSERT(o != NONE);
  return o;
}

static bool qwen(const loom_vision *v) { return v->s.arch == LOOM_VISION_QWEN; }

/* ---- linear layers (bf16-rounded inputs in bf16 mode, as the text model) ---------------- */

static void lin_fwd(loom_vision *v, float *y, const float *x, size_t w, size_t b, int M, int K,
                    int N) {
  loom_decoder *d = v->d;
  if (d->bf16) {
    loom_round_bf16_f32(v->round_x, x, (size_t)M * K);
    x = v->round_x;
  }
  loom_linear_forward_f32(y, x, d->params_lp + w, b == NONE ? NULL : d->params + b, M, K, N);
}

static void lin_bwd(loom_vision *v, float *dx, size_t w, size_t b, const float *dy, const float *x,
                    int M, int K, int N) {
  loom_decoder *d = v->d;
  if (b != NONE) loom_linear_backward_f32(NULL, NULL, d->grads + b, dy, x, d->params_lp + w, M, K, N);
  if (d->bf16) {
    loom_round_bf16_f32(v->round_dy, dy, (size_t)M * N);
    loom_round_bf16_f32(v->round_x, x, (size_t)M * K);
    dy = v->round_dy;
    x = v->round_x;
  }
  loom_linear_backward_f32(dx, d->grads + w, NULL, dy, x, d->params_lp + w, M, K, N);
}

static void norm_fwd(loom_vision *v, float *y, float *mean, float *rstd, const float *x,
                     size_t w, size_t b, int rows) {
  const float *P = v->d->params;
  if (qwen(v)) loom_rmsnorm_forward_f32(y, rstd, x, P + w, rows, v->Cv, (float)v->s.norm_eps);
  else loom_layernorm_forward_f32(y, mean, rstd, x, P + w, P + b, rows, v->Cv, (float)v->s.norm_eps);
}

static void norm_bwd(loom_vision *v, float *dx, const float *dy, const float *x, const float *mean,
                     const float *rstd, size_t w, size_t b, int rows) {
  loom_decoder *d = v->d;
  if (qwen(v)) loom_rmsnorm_backward_f32(dx, d->grads + w, dy, x, d->params + w, rstd, rows, v->Cv);
  else loom_layernorm_backward_f32(dx, d->grads + w, d->grads + b, dy, x, d->params + w, mean, rstd,
                                   rows, v->Cv);
}

/* ---- memory plan -------------------------------------------------------------------------- */

typedef struct {
  char *base;
  size_t used;
} carver;

static void *carve(carver *c, size_t bytes) {
  bytes = (bytes + 63) & ~(size_t)63;
  void *p = c->base ? c->base + c->used : NULL;
  c->used += bytes;
  return p;
}
#define CF(n) ((float *)carve(c, (size_t)(n) * sizeof(float)))

static void plan(loom_vision *v, carver *c) {
  size_t P = (size_t)v->maxP, M = P / ((size_t)v->s.merge * v->s.merge), Cv = (size_t)v->Cv;
  size_t I = (size_t)v->I, ph = qwen(v) ? (size_t)v->in : (size_t)v->Ct, Ct = (size_t)v->Ct;
  int depth = v->s.depth, half = v->D / 2;
  v->cosb = carve(c, P * half * sizeof(double));
  v->sinb = carve(c, P * half * sizeof(double));
  v->unit_perm = carve(c, (M + 1) * sizeof(int));
  v->seg_win = carve(c, (P + 2) * sizeof(int));
  v->seg_full = carve(c, (P + 2) * sizeof(int));
  v->patches_w = CF(P * v->pv);
  v->resid = CF((size_t)(depth + 1) * P * Cv);
  for (int l = 0; l < depth; l++) {
    vis_layer *L = &v->L[l];
    L->ln1 = CF(P * Cv), L->mean1 = CF(P), L->rstd1 = CF(P);
    L->q = CF(P * Cv), L->k = CF(P * Cv), L->v = CF(P * Cv), L->att = CF(P * Cv);
    L->lse = CF(P * v->H);
    L->mid = CF(P * Cv), L->ln2 = CF(P * Cv), L->mean2 = CF(P), L->rstd2 = CF(P);
    L->gate = qwen(v) ? CF(P * I) : NULL, L->up = CF(P * I), L->act = CF(P * I);
  }
  v->lnm = CF(P * Cv), v->meanm = CF(P), v->rstdm = CF(P);
  v->h1 = CF(M * ph), v->g1 = CF(M * ph), v->outw = CF(M * Ct);
  v->dres = CF(P * Cv), v->dn = CF(P * Cv), v->dq = CF(P * Cv), v->dk = CF(P * Cv);
  v->dv = CF(P * Cv), v->datt = CF(P * Cv), v->tmp = CF(P * (Cv > Ct ? Cv : Ct) + M * Ct);
  v->dact = CF(P * I), v->da = CF(P * I), v->db = CF(P * I);
  v->dh1 = CF(M * ph), v->dg1 = CF(M * ph), v->doutw = CF(M * Ct), v->dln = CF(P * Cv);
  size_t wide = Cv > I ? Cv : I;
  wide = wide > (size_t)v->pv ? wide : (size_t)v->pv;
  wide = wide > ph ? wide : ph;
  wide = wide > Ct ? wide : Ct;
  v->round_x = v->d->bf16 ? CF(P * wide) : NULL;
  v->round_dy = v->d->bf16 ? CF(P * wide) : NULL;
}

int loom_vision_create(loom_vision **out, loom_decoder *d, int max_patches) {
  const loom_vision_spec *s = &d->spec.vision;
  if (s->arch == LOOM_VISION_NONE) return loom_err("the model has no vision encoder");
  int unit = s->merge * s->merge;
  if (max_patches < unit) return loom_err("vision: plan for at least %d patches", unit);
  loom_vision *v = calloc(1, sizeof *v);
  v->d = d;
  v->s = *s;
  v->Ct = d->spec.hidden;
  v->Cv = s->hidden, v->H = s->heads, v->D = s->hidden / s->heads, v->I = s->intermediate;
  v->pv = loom_vision_patch_values(s);
  v->in = s->hidden * unit;
  v->maxP = max_patches / unit * unit;
  v->L = calloc((size_t)s->depth, sizeof *v->L);
  carver c = {NULL, 0};
  plan(v, &c);
  v->arena = loom_alloc(c.used);
  c.base = v->arena;
  c.used = 0;
  plan(v, &c);
  *out = v;
  return 0;
}

void loom_vision_free(loom_vision *v) {
  if (!v) return;
  loom_free(v->arena);
  free(v->L);
  free(v);
}

/* ---- forward ------------------------------------------------------------------------------ */

static bool full_attention(const loom_vision *v, int l) {
  if (!qwen(v)) return true;
  for (int i = 0; i < v->s.n_full; i++)
    if (v->s.full_layers[i] == l) return true;
  return false;
}

static void block_forward(loom_vision *v, int l) {
  int P = v->P, Cv = v->Cv, I = v->I;
  size_t PC = (size_t)P * Cv, PI = (size_t)P * I;
  const float *x = v->resid + (size_t)l * PC;
  float *out = v->resid + (size_t)(l + 1) * PC;
  vis_layer *L = &v->L[l];
  const char *B = "vision.blocks.%d.";
  char f[64];
#define O(suffix) (snprintf(f, sizeof f, "%s%s", B, suffix), off(v, f, l))
  size_t n1b = qwen(v) ? NONE : O("attn_norm.bias"), n2b = qwen(v) ? NONE : O("mlp_norm.bias");
  norm_fwd(v, L->ln1, L->mean1, L->rstd1, x, O("attn_norm.weight"), n1b, P);
  lin_fwd(v, L->q, L->ln1, O("attn.q.weight"), O("attn.q.bias"), P, Cv, Cv);
  lin_fwd(v, L->k, L->ln1, O("attn.k.weight"), O("attn.k.bias"), P, Cv, Cv);
  lin_fwd(v, L->v, L->ln1, O("attn.v.weight"), O("attn.v.bias"), P, Cv, Cv);
  if (qwen(v)) {
    loom_rope_table_forward_f32(L->q, v->cosb, v->sinb, P, v->H, v->D);
    loom_rope_table_forward_f32(L->k, v->cosb, v->sinb, P, v->H, v->D);
  }
  bool full = full_attention(v, l);
  loom_seg_attention_forward_f32(L->att, L->lse, L->q, L->k, L->v, P, v->H, v->D,
                                 full ? v->seg_full : v->seg_win, full ? v->n_full_seg : v->n_win);
  lin_fwd(v, v->tmp, L->att, O("attn.o.weight"), O("attn.o.bias"), P, Cv, Cv);
  for (size_t i = 0; i < PC; i++) L->mid[i] = x[i] + v->tmp[i];
  norm_fwd(v, L->ln2, L->mean2, L->rstd2, L->mid, O("mlp_norm.weight"), n2b, P);
  if (qwen(v)) {
    lin_fwd(v, L->gate, L->ln2, O("mlp.gate.weight"), O("mlp.gate.bias"), P, Cv, I);
    lin_fwd(v, L->up, L->ln2, O("mlp.up.weight"), O("mlp.up.bias"), P, Cv, I);
    loom_swiglu_forward_f32(L->act, L->gate, L->up, PI);
  } else {
    lin_fwd(v, L->up, L->ln2, O("mlp.up.weight"), O("mlp.up.bias"), P, Cv, I);
    loom_gelu_erf_forward_f32(L->act, L->up, PI);
  }
  lin_fwd(v, v->tmp, L->act, O("mlp.down.weight"), O("mlp.down.bias"), P, I, Cv);
  for (size_t i = 0; i < PC; i++) out[i] = L->mid[i] + v->tmp[i];
#undef O
}

int loom_vision_forward(loom_vision *v, const loom_vision_input *in, float *out) {
  if (vis_check_input(v, in)) return LOOM_ERR;
  vis_prepare(v, in);
  int P = v->P, M = v->M, Cv = v->Cv, unit = v->s.merge * v->s.merge, pv = v->pv, Ct = v->Ct;
  v->pixels = in->pixels;
  /* patches in window order (qwen); as given (llava) */
  for (int u = 0; u < M; u++) {
    int src = qwen(v) ? v->unit_perm[u] : u;
    memcpy(v->patches_w + (size_t)u * unit * pv, in->pixels + (size_t)src * unit * pv,
           (size_t)unit * pv * sizeof(float));
  }
  float *x0 = v->resid;
  size_t pb = qwen(v) ? NONE : off(v, "vision.patch_embed.bias%.0d", 0);
  lin_fwd(v, x0, v->patches_w, off(v, "vision.patch_embed.weight%.0d", 0), pb, P, pv, Cv);
  if (!qwen(v)) { /* learned positions, one per patch of the fixed-size image */
    const float *pos = v->d->params + off(v, "vision.pos_embed.weight%.0d", 0);
    int npos = (v->s.image_size / v->s.patch) * (v->s.image_size / v->s.patch);
    for (int p = 0; p < P; p++)
      for (int c = 0; c < Cv; c++) x0[(size_t)p * Cv + c] += pos[(size_t)(p % npos) * Cv + c];
  }
  for (int l = 0; l < v->s.depth; l++) block_forward(v, l);
  const float *xl = v->resid + (size_t)v->s.depth * P * Cv;
  if (qwen(v)) {
    norm_fwd(v, v->lnm, NULL, v->rstdm, xl, off(v, "vision.merger.norm.weight%.0d", 0), NONE, P);
  } else {
    norm_fwd(v, v->lnm, v->meanm, v->rstdm, xl, off(v, "vision.post_norm.weight%.0d", 0),
             off(v, "vision.post_norm.bias%.0d", 0), P);
  }
  int ph = qwen(v) ? v->in : Ct;
  lin_fwd(v, v->h1, v->lnm, off(v, "vision.merger.fc1.weight%.0d", 0),
          off(v, "vision.merger.fc1.bias%.0d", 0), M, v->in, ph);
  loom_gelu_erf_forward_f32(v->g1, v->h1, (size_t)M * ph);
  lin_fwd(v, v->outw, v->g1, off(v, "vision.merger.fc2.weight%.0d", 0),
          off(v, "vision.merger.fc2.bias%.0d", 0), M, ph, Ct);
  for (int u = 0; u < M; u++) { /* back to image order */
    int dst = qwen(v) ? v->unit_perm[u] : u;
    memcpy(out + (size_t)dst * Ct, v->outw + (size_t)u * Ct, (size_t)Ct * sizeof(float));
  }
  return 0;
}

/* ---- backward ----------------------------------------------------------------------------- */

static void block_backward(loom_vision *v, int l) {
  int P = v->P, Cv = v->Cv, I = v->I;
  size_t PC = (size_t)P * Cv, PI = (size_t)P * I;
  const float *x = v->resid + (size_t)l * PC;
  vis_layer *L = &v->L[l];
  const char *B = "vision.blocks.%d.";
  char f[64];
#define O(suffix) (snprintf(f, sizeof f, "%s%s", B, suffix), off(v, f, l))
  size_t n1b = qwen(v) ? NONE : O("attn_norm.bias"), n2b = qwen(v) ? NONE : O("mlp_norm.bias");
  memset(v->dact, 0, PI * sizeof(float));
  lin_bwd(v, v->dact, O("mlp.down.weight"), O("mlp.down.bias"), v->dres, L->act, P, I, Cv);
  memset(v->dn, 0, PC * sizeof(float));
  memset(v->da, 0, PI * sizeof(float));
  if (qwen(v)) {
    memset(v->db, 0, PI * sizeof(float));
    loom_swiglu_backward_f32(v->da, v->db, v->dact, L->gate, L->up, PI);
    lin_bwd(v, v->dn, O("mlp.gate.weight"), O("mlp.gate.bias"), v->da, L->ln2, P, Cv, I);
    lin_bwd(v, v->dn, O("mlp.up.weight"), O("mlp.up.bias"), v->db, L->ln2, P, Cv, I);
  } else {
    loom_gelu_erf_backward_f32(v->da, v->dact, L->up, PI);
    lin_bwd(v, v->dn, O("mlp.up.weight"), O("mlp.up.bias"), v->da, L->ln2, P, Cv, I);
  }
  norm_bwd(v, v->dres, v->dn, L->mid, L->mean2, L->rstd2, O("mlp_norm.weight"), n2b, P);
  memset(v->datt, 0, PC * sizeof(float));
  lin_bwd(v, v->datt, O("attn.o.weight"), O("attn.o.bias"), v->dres, L->att, P, Cv, Cv);
  memset(v->dq, 0, PC * sizeof(float));
  memset(v->dk, 0, PC * sizeof(float));
  memset(v->dv, 0, PC * sizeof(float));
  bool full = full_attention(v, l);
  loom_seg_attention_backward_f32(v->dq, v->dk, v->dv, v->datt, L->att, L->lse, L->q, L->k, L->v,
                                  P, v->H, v->D, full ? v->seg_full : v->seg_win,
                                  full ? v->n_full_seg : v->n_win);
  if (qwen(v)) {
    loom_rope_table_backward_f32(v->dq, v->cosb, v->sinb, P, v->H, v->D);
    loom_rope_table_backward_f32(v->dk, v->cosb, v->sinb, P, v->H, v->D);
  }
  memset(v->dn, 0, PC * sizeof(float));
  lin_bwd(v, v->dn, O("attn.q.weight"), O("attn.q.bias"), v->dq, L->ln1, P, Cv, Cv);
  lin_bwd(v, v->dn, O("attn.k.weight"), O("attn.k.bias"), v->dk, L->ln1, P, Cv, Cv);
  lin_bwd(v, v->dn, O("attn.v.weight"), O("attn.v.bias"), v->dv, L->ln1, P, Cv, Cv);
  norm_bwd(v, v->dres, v->dn, x, L->mean1, L->rstd1, O("attn_norm.weight"), n1b, P);
#undef O
}

void loom_vision_backward(loom_vision *v, const float *dout) {
  int P = v->P, M = v->M, Cv = v->Cv, Ct = v->Ct, ph = qwen(v) ? v->in : Ct;
  for (int u = 0; u < M; u++) {
    int src = qwen(v) ? v->unit_perm[u] : u;
    memcpy(v->doutw + (size_t)u * Ct, dout + (size_t)src * Ct, (size_t)Ct * sizeof(float));
  }
  memset(v->dg1, 0, (size_t)M * ph * sizeof(float));
  lin_bwd(v, v->dg1, off(v, "vision.merger.fc2.weight%.0d", 0),
          off(v, "vision.merger.fc2.bias%.0d", 0), v->doutw, v->g1, M, ph, Ct);
  memset(v->dh1, 0, (size_t)M * ph * sizeof(float));
  loom_gelu_erf_backward_f32(v->dh1, v->dg1, v->h1, (size_t)M * ph);
  memset(v->dln, 0, (size_t)P * Cv * sizeof(float));
  lin_bwd(v, v->dln, off(v, "vision.merger.fc1.weight%.0d", 0),
          off(v, "vision.merger.fc1.bias%.0d", 0), v->dh1, v->lnm, M, v->in, ph);
  const float *xl = v->resid + (size_t)v->s.depth * P * Cv;
  memset(v->dres, 0, (size_t)P * Cv * sizeof(float));
  if (qwen(v))
    norm_bwd(v, v->dres, v->dln, xl, NULL, v->rstdm, off(v, "vision.merger.norm.weight%.0d", 0),
             NONE, P);
  else
    norm_bwd(v, v->dres, v->dln, xl, v->meanm, v->rstdm, off(v, "vision.post_norm.weight%.0d", 0),
             off(v, "vision.post_norm.bias%.0d", 0), P);
  for (int l = v->s.depth - 1; l >= 0; l--) block_backward(v, l);
  if (!qwen(v)) {
    float *dpos = v->d->grads + off(v, "vision.pos_embed.weight%.0d", 0);
    int npos = (v->s.image_size / v->s.patch) * (v->s.image_size / v->s.patch);
    for (int p = 0; p < P; p++)
      for (int c = 0; c < Cv; c++) dpos[(size_t)(p % npos) * Cv + c] += v->dres[(size_t)p * Cv + c];
  }
  size_t pb = qwen(v) ? NONE : off(v, "vision.patch_embed.bias%.0d", 0);
  lin_bwd(v, NULL, off(v, "vision.patch_embed.weight%.0d", 0), pb, v->dres, v->patches_w, P,
          v->pv, Cv);
}

/* The vision encoder, forward and backward (see vision.h): patch embedding, pre-norm blocks
 * with bidirectional attention inside windows or whole images (2D rotary positions for Qwen,
 * learned positions for LLaVA), and the merger/projector to the text hidden size.
 * Split over tp ranks (Megatron: column-parallel q/k/v, gate/up, fc1; row-parallel o, down,
 * fc2 summed over tp) and sp ranks (each rank embeds, normalises and projects its Pl patches;
 * attention exchanges head groups by all-to-all (Ulysses) or passes K/V blocks around the
 * ranks (context parallelism, v->ring); the merged tokens are gathered).
 * Shapes (vision_internal.h): Pl patches of this rank, Ml = Pl/merge^2 tokens, Cv vision
 * hidden, Cl local attention width, Il local MLP width, phl local projector width, Ct text
 * hidden. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/kernels.h"
#include "loom/kernels_vision.h"
#include "loom/ring_attention.h"
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
  const float *W = loom_decoder_params_lp(d) + w;
  loom_linear_forward_f32(y, x, W, b == NONE ? NULL : d->params + b, M, K, N);
}

static void lin_bwd(loom_vision *v, float *dx, size_t w, size_t b, const float *dy, const float *x,
                    int M, int K, int N) {
  loom_decoder *d = v->d;
  const float *W = loom_decoder_params_lp(d) + w;
  if (b != NONE) loom_linear_backward_f32(NULL, NULL, d->grads + b, dy, x, W, M, K, N);
  if (d->bf16) {
    loom_round_bf16_f32(v->round_dy, dy, (size_t)M * N);
    loom_round_bf16_f32(v->round_x, x, (size_t)M * K);
    dy = v->round_dy;
    x = v->round_x;
  }
  loom_linear_backward_f32(dx, d->grads + w, NULL, dy, x, W, M, K, N);
}

/* Row-parallel linear: partial products summed over tp; the bias added once (tp rank 0). */
static void lin_fwd_row(loom_vision *v, float *y, const float *x, size_t w, size_t b, int M,
                        int K, int N) {
  lin_fwd(v, y, x, w, v->tp_rank == 0 ? b : NONE, M, K, N);
  vis_tp_sum(v, y, (size_t)M * N);
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

/* ---- forward ------------------------------------------------------------------------------ */

static bool full_attention(const loom_vision *v, int l) {
  if (!qwen(v)) return true;
  for (int i = 0; i < v->s.n_full; i++)
    if (v->s.full_layers[i] == l) return true;
  return false;
}

/* Context parallelism: the ring over this rank's Pl patches of the window order, attention
 * inside the window segments or (full-attention layers) the frame segments. */
static loom_ring_seg_attn ring_of(loom_vision *v, bool full) {
  loom_ring_seg_attn r = {v->sp_comm, v->Pl, v->Hl, v->D,
                          full ? v->seg_full : v->seg_win, full ? v->n_full_seg : v->n_win,
                          v->ring_work};
  return r;
}

static void block_forward(loom_vision *v, int l) {
  int Pl = v->Pl, Cv = v->Cv, Cl = v->Cl, Il = v->Il, half = v->D / 2;
  size_t PC = (size_t)Pl * Cv, PI = (size_t)Pl * Il;
  const float *x = v->resid + (size_t)l * PC;
  float *out = v->resid + (size_t)(l + 1) * PC;
  vis_layer *L = &v->L[l];
  bool split = v->sp > 1 && !v->ring; /* Ulysses */
  const char *B = "vision.blocks.%d.";
  char f[64];
#define O(suffix) (snprintf(f, sizeof f, "%s%s", B, suffix), off(v, f, l))
  size_t n1b = qwen(v) ? NONE : O("attn_norm.bias"), n2b = qwen(v) ? NONE : O("mlp_norm.bias");
  norm_fwd(v, L->ln1, L->mean1, L->rstd1, x, O("attn_norm.weight"), n1b, Pl);
  float *q = split ? v->dq : L->qh, *k = split ? v->dk : L->kh, *val = split ? v->dv : L->vh;
  lin_fwd(v, q, L->ln1, O("attn.q.weight"), O("attn.q.bias"), Pl, Cv, Cl);
  lin_fwd(v, k, L->ln1, O("attn.k.weight"), O("attn.k.bias"), Pl, Cv, Cl);
  lin_fwd(v, val, L->ln1, O("attn.v.weight"), O("attn.v.bias"), Pl, Cv, Cl);
  if (qwen(v)) {
    const double *cs = v->cosb + (size_t)v->p0 * half, *sn = v->sinb + (size_t)v->p0 * half;
    loom_rope_table_forward_f32(q, cs, sn, Pl, v->Hl, v->D);
    loom_rope_table_forward_f32(k, cs, sn, Pl, v->Hl, v->D);
  }
  if (split) {
    vis_to_heads(v, q, L->qh);
    vis_to_heads(v, k, L->kh);
    vis_to_heads(v, val, L->vh);
  }
  bool full = full_attention(v, l);
  if (v->ring) {
    loom_ring_seg_attn ring = ring_of(v, full);
    loom_ring_seg_attention_forward(&ring, L->atth, L->lse, L->qh, L->kh, L->vh);
  } else {
    loom_seg_attention_forward_f32(L->atth, L->lse, L->qh, L->kh, L->vh, v->Pg, v->Hs, v->D,
                                   full ? v->seg_full : v->seg_win,
                                   full ? v->n_full_seg : v->n_win);
  }
  if (split) vis_to_patches(v, L->atth, L->att);
  lin_fwd_row(v, v->tmp, L->att, O("attn.o.weight"), O("attn.o.bias"), Pl, Cl, Cv);
  for (size_t i = 0; i < PC; i++) L->mid[i] = x[i] + v->tmp[i];
  norm_fwd(v, L->ln2, L->mean2, L->rstd2, L->mid, O("mlp_norm.weight"), n2b, Pl);
  if (qwen(v)) {
    lin_fwd(v, L->gate, L->ln2, O("mlp.gate.weight"), O("mlp.gate.bias"), Pl, Cv, Il);
    lin_fwd(v, L->up, L->ln2, O("mlp.up.weight"), O("mlp.up.bias"), Pl, Cv, Il);
    loom_swiglu_forward_f32(L->act, L->gate, L->up, PI);
  } else {
    lin_fwd(v, L->up, L->ln2, O("mlp.up.weight"), O("mlp.up.bias"), Pl, Cv, Il);
    loom_gelu_erf_forward_f32(L->act, L->up, PI);
  }
  lin_fwd_row(v, v->tmp, L->act, O("mlp.down.weight"), O("mlp.down.bias"), Pl, Il, Cv);
  for (size_t i = 0; i < PC; i++) out[i] = L->mid[i] + v->tmp[i];
#undef O
}

/* Global merged unit of local unit u in window order, or -1 for padding. */
static int unit_of(const loom_vision *v, int u) {
  int g = v->p0 / (v->s.merge * v->s.merge) + u;
  return g < v->M ? g : -1;
}

int loom_vision_forward(loom_vision *v, const loom_vision_input *in, float *out) {
  if (vis_check_input(v, in)) return LOOM_ERR;
  vis_prepare(v, in);
  int Pl = v->Pl, Ml = v->Ml, Cv = v->Cv, unit = v->s.merge * v->s.merge, pv = v->pv, Ct = v->Ct;
  /* this rank's patches in window order (qwen); as given (llava); zeros for padding */
  for (int u = 0; u < Ml; u++) {
    int g = unit_of(v, u);
    float *dst = v->patches_w + (size_t)u * unit * pv;
    if (g < 0) memset(dst, 0, (size_t)unit * pv * sizeof(float));
    else memcpy(dst, in->pixels + (size_t)(qwen(v) ? v->unit_perm[g] : g) * unit * pv,
                (size_t)unit * pv * sizeof(float));
  }
  float *x0 = v->resid;
  size_t pb = qwen(v) ? NONE : off(v, "vision.patch_embed.bias%.0d", 0);
  lin_fwd(v, x0, v->patches_w, off(v, "vision.patch_embed.weight%.0d", 0), pb, Pl, pv, Cv);
  if (!qwen(v)) { /* learned positions, one per patch of the fixed-size image */
    const float *pos = v->d->params + off(v, "vision.pos_embed.weight%.0d", 0);
    int npos = (v->s.image_size / v->s.patch) * (v->s.image_size / v->s.patch);
    for (int p = 0; p < Pl && v->p0 + p < v->P; p++)
      for (int c = 0; c < Cv; c++)
        x0[(size_t)p * Cv + c] += pos[(size_t)((v->p0 + p) % npos) * Cv + c];
  }
  for (int l = 0; l < v->s.depth; l++) block_forward(v, l);
  const float *xl = v->resid + (size_t)v->s.depth * Pl * Cv;
  if (qwen(v)) {
    norm_fwd(v, v->lnm, NULL, v->rstdm, xl, off(v, "vision.merger.norm.weight%.0d", 0), NONE, Pl);
  } else {
    norm_fwd(v, v->lnm, v->meanm, v->rstdm, xl, off(v, "vision.post_norm.weight%.0d", 0),
             off(v, "vision.post_norm.bias%.0d", 0), Pl);
  }
  lin_fwd(v, v->h1, v->lnm, off(v, "vision.merger.fc1.weight%.0d", 0),
          off(v, "vision.merger.fc1.bias%.0d", 0), Ml, v->in, v->phl);
  loom_gelu_erf_forward_f32(v->g1, v->h1, (size_t)Ml * v->phl);
  lin_fwd_row(v, v->outw, v->g1, off(v, "vision.merger.fc2.weight%.0d", 0),
              off(v, "vision.merger.fc2.bias%.0d", 0), Ml, v->phl, Ct);
  if (v->sp > 1) loom_comm_allgather_f32(v->sp_comm, v->outw, v->outg, (size_t)Ml * Ct);
  for (int u = 0; u < v->M; u++) { /* back to image order, padding dropped */
    int dst = qwen(v) ? v->unit_perm[u] : u;
    memcpy(out + (size_t)dst * Ct, v->outg + (size_t)u * Ct, (size_t)Ct * sizeof(float));
  }
  return 0;
}

/* ---- backward ----------------------------------------------------------------------------- */

static void block_backward(loom_vision *v, int l) {
  int Pl = v->Pl, Cv = v->Cv, Cl = v->Cl, Il = v->Il, half = v->D / 2;
  size_t PC = (size_t)Pl * Cv, PI = (size_t)Pl * Il, PL = (size_t)Pl * Cl;
  const float *x = v->resid + (size_t)l * PC;
  vis_layer *L = &v->L[l];
  bool split = v->sp > 1 && !v->ring; /* Ulysses */
  const char *B = "vision.blocks.%d.";
  char f[64];
#define O(suffix) (snprintf(f, sizeof f, "%s%s", B, suffix), off(v, f, l))
  size_t n1b = qwen(v) ? NONE : O("attn_norm.bias"), n2b = qwen(v) ? NONE : O("mlp_norm.bias");
  memset(v->dact, 0, PI * sizeof(float));
  lin_bwd(v, v->dact, O("mlp.down.weight"), O("mlp.down.bias"), v->dres, L->act, Pl, Il, Cv);
  memset(v->dn, 0, PC * sizeof(float));
  memset(v->da, 0, PI * sizeof(float));
  if (qwen(v)) {
    memset(v->db, 0, PI * sizeof(float));
    loom_swiglu_backward_f32(v->da, v->db, v->dact, L->gate, L->up, PI);
    lin_bwd(v, v->dn, O("mlp.gate.weight"), O("mlp.gate.bias"), v->da, L->ln2, Pl, Cv, Il);
    lin_bwd(v, v->dn, O("mlp.up.weight"), O("mlp.up.bias"), v->db, L->ln2, Pl, Cv, Il);
  } else {
    loom_gelu_erf_backward_f32(v->da, v->dact, L->up, PI);
    lin_bwd(v, v->dn, O("mlp.up.weight"), O("mlp.up.bias"), v->da, L->ln2, Pl, Cv, Il);
  }
  vis_tp_sum(v, v->dn, PC); /* column-parallel: the input gradient is partial per tp rank */
  norm_bwd(v, v->dres, v->dn, L->mid, L->mean2, L->rstd2, O("mlp_norm.weight"), n2b, Pl);
  memset(v->datt, 0, PL * sizeof(float));
  lin_bwd(v, v->datt, O("attn.o.weight"), O("attn.o.bias"), v->dres, L->att, Pl, Cl, Cv);
  if (split) vis_to_heads(v, v->datt, v->datth);
  memset(v->dqh, 0, PL * sizeof(float));
  memset(v->dkh, 0, PL * sizeof(float));
  memset(v->dvh, 0, PL * sizeof(float));
  bool full = full_attention(v, l);
  if (v->ring) { /* writes dq, dk, dv */
    loom_ring_seg_attn ring = ring_of(v, full);
    loom_ring_seg_attention_backward(&ring, v->dqh, v->dkh, v->dvh, v->datth, L->atth, L->lse,
                                     L->qh, L->kh, L->vh);
  } else {
    loom_seg_attention_backward_f32(v->dqh, v->dkh, v->dvh, v->datth, L->atth, L->lse, L->qh,
                                    L->kh, L->vh, v->Pg, v->Hs, v->D,
                                    full ? v->seg_full : v->seg_win,
                                    full ? v->n_full_seg : v->n_win);
  }
  if (split) {
    vis_to_patches(v, v->dqh, v->dq);
    vis_to_patches(v, v->dkh, v->dk);
    vis_to_patches(v, v->dvh, v->dv);
  }
  if (qwen(v)) {
    const double *cs = v->cosb + (size_t)v->p0 * half, *sn = v->sinb + (size_t)v->p0 * half;
    loom_rope_table_backward_f32(v->dq, cs, sn, Pl, v->Hl, v->D);
    loom_rope_table_backward_f32(v->dk, cs, sn, Pl, v->Hl, v->D);
  }
  memset(v->dn, 0, PC * sizeof(float));
  lin_bwd(v, v->dn, O("attn.q.weight"), O("attn.q.bias"), v->dq, L->ln1, Pl, Cv, Cl);
  lin_bwd(v, v->dn, O("attn.k.weight"), O("attn.k.bias"), v->dk, L->ln1, Pl, Cv, Cl);
  lin_bwd(v, v->dn, O("attn.v.weight"), O("attn.v.bias"), v->dv, L->ln1, Pl, Cv, Cl);
  vis_tp_sum(v, v->dn, PC);
  norm_bwd(v, v->dres, v->dn, x, L->mean1, L->rstd1, O("attn_norm.weight"), n1b, Pl);
#undef O
}

void loom_vision_backward(loom_vision *v, const float *dout) {
  int Pl = v->Pl, Ml = v->Ml, Cv = v->Cv, Ct = v->Ct, phl = v->phl;
  for (int u = 0; u < Ml; u++) { /* this rank's tokens in window order; padding: zero */
    int g = unit_of(v, u);
    float *dst = v->doutw + (size_t)u * Ct;
    if (g < 0) memset(dst, 0, (size_t)Ct * sizeof(float));
    else memcpy(dst, dout + (size_t)(qwen(v) ? v->unit_perm[g] : g) * Ct, (size_t)Ct * sizeof(float));
  }
  memset(v->dg1, 0, (size_t)Ml * phl * sizeof(float));
  lin_bwd(v, v->dg1, off(v, "vision.merger.fc2.weight%.0d", 0),
          off(v, "vision.merger.fc2.bias%.0d", 0), v->doutw, v->g1, Ml, phl, Ct);
  memset(v->dh1, 0, (size_t)Ml * phl * sizeof(float));
  loom_gelu_erf_backward_f32(v->dh1, v->dg1, v->h1, (size_t)Ml * phl);
  memset(v->dln, 0, (size_t)Pl * Cv * sizeof(float));
  lin_bwd(v, v->dln, off(v, "vision.merger.fc1.weight%.0d", 0),
          off(v, "vision.merger.fc1.bias%.0d", 0), v->dh1, v->lnm, Ml, v->in, phl);
  vis_tp_sum(v, v->dln, (size_t)Pl * Cv);
  const float *xl = v->resid + (size_t)v->s.depth * Pl * Cv;
  memset(v->dres, 0, (size_t)Pl * Cv * sizeof(float));
  if (qwen(v))
    norm_bwd(v, v->dres, v->dln, xl, NULL, v->rstdm, off(v, "vision.merger.norm.weight%.0d", 0),
             NONE, Pl);
  else
    norm_bwd(v, v->dres, v->dln, xl, v->meanm, v->rstdm, off(v, "vision.post_norm.weight%.0d", 0),
             off(v, "vision.post_norm.bias%.0d", 0), Pl);
  for (int l = v->s.depth - 1; l >= 0; l--) block_backward(v, l);
  if (!qwen(v)) {
    float *dpos = v->d->grads + off(v, "vision.pos_embed.weight%.0d", 0);
    int npos = (v->s.image_size / v->s.patch) * (v->s.image_size / v->s.patch);
    for (int p = 0; p < Pl && v->p0 + p < v->P; p++)
      for (int c = 0; c < Cv; c++)
        dpos[(size_t)((v->p0 + p) % npos) * Cv + c] += v->dres[(size_t)p * Cv + c];
  }
  size_t pb = qwen(v) ? NONE : off(v, "vision.patch_embed.bias%.0d", 0);
  lin_bwd(v, NULL, off(v, "vision.patch_embed.weight%.0d", 0), pb, v->dres, v->patches_w, Pl,
          v->pv, Cv);
}

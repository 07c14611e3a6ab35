/* loom_moe_block_dump: runs loom's MoE layer (loom_moe_block_f32: router, dispatch plan, the
 * fast grouped experts, combine, shared expert) on random weights and inputs, two layers whose
 * load-balancing statistics are pooled, with loss
 *   L = sum_l <R_l, y_l> + aux_coef * aux(pooled) + sum_l z_coef * z_l,
 * and writes weights, inputs, outputs, the routing, both losses, dL/dx and every gradient to
 * one safetensors file for check_moe_block.py. Case "qwen3_attention" instead runs Qwen3's
 * attention composed of loom's reference kernels (q/k/v projections, per-head RMSNorm of q and
 * k before RoPE, GQA causal attention, head_dim != hidden / heads) with L = <R, y>.
 *
 * usage: loom_moe_block_dump OUT.safetensors CASE   (CASE: see the table below) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/kernels.h"
#include "loom/kernels_moe.h"
#include "loom/safetensors.h"

typedef struct {
  const char *name;
  int E, k, Ie, Is;
  bool norm, by_position, sel_bias, bf16;
  double cf;
} dump_case;

static const dump_case CASES[] = {
    /* name                 E  k  Ie  Is  norm   bypos  bias   bf16   cf */
    {"qwen3", 8, 2, 14, 0, true, false, false, false, 0},
    {"qwen2", 6, 4, 14, 20, false, false, false, false, 0},
    {"mixtral", 5, 2, 14, 0, true, false, false, false, 0},
    {"capacity_weight", 6, 2, 14, 0, true, false, true, false, 0.75},
    {"capacity_position", 5, 3, 14, 20, false, true, false, false, 0.8},
    {"qwen2_bf16", 6, 4, 14, 20, false, false, false, true, 0},
    {"capacity_weight_bf16", 6, 2, 14, 0, true, false, true, true, 0.75},
};

enum { B = 2, T = 13, N = B * T, C = 30, LAYERS = 2 };
#define AUX_COEF 0.5 /* large, so that both losses weigh in the gradients compared */
#define Z_COEF 0.2
#define MARGIN 1e-4 /* at top-k and capacity switches: far above fp32 vs float64 differences */

static loom_rng rng;

static float *fill(size_t n, double scale, double mean) {
  float *x = loom_alloc(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) x[i] = (float)(mean + scale * loom_rng_normal(&rng));
  return x;
}

/* compact copy of n consecutive matrices of len values that are ws apart */
static float *compact(const float *src, int n, size_t len, size_t ws) {
  float *d = loom_alloc(sizeof(float) * n * len);
  for (int e = 0; e < n; e++) memcpy(d + e * len, src + e * ws, sizeof(float) * len);
  return d;
}

typedef struct {
  float *prm, *grd; /* one buffer each, the params' layout */
  loom_moe_params_f32 p;
  loom_moe_grads_f32 g;
  float *x, *R, *y, *dx;
  loom_moe_block_f32 *b;
} layer;

/* the smallest gap at a top-k or capacity switch of the layer's last forward */
static double layer_margin(const layer *L, const dump_case *c) {
  const loom_moe_block_f32 *b = L->b;
  double m = INFINITY;
  for (int r = 0; r < N; r++) {
    double kth = INFINITY, next = -INFINITY;
    for (int e = 0; e < c->E; e++) {
      double sc = b->probs[r * c->E + e] + (L->p.sel_bias ? L->p.sel_bias[e] : 0);
      int chosen = 0;
      for (int j = 0; j < c->k; j++) chosen |= b->idx[r * c->k + j] == e;
      if (chosen) kth = fmin(kth, sc);
      else next = fmax(next, sc);
    }
    m = fmin(m, kth - next);
  }
  if (b->plan.capacity > 0 && !c->by_position)
    for (int e = 0; e < c->E; e++) {
      double kept = INFINITY, gone = -INFINITY;
      for (int i = 0; i < N * c->k; i++) {
        if (b->idx[i] != e) continue;
        if (b->plan.pair_row[i] >= 0) kept = fmin(kept, b->w[i]);
        else gone = fmax(gone, b->w[i]);
      }
      if (gone > -INFINITY) m = fmin(m, kept - gone);
    }
  return m;
}

static int moe_dump(const char *out, const dump_case *c) {
  loom_moe_shape s = {C, c->E, c->k, c->Ie, c->Is, c->norm, c->cf, c->by_position};
  size_t ws = ((size_t)c->Ie * C + 15) & ~(size_t)15; /* the layout pads each tensor to 16 */
  size_t E = c->E, Is = c->Is, NC = (size_t)N * C;
  size_t sz = E * C + E + 3 * E * ws + 3 * Is * C + (Is ? C : 0);
  layer L[LAYERS];
  uint64_t seed = 7;
  double margin = 0;
  for (int tries = 0; tries < 100; tries++, seed++) {
    loom_rng_seed(&rng, seed);
    int ok = 1;
    for (int l = 0; l < LAYERS; l++) {
      layer *y = &L[l];
      y->prm = fill(sz, 0.0, 0.0), y->grd = fill(sz, 0.0, 0.0);
      float *P = y->prm, *G = y->grd;
      size_t off = 0;
      float *router = fill(E * C, 0.4, 0.0), *bias = fill(E, 0.05, 0.0);
      memcpy(P, router, sizeof(float) * E * C), memcpy(P + E * C, bias, sizeof(float) * E);
      loom_free(router), loom_free(bias);
      y->p.router = P, y->g.router = G, off = E * C;
      y->p.sel_bias = c->sel_bias ? P + off : NULL, off += E;
      float *wbuf[3];
      float *gbuf[3];
      for (int m = 0; m < 3; m++) {
        wbuf[m] = P + off, gbuf[m] = G + off;
        for (size_t e = 0; e < E; e++)
          for (size_t i = 0; i < (size_t)c->Ie * C; i++)
            wbuf[m][e * ws + i] = (float)((m == 2 ? 1 / sqrt(c->Ie) : 1 / sqrt(C)) * loom_rng_normal(&rng));
        off += E * ws;
      }
      y->p.wg = wbuf[0], y->p.wu = wbuf[1], y->p.wd = wbuf[2], y->p.ws = ws;
      y->g.wg = gbuf[0], y->g.wu = gbuf[1], y->g.wd = gbuf[2];
      if (Is) {
        float **pp[4] = {(float **)&y->p.sg, (float **)&y->p.su, (float **)&y->p.sd, (float **)&y->p.sgate};
        float **gg[4] = {&y->g.sg, &y->g.su, &y->g.sd, &y->g.sgate};
        size_t len[4] = {Is * C, Is * C, Is * C, C};
        double sc[4] = {1 / sqrt(C), 1 / sqrt(C), 1 / sqrt(Is), 1 / sqrt(C)};
        for (int m = 0; m < 4; m++) {
          *pp[m] = P + off, *gg[m] = G + off;
          for (size_t i = 0; i < len[m]; i++) P[off + i] = (float)(sc[m] * loom_rng_normal(&rng));
          off += len[m];
        }
      } else {
        y->p.sg = y->p.su = y->p.sd = y->p.sgate = NULL;
        y->g.sg = y->g.su = y->g.sd = y->g.sgate = NULL;
      }
      if (c->bf16) /* the block multiplies the weights as given: hand it bf16 values */
        loom_round_bf16_f32(P, P, sz);
      y->x = fill(NC, 1.0, 0.0), y->R = fill(NC, 1.0, 0.0);
      y->y = fill(NC, 0.0, 0.0), y->dx = fill(NC, 0.0, 0.0);
      y->b = loom_moe_block_create_f32(&s, N, c->bf16);
      loom_moe_block_forward_f32(y->b, y->y, y->x, &y->p, N);
      double m = layer_margin(y, c);
      if (l == 0 || m < margin) margin = m;
      if (c->cf > 0 && y->b->plan.dropped == 0) ok = 0;
    }
    if (margin >= MARGIN && ok) break;
    for (int l = 0; l < LAYERS; l++) {
      loom_moe_block_free_f32(L[l].b);
      loom_free(L[l].prm), loom_free(L[l].grd), loom_free(L[l].x), loom_free(L[l].R);
      loom_free(L[l].y), loom_free(L[l].dx);
    }
    margin = 0;
  }
  if (margin < MARGIN) {
    fprintf(stderr, "loom_moe_block_dump: no seed gives switches %.0e apart\n", MARGIN);
    return 1;
  }
  /* pooled statistics, the two losses, the backward */
  int64_t sel[64] = {0};
  double psum[64] = {0}, lsq = 0, aux_grad[64], z_grad;
  for (int l = 0; l < LAYERS; l++)
    loom_moe_router_stats_f32(sel, psum, &lsq, L[l].b->probs, L[l].b->lse, L[l].b->idx, N, c->E,
                              c->k);
  double aux = loom_moe_aux_loss(aux_grad, sel, psum, c->E, (int64_t)LAYERS * N, AUX_COEF);
  double z = loom_moe_z_loss(&z_grad, lsq, N, Z_COEF);
  for (int l = 0; l < LAYERS; l++)
    loom_moe_block_backward_f32(L[l].b, L[l].dx, &L[l].g, L[l].R, L[l].x, &L[l].p, aux_grad,
                                z_grad);
  /* write */
  loom_st_writer *w = loom_st_writer_create();
  char v[64];
#define META(key, fmt, val) (snprintf(v, sizeof v, fmt, val), loom_st_writer_set_metadata(w, key, v))
  META("kind", "%s", "moe");
  META("case", "%s", c->name);
  META("bf16", "%d", c->bf16);
  META("C", "%d", C), META("E", "%d", c->E), META("k", "%d", c->k);
  META("Ie", "%d", c->Ie), META("Is", "%d", c->Is), META("N", "%d", N);
  META("layers", "%d", LAYERS), META("norm_topk", "%d", c->norm);
  META("capacity_factor", "%.17g", c->cf), META("drop_by_position", "%d", c->by_position);
  META("sel_bias", "%d", c->sel_bias);
  META("aux_coef", "%.17g", AUX_COEF), META("z_coef", "%.17g", Z_COEF);
  META("margin", "%.6g", margin);
#undef META
  float *owned[LAYERS * 32];
  int n_owned = 0;
  int32_t *rows[LAYERS];
  int32_t dropped[LAYERS], capacity[LAYERS];
  double losses[2] = {aux, z};
  for (int l = 0; l < LAYERS; l++) {
    layer *y = &L[l];
    char nm[128];
    int64_t sNC[2] = {N, C}, sNk[2] = {N, c->k}, sE[1] = {c->E}, sNE[2] = {N, c->E};
    int64_t sEC[2] = {c->E, C}, sEIC[3] = {c->E, c->Ie, C}, sECI[3] = {c->E, C, c->Ie};
    int64_t sIC[2] = {c->Is, C}, sCI[2] = {C, c->Is}, s1C[2] = {1, C};
#define ADD(name, dt, nd, shape, data)                                                         \
  (snprintf(nm, sizeof nm, "layers.%d.%s", l, name), loom_st_writer_add(w, nm, dt, nd, shape, data))
    ADD("x", LOOM_DT_F32, 2, sNC, y->x), ADD("R", LOOM_DT_F32, 2, sNC, y->R);
    ADD("y", LOOM_DT_F32, 2, sNC, y->y), ADD("dx", LOOM_DT_F32, 2, sNC, y->dx);
    ADD("probs", LOOM_DT_F32, 2, sNE, y->b->probs);
    ADD("idx", LOOM_DT_I32, 2, sNk, y->b->idx);
    rows[l] = loom_alloc(sizeof(int32_t) * N * c->k);
    memcpy(rows[l], y->b->plan.pair_row, sizeof(int32_t) * N * c->k);
    ADD("pair_row", LOOM_DT_I32, 2, sNk, rows[l]);
    dropped[l] = y->b->plan.dropped, capacity[l] = y->b->plan.capacity;
    ADD("dropped", LOOM_DT_I32, 0, NULL, &dropped[l]);
    ADD("capacity", LOOM_DT_I32, 0, NULL, &capacity[l]);
    ADD("param.router", LOOM_DT_F32, 2, sEC, y->p.router);
    ADD("grad.router", LOOM_DT_F32, 2, sEC, y->g.router);
    if (y->p.sel_bias) ADD("param.sel_bias", LOOM_DT_F32, 1, sE, y->p.sel_bias);
    const float *pw[3] = {y->p.wg, y->p.wu, y->p.wd}, *gw[3] = {y->g.wg, y->g.wu, y->g.wd};
    const char *part[3] = {"gate", "up", "down"};
    for (int m = 0; m < 3; m++) {
      char pn[64], gn[64];
      snprintf(pn, sizeof pn, "param.experts.%s", part[m]);
      snprintf(gn, sizeof gn, "grad.experts.%s", part[m]);
      float *a = owned[n_owned++] = compact(pw[m], c->E, (size_t)c->Ie * C, ws);
      float *g = owned[n_owned++] = compact(gw[m], c->E, (size_t)c->Ie * C, ws);
      ADD(pn, LOOM_DT_F32, 3, m == 2 ? sECI : sEIC, a);
      ADD(gn, LOOM_DT_F32, 3, m == 2 ? sECI : sEIC, g);
    }
    if (Is) {
      ADD("param.shared.gate", LOOM_DT_F32, 2, sIC, y->p.sg);
      ADD("grad.shared.gate", LOOM_DT_F32, 2, sIC, y->g.sg);
      ADD("param.shared.up", LOOM_DT_F32, 2, sIC, y->p.su);
      ADD("grad.shared.up", LOOM_DT_F32, 2, sIC, y->g.su);
      ADD("param.shared.down", LOOM_DT_F32, 2, sCI, y->p.sd);
      ADD("grad.shared.down", LOOM_DT_F32, 2, sCI, y->g.sd);
      ADD("param.shared_gate", LOOM_DT_F32, 2, s1C, y->p.sgate);
      ADD("grad.shared_gate", LOOM_DT_F32, 2, s1C, y->g.sgate);
    }
#undef ADD
  }
  loom_st_writer_add(w, "aux", LOOM_DT_F64, 0, NULL, &losses[0]);
  loom_st_writer_add(w, "z", LOOM_DT_F64, 0, NULL, &losses[1]);
  int rc = loom_st_writer_write(w, out);
  if (rc) fprintf(stderr, "%s\n", loom_errmsg());
  loom_st_writer_free(w);
  for (int i = 0; i < n_owned; i++) loom_free(owned[i]);
  for (int l = 0; l < LAYERS; l++) {
    loom_free(rows[l]);
    loom_moe_block_free_f32(L[l].b);
    loom_free(L[l].prm), loom_free(L[l].grd), loom_free(L[l].x), loom_free(L[l].R);
    loom_free(L[l].y), loom_free(L[l].dx);
  }
  return rc ? 1 : 0;
}

/* Qwen3 attention of loom's reference kernels: x (B,T,C) -> y (B,T,C), head_dim D = 16 with
 * hidden 30 and 4 query heads (4 * 16 != 30), 2 kv heads */
static int attn_dump(const char *out) {
  enum { Hq = 4, Hkv = 2, D = 16, QD = Hq * D, KD = Hkv * D };
  const double theta = 1e6;
  const float eps = 1e-6f;
  loom_rng_seed(&rng, 11);
  float *x = fill((size_t)N * C, 1.0, 0.0), *R = fill((size_t)N * C, 1.0, 0.0);
  float *wq = fill((size_t)QD * C, 1 / sqrt(C), 0), *wk = fill((size_t)KD * C, 1 / sqrt(C), 0);
  float *wv = fill((size_t)KD * C, 1 / sqrt(C), 0), *wo = fill((size_t)C * QD, 1 / sqrt(QD), 0);
  float *qn_w = fill(D, 0.1, 1.0), *kn_w = fill(D, 0.1, 1.0);
  float *q = fill((size_t)N * QD, 0, 0), *k = fill((size_t)N * KD, 0, 0);
  float *v = fill((size_t)N * KD, 0, 0), *qn = fill((size_t)N * QD, 0, 0);
  float *kn = fill((size_t)N * KD, 0, 0), *rq = fill((size_t)N * Hq, 0, 0);
  float *rk = fill((size_t)N * Hkv, 0, 0), *att = fill((size_t)N * QD, 0, 0);
  float *lse = fill((size_t)B * Hq * T, 0, 0), *y = fill((size_t)N * C, 0, 0);
  /* forward */
  loom_linear_forward_f32(q, x, wq, NULL, N, C, QD);
  loom_linear_forward_f32(k, x, wk, NULL, N, C, KD);
  loom_linear_forward_f32(v, x, wv, NULL, N, C, KD);
  loom_rmsnorm_forward_f32(qn, rq, q, qn_w, N * Hq, D, eps); /* per head: rows of D */
  loom_rmsnorm_forward_f32(kn, rk, k, kn_w, N * Hkv, D, eps);
  loom_rope_forward_f32(qn, B, T, Hq, D, theta, 0);
  loom_rope_forward_f32(kn, B, T, Hkv, D, theta, 0);
  loom_attention_forward_f32(att, lse, qn, kn, v, B, T, Hq, Hkv, D);
  loom_linear_forward_f32(y, att, wo, NULL, N, QD, C);
  /* backward of <R, y> */
  float *datt = fill((size_t)N * QD, 0, 0), *dqn = fill((size_t)N * QD, 0, 0);
  float *dkn = fill((size_t)N * KD, 0, 0), *dv = fill((size_t)N * KD, 0, 0);
  float *dq = fill((size_t)N * QD, 0, 0), *dk = fill((size_t)N * KD, 0, 0);
  float *dx = fill((size_t)N * C, 0, 0), *dwq = fill((size_t)QD * C, 0, 0);
  float *dwk = fill((size_t)KD * C, 0, 0), *dwv = fill((size_t)KD * C, 0, 0);
  float *dwo = fill((size_t)C * QD, 0, 0), *dqn_w = fill(D, 0, 0), *dkn_w = fill(D, 0, 0);
  loom_linear_backward_f32(datt, dwo, NULL, R, att, wo, N, QD, C);
  loom_attention_backward_f32(dqn, dkn, dv, datt, att, lse, qn, kn, v, B, T, Hq, Hkv, D);
  loom_rope_backward_f32(dqn, B, T, Hq, D, theta, 0);
  loom_rope_backward_f32(dkn, B, T, Hkv, D, theta, 0);
  loom_rmsnorm_backward_f32(dq, dqn_w, dqn, q, qn_w, rq, N * Hq, D);
  loom_rmsnorm_backward_f32(dk, dkn_w, dkn, k, kn_w, rk, N * Hkv, D);
  loom_linear_backward_f32(dx, dwq, NULL, dq, x, wq, N, C, QD);
  loom_linear_backward_f32(dx, dwk, NULL, dk, x, wk, N, C, KD);
  loom_linear_backward_f32(dx, dwv, NULL, dv, x, wv, N, C, KD);
  loom_st_writer *w = loom_st_writer_create();
  char val[32];
  loom_st_writer_set_metadata(w, "kind", "attention");
  int meta[6] = {B, T, C, Hq, Hkv, D};
  const char *keys[6] = {"B", "T", "hidden", "heads", "kv_heads", "head_dim"};
  for (int i = 0; i < 6; i++) snprintf(val, sizeof val, "%d", meta[i]), loom_st_writer_set_metadata(w, keys[i], val);
  snprintf(val, sizeof val, "%.17g", theta), loom_st_writer_set_metadata(w, "rope_theta", val);
  snprintf(val, sizeof val, "%.9g", (double)eps), loom_st_writer_set_metadata(w, "eps", val);
  int64_t sx[3] = {B, T, C}, sq[2] = {QD, C}, sk[2] = {KD, C}, so[2] = {C, QD}, sd[1] = {D};
  loom_st_writer_add(w, "x", LOOM_DT_F32, 3, sx, x), loom_st_writer_add(w, "R", LOOM_DT_F32, 3, sx, R);
  loom_st_writer_add(w, "y", LOOM_DT_F32, 3, sx, y), loom_st_writer_add(w, "dx", LOOM_DT_F32, 3, sx, dx);
  struct {
    const char *name;
    int nd;
    const int64_t *shape;
    const float *p, *g;
  } t[] = {{"q_proj", 2, sq, wq, dwq}, {"k_proj", 2, sk, wk, dwk}, {"v_proj", 2, sk, wv, dwv},
           {"o_proj", 2, so, wo, dwo}, {"q_norm", 1, sd, qn_w, dqn_w}, {"k_norm", 1, sd, kn_w, dkn_w}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    char nm[64];
    snprintf(nm, sizeof nm, "param.%s", t[i].name);
    loom_st_writer_add(w, nm, LOOM_DT_F32, t[i].nd, t[i].shape, t[i].p);
    snprintf(nm, sizeof nm, "grad.%s", t[i].name);
    loom_st_writer_add(w, nm, LOOM_DT_F32, t[i].nd, t[i].shape, t[i].g);
  }
  int rc = loom_st_writer_write(w, out);
  if (rc) fprintf(stderr, "%s\n", loom_errmsg());
  loom_st_writer_free(w);
  float *all[] = {x, R, wq, wk, wv, wo, qn_w, kn_w, q, k, v, qn, kn, rq, rk, att, lse, y, datt,
                  dqn, dkn, dv, dq, dk, dx, dwq, dwk, dwv, dwo, dqn_w, dkn_w};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) loom_free(all[i]);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: loom_moe_block_dump OUT.safetensors CASE\n");
    return 2;
  }
  if (!strcmp(argv[2], "qwen3_attention")) return attn_dump(argv[1]);
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
    if (!strcmp(argv[2], CASES[i].name)) return moe_dump(argv[1], &CASES[i]);
  fprintf(stderr, "loom_moe_block_dump: unknown case '%s': use qwen3_attention or one of", argv[2]);
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) fprintf(stderr, " %s", CASES[i].name);
  fprintf(stderr, "\n");
  return 2;
}

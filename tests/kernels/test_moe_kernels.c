/* Checks of the Mixture-of-Experts kernels (include/loom/kernels_moe.h).
 *
 *  - router: probabilities, top-k against a sort, ties to the lower expert, sel_bias choosing
 *    without weighting, norm_topk;
 *  - dispatch plan on a hand-made routing of 5 tokens: capacity 2 dropping by weight (with a
 *    tie) and by position, the dropped count, rows, inverse map and combine worked out by hand;
 *  - the whole layer in double (router + experts + combine + shared expert + load-balancing
 *    loss + z-loss, one layer and two layers pooled) against central finite differences, for
 *    E = 5 and 6, k = 1, 2, 3, norm_topk on and off, with and without the shared expert, with
 *    capacity dropping of both policies, an expert that no token reaches (its gradients must be
 *    exactly zero), sel_bias, and expert weights ws > Ie*C apart (NaN in the gaps: never read).
 *    Top-k and dropping by weight are discontinuous: every case asserts that the k-th and
 *    (k+1)-th selection scores of each row, and the last kept and first dropped weights of an
 *    expert over capacity, are at least MARGIN apart, far more than the h perturbation moves
 *    them, so the finite differences never cross a switch;
 *  - the float layer (fast grouped experts on the GEMM backend, oneDNN and OpenBLAS) and the
 *    float reference experts against double; bf16 mode against double on bf16 inputs;
 *  - determinism of the router, plan, gather and combine for 1 and 3 threads.
 * With --bench [N C E k Ie reps fresh]: times the grouped experts' forward + backward against a dense
 * SwiGLU of the same active FLOPs (inner size k*Ie over the N tokens). */
#include <omp.h>
#include <stdint.h>
#include <time.h>

#include "ktest.h"
#include "loom/kernels_moe.h"

/* Finite differences: h = 1e-6 in double. Truncation O(h^2 |f'''|) ~ 1e-12 and round-off
 * ~ eps |L| / h ~ 1e-16 * 10 / 1e-6 = 1e-9 (|L| <= 10 here) against gradients of order 0.1..1:
 * 1e-6 relative norm separates them from any real mistake (1e-2..1), as in
 * test_kernels_grad.c. */
#define FD_H 1e-6
#define FD_TOL 1e-6
/* selection scores and weights at a switch must be this far apart: h = 1e-6 on an input moves
 * a probability by at most ~h * max|x| * max|w| * 4 < 1e-4 here */
#define MARGIN 1e-3
/* backward twice on zeroed gradients = twice once: only the rounding of the second addition */
#define ACC_TOL 1e-13
/* float kernels against double on the same (float) inputs: products of length <= 48 and
 * softmaxes of <= 6 terms in fp32 lose a few ulps (eps 6e-8) relative to the norm of the
 * result; 1e-5 is the tolerance of every other f32-vs-f64 kernel check (docs/NUMERICS.md)
 * and leaves a 100x margin above what is measured */
#define F32_TOL 1e-5
/* bf16 mode against double on the same bf16 inputs: act, the output gradients and the SwiGLU
 * and router gradients are rounded to bf16 (relative 2^-9 = 2e-3 each, independent across
 * elements); a few such roundings compound in the weight gradients: 1e-2, the tolerance of
 * the dense bf16 checks against their emulation (docs/NUMERICS.md) */
#define BF16_TOL 1e-2

static double dot(const double *a, const double *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* ---- router -------------------------------------------------------------------------------- */

static void test_router(void) {
  enum { N = 7, E = 6 };
  double logits[N * E], probs[N * E], lse[N], w[N * 3], wb[N * 3], bias[E];
  int32_t idx[N * 3], idxb[N * 3];
  fill_normal(logits, N * E, 1.5);
  for (int e = 0; e < E; e++) logits[6 * E + e] = 0.25; /* row 6: all equal */
  logits[5 * E + 1] = logits[5 * E + 4] = 2.0;            /* row 5: a tie for the first place */
  for (int k = 1; k <= 3; k++)
    for (int norm = 0; norm < 2; norm++) {
      loom_moe_router_forward_f64(probs, lse, idx, w, logits, NULL, N, E, k, norm);
      for (int r = 0; r < N; r++) {
        const double *l = logits + r * E, *p = probs + r * E;
        double mx = l[0], s = 0, ps = 0;
        for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int e = 0; e < E; e++) s += exp(l[e] - mx);
        CHECK_CLOSE(lse[r], mx + log(s), 1e-14, "router lse");
        for (int e = 0; e < E; e++) CHECK_CLOSE(p[e], exp(l[e] - mx) / s, 1e-14, "router probs");
        /* top-k: by a selection sort that prefers the lower index on ties */
        int used[E] = {0};
        for (int j = 0; j < k; j++) {
          int best = -1;
          for (int e = 0; e < E; e++)
            if (!used[e] && (best < 0 || p[e] > p[best])) best = e;
          used[best] = 1;
          CHECK(idx[r * k + j] == best, "router k=%d row %d slot %d: expert %d, want %d", k, r,
                j, idx[r * k + j], best);
          ps += p[best];
        }
        for (int j = 0; j < k; j++)
          CHECK_CLOSE(w[r * k + j], p[idx[r * k + j]] / (norm ? ps : 1), 1e-14, "router w");
      }
      if (k == 3) { /* ties: the lower experts first */
        CHECK(idx[6 * k] == 0 && idx[6 * k + 1] == 1 && idx[6 * k + 2] == 2,
              "all-equal row: experts %d %d %d, want 0 1 2", idx[6 * k], idx[6 * k + 1],
              idx[6 * k + 2]);
        CHECK(idx[5 * k] == 1 && idx[5 * k + 1] == 4, "tied row: experts %d %d, want 1 4",
              idx[5 * k], idx[5 * k + 1]);
      }
      /* sel_bias chooses (a large bias on expert 5 puts it in every row's top k) but the
       * weights are still the probabilities of the chosen experts */
      for (int e = 0; e < E; e++) bias[e] = e == 5 ? 2.0 : 0.0;
      loom_moe_router_forward_f64(probs, lse, idxb, wb, logits, bias, N, E, k, norm);
      int changed = 0;
      for (int r = 0; r < N; r++) {
        double ps = 0;
        CHECK(idxb[r * k] == 5, "sel_bias: row %d first choice %d, want 5", r, idxb[r * k]);
        for (int j = 0; j < k; j++) ps += probs[r * E + idxb[r * k + j]];
        for (int j = 0; j < k; j++)
          CHECK_CLOSE(wb[r * k + j], probs[r * E + idxb[r * k + j]] / (norm ? ps : 1), 1e-14,
                      "sel_bias: weights are probabilities");
        for (int j = 0; j < k; j++) changed += idxb[r * k + j] != idx[r * k + j];
      }
      CHECK(changed > 0, "sel_bias changed no choice");
    }
}

/* ---- dispatch plan by hand ----------------------------------------------------------------- */

static void test_plan_by_hand(void) {
  /* 5 tokens, k = 2, E = 3; capacity ceil(0.5 * 5 * 2 / 3) = 2. Experts 0 and 1 have 4
   * candidates each, expert 2 has 2: 4 pairs are dropped. */
  enum { N = 5, K = 2, E = 3, C = 2 };
  const int32_t idx[N * K] = {0, 1, 0, 2, 1, 0, 0, 1, 2, 1};
  double w[N * K] = {0.5, 0.3, 0.6, 0.2, 0.45, 0.4, 0.7, 0.1, 0.55, 0.35};
  loom_moe_plan p;
  loom_moe_plan_init(&p, 8, K, E);
  int cap = loom_moe_capacity(0.5, N, K, E);
  CHECK(cap == 2, "capacity %d, want 2", cap);
  CHECK(loom_moe_capacity(0, N, K, E) == 0, "capacity factor 0 is no limit");
  /* by weight: e0 keeps t3 (.7), t1 (.6); e1 keeps t2 (.45), t4 (.35); e2 keeps both */
  loom_moe_plan_build_f64(&p, idx, w, N, cap, false);
  {
    const int32_t pairs[6] = {2, 6, 4, 9, 3, 8};
    CHECK(p.rows == 6 && p.dropped == 4, "by weight: %d rows, %d dropped; want 6, 4", p.rows,
          p.dropped);
    CHECK(p.count[0] == 2 && p.count[1] == 2 && p.count[2] == 2 && p.offset[3] == 6,
          "by weight: counts %d %d %d", p.count[0], p.count[1], p.count[2]);
    CHECK(p.selected[0] == 4 && p.selected[1] == 4 && p.selected[2] == 2,
          "selected %d %d %d, want 4 4 2", p.selected[0], p.selected[1], p.selected[2]);
    for (int r = 0; r < 6; r++) {
      CHECK(p.row_pair[r] == pairs[r] && p.row_token[r] == pairs[r] / K,
            "by weight: row %d holds pair %d, want %d", r, p.row_pair[r], pairs[r]);
      CHECK(p.pair_row[pairs[r]] == r, "by weight: pair %d -> row %d, want %d", pairs[r],
            p.pair_row[pairs[r]], r);
    }
    const int32_t gone[4] = {0, 1, 5, 7};
    for (int i = 0; i < 4; i++)
      CHECK(p.pair_row[gone[i]] == -1, "by weight: pair %d not dropped", gone[i]);
  }
  /* a tie at the capacity: t0's weight for e0 equal to t1's: the earlier token stays */
  w[0] = 0.6;
  loom_moe_plan_build_f64(&p, idx, w, N, cap, false);
  CHECK(p.row_pair[0] == 0 && p.row_pair[1] == 6, "tie: expert 0 keeps pairs %d %d, want 0 6",
        p.row_pair[0], p.row_pair[1]);
  w[0] = 0.5;
  /* by position: e0 keeps t0, t1; e1 keeps t0, t2; e2 t1, t4. Token 3 loses both slots. */
  loom_moe_plan_build_f64(&p, idx, w, N, cap, true);
  {
    const int32_t pairs[6] = {0, 2, 1, 4, 3, 8};
    CHECK(p.rows == 6 && p.dropped == 4, "by position: %d rows, %d dropped", p.rows, p.dropped);
    for (int r = 0; r < 6; r++)
      CHECK(p.row_pair[r] == pairs[r], "by position: row %d holds pair %d, want %d", r,
            p.row_pair[r], pairs[r]);
    /* combine of yp row r = (r+1, -(r+1)): token 3 gets 0, token 0 gets .5*1 + .3*3 (rows 0
     * and 2) */
    double yp[6 * C], y[N * C], dy[N * C], dyp[6 * C], dw[N * K] = {0};
    for (int r = 0; r < 6; r++) yp[r * C] = r + 1, yp[r * C + 1] = -(r + 1);
    loom_moe_combine_f64(y, yp, w, &p, C);
    CHECK(y[3 * C] == 0 && y[3 * C + 1] == 0, "a token with every slot dropped gets 0");
    CHECK_CLOSE(y[0], 0.5 * 1 + 0.3 * 3, 1e-15, "combine token 0");
    CHECK_CLOSE(y[1 * C], 0.6 * 2 + 0.2 * 5, 1e-15, "combine token 1");
    CHECK_CLOSE(y[4 * C], 0.55 * 6, 1e-15, "combine token 4: its slot 1 dropped (expert 1 full)");
    for (int i = 0; i < N * C; i++) dy[i] = 1;
    loom_moe_combine_backward_f64(dyp, dw, dy, yp, w, &p, C);
    CHECK(dw[6] == 0 && dw[7] == 0, "dropped pairs get no weight gradient");
    CHECK(dw[0] == 0 && dyp[0] == 0.5, "combine backward: <dy, yp> = 0 and dyp = w dy");
  }
  /* no capacity: everything kept, expert-major, token order */
  loom_moe_plan_build_f64(&p, idx, w, N, 0, false);
  {
    const int32_t pairs[10] = {0, 2, 5, 6, 1, 4, 7, 9, 3, 8};
    CHECK(p.rows == 10 && p.dropped == 0, "no capacity: %d rows %d dropped", p.rows, p.dropped);
    for (int r = 0; r < 10; r++)
      CHECK(p.row_pair[r] == pairs[r], "no capacity: row %d holds pair %d, want %d", r,
            p.row_pair[r], pairs[r]);
  }
  loom_moe_plan_free(&p);
}

/* ---- the whole layer by finite differences ------------------------------------------------- */

typedef struct {
  const char *name;
  int E, k, Is;
  bool norm, drop_by_position, bias;
  double cf;       /* capacity factor, 0: none */
  int starve;      /* an expert no token reaches (-1: none) */
  int layers;      /* 1, or 2 pooled */
} moe_case;

enum { TN = 9, TC = 7, TIe = 5, MAXL = 2 };

typedef struct {
  loom_moe_shape s;
  size_t ws; /* Ie*C + 3: gaps of NaN between experts */
  int nl;
  double *x[MAXL], *R[MAXL], *dx[MAXL], *y;
  double *prm[MAXL], *grd[MAXL]; /* one buffer per layer */
  loom_moe_params_f64 p[MAXL];
  loom_moe_grads_f64 g[MAXL];
  loom_moe_block_f64 *b[MAXL];
  double aux_coef, z_coef;
  double aux, z; /* of the last forward */
} moe_net;

/* carve the layer's tensors out of one buffer (params) and its twin (grads) */
static void net_carve(moe_net *n, int l) {
  const loom_moe_shape *s = &n->s;
  size_t C = s->C, E = s->E, Is = s->Is, off = 0;
  double *P = n->prm[l], *G = n->grd[l];
#define CARVE(field, len)                                                                      \
  do {                                                                                         \
    size_t len_ = (len);                                                                       \
    n->p[l].field = len_ > 0 ? P + off : NULL;                                                 \
    n->g[l].field = len_ > 0 ? G + off : NULL;                                                 \
    off += len_;                                                                               \
  } while (0)
  n->p[l].router = P, n->g[l].router = G, off = E * C;
  n->p[l].sel_bias = P + off, off += E;
  CARVE(wg, E * n->ws);
  CARVE(wu, E * n->ws);
  CARVE(wd, E * n->ws);
  CARVE(sg, Is * C);
  CARVE(su, Is * C);
  CARVE(sd, Is * C);
  CARVE(sgate, Is ? C : 0);
#undef CARVE
  n->p[l].ws = n->ws;
}

static size_t net_layer_size(const moe_net *n) {
  const loom_moe_shape *s = &n->s;
  return (size_t)s->E * s->C + s->E + 3 * s->E * n->ws + 3 * (size_t)s->Is * s->C +
         (s->Is ? s->C : 0);
}

/* total loss: sum over layers of <R, y> + aux (pooled) + z (summed over layers) */
static double net_loss(moe_net *n) {
  const loom_moe_shape *s = &n->s;
  int64_t sel[16] = {0};
  double psum[16] = {0}, lsq = 0, L = 0;
  for (int l = 0; l < n->nl; l++) {
    loom_moe_block_forward_f64(n->b[l], n->y, n->x[l], &n->p[l], TN);
    L += dot(n->y, n->R[l], (size_t)TN * s->C);
    loom_moe_router_stats_f64(sel, psum, &lsq, n->b[l]->probs, n->b[l]->lse, n->b[l]->idx, TN,
                              s->E, s->k);
  }
  n->aux = loom_moe_aux_loss(NULL, sel, psum, s->E, (int64_t)n->nl * TN, n->aux_coef);
  n->z = loom_moe_z_loss(NULL, lsq, TN, n->z_coef);
  return L + n->aux + n->z;
}

static void net_backward(moe_net *n) {
  const loom_moe_shape *s = &n->s;
  int64_t sel[16] = {0};
  double psum[16] = {0}, lsq = 0, aux_grad[16], z_grad;
  for (int l = 0; l < n->nl; l++) {
    loom_moe_block_forward_f64(n->b[l], n->y, n->x[l], &n->p[l], TN);
    loom_moe_router_stats_f64(sel, psum, &lsq, n->b[l]->probs, n->b[l]->lse, n->b[l]->idx, TN,
                              s->E, s->k);
  }
  loom_moe_aux_loss(aux_grad, sel, psum, s->E, (int64_t)n->nl * TN, n->aux_coef);
  loom_moe_z_loss(&z_grad, lsq, TN, n->z_coef);
  for (int l = 0; l < n->nl; l++)
    loom_moe_block_backward_f64(n->b[l], n->dx[l], &n->g[l], n->R[l], n->x[l], &n->p[l],
                                aux_grad, z_grad);
}

/* the smallest gap at a switch of the last forward: k-th vs (k+1)-th selection score of each
 * row; over capacity by weight, the last kept vs the first dropped weight of each expert */
static double net_margin(moe_net *n) {
  const loom_moe_shape *s = &n->s;
  double m = INFINITY;
  for (int l = 0; l < n->nl; l++) {
    loom_moe_block_f64 *b = n->b[l];
    loom_moe_block_forward_f64(b, n->y, n->x[l], &n->p[l], TN);
    for (int r = 0; r < TN; r++) {
      double sc[16];
      for (int e = 0; e < s->E; e++)
        sc[e] = b->probs[r * s->E + e] + (n->p[l].sel_bias ? n->p[l].sel_bias[e] : 0);
      double kth = INFINITY, next = -INFINITY;
      for (int j = 0; j < s->k; j++) kth = fmin(kth, sc[b->idx[r * s->k + j]]);
      for (int e = 0; e < s->E; e++) {
        int chosen = 0;
        for (int j = 0; j < s->k; j++) chosen |= b->idx[r * s->k + j] == e;
        if (!chosen) next = fmax(next, sc[e]);
      }
      m = fmin(m, kth - next);
    }
    if (b->plan.capacity > 0 && !s->drop_by_position)
      for (int e = 0; e < s->E; e++) {
        double kept = INFINITY, gone = -INFINITY;
        for (int i = 0; i < TN * s->k; i++) {
          if (b->idx[i] != e) continue;
          if (b->plan.pair_row[i] >= 0) kept = fmin(kept, b->w[i]);
          else gone = fmax(gone, b->w[i]);
        }
        if (gone > -INFINITY) m = fmin(m, kept - gone);
      }
  }
  return m;
}

static void net_free(moe_net *n) {
  for (int l = 0; l < n->nl; l++) {
    loom_moe_block_free_f64(n->b[l]);
    loom_free(n->x[l]), loom_free(n->R[l]), loom_free(n->dx[l]);
    loom_free(n->prm[l]), loom_free(n->grd[l]);
  }
  loom_free(n->y);
}

/* random weights and inputs for case c; returns the margin at switches */
static double net_make(moe_net *n, const moe_case *c, uint64_t seed) {
  memset(n, 0, sizeof *n);
  loom_rng_seed(&ktest_rng, seed);
  loom_moe_shape s = {TC, c->E, c->k, TIe, c->Is, c->norm, c->cf, c->drop_by_position};
  n->s = s;
  n->ws = (size_t)TIe * TC + 3;
  n->nl = c->layers;
  n->aux_coef = 0.7, n->z_coef = 0.3; /* large, so that both terms weigh in the check */
  n->y = dalloc((size_t)TN * TC);
  size_t sz = net_layer_size(n);
  for (int l = 0; l < n->nl; l++) {
    n->x[l] = dalloc((size_t)TN * TC), n->R[l] = dalloc((size_t)TN * TC);
    n->dx[l] = dalloc((size_t)TN * TC);
    fill_normal(n->x[l], (size_t)TN * TC, 1.0);
    fill_normal(n->R[l], (size_t)TN * TC, 1.0);
    n->prm[l] = dalloc(sz), n->grd[l] = dalloc(sz);
    fill_normal(n->prm[l], sz, 0.6);
    net_carve(n, l);
    if (!c->bias) n->p[l].sel_bias = NULL;
    else
      for (int e = 0; e < c->E; e++) n->prm[l][c->E * TC + e] *= 0.3;
    for (int e = 0; e < c->E; e++) /* the gaps between experts: never read */
      for (size_t i = (size_t)TIe * TC; i < n->ws; i++) {
        ((double *)n->p[l].wg)[e * n->ws + i] = NAN;
        ((double *)n->p[l].wu)[e * n->ws + i] = NAN;
        ((double *)n->p[l].wd)[e * n->ws + i] = NAN;
      }
    if (c->starve >= 0) { /* feature 0 of every token is >= 2 and the router row of the starved
                             expert weighs it by -4: its probability is below e^-8 */
      for (int t = 0; t < TN; t++) n->x[l][t * TC] = 2.0 + fabs(n->x[l][t * TC]);
      ((double *)n->p[l].router)[c->starve * TC] = -4.0;
    }
    n->b[l] = loom_moe_block_create_f64(&n->s, TN, false);
  }
  return net_margin(n);
}

static void fd_case(const moe_case *c) {
  moe_net n;
  double margin = 0;
  uint64_t seed = 1000;
  for (int tries = 0; tries < 50; tries++, seed++) {
    margin = net_make(&n, c, seed);
    if (margin >= MARGIN && (c->cf == 0 || n.b[0]->plan.dropped > 0)) break;
    net_free(&n);
  }
  CHECK(margin >= MARGIN, "%s: no seed with switches %.0e apart", c->name, MARGIN);
  printf("  %s: seed %llu, margin at switches %.3g\n", c->name, (unsigned long long)seed, margin);
  /* the analytic gradient */
  size_t sz = net_layer_size(&n);
  for (int l = 0; l < n.nl; l++) memset(n.grd[l], 0, sz * sizeof(double));
  for (int l = 0; l < n.nl; l++) memset(n.dx[l], 0, (size_t)TN * TC * sizeof(double));
  net_backward(&n);
  const loom_moe_plan *pl = &n.b[0]->plan;
  if (c->cf > 0) { /* the dropped count: what exceeds the capacity, expert by expert */
    int want = 0;
    for (int e = 0; e < c->E; e++) want += pl->selected[e] > pl->capacity ? pl->selected[e] - pl->capacity : 0;
    CHECK(pl->dropped == want && want > 0, "%s: %d dropped, want %d (> 0)", c->name, pl->dropped,
          want);
    printf("  %s: capacity %d, %d of %d pairs dropped\n", c->name, pl->capacity, pl->dropped,
           TN * c->k);
  }
  if (c->starve >= 0) {
    CHECK(pl->selected[c->starve] == 0, "%s: the starved expert got %d pairs", c->name,
          pl->selected[c->starve]);
    size_t o = (size_t)c->starve * n.ws;
    int zero = 1;
    for (size_t i = 0; i < (size_t)TIe * TC; i++)
      zero &= n.g[0].wg[o + i] == 0 && n.g[0].wu[o + i] == 0 && n.g[0].wd[o + i] == 0;
    CHECK(zero, "%s: an expert without tokens has a nonzero gradient", c->name);
  }
  for (int l = 0; l < n.nl; l++) /* the gaps stay untouched */
    for (int e = 0; e < c->E; e++)
      for (size_t i = (size_t)TIe * TC; i < n.ws; i++)
        CHECK(n.g[l].wg[e * n.ws + i] == 0 && n.g[l].wd[e * n.ws + i] == 0,
              "%s: the gap between experts was written", c->name);
  /* the same twice: the backward accumulates */
  {
    double *g1 = dalloc(sz), *dx1 = dalloc((size_t)TN * TC);
    memcpy(g1, n.grd[0], sz * sizeof(double));
    memcpy(dx1, n.dx[0], (size_t)TN * TC * sizeof(double));
    net_backward(&n);
    for (size_t i = 0; i < sz; i++) g1[i] *= 2;
    for (size_t i = 0; i < (size_t)TN * TC; i++) dx1[i] *= 2;
    CHECK_REL(rel_err_dd(n.grd[0], g1, sz), ACC_TOL, "%s: gradients accumulate", c->name);
    CHECK_REL(rel_err_dd(n.dx[0], dx1, (size_t)TN * TC), ACC_TOL, "%s: dx accumulates", c->name);
    for (size_t i = 0; i < sz; i++) n.grd[0][i] = g1[i] / 2;
    for (size_t i = 0; i < (size_t)TN * TC; i++) n.dx[0][i] = dx1[i] / 2;
    for (int l = 1; l < n.nl; l++) { /* layer 1 doubled too: halve it */
      for (size_t i = 0; i < sz; i++) n.grd[l][i] /= 2;
      for (size_t i = 0; i < (size_t)TN * TC; i++) n.dx[l][i] /= 2;
    }
    loom_free(g1), loom_free(dx1);
  }
  /* finite differences tensor by tensor (the gaps skipped, sel_bias has no gradient) */
  for (int l = 0; l < n.nl; l++) {
    struct {
      const char *name;
      double *x, *g;
      size_t n, ld, len; /* element i counts when i % ld < len */
    } t[] = {
        {"x", n.x[l], n.dx[l], (size_t)TN * TC, 1, 1},
        {"router", (double *)n.p[l].router, n.g[l].router, (size_t)c->E * TC, 1, 1},
        {"experts.gate", (double *)n.p[l].wg, n.g[l].wg, c->E * n.ws, n.ws, (size_t)TIe * TC},
        {"experts.up", (double *)n.p[l].wu, n.g[l].wu, c->E * n.ws, n.ws, (size_t)TIe * TC},
        {"experts.down", (double *)n.p[l].wd, n.g[l].wd, c->E * n.ws, n.ws, (size_t)TIe * TC},
        {"shared.gate", (double *)n.p[l].sg, n.g[l].sg, (size_t)c->Is * TC, 1, 1},
        {"shared.up", (double *)n.p[l].su, n.g[l].su, (size_t)c->Is * TC, 1, 1},
        {"shared.down", (double *)n.p[l].sd, n.g[l].sd, (size_t)c->Is * TC, 1, 1},
        {"shared_gate", (double *)n.p[l].sgate, n.g[l].sgate, c->Is ? (size_t)TC : 0, 1, 1},
    };
    for (size_t ti = 0; ti < sizeof t / sizeof t[0]; ti++) {
      if (!t[ti].n) continue;
      double *fd = dalloc(t[ti].n), *an = dalloc(t[ti].n);
      size_t m = 0;
      for (size_t i = 0; i < t[ti].n; i++) {
        if (i % t[ti].ld >= t[ti].len) continue;
        double save = t[ti].x[i];
        t[ti].x[i] = save + FD_H;
        double lp = net_loss(&n);
        t[ti].x[i] = save - FD_H;
        double lm = net_loss(&n);
        t[ti].x[i] = save;
        fd[m] = (lp - lm) / (2 * FD_H);
        an[m++] = t[ti].g[i];
      }
      CHECK_REL(rel_err_dd(an, fd, m), FD_TOL, "%s: layer %d d%s vs finite differences",
                c->name, l, t[ti].name);
      loom_free(fd), loom_free(an);
    }
  }
  /* the aux and z terms are really in the loss: they move it */
  net_loss(&n);
  CHECK(n.aux > 0.1 && n.z > 0.1, "%s: aux %.3g z %.3g", c->name, n.aux, n.z);
  net_free(&n);
}

static const moe_case CASES[] = {
    /* name                       E  k  Is norm   bypos  bias   cf   starve layers */
    {"E5 k1 shared", 5, 1, 4, false, false, false, 0, -1, 1},
    {"E6 k2 norm cap-weight", 6, 2, 0, true, false, false, 0.8, -1, 1},
    {"E5 k3 norm shared cap-position sel_bias", 5, 3, 4, true, true, true, 0.9, -1, 1},
    {"E6 k2 starved expert", 6, 2, 0, false, false, false, 0, 3, 1},
    {"E6 k3 shared cap-weight sel_bias", 6, 3, 3, false, false, true, 0.7, -1, 1},
    {"E5 k2 norm shared 2 layers pooled", 5, 2, 4, true, false, false, 0, -1, 2},
};

/* ---- float against double ------------------------------------------------------------------ */

static float *to_f32_new(const double *x, size_t n) {
  float *f = falloc(n);
  for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
  return f;
}

/* the f32 layer (bf16 mode or not) on the case's first layer against the f64 one; in bf16
 * mode the double side gets x and weights rounded to bf16 */
static void f32_case(const moe_case *c, bool bf16, loom_gemm_backend be) {
  moe_net n;
  double margin = 0;
  uint64_t seed = 1000;
  for (int tries = 0; tries < 50; tries++, seed++) {
    margin = net_make(&n, c, seed);
    if (margin >= MARGIN) break;
    net_free(&n);
  }
  n.nl = 1; /* one layer (free the second below) */
  size_t sz = net_layer_size(&n), NC = (size_t)TN * TC;
  if (bf16) {
    for (size_t i = 0; i < sz; i++) n.prm[0][i] = loom_bf16_round((float)n.prm[0][i]);
    for (size_t i = 0; i < NC; i++) n.x[0][i] = loom_bf16_round((float)n.x[0][i]);
  }
  /* double */
  memset(n.grd[0], 0, sz * sizeof(double));
  memset(n.dx[0], 0, NC * sizeof(double));
  net_backward(&n);
  double *y64 = dalloc(NC);
  loom_moe_block_forward_f64(n.b[0], y64, n.x[0], &n.p[0], TN);
  /* float: same tensors in a float twin of the buffer */
  float *P = to_f32_new(n.prm[0], sz), *G = falloc(sz), *x = to_f32_new(n.x[0], NC);
  float *R = to_f32_new(n.R[0], NC), *dx = falloc(NC), *y = falloc(NC);
  loom_moe_params_f32 p;
  loom_moe_grads_f32 g;
#define TWIN(f) p.f = n.p[0].f ? P + (n.p[0].f - n.prm[0]) : NULL
#define TWING(f) g.f = n.g[0].f ? G + (n.g[0].f - n.grd[0]) : NULL
  TWIN(router), TWIN(sel_bias), TWIN(wg), TWIN(wu), TWIN(wd), TWIN(sg), TWIN(su), TWIN(sd);
  TWIN(sgate);
  TWING(router), TWING(wg), TWING(wu), TWING(wd), TWING(sg), TWING(su), TWING(sd), TWING(sgate);
#undef TWIN
#undef TWING
  p.ws = n.ws;
  loom_gemm_set_backend(be);
  loom_moe_block_f32 *b = loom_moe_block_create_f32(&n.s, TN, bf16);
  loom_moe_block_forward_f32(b, y, x, &p, TN);
  int64_t sel[16] = {0};
  double psum[16] = {0}, lsq = 0, aux_grad[16], z_grad;
  loom_moe_router_stats_f32(sel, psum, &lsq, b->probs, b->lse, b->idx, TN, c->E, c->k);
  loom_moe_aux_loss(aux_grad, sel, psum, c->E, TN, n.aux_coef);
  loom_moe_z_loss(&z_grad, lsq, TN, n.z_coef);
  loom_moe_block_backward_f32(b, dx, &g, R, x, &p, aux_grad, z_grad);
  double tol = bf16 ? BF16_TOL : F32_TOL;
  const char *be_name = loom_gemm_backend_name(be);
  const char *mode = bf16 ? "bf16" : "f32";
  CHECK(b->plan.rows == n.b[0]->plan.rows && b->plan.dropped == n.b[0]->plan.dropped,
        "%s %s: the float layer routed differently", c->name, mode);
  for (int i = 0; i < TN * c->k; i++)
    CHECK(b->idx[i] == n.b[0]->idx[i], "%s %s: pair %d chose %d, double %d", c->name, mode, i,
          b->idx[i], n.b[0]->idx[i]);
  CHECK_REL(rel_err_fd(b->probs, n.b[0]->probs, (size_t)TN * c->E), tol, "%s %s %s: probs",
            c->name, mode, be_name);
  CHECK_REL(rel_err_fd(y, y64, NC), tol, "%s %s %s: y", c->name, mode, be_name);
  CHECK_REL(rel_err_fd(dx, n.dx[0], NC), tol, "%s %s %s: dx", c->name, mode, be_name);
  CHECK_REL(rel_err_fd(G, n.grd[0], sz), tol, "%s %s %s: every weight gradient", c->name, mode,
            be_name);
  struct {
    const char *name;
    const float *f;
    const double *d;
    size_t n;
  } parts[] = {{"router", g.router, n.g[0].router, (size_t)c->E * TC},
               {"experts.gate", g.wg, n.g[0].wg, c->E * n.ws},
               {"experts.down", g.wd, n.g[0].wd, c->E * n.ws},
               {"shared.up", g.su, n.g[0].su, (size_t)c->Is * TC},
               {"shared_gate", g.sgate, n.g[0].sgate, c->Is ? (size_t)TC : 0}};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    if (parts[i].n)
      CHECK_REL(rel_err_fd(parts[i].f, parts[i].d, parts[i].n), tol, "%s %s %s: d%s", c->name,
                mode, be_name, parts[i].name);
  if (bf16) { /* the rounding is applied: the same inputs in plain f32 land elsewhere */
    loom_moe_block_f32 *b32 = loom_moe_block_create_f32(&n.s, TN, false);
    float *y32 = falloc(NC);
    loom_moe_block_forward_f32(b32, y32, x, &p, TN);
    double d = 0, s = 0;
    for (size_t i = 0; i < NC; i++) d += (y[i] - y32[i]) * (y[i] - y32[i]), s += y32[i] * y32[i];
    CHECK(sqrt(d / s) > 1e-4, "%s bf16: no rounding applied (%.3g from fp32)", c->name,
          sqrt(d / s));
    loom_moe_block_free_f32(b32);
    loom_free(y32);
  }
  loom_moe_block_free_f32(b);
  loom_gemm_set_backend(LOOM_GEMM_ONEDNN);
  loom_free(P), loom_free(G), loom_free(x), loom_free(R), loom_free(dx), loom_free(y);
  loom_free(y64);
  n.nl = c->layers;
  net_free(&n);
}

/* the float reference experts (one cblas product per expert and matrix) against the fast
 * grouped path, with experts of 0, 1 and many rows */
static void test_experts_fast_vs_ref(void) {
  enum { C = 24, Ie = 20, NE = 4 };
  const int count[NE] = {0, 1, 37, 12};
  int rows = 50;
  size_t ws = (size_t)Ie * C;
  double *dw = dalloc(3 * NE * ws), *dxp = dalloc((size_t)rows * C), *ddy = dalloc((size_t)rows * C);
  fill_normal(dw, 3 * NE * ws, 0.2);
  fill_normal(dxp, (size_t)rows * C, 1.0);
  fill_normal(ddy, (size_t)rows * C, 1.0);
  float *w = to_f32_new(dw, 3 * NE * ws), *xp = to_f32_new(dxp, (size_t)rows * C);
  float *dyp = to_f32_new(ddy, (size_t)rows * C);
  float *wg = w, *wu = w + NE * ws, *wd = w + 2 * NE * ws;
  float *y_ref = falloc((size_t)rows * C), *y_fast = falloc((size_t)rows * C);
  float *hg = falloc((size_t)rows * Ie), *hu = falloc((size_t)rows * Ie);
  float *act = falloc((size_t)rows * Ie);
  float *g_ref = falloc(3 * NE * ws), *g_fast = falloc(3 * NE * ws);
  float *dx_ref = falloc((size_t)rows * C), *dx_fast = falloc((size_t)rows * C);
  float *work = falloc(loom_moe_experts_work_floats(rows, C, Ie, false));
  for (int be = 0; be < 2; be++) {
    loom_gemm_set_backend(be ? LOOM_GEMM_OPENBLAS : LOOM_GEMM_ONEDNN);
    memset(g_ref, 0, 3 * NE * ws * sizeof(float)), memset(g_fast, 0, 3 * NE * ws * sizeof(float));
    memset(dx_ref, 0, (size_t)rows * C * sizeof(float));
    loom_moe_experts_forward_f32(y_ref, hg, hu, xp, wg, wu, wd, ws, count, NE, C, Ie);
    loom_moe_experts_backward_f32(dx_ref, g_ref, g_ref + NE * ws, g_ref + 2 * NE * ws, dyp, xp, hg,
                                  hu, wg, wu, wd, ws, count, NE, C, Ie);
    loom_moe_expert_acts a = {hg, hu, act};
    loom_moe_experts_forward_fast_f32(y_fast, &a, xp, wg, wu, wd, ws, count, NE, C, Ie, false);
    loom_moe_experts_backward_fast_f32(dx_fast, g_fast, g_fast + NE * ws, g_fast + 2 * NE * ws,
                                       dyp, &a, xp, wg, wu, wd, ws, count, NE, C, Ie, false, work);
    const char *bn = loom_gemm_backend_name(be ? LOOM_GEMM_OPENBLAS : LOOM_GEMM_ONEDNN);
    double e1 = 0, e2 = 0, e3 = 0;
    {
      double *a64 = dalloc(3 * NE * ws), *b64 = dalloc((size_t)rows * C);
      for (size_t i = 0; i < 3 * NE * ws; i++) a64[i] = g_ref[i];
      e1 = rel_err_fd(g_fast, a64, 3 * NE * ws);
      for (size_t i = 0; i < (size_t)rows * C; i++) b64[i] = y_ref[i];
      e2 = rel_err_fd(y_fast, b64, (size_t)rows * C);
      for (size_t i = 0; i < (size_t)rows * C; i++) b64[i] = dx_ref[i];
      e3 = rel_err_fd(dx_fast, b64, (size_t)rows * C);
      loom_free(a64), loom_free(b64);
    }
    CHECK_REL(e2, F32_TOL, "fast experts (%s) vs reference f32: yp", bn);
    CHECK_REL(e3, F32_TOL, "fast experts (%s) vs reference f32: dxp", bn);
    CHECK_REL(e1, F32_TOL, "fast experts (%s) vs reference f32: weight gradients", bn);
    int zero = 1; /* expert 0 has no rows */
    for (size_t i = 0; i < ws; i++)
      zero &= g_fast[i] == 0 && g_fast[NE * ws + i] == 0 && g_fast[2 * NE * ws + i] == 0;
    CHECK(zero, "fast experts (%s): an expert without rows got a gradient", bn);
  }
  loom_gemm_set_backend(LOOM_GEMM_ONEDNN);
  loom_free(dw), loom_free(dxp), loom_free(ddy), loom_free(w), loom_free(xp), loom_free(dyp);
  loom_free(y_ref), loom_free(y_fast), loom_free(hg), loom_free(hu), loom_free(act);
  loom_free(g_ref), loom_free(g_fast), loom_free(dx_ref), loom_free(dx_fast), loom_free(work);
}

/* ---- determinism ---------------------------------------------------------------------------- */

/* router, plan, gather, combine and their backwards, and the grouped experts on OpenBLAS, on
 * 3 threads: bitwise those of 1 */
static void test_threads(void) {
  enum { N = 3000, E = 12, K = 3, C = 40 };
  float *logits = falloc((size_t)N * E), *x = falloc((size_t)N * C), *dy = falloc((size_t)N * C);
  double *tmp = dalloc((size_t)N * C);
  fill_normal(tmp, (size_t)N * E, 2.0), to_f32(logits, tmp, (size_t)N * E);
  fill_normal(tmp, (size_t)N * C, 1.0), to_f32(x, tmp, (size_t)N * C);
  fill_normal(tmp, (size_t)N * C, 1.0), to_f32(dy, tmp, (size_t)N * C);
  size_t outs = (size_t)N * E * 2 + N * K * 2 + (size_t)N * K * C * 2 + (size_t)N * C * 2 + E;
  float *res[2];
  for (int rep = 0; rep < 2; rep++) {
    omp_set_num_threads(rep ? 3 : 1);
    float *o = res[rep] = falloc(outs);
    float *probs = o, *dl = o + (size_t)N * E, *w = dl + (size_t)N * E, *dw = w + N * K;
    float *xp = dw + N * K, *dxp = xp + (size_t)N * K * C, *y = dxp + (size_t)N * K * C;
    float *dx = y + (size_t)N * C, *psum = dx + (size_t)N * C;
    float lse[N];
    int32_t idx[N * K];
    loom_moe_router_forward_f32(probs, lse, idx, w, logits, NULL, N, E, K, true);
    double ps[E] = {0}, aux_grad[E];
    int64_t sel[E] = {0};
    loom_moe_router_stats_f32(sel, ps, NULL, probs, lse, idx, N, E, K);
    for (int e = 0; e < E; e++) psum[e] = (float)ps[e];
    loom_moe_aux_loss(aux_grad, sel, ps, E, N, 0.01);
    loom_moe_plan p;
    loom_moe_plan_init(&p, N, K, E);
    loom_moe_plan_build_f32(&p, idx, w, N, loom_moe_capacity(1.0, N, K, E), false);
    loom_moe_gather_f32(xp, x, &p, C);
    loom_moe_combine_f32(y, xp, w, &p, C);
    loom_moe_combine_backward_f32(dxp, dw, dy, xp, w, &p, C);
    loom_moe_gather_backward_f32(dx, dxp, &p, C);
    loom_moe_router_backward_f32(dl, dw, probs, lse, idx, w, aux_grad, 1e-3, N, E, K, true);
    loom_moe_plan_free(&p);
  }
  omp_set_num_threads(1);
  CHECK(!memcmp(res[0], res[1], outs * sizeof(float)),
        "router/plan/gather/combine: 3 threads differ from 1");
  /* the grouped experts on OpenBLAS (in parallel over experts): the same bits on 1 and 3 */
  {
    enum { NE = 7, R = 300, CC = 24, Ie = 20 };
    const int count[NE] = {60, 0, 1, 90, 33, 77, 39};
    size_t ws = (size_t)Ie * CC, nw = 3 * NE * ws;
    float *w = falloc(nw), *xp = falloc((size_t)R * CC), *dyp = falloc((size_t)R * CC);
    double *d = dalloc(nw);
    fill_normal(d, nw, 0.2), to_f32(w, d, nw);
    fill_normal(d, (size_t)R * CC, 1.0), to_f32(xp, d, (size_t)R * CC);
    fill_normal(d, (size_t)R * CC, 1.0), to_f32(dyp, d, (size_t)R * CC);
    size_t o2 = (size_t)R * CC * 2 + nw + (size_t)R * Ie * 3;
    float *r2[2], *work = falloc(loom_moe_experts_work_floats(R, CC, Ie, true));
    loom_gemm_set_backend(LOOM_GEMM_OPENBLAS);
    for (int bf = 0; bf < 2; bf++) {
      for (int rep = 0; rep < 2; rep++) {
        omp_set_num_threads(rep ? 3 : 1);
        float *o = r2[rep] = falloc(o2);
        float *yp = o, *dxp = yp + (size_t)R * CC, *g = dxp + (size_t)R * CC, *h = g + nw;
        loom_moe_expert_acts a = {h, h + (size_t)R * Ie, h + 2 * (size_t)R * Ie};
        loom_moe_experts_forward_fast_f32(yp, &a, xp, w, w + NE * ws, w + 2 * NE * ws, ws, count,
                                          NE, CC, Ie, bf);
        loom_moe_experts_backward_fast_f32(dxp, g, g + NE * ws, g + 2 * NE * ws, dyp, &a, xp, w,
                                           w + NE * ws, w + 2 * NE * ws, ws, count, NE, CC, Ie,
                                           bf, work);
      }
      omp_set_num_threads(1);
      CHECK(!memcmp(r2[0], r2[1], o2 * sizeof(float)),
            "grouped experts on OpenBLAS%s: 3 threads differ from 1", bf ? ", bf16" : "");
      loom_free(r2[0]), loom_free(r2[1]);
    }
    loom_gemm_set_backend(LOOM_GEMM_ONEDNN);
    loom_free(w), loom_free(xp), loom_free(dyp), loom_free(d), loom_free(work);
  }
  loom_free(res[0]), loom_free(res[1]);
  loom_free(logits), loom_free(x), loom_free(dy), loom_free(tmp);
}

/* ---- benchmark ------------------------------------------------------------------------------ */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* grouped experts forward + backward over the rows the router gives N random tokens, E
 * experts, top k, against a dense SwiGLU of inner size k*Ie on the same N tokens (the same
 * 18 N k Ie C FLOPs); each repetition draws new routing (new per-expert row counts, as every
 * training step does). */
static int bench(int N, int C, int E, int k, int Ie, int reps, int fresh) {
  size_t ws = (size_t)Ie * C, NK = (size_t)N * k, I = (size_t)k * Ie;
  float *w = falloc(3 * E * ws), *g = falloc(3 * E * ws), *x = falloc((size_t)N * C);
  float *logits = falloc((size_t)N * E), *probs = falloc((size_t)N * E), *lse = falloc(N);
  float *rw = falloc(NK), *xp = falloc(NK * C), *yp = falloc(NK * C), *dyp = falloc(NK * C);
  float *dxp = falloc(NK * C), *hg = falloc(NK * Ie), *hu = falloc(NK * Ie), *act = falloc(NK * Ie);
  float *work = falloc(loom_moe_experts_work_floats((int)NK, C, Ie, false));
  int32_t *idx = loom_alloc(NK * sizeof(int32_t));
  for (size_t i = 0; i < 3 * E * ws; i++) w[i] = 0.02f * (float)loom_rng_normal(&ktest_rng);
  for (size_t i = 0; i < (size_t)N * C; i++) x[i] = (float)loom_rng_normal(&ktest_rng);
  for (size_t i = 0; i < NK * C; i++) dyp[i] = (float)loom_rng_normal(&ktest_rng);
  loom_moe_plan p;
  loom_moe_plan_init(&p, N, k, E);
  loom_moe_expert_acts a = {hg, hu, act};
  double t_route = 0, t_fwd = 0, t_bwd = 0, t_dense_f = 0, t_dense_b = 0;
  int max_count = 0;
  for (int rep = 0; rep <= reps; rep++) { /* rep 0 warms up */
    double t0 = now_s();
    if (rep <= 1 || fresh) /* new logits: new per-expert row counts */
      for (size_t i = 0; i < (size_t)N * E; i++) logits[i] = (float)loom_rng_normal(&ktest_rng);
    double t1 = now_s();
    loom_moe_router_forward_f32(probs, lse, idx, rw, logits, NULL, N, E, k, true);
    loom_moe_plan_build_f32(&p, idx, rw, N, 0, false);
    loom_moe_gather_f32(xp, x, &p, C);
    double t2 = now_s();
    loom_moe_experts_forward_fast_f32(yp, &a, xp, w, w + E * ws, w + 2 * E * ws, ws, p.count, E,
                                      C, Ie, false);
    double t3 = now_s();
    loom_moe_experts_backward_fast_f32(dxp, g, g + E * ws, g + 2 * E * ws, dyp, &a, xp, w,
                                       w + E * ws, w + 2 * E * ws, ws, p.count, E, C, Ie, false,
                                       work);
    double t4 = now_s();
    (void)t0;
    if (rep) t_route += t2 - t1, t_fwd += t3 - t2, t_bwd += t4 - t3;
    for (int e = 0; e < E; e++) max_count = p.count[e] > max_count ? p.count[e] : max_count;
  }
  /* dense SwiGLU, inner k*Ie, on N tokens: the same products as one expert with every row */
  float *dwt = falloc(3 * I * C), *dact = falloc((size_t)N * I), *dgt = falloc((size_t)N * I);
  float *dup = falloc((size_t)N * I);
  float *Dg = falloc((size_t)N * I), *Du = falloc((size_t)N * I), *Da = falloc((size_t)N * I);
  float *dy = falloc((size_t)N * C), *dxd = falloc((size_t)N * C), *yd = falloc((size_t)N * C);
  for (size_t i = 0; i < 3 * I * C; i++) dwt[i] = 0.02f * (float)loom_rng_normal(&ktest_rng);
  float *gd = falloc(3 * I * C);
  for (int rep = 0; rep <= reps; rep++) {
    double t0 = now_s();
    loom_gemm_f32(0, 1, N, I, C, x, C, dwt, C, NULL, 0.0f, Dg, I);
    loom_gemm_f32(0, 1, N, I, C, x, C, dwt + I * C, C, NULL, 0.0f, Du, I);
    loom_swiglu_forward_fast_f32(Da, Dg, Du, (size_t)N * I);
    loom_gemm_f32(0, 1, N, C, I, Da, I, dwt + 2 * I * C, I, NULL, 0.0f, yd, C);
    double t1 = now_s();
    loom_gemm_f32(0, 0, N, I, C, dyp, C, dwt + 2 * I * C, I, NULL, 0.0f, dact, I);
    loom_gemm_f32(1, 0, C, I, N, dyp, C, Da, I, NULL, 1.0f, gd + 2 * I * C, I);
    loom_swiglu_backward_fast_f32(dgt, dup, dact, Dg, Du, (size_t)N * I);
    loom_gemm_f32(1, 0, I, C, N, dgt, I, x, C, NULL, 1.0f, gd, C);
    loom_gemm_f32(1, 0, I, C, N, dup, I, x, C, NULL, 1.0f, gd + I * C, C);
    loom_gemm_f32(0, 0, N, C, I, dgt, I, dwt, C, NULL, 0.0f, dxd, C);
    loom_gemm_f32(0, 0, N, C, I, dup, I, dwt + I * C, C, NULL, 1.0f, dxd, C);
    double t2 = now_s();
    if (rep) t_dense_f += t1 - t0, t_dense_b += t2 - t1;
  }
  double fl_f = 6.0 * NK * C * Ie, fl_b = 12.0 * NK * C * Ie;
  printf("bench N=%d C=%d E=%d k=%d Ie=%d (%zu rows, largest expert %d), %d threads, %s, %d reps, "
         "%s\n", N, C, E, k, Ie, NK, max_count, omp_get_max_threads(),
         loom_gemm_backend_name(loom_gemm_get_backend()), reps,
         fresh ? "new routing every rep" : "the same routing every rep");
  printf("  route+plan+gather %8.2f ms\n", 1e3 * t_route / reps);
  printf("  experts forward   %8.2f ms  %6.1f GFLOP/s\n", 1e3 * t_fwd / reps, fl_f * reps / t_fwd / 1e9);
  printf("  experts backward  %8.2f ms  %6.1f GFLOP/s\n", 1e3 * t_bwd / reps, fl_b * reps / t_bwd / 1e9);
  printf("  dense I=%zu fwd   %8.2f ms  %6.1f GFLOP/s\n", I, 1e3 * t_dense_f / reps, fl_f * reps / t_dense_f / 1e9);
  printf("  dense I=%zu bwd   %8.2f ms  %6.1f GFLOP/s\n", I, 1e3 * t_dense_b / reps, fl_b * reps / t_dense_b / 1e9);
  printf("  experts / dense (fwd+bwd): %.3f\n", (t_fwd + t_bwd) / (t_dense_f + t_dense_b));
  loom_moe_plan_free(&p);
  void *bufs[] = {w, g, x, logits, probs, lse, rw, xp, yp, dyp, dxp, hg, hu, act, work, idx,
                  dwt, dact, dgt, dup, Dg, Du, Da, dy, dxd, yd, gd};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) loom_free(bufs[i]);
  return 0;
}

int main(int argc, char **argv) {
  loom_rng_seed(&ktest_rng, 42);
  if (argc > 1 && !strcmp(argv[1], "--bench")) {
    int v[7] = {2048, 2048, 16, 1, 768, 3, 1};
    for (int i = 2; i < argc && i < 9; i++) v[i - 2] = atoi(argv[i]);
    return bench(v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
  }
  printf("router\n");
  test_router();
  printf("plan by hand\n");
  test_plan_by_hand();
  printf("whole layer, double, finite differences\n");
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) fd_case(&CASES[i]);
  printf("float and bf16 against double\n");
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
    for (int be = 0; be < 2; be++) f32_case(&CASES[i], false, be ? LOOM_GEMM_OPENBLAS : LOOM_GEMM_ONEDNN);
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
    for (int be = 0; be < 2; be++) f32_case(&CASES[i], true, be ? LOOM_GEMM_OPENBLAS : LOOM_GEMM_ONEDNN);
  test_experts_fast_vs_ref();
  printf("threads\n");
  test_threads();
  ktest_report_worst();
  return harness_finish("test_moe_kernels");
}

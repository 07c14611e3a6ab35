/* Gradient checks of every f64 backward kernel against central finite differences.
 *
 * For each op, a fixed random R defines the scalar objective L = sum(out * R) (cross-entropy:
 * L = scale * sum(losses), matching its backward's `scale`), so the backward called with
 * dout = R must give dL/d(input) for every input and parameter. Sizes are small and odd so
 * that no dimension hides behind another (N=5, C=7, T=5, Hq=6 with Hkv=2/3/6/1, D=4/6...).
 *
 * Tolerance: relative norm error ||g - fd|| / max(||fd||, 1e-8) <= 1e-6. With h = 1e-6 the
 * central-difference truncation error is O(h^2 f''') ~ 1e-12, and the roundoff of
 * (L(x+h) - L(x-h)) / 2h is ~ eps |L| / h ~ 1e-16 * 10 / 1e-6 ~ 1e-9 at worst for our |L|;
 * both are far below 1e-6, while any real mistake in a gradient (a missing term, a wrong
 * index) gives errors of order 1e-2..1.
 *
 * Every accumulating backward is also called twice on zeroed gradients: the result must be
 * twice the first (relative 1e-13: only rounding of the second addition differs). */
#include "ktest.h"

#define FD_H 1e-6
#define FD_TOL 1e-6
#define ACC_TOL 1e-13

typedef struct {
  const char *name;
  double *x; /* the input or parameter being perturbed */
  double *g; /* where the backward accumulates its gradient */
  size_t n;
} gparam;

static double dot(const double *a, const double *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* loss(): forward at the current inputs, returns L. backward(): forward at the current inputs
 * (for saved statistics) then backward with dout = R, accumulating into the g's. */
static void grad_check(const char *op, double (*loss)(void), void (*backward)(void), gparam *ps,
                       int np, int accumulates) {
  double *g1[8];
  LOOM_ASSERT(np <= 8);
  for (int p = 0; p < np; p++) memset(ps[p].g, 0, sizeof(double) * ps[p].n);
  backward();
  for (int p = 0; p < np; p++) {
    g1[p] = dalloc(ps[p].n);
    memcpy(g1[p], ps[p].g, sizeof(double) * ps[p].n);
  }
  if (accumulates) {
    backward();
    for (int p = 0; p < np; p++) {
      double *twice = dalloc(ps[p].n);
      for (size_t i = 0; i < ps[p].n; i++) twice[i] = 2 * g1[p][i];
      CHECK_REL(rel_err_dd(ps[p].g, twice, ps[p].n), ACC_TOL, "%s: d%s accumulates", op,
                ps[p].name);
      loom_free(twice);
    }
  }
  for (int p = 0; p < np; p++) {
    double *fd = dalloc(ps[p].n);
    for (size_t i = 0; i < ps[p].n; i++) {
      double save = ps[p].x[i];
      ps[p].x[i] = save + FD_H;
      double lp = loss();
      ps[p].x[i] = save - FD_H;
      double lm = loss();
      ps[p].x[i] = save;
      fd[i] = (lp - lm) / (2 * FD_H);
    }
    CHECK_REL(rel_err_dd(g1[p], fd, ps[p].n), FD_TOL, "%s: d%s vs finite differences", op,
              ps[p].name);
    loom_free(fd);
    loom_free(g1[p]);
  }
}

/* ---- linear ---- */
static int LM = 5, LK = 7, LN = 3;
static double *lx, *lw, *lb, *lR, *ly, *ldx, *ldw, *ldb;
static double linear_loss(void) {
  loom_linear_forward_f64(ly, lx, lw, lb, LM, LK, LN);
  return dot(ly, lR, (size_t)LM * LN);
}
static void linear_bwd(void) { loom_linear_backward_f64(ldx, ldw, ldb, lR, lx, lw, LM, LK, LN); }
static void test_linear(void) {
  size_t nx = (size_t)LM * LK, nw = (size_t)LN * LK, ny = (size_t)LM * LN;
  lx = dalloc(nx), lw = dalloc(nw), lb = dalloc(LN), lR = dalloc(ny), ly = dalloc(ny);
  ldx = dalloc(nx), ldw = dalloc(nw), ldb = dalloc(LN);
  fill_normal(lx, nx, 1), fill_normal(lw, nw, 1), fill_normal(lb, LN, 1), fill_normal(lR, ny, 1);
  gparam ps[] = {{"x", lx, ldx, nx}, {"w", lw, ldw, nw}, {"b", lb, ldb, LN}};
  grad_check("linear", linear_loss, linear_bwd, ps, 3, 1);
}

/* ---- LayerNorm / RMSNorm ---- */
static int NN = 5, NC = 7;
static double *nx_, *nw, *nb, *nR, *ny, *nmean, *nrstd, *ndx, *ndw, *ndb;
static double layernorm_loss(void) {
  loom_layernorm_forward_f64(ny, nmean, nrstd, nx_, nw, nb, NN, NC, 1e-5);
  return dot(ny, nR, (size_t)NN * NC);
}
static void layernorm_bwd(void) {
  loom_layernorm_forward_f64(ny, nmean, nrstd, nx_, nw, nb, NN, NC, 1e-5);
  loom_layernorm_backward_f64(ndx, ndw, ndb, nR, nx_, nw, nmean, nrstd, NN, NC);
}
static double rmsnorm_loss(void) {
  loom_rmsnorm_forward_f64(ny, nrstd, nx_, nw, NN, NC, 1e-5);
  return dot(ny, nR, (size_t)NN * NC);
}
static void rmsnorm_bwd(void) {
  loom_rmsnorm_forward_f64(ny, nrstd, nx_, nw, NN, NC, 1e-5);
  loom_rmsnorm_backward_f64(ndx, ndw, nR, nx_, nw, nrstd, NN, NC);
}
static void test_norms(void) {
  size_t n = (size_t)NN * NC;
  nx_ = dalloc(n), nw = dalloc(NC), nb = dalloc(NC), nR = dalloc(n), ny = dalloc(n);
  nmean = dalloc(NN), nrstd = dalloc(NN), ndx = dalloc(n), ndw = dalloc(NC), ndb = dalloc(NC);
  fill_normal(nx_, n, 1.5), fill_normal(nw, NC, 1), fill_normal(nb, NC, 1), fill_normal(nR, n, 1);
  for (size_t i = 0; i < n; i++) nx_[i] += 0.5;  // nonzero row means
  gparam ln[] = {{"x", nx_, ndx, n}, {"w", nw, ndw, NC}, {"b", nb, ndb, NC}};
  grad_check("layernorm", layernorm_loss, layernorm_bwd, ln, 3, 1);
  gparam rn[] = {{"x", nx_, ndx, n}, {"w", nw, ndw, NC}};
  grad_check("rmsnorm", rmsnorm_loss, rmsnorm_bwd, rn, 2, 1);
}

/* ---- GELU / SwiGLU ---- */
enum { EN = 13 };
static double ex[EN], eu[EN], eR[EN], ey[EN], edx[EN], edu[EN];
static double gelu_loss(void) {
  loom_gelu_forward_f64(ey, ex, EN);
  return dot(ey, eR, EN);
}
static void gelu_bwd(void) { loom_gelu_backward_f64(edx, eR, ex, EN); }
static double swiglu_loss(void) {
  loom_swiglu_forward_f64(ey, ex, eu, EN);
  return dot(ey, eR, EN);
}
static void swiglu_bwd(void) { loom_swiglu_backward_f64(edx, edu, eR, ex, eu, EN); }
static void test_elementwise(void) {
  fill_normal(ex, EN, 2), fill_normal(eu, EN, 1), fill_normal(eR, EN, 1);
  gparam g[] = {{"x", ex, edx, EN}};
  grad_check("gelu", gelu_loss, gelu_bwd, g, 1, 1);
  gparam s[] = {{"gate", ex, edx, EN}, {"up", eu, edu, EN}};
  grad_check("swiglu", swiglu_loss, swiglu_bwd, s, 2, 1);
}

/* ---- RoPE (in place; the backward transforms, it does not accumulate) ---- */
enum { RB = 2, RT = 5, RH = 3, RD = 6, RN = RB * RT * RH * RD };
static double rx[RN], rR[RN], ry[RN], rdx[RN];
static double rope_loss(void) {
  memcpy(ry, rx, sizeof rx);
  loom_rope_forward_f64(ry, RB, RT, RH, RD, 10000.0, 3);
  return dot(ry, rR, RN);
}
static void rope_bwd(void) {
  memcpy(rdx, rR, sizeof rR);
  loom_rope_backward_f64(rdx, RB, RT, RH, RD, 10000.0, 3);
}
static void test_rope(void) {
  fill_normal(rx, RN, 1), fill_normal(rR, RN, 1);
  gparam g[] = {{"x", rx, rdx, RN}};
  grad_check("rope", rope_loss, rope_bwd, g, 1, 0);
}

/* ---- attention ---- */
static int AB, AT, AHq, AHkv, AD;
static double *aq, *ak, *av, *aR, *aout, *alse, *adq, *adk, *adv;
static double attn_loss(void) {
  loom_attention_forward_f64(aout, alse, aq, ak, av, AB, AT, AHq, AHkv, AD);
  return dot(aout, aR, (size_t)AB * AT * AHq * AD);
}
static void attn_bwd(void) {
  loom_attention_forward_f64(aout, alse, aq, ak, av, AB, AT, AHq, AHkv, AD);
  loom_attention_backward_f64(adq, adk, adv, aR, aout, alse, aq, ak, av, AB, AT, AHq, AHkv, AD);
}
static void test_attention(int B, int T, int Hq, int Hkv, int D) {
  AB = B, AT = T, AHq = Hq, AHkv = Hkv, AD = D;
  size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D;
  aq = dalloc(nq), ak = dalloc(nk), av = dalloc(nk), aR = dalloc(nq), aout = dalloc(nq);
  alse = dalloc((size_t)B * Hq * T), adq = dalloc(nq), adk = dalloc(nk), adv = dalloc(nk);
  fill_normal(aq, nq, 1), fill_normal(ak, nk, 1), fill_normal(av, nk, 1), fill_normal(aR, nq, 1);
  char name[64];
  snprintf(name, sizeof name, "attention B%d T%d Hq%d Hkv%d D%d", B, T, Hq, Hkv, D);
  gparam g[] = {{"q", aq, adq, nq}, {"k", ak, adk, nk}, {"v", av, adv, nk}};
  grad_check(name, attn_loss, attn_bwd, g, 3, 1);
  loom_free(aq), loom_free(ak), loom_free(av), loom_free(aR), loom_free(aout);
  loom_free(alse), loom_free(adq), loom_free(adk), loom_free(adv);
}

/* ---- cross-entropy: L = scale * sum(losses) ---- */
enum { XN = 7, XV = 11, XVP = 16 };
static double xlog[XN * XVP], xloss[XN], xdl[XN * XVP];
static int32_t xtgt[XN] = {3, LOOM_IGNORE_INDEX, 0, 10, 3, LOOM_IGNORE_INDEX, 7};
static const double XSCALE = 0.37;
static double xent_loss(void) {
  loom_xent_forward_f64(xloss, xlog, xtgt, XN, XV, XVP);
  double s = 0;
  for (int n = 0; n < XN; n++) s += xloss[n];
  return XSCALE * s;
}
static void xent_bwd(void) { loom_xent_backward_f64(xdl, xlog, xtgt, XN, XV, XVP, XSCALE); }
static void test_xent(void) {
  fill_normal(xlog, XN * XVP, 2);
  for (int n = 0; n < XN; n++)
    for (int j = XV; j < XVP; j++) xlog[n * XVP + j] = 1e4;  // huge padding logits
  gparam g[] = {{"logits", xlog, xdl, XN * XVP}};
  grad_check("xent", xent_loss, xent_bwd, g, 1, 1);
}

/* ---- embedding ---- */
enum { MB = 2, MT = 5, MC = 7, MV = 11 };
static double mwte[MV * MC], mwpe[MT * MC], mR[MB * MT * MC], my[MB * MT * MC];
static double mdwte[MV * MC], mdwpe[MT * MC];
static int32_t mtok[MB * MT] = {1, 4, 4, 0, 10, 4, 9, 1, 2, 1};  // repeats on purpose
static int muse_wpe = 1;
static double emb_loss(void) {
  loom_embedding_forward_f64(my, mtok, mwte, muse_wpe ? mwpe : NULL, MB, MT, MC);
  return dot(my, mR, MB * MT * MC);
}
static void emb_bwd(void) {
  loom_embedding_backward_f64(mdwte, muse_wpe ? mdwpe : NULL, mR, mtok, MB, MT, MC);
}
static void test_embedding(void) {
  fill_normal(mwte, MV * MC, 1), fill_normal(mwpe, MT * MC, 1), fill_normal(mR, MB * MT * MC, 1);
  gparam g[] = {{"wte", mwte, mdwte, MV * MC}, {"wpe", mwpe, mdwpe, MT * MC}};
  muse_wpe = 1;
  grad_check("embedding (wte+wpe)", emb_loss, emb_bwd, g, 2, 1);
  muse_wpe = 0;
  grad_check("embedding (wte only, wpe NULL)", emb_loss, emb_bwd, g, 1, 1);
}

int main(void) {
  loom_rng_seed(&ktest_rng, 1234);
  test_linear();
  test_norms();
  test_elementwise();
  test_rope();
  test_attention(2, 5, 6, 2, 4);
  test_attention(2, 5, 6, 3, 6);
  test_attention(1, 7, 3, 3, 6);
  test_attention(2, 6, 4, 1, 5);
  test_xent();
  test_embedding();
  ktest_report_worst();
  return harness_finish("test_kernels_grad");
}

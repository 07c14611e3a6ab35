/* f32 kernels vs f64 kernels on identical inputs (the f64 inputs are float values), forward
 * outputs and backward gradients, for every op. The f64 kernels are checked against finite
 * differences in test_kernels_grad.c, so this ties the trainer's f32 path to a verified one.
 *
 * Tolerance: relative norm error <= 1e-5. Float unit roundoff is u = 2^-24 ~ 6e-8; a sum of L
 * terms has error ~ sqrt(L) u typically (L u worst case), and the longest reductions here are
 * L = 70 (linear K), 150 (norms), 33*16 (attention) and 1000 (cross-entropy V), i.e. ~2e-6
 * typical per element, less in a relative norm over many elements. expf/tanhf/logf add ~1 ulp.
 * Gradients start from the same random nonzero values in both precisions, so the
 * accumulate (+=) path is compared too. Sizes span several 64-column blocks and exceed the
 * OpenMP work threshold in places, so the parallel paths run as well. */
#include "ktest.h"

#define TOL 1e-5

typedef struct {
  double *d;
  float *f;
  size_t n;
} pair;

static pair mk(size_t n, double scale) {
  pair p = {dalloc(n), falloc(n), n};
  fill_normal(p.d, n, scale);
  to_f32(p.f, p.d, n);
  return p;
}
static const char *cur_op = "";  // printed before each compared tensor's name
static void cmp(const char *what, pair p) {
  CHECK_REL(rel_err_fd(p.f, p.d, p.n), TOL, "%s: %s", cur_op, what);
}
static void drop(pair p) {
  loom_free(p.d);
  loom_free(p.f);
}

static void test_linear(int M, int K, int N, int with_bias) {
  pair x = mk((size_t)M * K, 1), w = mk((size_t)N * K, 0.2), b = mk(N, 1);
  pair y = mk((size_t)M * N, 0), dy = mk((size_t)M * N, 1);
  pair dx = mk((size_t)M * K, 1), dw = mk((size_t)N * K, 1), db = mk(N, 1);
  loom_linear_forward_f64(y.d, x.d, w.d, with_bias ? b.d : NULL, M, K, N);
  loom_linear_forward_f32(y.f, x.f, w.f, with_bias ? b.f : NULL, M, K, N);
  loom_linear_backward_f64(dx.d, dw.d, db.d, dy.d, x.d, w.d, M, K, N);
  loom_linear_backward_f32(dx.f, dw.f, db.f, dy.f, x.f, w.f, M, K, N);
  char s[64];
  snprintf(s, sizeof s, "linear%s", with_bias ? "" : " (no bias)");
  cur_op = s;
  printf("%s M=%d K=%d N=%d\n", s, M, K, N);
  cmp("y", y), cmp("dx", dx), cmp("dw", dw), cmp("db", db);
  drop(x), drop(w), drop(b), drop(y), drop(dy), drop(dx), drop(dw), drop(db);
}

static void test_norms(int N, int C) {
  size_t n = (size_t)N * C;
  pair x = mk(n, 2), w = mk(C, 1), b = mk(C, 1), y = mk(n, 0), dy = mk(n, 1);
  pair mean = mk(N, 0), rstd = mk(N, 0), dx = mk(n, 1), dw = mk(C, 1), db = mk(C, 1);
  for (size_t i = 0; i < n; i++) x.d[i] += 1, x.f[i] += 1;  // exact in both: nonzero means
  cur_op = "layernorm";
  printf("layernorm N=%d C=%d\n", N, C);
  loom_layernorm_forward_f64(y.d, mean.d, rstd.d, x.d, w.d, b.d, N, C, 1e-5);
  loom_layernorm_forward_f32(y.f, mean.f, rstd.f, x.f, w.f, b.f, N, C, 1e-5f);
  loom_layernorm_backward_f64(dx.d, dw.d, db.d, dy.d, x.d, w.d, mean.d, rstd.d, N, C);
  loom_layernorm_backward_f32(dx.f, dw.f, db.f, dy.f, x.f, w.f, mean.f, rstd.f, N, C);
  cmp("y", y), cmp("mean", mean), cmp("rstd", rstd), cmp("dx", dx), cmp("dw", dw);
  cmp("db", db);
  cur_op = "rmsnorm";
  printf("rmsnorm N=%d C=%d\n", N, C);
  loom_rmsnorm_forward_f64(y.d, rstd.d, x.d, w.d, N, C, 1e-5);
  loom_rmsnorm_forward_f32(y.f, rstd.f, x.f, w.f, N, C, 1e-5f);
  loom_rmsnorm_backward_f64(dx.d, dw.d, dy.d, x.d, w.d, rstd.d, N, C);
  loom_rmsnorm_backward_f32(dx.f, dw.f, dy.f, x.f, w.f, rstd.f, N, C);
  cmp("y", y), cmp("rstd", rstd), cmp("dx", dx), cmp("dw", dw);
  drop(x), drop(w), drop(b), drop(y), drop(dy), drop(mean), drop(rstd), drop(dx), drop(dw);
  drop(db);
}

static void test_elementwise(size_t n) {
  pair x = mk(n, 3), u = mk(n, 1), y = mk(n, 0), dy = mk(n, 1), dx = mk(n, 1), du = mk(n, 1);
  cur_op = "gelu";
  printf("gelu n=%zu\n", n);
  loom_gelu_forward_f64(y.d, x.d, n);
  loom_gelu_forward_f32(y.f, x.f, n);
  loom_gelu_backward_f64(dx.d, dy.d, x.d, n);
  loom_gelu_backward_f32(dx.f, dy.f, x.f, n);
  cmp("y", y), cmp("dx", dx);
  cur_op = "swiglu";
  printf("swiglu n=%zu\n", n);
  loom_swiglu_forward_f64(y.d, x.d, u.d, n);
  loom_swiglu_forward_f32(y.f, x.f, u.f, n);
  loom_swiglu_backward_f64(dx.d, du.d, dy.d, x.d, u.d, n);
  loom_swiglu_backward_f32(dx.f, du.f, dy.f, x.f, u.f, n);
  cmp("y", y), cmp("dgate", dx), cmp("dup", du);
  drop(x), drop(u), drop(y), drop(dy), drop(dx), drop(du);
}

static void test_rope(int B, int T, int H, int D, int pos_offset) {
  size_t n = (size_t)B * T * H * D;
  pair x = mk(n, 1), dx = mk(n, 1);
  cur_op = "rope";
  printf("rope B=%d T=%d H=%d D=%d pos_offset=%d\n", B, T, H, D, pos_offset);
  loom_rope_forward_f64(x.d, B, T, H, D, 10000.0, pos_offset);
  loom_rope_forward_f32(x.f, B, T, H, D, 10000.0, pos_offset);
  loom_rope_backward_f64(dx.d, B, T, H, D, 10000.0, pos_offset);
  loom_rope_backward_f32(dx.f, B, T, H, D, 10000.0, pos_offset);
  cmp("x (forward, in place)", x), cmp("dx (backward, in place)", dx);
  drop(x), drop(dx);
}

static void test_attention(int B, int T, int Hq, int Hkv, int D) {
  size_t nq = (size_t)B * T * Hq * D, nk = (size_t)B * T * Hkv * D;
  pair q = mk(nq, 1), k = mk(nk, 1), v = mk(nk, 1), out = mk(nq, 0);
  pair lse = mk((size_t)B * Hq * T, 0);
  pair dout = mk(nq, 1), dq = mk(nq, 1), dk = mk(nk, 1), dv = mk(nk, 1);
  cur_op = "attention";
  printf("attention B=%d T=%d Hq=%d Hkv=%d D=%d\n", B, T, Hq, Hkv, D);
  loom_attention_forward_f64(out.d, lse.d, q.d, k.d, v.d, B, T, Hq, Hkv, D);
  loom_attention_forward_f32(out.f, lse.f, q.f, k.f, v.f, B, T, Hq, Hkv, D);
  // each backward from its own precision's forward results, as in training
  loom_attention_backward_f64(dq.d, dk.d, dv.d, dout.d, out.d, lse.d, q.d, k.d, v.d, B, T, Hq,
                              Hkv, D);
  loom_attention_backward_f32(dq.f, dk.f, dv.f, dout.f, out.f, lse.f, q.f, k.f, v.f, B, T, Hq,
                              Hkv, D);
  cmp("out", out), cmp("lse", lse), cmp("dq", dq), cmp("dk", dk), cmp("dv", dv);
  drop(q), drop(k), drop(v), drop(out), drop(lse), drop(dout), drop(dq), drop(dk), drop(dv);
}

static void test_xent(int N, int V, int Vp) {
  pair logits = mk((size_t)N * Vp, 3), losses = mk(N, 0), dl = mk((size_t)N * Vp, 1);
  int32_t *tgt = loom_alloc(sizeof(int32_t) * N);
  for (int n = 0; n < N; n++)
    tgt[n] = n % 7 == 3 ? LOOM_IGNORE_INDEX : (int32_t)loom_rng_below(&ktest_rng, V);
  cur_op = "xent";
  printf("xent N=%d V=%d Vp=%d\n", N, V, Vp);
  int c64 = loom_xent_forward_f64(losses.d, logits.d, tgt, N, V, Vp);
  int c32 = loom_xent_forward_f32(losses.f, logits.f, tgt, N, V, Vp);
  CHECK(c64 == c32, "count %d vs %d", c64, c32);
  loom_xent_backward_f64(dl.d, logits.d, tgt, N, V, Vp, 1.0 / c64);
  loom_xent_backward_f32(dl.f, logits.f, tgt, N, V, Vp, 1.0f / (float)c32);
  cmp("losses", losses), cmp("dlogits", dl);
  loom_free(tgt);
  drop(logits), drop(losses), drop(dl);
}

static void test_embedding(int B, int T, int C, int V) {
  pair wte = mk((size_t)V * C, 1), wpe = mk((size_t)T * C, 1), y = mk((size_t)B * T * C, 0);
  pair dy = mk((size_t)B * T * C, 1), dwte = mk((size_t)V * C, 1), dwpe = mk((size_t)T * C, 1);
  int32_t *tok = loom_alloc(sizeof(int32_t) * B * T);
  for (int i = 0; i < B * T; i++) tok[i] = (int32_t)loom_rng_below(&ktest_rng, V);
  cur_op = "embedding";
  printf("embedding B=%d T=%d C=%d V=%d\n", B, T, C, V);
  loom_embedding_forward_f64(y.d, tok, wte.d, wpe.d, B, T, C);
  loom_embedding_forward_f32(y.f, tok, wte.f, wpe.f, B, T, C);
  loom_embedding_backward_f64(dwte.d, dwpe.d, dy.d, tok, B, T, C);
  loom_embedding_backward_f32(dwte.f, dwpe.f, dy.f, tok, B, T, C);
  cmp("y", y), cmp("dwte", dwte), cmp("dwpe", dwpe);
  loom_embedding_forward_f64(y.d, tok, wte.d, NULL, B, T, C);
  loom_embedding_forward_f32(y.f, tok, wte.f, NULL, B, T, C);
  loom_embedding_backward_f64(dwte.d, NULL, dy.d, tok, B, T, C);
  loom_embedding_backward_f32(dwte.f, NULL, dy.f, tok, B, T, C);
  cmp("y (wpe NULL)", y), cmp("dwte (dwpe NULL)", dwte);
  loom_free(tok);
  drop(wte), drop(wpe), drop(y), drop(dy), drop(dwte), drop(dwpe);
}

int main(void) {
  loom_rng_seed(&ktest_rng, 99);
  test_linear(37, 70, 130, 1);
  test_linear(5, 3, 7, 0);
  test_norms(9, 150);
  test_norms(130, 131);  // above the OpenMP threshold
  test_elementwise(1000);
  test_elementwise(20001);
  test_rope(2, 17, 4, 16, 1000);
  test_attention(2, 33, 8, 2, 16);
  test_attention(1, 9, 3, 3, 6);
  test_xent(20, 1000, 1024);
  test_embedding(3, 17, 130, 50);
  ktest_report_worst();
  return harness_finish("test_kernels_f32");
}

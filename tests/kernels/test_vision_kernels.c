/* Vision reference kernels: segment attention, table-driven rotary embedding and erf GELU —
 * f64 backward against central finite differences, f32 against f64, and properties
 * (no attention across segments, rotation inverse). Tolerances as in test_kernels_grad.c:
 * 1e-6 for FD in double (truncation ~h^2 = 1e-12, round-off ~eps/h = 1e-10), 1e-5 for f32. */
#include "harness.h"
#include "ktest.h"
#include "loom/kernels_vision.h"

enum { ROWS = 11, H = 2, D = 6, NSEG = 3 };
static const int seg[NSEG + 1] = {0, 4, 5, 11};

/* L = sum(out * R) for attention with inputs q, k, v */
static double att_loss(const double *q, const double *k, const double *v, const double *R) {
  double out[ROWS * H * D], lse[H * ROWS], L = 0;
  loom_seg_attention_forward_f64(out, lse, q, k, v, ROWS, H, D, seg, NSEG);
  for (int i = 0; i < ROWS * H * D; i++) L += out[i] * R[i];
  return L;
}

static void test_seg_attention(void) {
  size_t n = ROWS * H * D;
  double *q = dalloc(n), *k = dalloc(n), *v = dalloc(n), *R = dalloc(n);
  fill_normal(q, n, 1), fill_normal(k, n, 1), fill_normal(v, n, 1), fill_normal(R, n, 1);
  double *out = dalloc(n), *lse = dalloc(H * ROWS), *dq = dalloc(n), *dk = dalloc(n), *dv = dalloc(n);
  loom_seg_attention_forward_f64(out, lse, q, k, v, ROWS, H, D, seg, NSEG);
  loom_seg_attention_backward_f64(dq, dk, dv, R, out, lse, q, k, v, ROWS, H, D, seg, NSEG);
  double *in[3] = {q, k, v}, *g[3] = {dq, dk, dv}, *fd = dalloc(n);
  const char *names[3] = {"dq", "dk", "dv"};
  for (int t = 0; t < 3; t++) {
    for (size_t i = 0; i < n; i++) {
      double keep = in[t][i], h = 1e-6;
      in[t][i] = keep + h;
      double lp = att_loss(q, k, v, R);
      in[t][i] = keep - h;
      double lm = att_loss(q, k, v, R);
      in[t][i] = keep;
      fd[i] = (lp - lm) / (2 * h);
    }
    CHECK_REL(rel_err_dd(g[t], fd, n), 1e-6, "segment attention %s vs finite differences", names[t]);
  }
  /* no attention across segments: changing k, v of segment 2 leaves rows of segments 0-1 alone */
  double *out2 = dalloc(n), *lse2 = dalloc(H * ROWS);
  for (size_t i = (size_t)seg[2] * H * D; i < n; i++) k[i] += 1.0, v[i] -= 2.0;
  loom_seg_attention_forward_f64(out2, lse2, q, k, v, ROWS, H, D, seg, NSEG);
  CHECK(!memcmp(out, out2, (size_t)seg[2] * H * D * sizeof(double)), "segments leak");
  /* a segment of one row returns its own value */
  for (int h = 0; h < H; h++)
    for (int d = 0; d < D; d++)
      CHECK(fabs(out2[(4 * H + h) * D + d] - v[(4 * H + h) * D + d]) < 1e-15, "single-row segment");
  /* f32 against f64 */
  float *qf = falloc(n), *kf = falloc(n), *vf = falloc(n), *of = falloc(n), *lf = falloc(H * ROWS);
  float *Rf = falloc(n), *dqf = falloc(n), *dkf = falloc(n), *dvf = falloc(n);
  to_f32(qf, q, n), to_f32(kf, k, n), to_f32(vf, v, n), to_f32(Rf, R, n);
  loom_seg_attention_forward_f64(out, lse, q, k, v, ROWS, H, D, seg, NSEG);
  memset(dq, 0, n * 8), memset(dk, 0, n * 8), memset(dv, 0, n * 8);
  loom_seg_attention_backward_f64(dq, dk, dv, R, out, lse, q, k, v, ROWS, H, D, seg, NSEG);
  loom_seg_attention_forward_f32(of, lf, qf, kf, vf, ROWS, H, D, seg, NSEG);
  loom_seg_attention_backward_f32(dqf, dkf, dvf, Rf, of, lf, qf, kf, vf, ROWS, H, D, seg, NSEG);
  CHECK_REL(rel_err_fd(of, out, n), 1e-5, "segment attention f32 out");
  CHECK_REL(rel_err_fd(dqf, dq, n), 1e-5, "segment attention f32 dq");
  CHECK_REL(rel_err_fd(dkf, dk, n), 1e-5, "segment attention f32 dk");
  CHECK_REL(rel_err_fd(dvf, dv, n), 1e-5, "segment attention f32 dv");
  void *all[] = {q, k, v, R, out, lse, dq, dk, dv, fd, out2, lse2, qf, kf, vf, of, lf, Rf, dqf, dkf, dvf};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) loom_free(all[i]);
}

static void test_rope_table(void) {
  int rows = 5;
  size_t n = (size_t)rows * H * D;
  double cs[5 * D / 2], sn[5 * D / 2];
  for (int i = 0; i < rows * D / 2; i++) {
    double a = 0.37 * i - 1.1;
    cs[i] = cos(a), sn[i] = sin(a);
  }
  double *x = dalloc(n), *y = dalloc(n), *R = dalloc(n), *g = dalloc(n), *fd = dalloc(n);
  fill_normal(x, n, 1), fill_normal(R, n, 1);
  memcpy(y, x, n * 8);
  loom_rope_table_forward_f64(y, cs, sn, rows, H, D);
  /* a rotation: norms kept, backward(forward(x)) = x */
  double nx = 0, ny = 0;
  for (size_t i = 0; i < n; i++) nx += x[i] * x[i], ny += y[i] * y[i];
  CHECK(fabs(nx - ny) < 1e-12 * nx, "rotation keeps the norm");
  memcpy(g, y, n * 8);
  loom_rope_table_backward_f64(g, cs, sn, rows, H, D);
  CHECK_REL(rel_err_dd(g, x, n), 1e-14, "rope table inverse");
  /* backward is the gradient: d/dx sum(R * rope(x)) = rope^-1(R) */
  memcpy(g, R, n * 8);
  loom_rope_table_backward_f64(g, cs, sn, rows, H, D);
  for (size_t i = 0; i < n; i++) {
    double keep = x[i], h = 1e-6, lp = 0, lm = 0;
    x[i] = keep + h, memcpy(y, x, n * 8), loom_rope_table_forward_f64(y, cs, sn, rows, H, D);
    for (size_t j = 0; j < n; j++) lp += y[j] * R[j];
    x[i] = keep - h, memcpy(y, x, n * 8), loom_rope_table_forward_f64(y, cs, sn, rows, H, D);
    for (size_t j = 0; j < n; j++) lm += y[j] * R[j];
    x[i] = keep;
    fd[i] = (lp - lm) / (2 * h);
  }
  CHECK_REL(rel_err_dd(g, fd, n), 1e-6, "rope table backward vs finite differences");
  loom_free(x), loom_free(y), loom_free(R), loom_free(g), loom_free(fd);
}

static void test_gelu_erf(void) {
  size_t n = 64;
  double *x = dalloc(n), *y = dalloc(n), *dx = dalloc(n), *one = dalloc(n), *fd = dalloc(n);
  fill_normal(x, n, 2);
  for (size_t i = 0; i < n; i++) one[i] = 1;
  loom_gelu_erf_forward_f64(y, x, n);
  CHECK(fabs(y[0] - 0.5 * x[0] * (1 + erf(x[0] / sqrt(2)))) < 1e-15, "gelu erf formula");
  loom_gelu_erf_backward_f64(dx, one, x, n);
  for (size_t i = 0; i < n; i++) {
    double h = 1e-6, a = x[i] + h, b = x[i] - h, ya, yb;
    loom_gelu_erf_forward_f64(&ya, &a, 1), loom_gelu_erf_forward_f64(&yb, &b, 1);
    fd[i] = (ya - yb) / (2 * h);
  }
  CHECK_REL(rel_err_dd(dx, fd, n), 1e-6, "gelu erf backward vs finite differences");
  loom_free(x), loom_free(y), loom_free(dx), loom_free(one), loom_free(fd);
}

int main(void) {
  loom_rng_seed(&ktest_rng, 17);
  test_seg_attention();
  test_rope_table();
  test_gelu_erf();
  ktest_report_worst();
  return harness_finish("test_vision_kernels");
}

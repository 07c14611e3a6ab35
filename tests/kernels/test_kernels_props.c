/* Kernel properties that gradient checks cannot see:
 *  - every f64 forward against a direct transcription of its formula (the gradient tests only
 *    show that backward matches forward, not that forward is the right function);
 *  - attention: causality, GQA == repeated kv heads, lse == direct logsumexp;
 *  - RoPE: Hugging Face rotate_half convention on a hand-computed case, backward inverts;
 *  - cross-entropy: padding columns and ignored rows, returned count, stability;
 *  - NULL optional arguments;
 *  - AdamW vs a double transcription of torch.optim.AdamW; bf16 rounding; sumsq;
 *  - bitwise identical results for 1 and 3 OpenMP threads. */
#include <omp.h>

#include "ktest.h"

/* Direct formulas are evaluated in double with different summation orders and no max
 * subtraction, so agreement is to rounding: 1e-12 relative. */
#define REF_TOL 1e-12

static double maxabs_diff(const double *a, const double *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
  return m;
}

/* ---- forwards vs direct formulas -------------------------------------------------------- */

static void test_forward_formulas(void) {
  printf("forward kernels vs direct formulas (f64)\n");
  enum { M = 4, K = 9, N = 5, C = 11 };
  double x[M * K], w[N * K], b[N], y[M * N], ref[M * N];
  fill_normal(x, M * K, 1), fill_normal(w, N * K, 1), fill_normal(b, N, 1);
  for (int withb = 0; withb < 2; withb++) {
    loom_linear_forward_f64(y, x, w, withb ? b : NULL, M, K, N);
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N; n++) {
        double s = withb ? b[n] : 0;
        for (int k = 0; k < K; k++) s += x[m * K + k] * w[n * K + k];
        ref[m * N + n] = s;
      }
    CHECK_REL(rel_err_dd(y, ref, M * N), REF_TOL, "linear forward%s", withb ? "" : " (b NULL)");
  }

  // LayerNorm / RMSNorm on rows of C
  double nx[M * C], nw[C], nb[C], ny[M * C], nref[M * C], mean[M], rstd[M];
  fill_normal(nx, M * C, 2), fill_normal(nw, C, 1), fill_normal(nb, C, 1);
  loom_layernorm_forward_f64(ny, mean, rstd, nx, nw, nb, M, C, 1e-5);
  double mref[M], rref[M];
  for (int m = 0; m < M; m++) {
    double mu = 0, var = 0;
    for (int c = 0; c < C; c++) mu += nx[m * C + c] / C;
    for (int c = 0; c < C; c++) var += pow(nx[m * C + c] - mu, 2) / C;
    mref[m] = mu, rref[m] = 1 / sqrt(var + 1e-5);
    for (int c = 0; c < C; c++)
      nref[m * C + c] = (nx[m * C + c] - mu) / sqrt(var + 1e-5) * nw[c] + nb[c];
  }
  CHECK_REL(rel_err_dd(ny, nref, M * C), REF_TOL, "layernorm forward y");
  CHECK_REL(rel_err_dd(mean, mref, M), REF_TOL, "layernorm forward mean");
  CHECK_REL(rel_err_dd(rstd, rref, M), REF_TOL, "layernorm forward rstd");
  // b NULL is the same as b = 0
  double zero[C] = {0}, ny0[M * C];
  loom_layernorm_forward_f64(ny, mean, rstd, nx, nw, NULL, M, C, 1e-5);
  loom_layernorm_forward_f64(ny0, mean, rstd, nx, nw, zero, M, C, 1e-5);
  CHECK(maxabs_diff(ny, ny0, M * C) == 0, "layernorm b NULL differs from b = 0");

  loom_rmsnorm_forward_f64(ny, rstd, nx, nw, M, C, 1e-5);
  for (int m = 0; m < M; m++) {
    double ms = 0;
    for (int c = 0; c < C; c++) ms += nx[m * C + c] * nx[m * C + c] / C;
    rref[m] = 1 / sqrt(ms + 1e-5);
    for (int c = 0; c < C; c++) nref[m * C + c] = nx[m * C + c] / sqrt(ms + 1e-5) * nw[c];
  }
  CHECK_REL(rel_err_dd(ny, nref, M * C), REF_TOL, "rmsnorm forward y");
  CHECK_REL(rel_err_dd(rstd, rref, M), REF_TOL, "rmsnorm forward rstd");

  // GELU (tanh form) and SwiGLU, plus GELU's known limits
  enum { E = 17 };
  double ex[E], eu[E], ey[E], eref[E];
  fill_normal(ex, E, 3), fill_normal(eu, E, 1);
  loom_gelu_forward_f64(ey, ex, E);
  for (int i = 0; i < E; i++)
    eref[i] = 0.5 * ex[i] * (1 + tanh(sqrt(2 / M_PI) * (ex[i] + 0.044715 * pow(ex[i], 3))));
  CHECK_REL(rel_err_dd(ey, eref, E), REF_TOL, "gelu forward");
  loom_swiglu_forward_f64(ey, ex, eu, E);
  for (int i = 0; i < E; i++) eref[i] = ex[i] / (1 + exp(-ex[i])) * eu[i];
  CHECK_REL(rel_err_dd(ey, eref, E), REF_TOL, "swiglu forward");
  float gx[4] = {0, 30, -30, -200}, gy[4], gu[4] = {1, 1, 1, 1};
  loom_gelu_forward_f32(gy, gx, 4);
  CHECK(gy[0] == 0 && gy[1] == 30 && gy[2] == 0 && gy[3] == 0, "gelu limits %g %g %g %g", gy[0],
        gy[1], gy[2], gy[3]);
  loom_swiglu_forward_f32(gy, gx, gu, 4);
  CHECK(gy[0] == 0 && gy[1] == 30 && fabsf(gy[2]) < 1e-10f && gy[3] == 0 && !isnan(gy[3]),
        "swiglu limits %g %g %g %g", gy[0], gy[1], gy[2], gy[3]);

  // embedding
  enum { B = 2, T = 3, V = 5, EC = 4 };
  double wte[V * EC], wpe[T * EC], my[B * T * EC];
  int32_t tok[B * T] = {4, 0, 4, 2, 2, 1};
  fill_normal(wte, V * EC, 1), fill_normal(wpe, T * EC, 1);
  loom_embedding_forward_f64(my, tok, wte, wpe, B, T, EC);
  int ok = 1;
  for (int i = 0; i < B * T; i++)
    for (int c = 0; c < EC; c++)
      ok &= my[i * EC + c] == wte[tok[i] * EC + c] + wpe[(i % T) * EC + c];
  CHECK(ok, "embedding forward with wpe");
  loom_embedding_forward_f64(my, tok, wte, NULL, B, T, EC);
  ok = 1;
  for (int i = 0; i < B * T; i++)
    for (int c = 0; c < EC; c++) ok &= my[i * EC + c] == wte[tok[i] * EC + c];
  CHECK(ok, "embedding forward without wpe");
}

/* ---- attention ----------------------------------------------------------------------------- */

/* Direct causal attention with an explicit (T,T) masked score matrix per (b,h). */
static void naive_attention(double *out, double *lse, const double *q, const double *k,
                            const double *v, int B, int T, int Hq, int Hkv, int D) {
  double *S = dalloc((size_t)T * T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hq; h++) {
      int kh = h / (Hq / Hkv);
      for (int t = 0; t < T; t++)
        for (int s = 0; s < T; s++) {
          double dot = 0;
          for (int d = 0; d < D; d++)
            dot += q[((b * T + t) * Hq + h) * D + d] * k[((b * T + s) * Hkv + kh) * D + d];
          S[t * T + s] = s <= t ? dot / sqrt(D) : -INFINITY;
        }
      for (int t = 0; t < T; t++) {
        long double z = 0;  // direct logsumexp, no max subtraction (scores are O(1))
        for (int s = 0; s < T; s++) z += expl(S[t * T + s]);
        lse[(b * Hq + h) * T + t] = (double)logl(z);
        for (int d = 0; d < D; d++) {
          double o = 0;
          for (int s = 0; s < T; s++)
            o += (double)(expl(S[t * T + s]) / z) * v[((b * T + s) * Hkv + kh) * D + d];
          out[((b * T + t) * Hq + h) * D + d] = o;
        }
      }
    }
  loom_free(S);
}

static void test_attention(void) {
  enum { B = 2, T = 7, Hq = 6, Hkv = 2, D = 5, G = Hq / Hkv };
  enum { NQ = B * T * Hq * D, NK = B * T * Hkv * D, NL = B * Hq * T };
  static double q[NQ], k[NK], v[NK], out[NQ], lse[NL], ref[NQ], lref[NL];
  fill_normal(q, NQ, 1), fill_normal(k, NK, 1), fill_normal(v, NK, 1);
  printf("attention properties B=%d T=%d Hq=%d Hkv=%d D=%d\n", B, T, Hq, Hkv, D);
  loom_attention_forward_f64(out, lse, q, k, v, B, T, Hq, Hkv, D);
  naive_attention(ref, lref, q, k, v, B, T, Hq, Hkv, D);
  CHECK_REL(rel_err_dd(out, ref, NQ), REF_TOL, "attention out vs masked (T,T) softmax");
  CHECK_REL(rel_err_dd(lse, lref, NL), REF_TOL, "attention lse vs direct logsumexp");

  // causality: changing k, v at positions s > t0 leaves out and lse at t <= t0 bit-identical
  for (int t0 = 0; t0 < T - 1; t0 += 3) {
    static double k2[NK], v2[NK], out2[NQ], lse2[NL];
    memcpy(k2, k, sizeof k), memcpy(v2, v, sizeof v);
    for (int b = 0; b < B; b++)
      for (int s = t0 + 1; s < T; s++)
        for (int j = 0; j < Hkv * D; j++) {
          k2[(b * T + s) * Hkv * D + j] += 3.0;
          v2[(b * T + s) * Hkv * D + j] -= 5.0;
        }
    loom_attention_forward_f64(out2, lse2, q, k2, v2, B, T, Hq, Hkv, D);
    int same = 1, changed = 0;
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++)
        for (int h = 0; h < Hq; h++) {
          int eq = lse[(b * Hq + h) * T + t] == lse2[(b * Hq + h) * T + t];
          for (int d = 0; d < D; d++)
            eq &= out[((b * T + t) * Hq + h) * D + d] == out2[((b * T + t) * Hq + h) * D + d];
          if (t <= t0)
            same &= eq;
          else
            changed |= !eq;
        }
    CHECK(same && changed, "causality at t0=%d: unchanged %d, later rows changed %d", t0, same,
          changed);
  }

  // GQA: Hkv=2 equals Hkv=Hq=6 with each kv head repeated over its group of G query heads.
  static double kr[B * T * Hq * D], vr[B * T * Hq * D], outr[NQ], lser[NL];
  for (int bt = 0; bt < B * T; bt++)
    for (int h = 0; h < Hq; h++)
      for (int d = 0; d < D; d++) {
        kr[(bt * Hq + h) * D + d] = k[(bt * Hkv + h / G) * D + d];
        vr[(bt * Hq + h) * D + d] = v[(bt * Hkv + h / G) * D + d];
      }
  loom_attention_forward_f64(outr, lser, q, kr, vr, B, T, Hq, Hq, D);
  CHECK(maxabs_diff(out, outr, NQ) == 0 && maxabs_diff(lse, lser, NL) == 0,
        "GQA forward differs from repeated kv heads");
  // backward: dq equal; dk, dv of a shared head = sum of the repeated heads' gradients
  static double dout[NQ], dq[NQ], dk[NK], dv[NK], dqr[NQ], dkr[NQ], dvr[NQ], dks[NK], dvs[NK];
  fill_normal(dout, NQ, 1);
  memset(dq, 0, sizeof dq), memset(dk, 0, sizeof dk), memset(dv, 0, sizeof dv);
  memset(dqr, 0, sizeof dqr), memset(dkr, 0, sizeof dkr), memset(dvr, 0, sizeof dvr);
  loom_attention_backward_f64(dq, dk, dv, dout, out, lse, q, k, v, B, T, Hq, Hkv, D);
  loom_attention_backward_f64(dqr, dkr, dvr, dout, outr, lser, q, kr, vr, B, T, Hq, Hq, D);
  memset(dks, 0, sizeof dks), memset(dvs, 0, sizeof dvs);
  for (int bt = 0; bt < B * T; bt++)
    for (int h = 0; h < Hq; h++)
      for (int d = 0; d < D; d++) {
        dks[(bt * Hkv + h / G) * D + d] += dkr[(bt * Hq + h) * D + d];
        dvs[(bt * Hkv + h / G) * D + d] += dvr[(bt * Hq + h) * D + d];
      }
  CHECK(maxabs_diff(dq, dqr, NQ) == 0, "GQA dq differs from repeated kv heads");
  CHECK_REL(rel_err_dd(dk, dks, NK), REF_TOL, "GQA dk = group sum of repeated-head dk");
  CHECK_REL(rel_err_dd(dv, dvs, NK), REF_TOL, "GQA dv = group sum of repeated-head dv");

  // NULL gradients are skipped without changing the others
  static double dq1[NQ], dv1[NK];
  memset(dq1, 0, sizeof dq1), memset(dv1, 0, sizeof dv1);
  loom_attention_backward_f64(dq1, NULL, NULL, dout, out, lse, q, k, v, B, T, Hq, Hkv, D);
  loom_attention_backward_f64(NULL, NULL, dv1, dout, out, lse, q, k, v, B, T, Hq, Hkv, D);
  CHECK(maxabs_diff(dq1, dq, NQ) == 0 && maxabs_diff(dv1, dv, NK) == 0,
        "attention backward with NULL gradients");

  // large scores: f32 stays finite (max subtraction) with |score| ~ 1e3
  float fq[NQ], fk[NK], fv[NK], fo[NQ], fl[NL];
  for (int i = 0; i < NQ; i++) fq[i] = (float)(30 * q[i]);
  for (int i = 0; i < NK; i++) fk[i] = (float)(30 * k[i]), fv[i] = (float)v[i];
  loom_attention_forward_f32(fo, fl, fq, fk, fv, B, T, Hq, Hkv, D);
  int finite = 1;
  for (int i = 0; i < NQ; i++) finite &= isfinite(fo[i]);
  for (int i = 0; i < NL; i++) finite &= isfinite(fl[i]);
  CHECK(finite, "attention f32 overflowed with large scores");
}

/* ---- RoPE ---------------------------------------------------------------------------------- */

static void test_rope(void) {
  printf("rope\n");
  // D=4, pos=1 (t=0, pos_offset=1), theta=10000: angles 1 and 10000^(-1/2) = 0.01.
  // rotate_half pairs (0,2) and (1,3).
  double x[4] = {1, 2, 3, 4};
  loom_rope_forward_f64(x, 1, 1, 1, 4, 10000.0, 1);
  double want[4] = {1 * cos(1.0) - 3 * sin(1.0), 2 * cos(0.01) - 4 * sin(0.01),
                    3 * cos(1.0) + 1 * sin(1.0), 4 * cos(0.01) + 2 * sin(0.01)};
  CHECK_REL(rel_err_dd(x, want, 4), 1e-15, "rope hand-computed D=4 pos=1");
  // position 0 is the identity
  double x0[4] = {1, 2, 3, 4}, x0c[4] = {1, 2, 3, 4};
  loom_rope_forward_f64(x0, 1, 1, 1, 4, 10000.0, 0);
  CHECK(maxabs_diff(x0, x0c, 4) == 0, "rope at position 0 is not the identity");
  // general case vs explicit per-(b,t,h) rotation; backward(forward(x)) = x; norms kept
  enum { B = 2, T = 6, H = 3, D = 8, N = B * T * H * D };
  double a[N], a0[N], ref[N];
  fill_normal(a, N, 1);
  memcpy(a0, a, sizeof a);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < D / 2; i++) {
          int o = ((b * T + t) * H + h) * D;
          double ang = (t + 7) / pow(500.0, (2.0 * i) / D);
          ref[o + i] = a[o + i] * cos(ang) - a[o + i + D / 2] * sin(ang);
          ref[o + i + D / 2] = a[o + i + D / 2] * cos(ang) + a[o + i] * sin(ang);
        }
  loom_rope_forward_f64(a, B, T, H, D, 500.0, 7);
  CHECK_REL(rel_err_dd(a, ref, N), REF_TOL, "rope forward vs explicit rotation");
  loom_rope_backward_f64(a, B, T, H, D, 500.0, 7);
  CHECK_REL(rel_err_dd(a, a0, N), REF_TOL, "rope backward(forward(x)) == x");
}

/* The rotation the kernels computed per call before they kept a table: cos and sin of the
 * angle in double, rounded to float, then the pair's float products. */
static void rope_direct_f32(float *x, int B, int T, int H, int D, double theta, const int *pos,
                            double sign) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int i = 0; i < D / 2; i++) {
        double angle = sign * (double)pos[b * T + t] * pow(theta, -2.0 * i / D);
        float c = (float)cos(angle), s = (float)sin(angle);
        for (int h = 0; h < H; h++) {
          float *p = x + (((size_t)b * T + t) * H + h) * D;
          float x0 = p[i], x1 = p[i + D / 2];
          p[i] = x0 * c - x1 * s;
          p[i + D / 2] = x1 * c + x0 * s;
        }
      }
}

/* The kernels' cached cos/sin table gives bitwise what the per-call formula gave: forward and
 * backward, positions past the table's first size (it grows), a theta and a head size in
 * between (it is rebuilt), and the per-row positions of loom_rope_pos_*. */
static void test_rope_table(void) {
  printf("rope table\n");
  enum { B = 2, T = 40, H = 3, N = B * T * H * 128 };
  static float a[N], want[N];
  static int pos[B * T];
  const struct { int D, offset; double theta; } cases[] = {
      {64, 0, 10000.0}, {64, 250, 10000.0}, {128, 100, 10000.0}, {128, 3000, 1e6}, {64, 5, 10000.0},
      {32, 70000, 5e5}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int D = cases[k].D, n = B * T * H * D;
    for (int sign = 1; sign >= -1; sign -= 2) {
      for (int i = 0; i < n; i++) a[i] = (float)loom_rng_normal(&ktest_rng), want[i] = a[i];
      for (int r = 0; r < B * T; r++) pos[r] = cases[k].offset + r % T;
      rope_direct_f32(want, B, T, H, D, cases[k].theta, pos, sign);
      if (sign > 0) loom_rope_forward_f32(a, B, T, H, D, cases[k].theta, cases[k].offset);
      else loom_rope_backward_f32(a, B, T, H, D, cases[k].theta, cases[k].offset);
      CHECK(memcmp(a, want, sizeof(float) * n) == 0, "rope %s D=%d offset %d theta %g: not the "
            "per-call formula's bits", sign > 0 ? "forward" : "backward", D, cases[k].offset,
            cases[k].theta);
      /* per-row positions, scattered (rows 1 token each: B*T rows of one position) */
      for (int i = 0; i < n; i++) a[i] = (float)loom_rng_normal(&ktest_rng), want[i] = a[i];
      for (int r = 0; r < B * T; r++) pos[r] = cases[k].offset + (r * 37) % (3 * T);
      rope_direct_f32(want, 1, B * T, H, D, cases[k].theta, pos, sign);
      if (sign > 0) loom_rope_pos_forward_f32(a, B * T, H, D, cases[k].theta, pos);
      else loom_rope_pos_backward_f32(a, B * T, H, D, cases[k].theta, pos);
      CHECK(memcmp(a, want, sizeof(float) * n) == 0, "rope_pos %s D=%d offset %d: not the "
            "per-call formula's bits", sign > 0 ? "forward" : "backward", D, cases[k].offset);
    }
  }
}

/* ---- cross-entropy ------------------------------------------------------------------------- */

static void test_xent(void) {
  printf("cross-entropy\n");
  enum { N = 6, V = 9, Vp = 16 };
  int32_t tgt[N] = {2, LOOM_IGNORE_INDEX, 8, 0, LOOM_IGNORE_INDEX, 5};
  float lg[N * Vp], lg0[N * Vp], loss[N], loss0[N], dl[N * Vp];
  double dlog[N * Vp];
  fill_normal(dlog, N * Vp, 2);
  to_f32(lg, dlog, N * Vp);
  memcpy(lg0, lg, sizeof lg);
  for (int n = 0; n < N; n++)
    for (int j = V; j < Vp; j++) lg[n * Vp + j] = 1e30f, lg0[n * Vp + j] = 0;  // huge padding
  int cnt = loom_xent_forward_f32(loss, lg, tgt, N, V, Vp);
  loom_xent_forward_f32(loss0, lg0, tgt, N, V, Vp);
  CHECK(cnt == 4, "count %d, want 4", cnt);
  CHECK(memcmp(loss, loss0, sizeof loss) == 0, "padding logits changed the losses");
  CHECK(loss[1] == 0 && loss[4] == 0, "ignored rows have loss %g %g", loss[1], loss[4]);
  for (int i = 0; i < N * Vp; i++) dl[i] = 0.25f;  // sentinel: untouched entries keep it
  loom_xent_backward_f32(dl, lg, tgt, N, V, Vp, 0.5f);
  int pad_ok = 1, ign_ok = 1;
  double rowsum = 0;
  for (int n = 0; n < N; n++)
    for (int j = 0; j < Vp; j++) {
      if (j >= V) pad_ok &= dl[n * Vp + j] == 0.25f;
      if (tgt[n] == LOOM_IGNORE_INDEX)
        ign_ok &= dl[n * Vp + j] == 0.25f;
      else if (j < V)
        rowsum += dl[n * Vp + j] - 0.25f;
    }
  CHECK(pad_ok, "padding columns got a gradient");
  CHECK(ign_ok, "ignored rows got a gradient");
  CHECK(fabs(rowsum) < 1e-6, "softmax - onehot rows should sum to 0, got %g", rowsum);
  // values: uniform logits give log V; and a large common offset changes nothing (f32)
  float uni[Vp], l1;
  int32_t t1 = 3;
  for (int j = 0; j < Vp; j++) uni[j] = 1e4f;
  loom_xent_forward_f32(&l1, uni, &t1, 1, V, Vp);
  CHECK_REL(fabs(l1 - log(V)) / log(V), 1e-6, "xent of uniform logits = log V");
  double dl64[Vp], loss64;
  double row64[Vp];
  for (int j = 0; j < Vp; j++) row64[j] = dlog[j] + 1e5;
  loom_xent_forward_f64(&loss64, row64, &t1, 1, V, Vp);
  double z = 0;
  for (int j = 0; j < V; j++) z += exp(dlog[j]);
  CHECK_REL(fabs(loss64 - (log(z) - dlog[3])) / (log(z) - dlog[3]), 1e-10,
            "xent with +1e5 offset vs direct -log softmax");
  memset(dl64, 0, sizeof dl64);
  loom_xent_backward_f64(dl64, row64, &t1, 1, V, Vp, 1.0);
  int fin = 1;
  for (int j = 0; j < Vp; j++) fin &= isfinite(dl64[j]);
  CHECK(fin, "xent backward not finite with large logits");
  // all ignored
  int32_t ign[2] = {LOOM_IGNORE_INDEX, LOOM_IGNORE_INDEX};
  CHECK(loom_xent_forward_f32(loss, lg, ign, 2, V, Vp) == 0, "all-ignored count");
}

/* ---- linear NULL gradients ----------------------------------------------------------------- */

static void test_linear_nulls(void) {
  printf("linear backward with NULL gradients\n");
  enum { M = 6, K = 5, N = 4 };
  double x[M * K], w[N * K], dy[M * N], dx[M * K] = {0}, dw[N * K] = {0}, db[N] = {0};
  double dx1[M * K] = {0}, dw1[N * K] = {0}, db1[N] = {0};
  fill_normal(x, M * K, 1), fill_normal(w, N * K, 1), fill_normal(dy, M * N, 1);
  loom_linear_backward_f64(dx, dw, db, dy, x, w, M, K, N);
  loom_linear_backward_f64(dx1, NULL, NULL, dy, x, w, M, K, N);
  loom_linear_backward_f64(NULL, dw1, NULL, dy, x, w, M, K, N);
  loom_linear_backward_f64(NULL, NULL, db1, dy, x, w, M, K, N);
  CHECK(maxabs_diff(dx, dx1, M * K) == 0 && maxabs_diff(dw, dw1, N * K) == 0 &&
            maxabs_diff(db, db1, N) == 0,
        "linear backward NULL handling");
}

/* ---- AdamW --------------------------------------------------------------------------------- */

/* torch.optim.AdamW, _single_tensor_adam (foreach=False, capturable=False), in double. */
static void torch_adamw(double *p, const double *g, double *m, double *v, size_t n, double lr,
                        double b1, double b2, double eps, double wd, long step) {
  for (size_t i = 0; i < n; i++) {
    p[i] *= 1 - lr * wd;
    m[i] += (g[i] - m[i]) * (1 - b1);  // exp_avg.lerp_(grad, 1 - beta1)
    v[i] = v[i] * b2 + (1 - b2) * g[i] * g[i];
    double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
    double step_size = lr / bc1;
    double denom = sqrt(v[i]) / sqrt(bc2) + eps;
    p[i] += -step_size * (m[i] / denom);
  }
}

static void test_adamw(void) {
  printf("adamw: 3 steps vs double transcription of torch.optim.AdamW\n");
  enum { N = 20011 };  // above the OpenMP threshold
  static float p[N], g[N], m[N], v[N];
  static double pd[N], gd[N], md[N], vd[N], p0[N];
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  for (int pass = 0; pass < 2; pass++) {
    float wd = pass == 0 ? 0.1f : 0.0f;
    fill_normal(p0, N, 0.02);  // GPT-2-like init scale: updates are not lost in p's rounding
    for (int i = 0; i < N; i++)
      p[i] = (float)p0[i], pd[i] = p0[i], m[i] = v[i] = 0, md[i] = vd[i] = 0;
    for (long step = 1; step <= 3; step++) {
      fill_normal(gd, N, 0.1);
      gd[0] = 0;  // a zero gradient: update 0 (m = v = 0) at step 1
      to_f32(g, gd, N);
      loom_adamw_f32(p, g, m, v, N, lr, b1, b2, eps, wd, step);
      torch_adamw(pd, gd, md, vd, N, lr, b1, b2, eps, wd, step);
    }
    // also compare the parameter change alone (what AdamW computes), not just p
    static double dpd[N];
    static float dpf[N];
    for (int i = 0; i < N; i++) dpd[i] = pd[i] - p0[i], dpf[i] = (float)((double)p[i] - p0[i]);
    CHECK_REL(rel_err_fd(p, pd, N), 1e-6, "adamw wd=%g: p", wd);
    CHECK_REL(rel_err_fd(dpf, dpd, N), 1e-6, "adamw wd=%g: p - p0", wd);
    CHECK_REL(rel_err_fd(m, md, N), 1e-6, "adamw wd=%g: m", wd);
    CHECK_REL(rel_err_fd(v, vd, N), 1e-6, "adamw wd=%g: v", wd);
  }
}

/* ---- bf16 rounding ------------------------------------------------------------------------- */

static void test_bf16(void) {
  printf("bf16 rounding\n");
  // bf16 keeps 7 fraction bits: the spacing at 1 is 2^-7, halfway is 2^-8.
  const float u = 0x1p-8f;
  struct {
    float in, want;
  } cases[] = {
      {1.0f, 1.0f},
      {1 + u, 1.0f},                    // tie -> even (1.0000000)
      {1 + 3 * u, 1 + 0x1p-6f},         // tie between 1+2^-7 (odd) and 1+2^-6 (even)
      {1 + u + 0x1p-23f, 1 + 0x1p-7f},  // just above the tie
      {1 + u - 0x1p-23f, 1.0f},         // just below the tie
      {1 + 0x1p-7f, 1 + 0x1p-7f},       // representable: unchanged
      {-(1 + 3 * u), -(1 + 0x1p-6f)},   // sign symmetric
      {3.14159265f, 3.140625f},         // pi -> 201/64
      {0x1.fffffep127f, INFINITY},      // FLT_MAX rounds up to +inf
      {INFINITY, INFINITY},
      {-INFINITY, -INFINITY},
      {0x1p-149f, 0.0f},       // smallest subnormal -> 0
      {0x1p-126f, 0x1p-126f},  // smallest normal is representable
  };
  int nc = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < nc; i++) {
    float got;
    loom_round_bf16_f32(&got, &cases[i].in, 1);
    CHECK(got == cases[i].want, "bf16(%a) = %a, want %a", cases[i].in, got, cases[i].want);
  }
  float z[2] = {0.0f, -0.0f}, zr[2];
  loom_round_bf16_f32(zr, z, 2);
  CHECK(zr[0] == 0 && !signbit(zr[0]) && zr[1] == 0 && signbit(zr[1]), "signed zeros");
  float nan_in[2] = {NAN, -NAN}, nan_out[2];
  loom_round_bf16_f32(nan_out, nan_in, 2);
  CHECK(isnan(nan_out[0]) && isnan(nan_out[1]), "NaN must stay NaN");
  // many random values, in place: idempotent, within half a bf16 ulp (2^-8 relative)
  enum { N = 30000 };
  static float a[N], b[N], c[N];
  for (int i = 0; i < N; i++) a[i] = (float)(loom_rng_normal(&ktest_rng) * 100);
  memcpy(b, a, sizeof a);
  loom_round_bf16_f32(b, b, N);
  loom_round_bf16_f32(c, b, N);
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= fabsf(b[i] - a[i]) <= 0x1p-8f * fabsf(a[i]) && c[i] == b[i];
  CHECK(ok, "random bf16 rounding: error or idempotence");
}

/* ---- sumsq --------------------------------------------------------------------------------- */

static void test_sumsq(void) {
  printf("sumsq\n");
  enum { N = 100003 };
  static float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)loom_rng_normal(&ktest_rng);
  long double ref = 0;
  for (int i = 0; i < N; i++) ref += (long double)x[i] * x[i];
  double got = loom_sumsq_f32(x, N);
  // double accumulation of 1e5 positive terms: relative error <= ~1e5 * 1.1e-16
  CHECK_REL(fabs(got - (double)ref) / (double)ref, 1e-11, "sumsq n=%d vs long double", N);
  CHECK(loom_sumsq_f32(x, 0) == 0, "sumsq of nothing");
  CHECK(loom_sumsq_f32(x, 1) == (double)x[0] * x[0], "sumsq of one value");
  float three[3] = {1, 2, 3};
  CHECK(loom_sumsq_f32(three, 3) == 14, "sumsq {1,2,3}");
}

/* ---- thread-count independence ------------------------------------------------------------- */

/* Runs every kernel in f32 on inputs large enough to take the OpenMP paths; every output is
 * carved out of one arena so that two runs can be compared with a single memcmp. */
static float *arena;
static size_t arena_used;
static float *take(size_t n) {
  float *p = arena + arena_used;
  memset(p, 0, sizeof(float) * n);
  arena_used += n;
  return p;
}

static void run_all_f32(void) {
  loom_rng r;
  loom_rng_seed(&r, 7);
  const size_t NR = 1 << 18;
  float *x = falloc(NR), *y = falloc(NR), *w = falloc(NR), *b = falloc(NR);
  for (size_t i = 0; i < NR; i++) {
    x[i] = (float)loom_rng_normal(&r), y[i] = (float)loom_rng_normal(&r);
    w[i] = (float)loom_rng_normal(&r), b[i] = (float)loom_rng_normal(&r);
  }
  // linear M=128 K=40 N=130 (db is the OpenMP part)
  loom_linear_forward_f32(take(128 * 130), x, w, b, 128, 40, 130);
  loom_linear_backward_f32(take(128 * 40), take(130 * 40), take(130), y, x, w, 128, 40, 130);
  // layernorm / rmsnorm N=64 C=300
  float *mean = take(64), *rstd = take(64);
  loom_layernorm_forward_f32(take(64 * 300), mean, rstd, x, w, b, 64, 300, 1e-5f);
  loom_layernorm_backward_f32(take(64 * 300), take(300), take(300), y, x, w, mean, rstd, 64, 300);
  float *rrs = take(64);
  loom_rmsnorm_forward_f32(take(64 * 300), rrs, x, w, 64, 300, 1e-5f);
  loom_rmsnorm_backward_f32(take(64 * 300), take(300), y, x, w, rrs, 64, 300);
  // elementwise n=20000
  loom_gelu_forward_f32(take(20000), x, 20000);
  loom_gelu_backward_f32(take(20000), y, x, 20000);
  loom_swiglu_forward_f32(take(20000), x, w, 20000);
  loom_swiglu_backward_f32(take(20000), take(20000), y, x, w, 20000);
  // rope B=2 T=32 H=4 D=64, forward and backward in place
  float *rp = take(16384), *rpb = take(16384);
  memcpy(rp, x, sizeof(float) * 16384), memcpy(rpb, y, sizeof(float) * 16384);
  loom_rope_forward_f32(rp, 2, 32, 4, 64, 10000.0, 5);
  loom_rope_backward_f32(rpb, 2, 32, 4, 64, 10000.0, 5);
  // attention B=2 T=40 Hq=4 Hkv=2 D=16
  const int nq = 2 * 40 * 4 * 16, nk = 2 * 40 * 2 * 16;
  float *ao = take(nq), *al = take(2 * 4 * 40);
  loom_attention_forward_f32(ao, al, x, w, b, 2, 40, 4, 2, 16);
  loom_attention_backward_f32(take(nq), take(nk), take(nk), y, ao, al, x, w, b, 2, 40, 4, 2, 16);
  // xent N=32 V=600 Vp=640
  int32_t tg[32];
  for (int i = 0; i < 32; i++) tg[i] = i % 5 == 0 ? LOOM_IGNORE_INDEX : (i * 37) % 600;
  loom_xent_forward_f32(take(32), x, tg, 32, 600, 640);
  loom_xent_backward_f32(take(32 * 640), x, tg, 32, 600, 640, 0.03f);
  // embedding B=4 T=32 C=160, vocab 50 (many repeated tokens)
  int32_t tok[128];
  for (int i = 0; i < 128; i++) tok[i] = (i * 7) % 50;
  loom_embedding_forward_f32(take(128 * 160), tok, w, b, 4, 32, 160);
  loom_embedding_backward_f32(take(50 * 160), take(32 * 160), y, tok, 4, 32, 160);
  // adamw, bf16, sumsq
  float *p = take(20000);
  memcpy(p, x, sizeof(float) * 20000);
  loom_adamw_f32(p, y, take(20000), take(20000), 20000, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
  loom_round_bf16_f32(take(20000), x, 20000);
  double ss = loom_sumsq_f32(x, NR);
  memcpy(take(2), &ss, sizeof ss);
  loom_free(x), loom_free(y), loom_free(w), loom_free(b);
}

static void test_threads(void) {
  printf("bitwise determinism across thread counts\n");
  enum { CAP = 1 << 20 };
  float *a = falloc(CAP), *b = falloc(CAP);
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  arena = a, arena_used = 0;
  run_all_f32();
  size_t n = arena_used;
  omp_set_num_threads(3);
  arena = b, arena_used = 0;
  run_all_f32();
  omp_set_num_threads(saved);
  LOOM_ASSERT(n <= CAP && n == arena_used);
  CHECK(memcmp(a, b, sizeof(float) * n) == 0, "results differ between 1 and 3 threads");
  loom_free(a), loom_free(b);
}

int main(void) {
  loom_rng_seed(&ktest_rng, 4242);
  test_forward_formulas();
  test_attention();
  test_rope();
  test_rope_table();
  test_xent();
  test_linear_nulls();
  test_adamw();
  test_bf16();
  test_sumsq();
  test_threads();
  ktest_report_worst();
  return harness_finish("test_kernels_props");
}

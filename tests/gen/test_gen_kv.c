/* The KV-cache forward of generation against the training decoder's forward (no cache, the
 * whole sequence at once) on random models: GPT-2 with hidden 96 and 3 heads, Llama GQA
 * (4 q / 2 kv heads) with q/k/v biases and an untied head, Llama with head_dim 12 and one
 * kv head, tied; sequences of 13 tokens (not a power of two), and 70 (many cached keys per
 * query). Row 0 is prefilled with 5 (33) tokens and then fed one token per step; row 1 (other
 * tokens) is prefilled whole in the same ragged call as row 0's prefill. Every position's
 * logits must match, and one token more than the cache holds is refused.
 *
 * Tolerance: 1e-4 * max(1, |logit|). Both sides are fp32 with the same weights; they differ
 * only in summation order (GEMMs of 1, 5 or 18 rows vs 26; a two-pass softmax over cached
 * keys vs the training flash attention's online softmax), i.e. rounding of ~1e-7 relative per
 * operation, grown through 2-3 layers of norms and residuals to ~1e-6; 1e-4 leaves a margin
 * of 100 while still catching any wrong position, mask, rotary angle or cache slot (those
 * change logits by 1e-2 and more at init_std 0.2).
 * bf16 (--dtype bf16 against the training decoder's bf16 mode: both multiply bf16-rounded
 * inputs and weights with fp32 accumulation): the products are exact in fp32, but an
 * activation that differs by an fp32 rounding can round to the neighbouring bf16 value
 * (a 2^-8 relative step of that one input), so the tolerance is 1e-2 * max(1, |logit|):
 * a few such flips per row, far below the effect of a wrong position or cache slot. */
#include <stdlib.h>

#include "harness.h"
#include "loom/generate.h"
#include "loom/kernels.h"

#define BF16_TOL 1e-2

static void check_model(const char *what, loom_model_spec s, bool bf16, double tol, int T,
                        int PRE) {
  loom_decoder *d;
  setenv("LOOM_KEEP_LOGITS", "1", 1);
  CHECK(loom_decoder_create(&d, &s, 2, T, bf16, false) == 0, "%s", loom_errmsg());
  loom_decoder_init_params(d, 5);
  int32_t *tok = malloc(2 * (size_t)T * sizeof *tok);
  int32_t *pre = malloc((size_t)(PRE + T) * sizeof *pre);
  loom_rng r;
  loom_rng_seed(&r, 9);
  for (int i = 0; i < 2 * T; i++) tok[i] = (int32_t)loom_rng_below(&r, (uint64_t)s.vocab_size);
  loom_decoder_forward(d, tok, NULL, NULL, NULL);
  const float *want = d->logits; /* (2*T, Vp) */
  int V = s.vocab_size, Vp = d->vloc;

  loom_gen_model m = {0};
  m.spec = s;
  m.d = d;
  m.bf16 = bf16;
  loom_gen_ctx *g;
  CHECK(loom_gen_ctx_create(&g, &m, 2, T) == 0, "%s", loom_errmsg());
  float *got = malloc((size_t)(T + PRE) * V * sizeof(float));
  memcpy(pre, tok, PRE * sizeof *pre);
  memcpy(pre + PRE, tok + T, T * sizeof *pre);
  int rows[2] = {0, 1}, counts[2] = {PRE, T};
  loom_gen_batch b = {2, rows, counts, pre, NULL, NULL, NULL, NULL, true};
  CHECK(loom_gen_forward(g, &b, got) == 0, "%s", loom_errmsg());
  double worst = 0;
  int bad = 0;
  for (int m2 = 0; m2 < PRE + T; m2++) {
    int seq = m2 < PRE ? 0 : 1, t = m2 < PRE ? m2 : m2 - PRE;
    for (int v = 0; v < V; v++) {
      double w = want[(size_t)(seq * T + t) * Vp + v], e = fabs(got[(size_t)m2 * V + v] - w);
      double rel = e / (fabs(w) > 1 ? fabs(w) : 1);
      if (!(rel <= worst)) worst = rel; /* NaN counts as the worst */
      bad += !(rel <= tol);
    }
  }
  /* row 0: one token per step */
  for (int t = PRE; t < T; t++) {
    int one = 1, row0 = 0;
    loom_gen_batch s1 = {1, &row0, &one, tok + t, NULL, NULL, NULL, NULL, false};
    CHECK(loom_gen_forward(g, &s1, got) == 0, "%s", loom_errmsg());
    for (int v = 0; v < V; v++) {
      double w = want[(size_t)t * Vp + v], e = fabs(got[v] - w);
      double rel = e / (fabs(w) > 1 ? fabs(w) : 1);
      if (!(rel <= worst)) worst = rel; /* NaN counts as the worst */
      bad += !(rel <= tol);
    }
  }
  CHECK(bad == 0, "%s: %d logits differ by more than %g (worst %.3g)", what, bad, tol, worst);
  CHECK(loom_gen_ctx_cache(g)->len[0] == T && loom_gen_ctx_cache(g)->len[1] == T,
        "%s: cache lengths %d %d", what, loom_gen_ctx_cache(g)->len[0],
        loom_gen_ctx_cache(g)->len[1]);
  /* one more token does not fit: an error naming the numbers, nothing written */
  int one = 1, row1 = 1;
  loom_gen_batch s2 = {1, &row1, &one, tok, NULL, NULL, NULL, NULL, false};
  char want_msg[32];
  snprintf(want_msg, sizeof want_msg, "%d tokens", T + 1);
  CHECK(loom_gen_forward(g, &s2, got) != 0 && strstr(loom_errmsg(), want_msg),
        "%s: overflow not refused: %s", what, loom_errmsg());
  printf("%-44s worst relative logit difference %.3g over %d positions\n", what, worst,
         2 * T);
  free(got), free(tok), free(pre);
  loom_gen_ctx_free(g);
  loom_decoder_free(d);
}

static loom_model_spec base(loom_arch arch) {
  loom_model_spec s;
  loom_model_preset(&s, arch == LOOM_ARCH_GPT2 ? "tiny-gpt2" : "tiny-llama");
  s.vocab_size = 300;
  s.padded_vocab = 320;
  s.layers = 2;
  s.max_seq = 40;
  s.init_std = 0.2;
  return s;
}

int main(void) {
  loom_model_spec s = base(LOOM_ARCH_GPT2);
  s.hidden = 96, s.heads = s.kv_heads = 3, s.head_dim = 32, s.intermediate = 384;
  check_model("gpt2 hidden 96, 3 heads", s, false, 1e-4, 13, 5);
  if (loom_gemm_bf16_native()) check_model("gpt2 hidden 96, 3 heads, bf16", s, true, BF16_TOL, 13, 5);
  s = base(LOOM_ARCH_LLAMA);
  s.hidden = 64, s.heads = 4, s.kv_heads = 2, s.head_dim = 16, s.intermediate = 96;
  s.qkv_bias = true, s.tied_embeddings = false;
  check_model("llama GQA 4/2, q/k/v bias, untied", s, false, 1e-4, 13, 5);
  s.max_seq = 80; /* many cached keys per query, a 33-token prefill */
  check_model("llama GQA 4/2, 70 tokens", s, false, 1e-4, 70, 33);
  s.max_seq = 40;
  if (loom_gemm_bf16_native())
    check_model("llama GQA 4/2, q/k/v bias, untied, bf16", s, true, BF16_TOL, 13, 5);
  s = base(LOOM_ARCH_LLAMA);
  s.hidden = 48, s.heads = 4, s.kv_heads = 1, s.head_dim = 12, s.intermediate = 80;
  s.layers = 3, s.qkv_bias = false, s.tied_embeddings = true, s.rope_theta = 1e6;
  check_model("llama head_dim 12, 1 kv head, tied, 3 layers", s, false, 1e-4, 13, 5);
  return harness_finish("test_gen_kv");
}

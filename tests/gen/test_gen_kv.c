/* The decoder's cached forward (loom_decoder_forward_cached, what generation runs) against
 * its training forward (no cache, the whole sequence at once) on random models: GPT-2 with
 * hidden 96 and 3 heads, Llama GQA (4 q / 2 kv heads) with q/k/v biases and an untied head,
 * Llama with head_dim 12 and one kv head, tied; sequences of 13 tokens (not a power of two),
 * and 70 (many cached keys per query). Row 0 is prefilled with 5 (33) tokens and then fed one
 * token per step; row 1 (other tokens) is prefilled whole in the same ragged call as row 0's
 * prefill. Every position's logits must match, and one token more than the cache holds is
 * refused.
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
 * a few such flips per row, far below the effect of a wrong position or cache slot. The bf16
 * cases run on every machine: on native bf16 GEMMs (oneDNN with AVX512-BF16 or AMX) and on
 * bf16-rounded fp32 weights (OpenBLAS, or oneDNN without bf16), as training does. OpenBLAS's
 * sgemm sums a row in an order that depends on the number of rows (18 in the ragged prefill, 26
 * in the training forward), so more inputs flip there, and a flipped key or value reaches every
 * later position of its row through the cache: 1.8e-2 seen on the GPT-2 case (one flip at
 * position 8 of row 1, positions 8-11 off, every other within 6e-7); its tolerance is 5e-2,
 * and so is that of MoE models on every backend: their routed experts are fp32 products of
 * bf16 values whose row sums depend on the row count (0.0197 seen on a Xeon with AMX).
 * Precision switch (what `loom generate --dtype bf16` does to a model loaded in fp32): an fp32
 * decoder given the same parameters and switched by loom_decoder_set_bf16 must give the bf16
 * decoder's cached logits bit for bit, and back in fp32 those of an fp32 decoder; a decoder
 * whose activation slot holds a micro-batch refuses the switch.
 * Qwen3 (per-head q/k norms) and Mixture-of-Experts models (routed and shared experts, dense
 * layers between MoE layers, a balancing bias) take the same checks: the cached forward routes
 * the new tokens through the same router code, so every logit, hence every greedy id, is the
 * training forward's. */
#include <stdlib.h>

#include "harness.h"
#include "loom/decoder.h"
#include "loom/kernels.h"

#define BF16_TOL 1e-2
#define BF16_BLAS_TOL 5e-2

static void check_model(const char *what, loom_model_spec s, bool bf16, double tol, int T,
                        int PRE) {
  loom_decoder *d;
  setenv("LOOM_KEEP_LOGITS", "1", 1);
  CHECK(loom_decoder_create(&d, &s, 2, T, bf16, false) == 0, "%s", loom_errmsg());
  loom_decoder_init_params(d, 5);
  for (int i = 0; i < d->layout.count; i++) { /* MoE balancing biases: some choices moved */
    const loom_param *p = &d->layout.params[i];
    if (strstr(p->name, "moe.router.bias"))
      for (size_t j = 0; j < p->numel; j++) d->params[p->offset + j] = 0.05f * (float)(j % 3);
  }
  loom_decoder_params_updated(d);
  int32_t *tok = malloc(2 * (size_t)T * sizeof *tok);
  int32_t *pre = malloc((size_t)(PRE + T) * sizeof *pre);
  loom_rng r;
  loom_rng_seed(&r, 9);
  for (int i = 0; i < 2 * T; i++) tok[i] = (int32_t)loom_rng_below(&r, (uint64_t)s.vocab_size);
  loom_decoder_forward(d, tok, NULL, NULL, NULL);
  const float *want = d->logits; /* (2*T, Vp) */
  int V = s.vocab_size, Vp = d->vloc;

  loom_kv_cache c;
  CHECK(loom_kv_cache_create(&c, d, 2, T) == 0, "%s", loom_errmsg());
  float *got = malloc((size_t)(T + PRE) * V * sizeof(float));
  memcpy(pre, tok, PRE * sizeof *pre);
  memcpy(pre + PRE, tok + T, T * sizeof *pre);
  int rows[2] = {0, 1}, counts[2] = {PRE, T};
  loom_kv_batch b = {2, rows, counts, pre, NULL, NULL, NULL, NULL, true};
  CHECK(loom_decoder_forward_cached(d, &c, &b, got) == 0, "%s", loom_errmsg());
  float *first = malloc((size_t)(T + PRE) * V * sizeof(float));
  memcpy(first, got, (size_t)(T + PRE) * V * sizeof(float));
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
    loom_kv_batch s1 = {1, &row0, &one, tok + t, NULL, NULL, NULL, NULL, false};
    CHECK(loom_decoder_forward_cached(d, &c, &s1, got) == 0, "%s", loom_errmsg());
    for (int v = 0; v < V; v++) {
      double w = want[(size_t)t * Vp + v], e = fabs(got[v] - w);
      double rel = e / (fabs(w) > 1 ? fabs(w) : 1);
      if (!(rel <= worst)) worst = rel; /* NaN counts as the worst */
      bad += !(rel <= tol);
    }
  }
  CHECK(bad == 0, "%s: %d logits differ by more than %g (worst %.3g)", what, bad, tol, worst);
  CHECK(c.len[0] == T && c.len[1] == T, "%s: cache lengths %d %d", what, c.len[0], c.len[1]);
  /* one more token does not fit: an error naming the numbers, nothing written */
  int one = 1, row1 = 1;
  loom_kv_batch s2 = {1, &row1, &one, tok, NULL, NULL, NULL, NULL, false};
  char want_msg[32];
  snprintf(want_msg, sizeof want_msg, "%d tokens", T + 1);
  CHECK(loom_decoder_forward_cached(d, &c, &s2, got) != 0 && strstr(loom_errmsg(), want_msg),
        "%s: overflow not refused: %s", what, loom_errmsg());
  printf("%-44s worst relative logit difference %.3g over %d positions\n", what, worst,
         2 * T);
  /* the same prefill on a decoder switched to this precision from the other */
  CHECK(loom_decoder_set_bf16(d, !bf16) != 0 && strstr(loom_errmsg(), "activation slot"),
        "%s: precision switch of a decoder in use not refused: %s", what, loom_errmsg());
  loom_decoder *d2;
  CHECK(loom_decoder_create(&d2, &s, 1, 1, !bf16, false) == 0, "%s", loom_errmsg());
  memcpy(d2->params, d->params, d->layout.total * sizeof(float));
  loom_decoder_params_updated(d2);
  float *again = malloc((size_t)(T + PRE) * V * sizeof(float));
  for (int round = 0; round < 2; round++) { /* switched, then switched back and forth */
    CHECK(loom_decoder_set_bf16(d2, !bf16) == 0 && loom_decoder_set_bf16(d2, bf16) == 0 &&
              d2->bf16 == bf16, "%s", loom_errmsg());
    loom_kv_cache c2;
    CHECK(loom_kv_cache_create(&c2, d2, 2, T) == 0, "%s", loom_errmsg());
    CHECK(loom_decoder_forward_cached(d2, &c2, &b, again) == 0, "%s", loom_errmsg());
    CHECK(!memcmp(again, first, (size_t)(T + PRE) * V * sizeof(float)),
          "%s: a decoder switched to %s differs from one made so", what, bf16 ? "bf16" : "fp32");
    loom_kv_cache_free(&c2);
  }
  free(got), free(first), free(again), free(tok), free(pre);
  loom_kv_cache_free(&c);
  loom_decoder_free(d2);
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

/* the bf16 cases on each GEMM backend (oneDNN: native bf16 GEMMs where the CPU has them) */
static void check_bf16(const char *what, loom_model_spec s, int T, int PRE) {
  loom_gemm_backend keep = loom_gemm_get_backend();
  loom_gemm_backend backends[2] = {LOOM_GEMM_ONEDNN, LOOM_GEMM_OPENBLAS};
  for (int i = 0; i < 2; i++) {
    loom_gemm_set_backend(backends[i]);
    char name[96];
    snprintf(name, sizeof name, "%s, bf16 %s %s", what,
             loom_gemm_backend_name(backends[i]), loom_gemm_bf16_native() ? "native" : "rounded");
    /* an MoE model's routed experts multiply bf16 values in fp32 on either backend (oneDNN's
     * ragged primitive, src/kernels/moe_experts.c), whose row sums also depend on the row
     * count: OpenBLAS's flips, hence its tolerance (0.0197 seen on a Xeon with AMX) */
    int fp32_rows = backends[i] == LOOM_GEMM_OPENBLAS || s.moe.experts > 0;
    check_model(name, s, true, fp32_rows ? BF16_BLAS_TOL : BF16_TOL, T, PRE);
  }
  loom_gemm_set_backend(keep);
}

int main(void) {
  loom_model_spec s = base(LOOM_ARCH_GPT2);
  s.hidden = 96, s.heads = s.kv_heads = 3, s.head_dim = 32, s.intermediate = 384;
  check_model("gpt2 hidden 96, 3 heads", s, false, 1e-4, 13, 5);
  check_bf16("gpt2 hidden 96, 3 heads", s, 13, 5);
  s = base(LOOM_ARCH_LLAMA);
  s.hidden = 64, s.heads = 4, s.kv_heads = 2, s.head_dim = 16, s.intermediate = 96;
  s.qkv_bias = true, s.tied_embeddings = false;
  check_model("llama GQA 4/2, q/k/v bias, untied", s, false, 1e-4, 13, 5);
  s.max_seq = 80; /* many cached keys per query, a 33-token prefill */
  check_model("llama GQA 4/2, 70 tokens", s, false, 1e-4, 70, 33);
  s.max_seq = 40;
  check_bf16("llama GQA 4/2, q/k/v bias, untied", s, 13, 5);
  s = base(LOOM_ARCH_LLAMA);
  s.hidden = 48, s.heads = 4, s.kv_heads = 1, s.head_dim = 12, s.intermediate = 80;
  s.layers = 3, s.qkv_bias = false, s.tied_embeddings = true, s.rope_theta = 1e6;
  check_model("llama head_dim 12, 1 kv head, tied, 3 layers", s, false, 1e-4, 13, 5);
  /* Qwen3: per-head q/k norms, head_dim 20 != hidden / heads */
  s = base(LOOM_ARCH_LLAMA);
  s.hidden = 48, s.heads = 3, s.kv_heads = 1, s.head_dim = 20, s.intermediate = 72;
  s.qkv_bias = false, s.tied_embeddings = false, s.qk_norm = true;
  check_model("qwen3 q/k norms, head_dim 20", s, false, 1e-4, 13, 5);
  check_bf16("qwen3 q/k norms, head_dim 20", s, 13, 5);
  /* Qwen3-MoE: 5 experts, 3 per token, a shared expert, layer 1 dense (mlp_only_layers);
   * generation routes dropless (the training forward here is dropless too) */
  s.layers = 3;
  s.moe = (loom_moe_spec){.experts = 5, .top_k = 3, .intermediate = 40,
                          .shared_intermediate = 56, .norm_topk = true, .sparse_step = 1};
  s.moe.dense_mask[0] = 1u << 1;
  check_model("qwen3-moe E5 k3 shared, layer 1 dense", s, false, 1e-4, 13, 5);
  check_bf16("qwen3-moe E5 k3 shared, layer 1 dense", s, 13, 5);
  /* Qwen2-MoE-like: no q/k norms, plain top-k weights, MoE every 2nd layer, a balancing bias
   * (set to non-zero values: it changes the choice, never the weights) */
  s.qk_norm = false, s.layers = 4;
  s.moe = (loom_moe_spec){.experts = 6, .top_k = 2, .intermediate = 40,
                          .shared_intermediate = 0, .norm_topk = false, .sparse_step = 2,
                          .bias_update_rate = 1e-3};
  check_model("qwen2-moe E6 k2, sparse step 2, balancing bias", s, false, 1e-4, 13, 5);
  return harness_finish("test_gen_kv");
}

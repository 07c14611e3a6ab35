/* The decoder's fused paths against its unfused ones, on whole models (GPT-2 and Llama-GQA,
 * fp32 and bf16): the fused classifier + cross-entropy (one activation slot: gradient in row
 * chunks, logits not kept) vs the unfused head (two slots: (N, V) logits and their gradient),
 * with T not a multiple of the 64-row tiles and 48-row head chunks that do not divide N.
 *   - loss: 1e-6 relative (same logits, fp32 statistics vs fp32 statistics);
 *   - logits when kept: 1e-6 relative norm;
 *   - every gradient: fp32 1e-5 rel. norm (the fused fp32 head scales after its GEMMs: fp32
 *     rounding only); bf16 2e-3 (both round scale * (softmax - onehot) to bf16, but an fp32
 *     difference in a GEMM's accumulation order flips some bf16 roundings downstream: ~2^-9
 *     per flipped element, far below the 1e-2 the PyTorch bf16 check allows).
 * Each with the loss scale of a one-micro-batch step (bf16 uses the head gradient its forward
 * precomputed with that guess) and with half of it (bf16 recomputes the chunks in backward).
 * The key bias is skipped: its exact gradient is 0, both runs hold rounding noise. */
#include <stdlib.h>

#include "ktest.h"
#include "loom/config.h"
#include "loom/decoder.h"
#include "loom/model.h"

typedef struct {
  double loss;
  int count;
  float *grads, *logits;
} run_out;

/* forward + backward with loss scale factor / (targets counted) */
static void run(const loom_model_spec *spec, int B, int T, bool bf16, int slots,
                const int32_t *tok, const int32_t *tgt, float factor, run_out *o) {
  loom_decoder *d;
  loom_shard sh;
  loom_shard_full(&sh, spec);
  LOOM_ASSERT(!loom_decoder_create_shard(&d, spec, &sh, B, T, bf16, false, slots, NULL, NULL, NULL));
  loom_decoder_init_params(d, 5);
  loom_decoder_zero_grads(d);
  loom_decoder_forward(d, tok, tgt, &o->loss, &o->count);
  size_t nl = (size_t)B * T * d->vloc;
  o->logits = NULL;
  if (d->logits) {
    o->logits = falloc(nl);
    memcpy(o->logits, d->logits, nl * sizeof(float));
  }
  loom_decoder_backward(d, factor / (float)o->count);
  o->grads = falloc(d->layout.total);
  memcpy(o->grads, d->grads, d->layout.total * sizeof(float));
  loom_decoder_free(d);
}

static double rel(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double x = (double)a[i] - b[i];
    num += x * x;
    den += (double)b[i] * b[i];
  }
  return sqrt(num) / (sqrt(den) > 1e-30 ? sqrt(den) : 1e-30);
}

/* factor 1: the scale a one-micro-batch step uses (bf16 precomputes the head's gradient with
 * it); 0.5: another (as gradient accumulation would), bf16 recomputes */
static void check_model(const char *name, const char *overrides[], bool bf16, float factor) {
  loom_config cfg;
  loom_config_defaults(&cfg);
  for (int i = 0; overrides[i]; i++) LOOM_ASSERT(!loom_config_override(&cfg, overrides[i]));
  loom_model_spec spec;
  LOOM_ASSERT(!loom_model_spec_from_config(&spec, &cfg.model));
  const int B = 2, T = 70;
  int32_t tok[B * T], tgt[B * T];
  for (int i = 0; i < B * T; i++) {
    tok[i] = (int32_t)loom_rng_below(&ktest_rng, (uint64_t)spec.vocab_size);
    tgt[i] = i % 9 == 4 ? LOOM_IGNORE_INDEX : (int32_t)loom_rng_below(&ktest_rng, (uint64_t)spec.vocab_size);
  }
  loom_param_layout lay;
  loom_param_layout_build(&lay, &spec);
  run_out ref, fused, kept;
  setenv("LOOM_HEAD_ROWS", "48", 1);
  run(&spec, B, T, bf16, 2, tok, tgt, factor, &ref);   /* two slots: the unfused head */
  setenv("LOOM_KEEP_LOGITS", "0", 1);
  run(&spec, B, T, bf16, 1, tok, tgt, factor, &fused); /* fused, chunks of 48 rows, no logits */
  setenv("LOOM_KEEP_LOGITS", "1", 1);
  run(&spec, B, T, bf16, 1, tok, tgt, factor, &kept);  /* fused, logits kept */
  unsetenv("LOOM_KEEP_LOGITS");
  unsetenv("LOOM_HEAD_ROWS");
  double gtol = bf16 ? 2e-3 : 1e-5;
  char dt[32];
  snprintf(dt, sizeof dt, "%s scale x%g", bf16 ? "bf16" : "fp32", factor);
  CHECK(fused.logits == NULL, "%s %s: logits kept although LOOM_KEEP_LOGITS=0", name, dt);
  CHECK(fused.count == ref.count && kept.count == ref.count, "%s: token counts differ", name);
  CHECK_REL(fabs(fused.loss - ref.loss) / ref.loss, 1e-6, "%s %s fused head loss", name, dt);
  CHECK_REL(fabs(kept.loss - ref.loss) / ref.loss, 1e-6, "%s %s fused head (logits kept) loss", name, dt);
  CHECK_REL(rel(kept.logits, ref.logits, (size_t)B * T * spec.padded_vocab), 1e-6,
            "%s %s kept logits", name, dt);
  double worst = 0, worst_kept = 0;
  const char *wname = "";
  for (int i = 0; i < lay.count; i++) {
    const loom_param *p = &lay.params[i];
    /* the key bias's exact gradient is 0 (softmax is shift invariant): only noise to compare */
    if (strstr(p->name, "attn.k.bias")) continue;
    double e = rel(fused.grads + p->offset, ref.grads + p->offset, p->numel);
    double ek = rel(kept.grads + p->offset, ref.grads + p->offset, p->numel);
    if (e > worst) worst = e, wname = p->name;
    if (ek > worst_kept) worst_kept = ek;
  }
  CHECK_REL(worst, gtol, "%s %s fused head: worst gradient (%s)", name, dt, wname);
  CHECK_REL(worst_kept, gtol, "%s %s fused head, logits kept: worst gradient", name, dt);
  loom_free(ref.grads), loom_free(fused.grads), loom_free(kept.grads);
  loom_free(ref.logits), loom_free(kept.logits);
  loom_param_layout_free(&lay);
}

int main(void) {
  loom_rng_seed(&ktest_rng, 17);
  const char *gpt2[] = {"model.preset=", "model.arch=gpt2", "model.vocab_size=1000",
                        "model.hidden=64", "model.heads=4", "model.layers=2", "model.max_seq=128",
                        NULL};
  const char *llama[] = {"model.preset=", "model.arch=llama", "model.vocab_size=1000",
                         "model.hidden=96", "model.heads=6", "model.kv_heads=2",
                         "model.intermediate=200", "model.layers=2", "model.max_seq=128",
                         "model.tied_embeddings=false", NULL};
  for (int bf16 = 0; bf16 < 2; bf16++)
    for (int f = 0; f < 2; f++) {
      check_model("gpt2", gpt2, bf16, f ? 0.5f : 1.0f);
      check_model("llama-gqa", llama, bf16, f ? 0.5f : 1.0f);
    }
  ktest_report_worst();
  return harness_finish("test_fast_decoder");
}

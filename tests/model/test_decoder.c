/* Decoder behaviour that PyTorch cannot see: activation checkpointing gives bitwise the same
 * gradients, the loss at init is ~log(V), vocabulary padding stays zero through training,
 * training on a fixed batch drives the loss down (both families, fp32 and bf16), and bf16
 * weight copies follow the optimizer's steps. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "loom/decoder.h"
#include "loom/kernels.h"
#include "loom/optim.h"

static void random_batch(int32_t *tok, int32_t *tgt, int n, int V, uint64_t seed) {
  loom_rng r;
  loom_rng_seed(&r, seed);
  for (int i = 0; i < n; i++) {
    tok[i] = (int32_t)loom_rng_below(&r, (uint64_t)V);
    tgt[i] = (int32_t)loom_rng_below(&r, (uint64_t)V);
  }
}

static void check_recompute(const char *preset, bool bf16) {
  loom_model_spec s;
  loom_model_preset(&s, preset);
  int B = 2, T = 16, n = B * T;
  int32_t tok[32], tgt[32];
  random_batch(tok, tgt, n, s.vocab_size, 7);
  loom_decoder *a, *b;
  CHECK(loom_decoder_create(&a, &s, B, T, bf16, false) == 0, "%s", loom_errmsg());
  CHECK(loom_decoder_create(&b, &s, B, T, bf16, true) == 0, "%s", loom_errmsg());
  loom_decoder_init_params(a, 3);
  loom_decoder_init_params(b, 3);
  double la, lb;
  int ca, cb;
  loom_decoder_zero_grads(a);
  loom_decoder_zero_grads(b);
  loom_decoder_forward(a, tok, tgt, &la, &ca);
  loom_decoder_forward(b, tok, tgt, &lb, &cb);
  loom_decoder_backward(a, 1.0f / ca);
  loom_decoder_backward(b, 1.0f / cb);
  CHECK(la == lb, "%s: loss differs with recompute: %.17g vs %.17g", preset, la, lb);
  CHECK(!memcmp(a->grads, b->grads, a->layout.total * sizeof(float)),
        "%s%s: recompute changes gradients", preset, bf16 ? " bf16" : "");
  /* the initial loss of a random model is close to log(V) */
  CHECK(fabs(la / ca - log(s.vocab_size)) < 0.1, "%s: initial loss %.4f vs log V %.4f", preset,
        la / ca, log(s.vocab_size));
  loom_decoder_free(a);
  loom_decoder_free(b);
}

static void check_learns(const char *preset, bool bf16) {
  loom_model_spec s;
  loom_model_preset(&s, preset);
  int B = 4, T = 32, n = B * T;
  int32_t tok[128], tgt[128];
  random_batch(tok, tgt, n, 64, 11); /* tokens < 64: padding and unused rows stay untouched */
  loom_decoder *d;
  loom_decoder_create(&d, &s, B, T, bf16, false);
  loom_decoder_init_params(d, 5);
  loom_config c;
  loom_config_defaults(&c);
  c.training.lr = 3e-3;
  c.training.warmup_steps = 1;
  c.training.steps = 30;
  loom_adamw_state opt;
  loom_adamw_state_init(&opt, d->layout.total);
  loom_step_result r0, r;
  for (int step = 0; step < 30; step++) {
    loom_train_step(d, &opt, &c.training, tok, tgt, 1, &r);
    if (step == 0) r0 = r;
  }
  CHECK(r.loss < 0.5 * r0.loss, "%s%s: memorising one batch: loss %.4f -> %.4f", preset,
        bf16 ? " bf16" : "", r0.loss, r.loss);
  const loom_param *e = loom_param_find(&d->layout, "embed.weight");
  double pad = 0;
  for (size_t i = (size_t)s.vocab_size * s.hidden; i < e->numel; i++)
    pad += fabs(d->params[e->offset + i]);
  CHECK(pad == 0, "%s: vocabulary padding rows changed (sum |w| = %g)", preset, pad);
  loom_adamw_state_free(&opt);
  loom_decoder_free(d);
}

/* bf16: after optimizer steps the weights the matmuls read (the native GEMMs' bf16 copy, or
 * the rounded fp32 copy params_lp, which a step leaves to be made when read) are those of the
 * new parameters: the loss equals, bitwise, that of a fresh decoder given the same parameters
 * (whose copies are made at once by loom_decoder_params_updated). */
static void check_weight_copies(const char *preset, loom_gemm_backend backend) {
  loom_gemm_backend saved = loom_gemm_get_backend();
  loom_gemm_set_backend(backend);
  loom_model_spec s;
  loom_model_preset(&s, preset);
  int B = 2, T = 16, n = B * T;
  int32_t tok[32], tgt[32];
  random_batch(tok, tgt, n, 64, 12);
  loom_decoder *a, *b;
  CHECK(loom_decoder_create(&a, &s, B, T, true, false) == 0, "%s", loom_errmsg());
  CHECK(loom_decoder_create(&b, &s, B, T, true, false) == 0, "%s", loom_errmsg());
  loom_decoder_init_params(a, 7);
  loom_config c;
  loom_config_defaults(&c);
  c.training.lr = 1e-2; /* large steps: stale weights would change the loss visibly */
  c.training.warmup_steps = 1;
  loom_adamw_state opt;
  loom_adamw_state_init(&opt, a->layout.total);
  loom_step_result r;
  for (int step = 0; step < 2; step++) loom_train_step(a, &opt, &c.training, tok, tgt, 1, &r);
  memcpy(b->params, a->params, a->layout.total * sizeof(float));
  loom_decoder_params_updated(b);
  double la = 0, lb = 0;
  loom_decoder_forward(a, tok, tgt, &la, NULL);
  loom_decoder_forward(b, tok, tgt, &lb, NULL);
  CHECK(la == lb, "%s bf16 (%s): loss after 2 steps %.9g, with the same parameters loaded %.9g",
        preset, loom_gemm_backend_name(backend), la, lb);
  /* the rounded fp32 copy exists only where the matmuls read it: not beside native bf16
   * GEMMs (4 + 2 bytes a parameter), else 4 + 4 */
  size_t P = a->layout.total;
  int native = loom_gemm_bf16_native();
  CHECK((a->params_lp != NULL) == !native && loom_decoder_param_bytes(a) == (native ? 6 : 8) * P,
        "%s bf16 (%s, native %d): rounded copy %s, %zu bytes of parameters for %zu", preset,
        loom_gemm_backend_name(backend), native, a->params_lp ? "allocated" : "absent",
        loom_decoder_param_bytes(a), P);
  const float *lp = loom_decoder_params_lp(a);
  size_t bad = 0;
  for (size_t i = 0; i < a->layout.total; i++) bad += lp[i] != loom_bf16_round(a->params[i]);
  CHECK(bad == 0, "%s bf16 (%s): %zu values of the rounded copy are not bf16(params)", preset,
        loom_gemm_backend_name(backend), bad);
  loom_adamw_state_free(&opt);
  loom_decoder_free(a);
  loom_decoder_free(b);
  loom_gemm_set_backend(saved);
}

int main(void) {
  check_weight_copies("tiny-qwen2", LOOM_GEMM_ONEDNN);
  check_weight_copies("tiny-qwen2", LOOM_GEMM_OPENBLAS);
  check_recompute("tiny-gpt2", false);
  check_recompute("tiny-llama", false);
  check_recompute("tiny-qwen2", true);
  check_learns("tiny-gpt2", false);
  check_learns("tiny-llama", true);
  return harness_finish("test_decoder");
}

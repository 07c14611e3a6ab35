/* The decoder's Mixture-of-Experts layers and Qwen3 q/k norms where PyTorch cannot look
 * (tests/torch checks the numbers against the reference):
 *  - activation checkpointing gives bitwise the same loss, gradients and router statistics:
 *    the recomputed forward routes alike and does not record its routing a second time
 *    (fp32 and bf16; dense Qwen3 too);
 *  - a run does not depend on the thread count: three optimizer steps on 1 and 2 threads give
 *    the same bits (fp32 and bf16, the OpenBLAS backend, whose products do not depend on it;
 *    the grouped experts then run expert-parallel);
 *  - the step's statistics: every micro-batch's N tokens x k selections counted once per MoE
 *    layer, the capacity's dropped pairs, the mean aux loss of a balanced router (k);
 *  - auxiliary-loss-free balancing: the bias moves by -rate where the load is above the mean
 *    and +rate below, AdamW leaves it alone (no gradient, not in the norm), the selections
 *    follow it;
 *  - a shard with a tensor, sequence or context split is refused with the reason. */
#include <omp.h>
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

/* tiny-qwen3-moe with the router terms on, a shared expert, a dense layer, E = 6, k = 3 */
static loom_model_spec moe_spec(double capacity, double bias_rate) {
  loom_model_spec s;
  loom_model_preset(&s, "tiny-qwen3-moe");
  s.layers = 3;
  s.moe.experts = 6, s.moe.top_k = 3, s.moe.shared_intermediate = 64;
  s.moe.dense_mask[0] = 1u << 1;
  s.moe.aux_loss_coef = 0.01, s.moe.z_loss_coef = 0.001;
  s.moe.capacity_factor = capacity, s.moe.bias_update_rate = bias_rate;
  return s;
}

static void check_recompute(const char *what, loom_model_spec s, bool bf16) {
  int B = 2, T = 16, n = B * T, A = 2;
  int32_t tok[64], tgt[64];
  random_batch(tok, tgt, A * n, s.vocab_size, 7);
  loom_decoder *a, *b;
  CHECK(loom_decoder_create(&a, &s, B, T, bf16, false) == 0, "%s", loom_errmsg());
  CHECK(loom_decoder_create(&b, &s, B, T, bf16, true) == 0, "%s", loom_errmsg());
  loom_decoder_init_params(a, 3);
  loom_decoder_init_params(b, 3);
  double la = 0, lb = 0;
  loom_decoder_zero_grads(a);
  loom_decoder_zero_grads(b);
  loom_decoder_moe_begin_step(a, A);
  loom_decoder_moe_begin_step(b, A);
  for (int mb = 0; mb < A; mb++) { /* two micro-batches accumulated */
    double pa, pb;
    loom_decoder_forward(a, tok + mb * n, tgt + mb * n, &pa, NULL);
    loom_decoder_forward(b, tok + mb * n, tgt + mb * n, &pb, NULL);
    loom_decoder_backward(a, 1.0f / (float)(A * n));
    loom_decoder_backward(b, 1.0f / (float)(A * n));
    la += pa, lb += pb;
  }
  loom_decoder_moe_end_step(a, NULL, NULL, a->params, 0, a->layout.total);
  loom_decoder_moe_end_step(b, NULL, NULL, b->params, 0, b->layout.total);
  CHECK(la == lb, "%s: loss differs with recompute: %.17g vs %.17g", what, la, lb);
  CHECK(!memcmp(a->grads, b->grads, a->layout.total * sizeof(float)),
        "%s: recompute changes gradients", what);
  const loom_moe_step_stats *sa = loom_decoder_moe_stats(a), *sb = loom_decoder_moe_stats(b);
  CHECK(sa->layers == sb->layers && sa->micro_batches == sb->micro_batches &&
            sa->aux_loss == sb->aux_loss && sa->z_loss == sb->z_loss &&
            (!sa->layers ||
             !memcmp(sa->load, sb->load, (size_t)sa->layers * sa->experts * sizeof(int64_t))),
        "%s: recompute changes the router statistics (aux %.9g vs %.9g, %ld vs %ld mbs)", what,
        sa->aux_loss, sb->aux_loss, sa->micro_batches, sb->micro_batches);
  for (int i = 0; i < sa->layers; i++) { /* each token's k choices, counted once */
    int64_t total = 0;
    for (int e = 0; e < sa->experts; e++) total += sb->load[(size_t)i * sa->experts + e];
    CHECK(total == (int64_t)A * n * s.moe.top_k, "%s: layer %d counts %lld selections, want %d",
          what, sa->layer[i], (long long)total, A * n * s.moe.top_k);
  }
  loom_decoder_free(a);
  loom_decoder_free(b);
}

/* three optimizer steps on `threads` threads: the parameters after them */
static float *train_on(loom_model_spec s, int threads, bool bf16, size_t *P) {
  int B = 2, T = 16, n = B * T, A = 2;
  int32_t tok[64], tgt[64];
  random_batch(tok, tgt, A * n, s.vocab_size, 9);
  omp_set_num_threads(threads);
  loom_decoder *d;
  CHECK(loom_decoder_create(&d, &s, B, T, bf16, false) == 0, "%s", loom_errmsg());
  loom_decoder_init_params(d, 4);
  loom_config c;
  loom_config_defaults(&c);
  c.training.lr = 3e-3, c.training.warmup_steps = 1;
  loom_adamw_state opt;
  loom_adamw_state_init(&opt, d->layout.total);
  loom_step_result r;
  for (int step = 0; step < 3; step++) loom_train_step(d, &opt, &c.training, tok, tgt, A, &r);
  *P = d->layout.total;
  float *out = malloc(*P * sizeof(float));
  memcpy(out, d->params, *P * sizeof(float));
  loom_adamw_state_free(&opt);
  loom_decoder_free(d);
  omp_set_num_threads(2);
  return out;
}

static void check_threads(const char *what, loom_model_spec s, loom_gemm_backend backend,
                          bool bf16) {
  loom_gemm_backend keep = loom_gemm_get_backend();
  loom_gemm_set_backend(backend);
  size_t P1, P2;
  float *one = train_on(s, 1, bf16, &P1), *two = train_on(s, 2, bf16, &P2);
  CHECK(P1 == P2 && !memcmp(one, two, P1 * sizeof(float)),
        "%s %s (%s): 3 steps on 1 and on 2 threads differ", what, bf16 ? "bf16" : "fp32",
        loom_gemm_backend_name(backend));
  free(one), free(two);
  loom_gemm_set_backend(keep);
}

/* the capacity's dropped pairs and a balanced router's aux loss */
static void check_stats(void) {
  loom_model_spec s = moe_spec(0.5, 0);
  int B = 2, T = 16, n = B * T;
  int32_t tok[32], tgt[32];
  random_batch(tok, tgt, n, s.vocab_size, 5);
  loom_decoder *d;
  CHECK(loom_decoder_create(&d, &s, B, T, false, false) == 0, "%s", loom_errmsg());
  loom_decoder_init_params(d, 6);
  /* a router of zeros: every probability 1/E, aux = E sum_e f_e / E = k whatever the ties */
  for (int i = 0; i < d->layout.count; i++)
    if (strstr(d->layout.params[i].name, "moe.router.weight"))
      memset(d->params + d->layout.params[i].offset, 0, d->layout.params[i].numel * 4);
  loom_decoder_params_updated(d);
  loom_decoder_moe_begin_step(d, 1);
  loom_decoder_forward(d, tok, tgt, NULL, NULL);
  loom_decoder_moe_end_step(d, NULL, NULL, d->params, 0, d->layout.total);
  const loom_moe_step_stats *st = loom_decoder_moe_stats(d);
  CHECK(st->layers == 2 && st->layer[0] == 0 && st->layer[1] == 2, "MoE layers %d: %d %d",
        st->layers, st->layer[0], st->layer[1]);
  CHECK_CLOSE(st->aux_loss, s.moe.top_k, 1e-6, "aux loss of a uniform router");
  /* all ties choose experts 0..k-1: capacity ceil(0.5 n k / E) each, the rest dropped */
  int E = s.moe.experts, k = s.moe.top_k, cap = (n * k + 2 * E - 1) / (2 * E);
  for (int i = 0; i < st->layers; i++)
    CHECK(st->dropped[i] == (int64_t)k * (n - cap) && st->load[(size_t)i * E] == n &&
              st->load[(size_t)i * E + k] == 0,
          "layer %d: %lld dropped (want %d), load %lld %lld", st->layer[i],
          (long long)st->dropped[i], k * (n - cap), (long long)st->load[(size_t)i * E],
          (long long)st->load[(size_t)i * E + k]);
  /* a forward outside a step records nothing */
  loom_decoder_forward(d, tok, tgt, NULL, NULL);
  CHECK(st->micro_batches == 1, "a forward after the step was recorded (%ld micro-batches)",
        st->micro_batches);
  loom_decoder_free(d);
}

/* DeepSeek-V3 balancing: the bias steps against the load; AdamW never touches it */
static void check_bias(void) {
  loom_model_spec s = moe_spec(0, 0.05);
  s.moe.aux_loss_coef = 0;
  int B = 2, T = 16, n = B * T;
  int32_t tok[32], tgt[32];
  random_batch(tok, tgt, n, s.vocab_size, 5);
  loom_decoder *d;
  CHECK(loom_decoder_create(&d, &s, B, T, false, false) == 0, "%s", loom_errmsg());
  loom_decoder_init_params(d, 6);
  const loom_param *rb = loom_param_find(&d->layout, "layers.0.moe.router.bias");
  CHECK(rb && rb->frozen && !rb->decay && rb->numel == (size_t)s.moe.experts,
        "layers.0.moe.router.bias: a frozen (E) tensor of the layout");
  if (!rb) return;
  loom_config c;
  loom_config_defaults(&c);
  c.training.lr = 1e-2, c.training.warmup_steps = 1;
  loom_adamw_state opt;
  loom_adamw_state_init(&opt, d->layout.total);
  loom_step_result r;
  int E = s.moe.experts;
  float before[16];
  for (int step = 0; step < 4; step++) {
    memcpy(before, d->params + rb->offset, (size_t)E * sizeof(float));
    loom_train_step(d, &opt, &c.training, tok, tgt, 1, &r);
    const loom_moe_step_stats *st = loom_decoder_moe_stats(d);
    int64_t total = 0;
    for (int e = 0; e < E; e++) total += st->load[e];
    int bad = 0;
    for (int e = 0; e < E; e++) {
      int64_t x = st->load[e] * E;
      float want = before[e] - 0.05f * (float)((x > total) - (x < total));
      bad += d->params[rb->offset + e] != want;
      bad += d->grads[rb->offset + e] != 0;
    }
    CHECK(bad == 0, "step %d: the bias did not move by -rate sign(load - mean)", step + 1);
  }
  /* the loads of layer 0 grow more even as the bias steps (4 steps of 0.05 on probabilities
   * of about 1/E: the bias decides) */
  float spread = 0;
  for (int e = 0; e < E; e++) spread += fabsf(d->params[rb->offset + e]);
  CHECK(spread > 0, "the bias never moved");
  loom_adamw_state_free(&opt);
  loom_decoder_free(d);
}

static void check_refused(void) {
  loom_model_spec s = moe_spec(0, 0);
  loom_shard sh;
  loom_shard_full(&sh, &s);
  sh.tp = 2, sh.seq_parallel = true; /* Megatron sequence parallelism splits the tokens */
  loom_decoder *d = NULL;
  CHECK(loom_decoder_create_shard(&d, &s, &sh, 2, 16, false, false, 1, NULL, NULL, NULL) != 0 &&
            strstr(loom_errmsg(), "Mixture-of-Experts") &&
            strstr(loom_errmsg(), "Megatron sequence parallelism"),
        "an MoE shard with Megatron sequence parallelism was not refused: %s", loom_errmsg());
}

int main(void) {
  loom_model_spec q3;
  loom_model_preset(&q3, "tiny-qwen3");
  check_recompute("tiny-qwen3 (q/k norms)", q3, false);
  check_recompute("MoE fp32", moe_spec(0, 0), false);
  check_recompute("MoE fp32, capacity 1, balancing bias", moe_spec(1.0, 0.01), false);
  check_recompute("MoE bf16", moe_spec(0, 0), true);
  /* (OpenBLAS: oneDNN's own fp32 GEMM sums some narrow products in an order that depends on
   * the thread count, e.g. outputs of 64 columns at K = 128: "the GEMM libraries aside",
   * docs/PERFORMANCE.md) */
  check_threads("MoE", moe_spec(1.0, 0.01), LOOM_GEMM_OPENBLAS, false);
  check_threads("MoE", moe_spec(1.0, 0.01), LOOM_GEMM_OPENBLAS, true);
  check_threads("dense qwen3", q3, LOOM_GEMM_OPENBLAS, false);
  check_stats();
  check_bias();
  check_refused();
  return harness_finish("test_moe_decoder");
}

/* The simulator's models against closed forms: parameter counts (published numbers and the
 * trainer's shard layouts), FLOPs per token and Megatron's FLOPs per iteration, Korthikanti
 * et al.'s activation formulas with tensor/sequence parallelism and recomputation, ZeRO bytes
 * per parameter, pipeline bubble fractions, and ring collective volumes. */
#include <math.h>

#include "loom/decoder.h"
#include "sim_test_util.h"

static void test_param_counts(void) {
  loom_model_spec s;
  CHECK(loom_model_preset(&s, "gpt2-124m") == 0, "%s", loom_errmsg());
  double padded = loom_sim_rank_params(&s, 1, s.layers, true, true);
  double pad_rows = (double)(s.padded_vocab - s.vocab_size) * s.hidden;
  CHECK_CLOSE(padded, 124475904.0, 0, "gpt2-124m with vocab padded to 50304");
  CHECK_CLOSE(padded - pad_rows, 124439808.0, 0, "gpt2-124m with vocab 50257");
  CHECK(loom_model_preset(&s, "qwen2.5-0.5b") == 0, "%s", loom_errmsg());
  CHECK_CLOSE(loom_sim_rank_params(&s, 1, s.layers, true, true) -
                  (double)(s.padded_vocab - s.vocab_size) * s.hidden,
              494032768.0, 0, "qwen2.5-0.5b");
  /* every shard the trainer builds: the closed form equals the layout's element count */
  const char *presets[] = {"gpt2-124m", "qwen2.5-0.5b", "llama3-8b", "tiny-llama",
                           "tiny-qwen2.5-vl", "tiny-llava", "qwen2.5-vl-7b"};
  for (size_t p = 0; p < sizeof presets / sizeof *presets; p++) {
    CHECK(loom_model_preset(&s, presets[p]) == 0, "%s", loom_errmsg());
    for (int tp = 1; tp <= 2; tp *= 2)
      for (int part = 0; part < 3; part++) { /* first stage, middle, last */
        loom_shard sh;
        memset(&sh, 0, sizeof sh);
        sh.tp = tp, sh.sp = 1, sh.n_chunks = 1;
        sh.chunk_first[0] = part == 0 ? 0 : 1;
        sh.chunk_last[0] = part == 2 ? s.layers : 2;
        sh.chunk_embed[0] = part == 0, sh.chunk_head[0] = part == 2;
        loom_param_layout lay;
        loom_param_layout_build_shard(&lay, &s, &sh);
        double n = 0;
        for (int i = 0; i < lay.count; i++) n += (double)lay.params[i].numel;
        loom_param_layout_free(&lay);
        double want = loom_sim_rank_params(&s, tp, sh.chunk_last[0] - sh.chunk_first[0],
                                           part == 0, part == 2);
        CHECK(n == want, "%s tp=%d part %d: layout %.0f, closed form %.0f", presets[p], tp,
              part, n, want);
      }
  }
}

static void test_flops(void) {
  loom_model_spec s;
  CHECK(loom_model_preset(&s, "gpt2-124m") == 0, "%s", loom_errmsg());
  /* 6N (matmul weights, LM head included) + the causal attention term 6 L T h */
  double L = s.layers, h = s.hidden, V = s.padded_vocab, T = 1024;
  double want = 6 * (12 * L * h * h + V * h) + 6 * L * T * h;
  CHECK_CLOSE(loom_sim_flops_per_token(&s, 1024), want, 1e-12, "flops per token gpt2-124m");
  /* Megatron's 72 B s L h^2 (1 + s/6h + V/12hL) equals the cost model's executed FLOPs of
   * forward + backward (unfused attention, all T x T scores) over the layers and the head */
  loom_model_spec g = megatron_gpt(6144, 64, 48, 51200, 2048);
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "a100-80gb") == 0, "%s", loom_errmsg());
  hw.attention = LOOM_ATTN_UNFUSED;
  for (int tp = 1; tp <= 8; tp *= 8) {
    loom_sim_strategy st = strategy(1, tp, 1, 1, 4, 1, 2048);
    loom_sim_ctx c;
    loom_sim_ctx_init(&c, &g, &hw, &st);
    loom_sim_cost layer, head;
    loom_sim_layer_cost(&c, &layer);
    loom_sim_head_cost(&c, &head);
    double got = (g.layers * layer.flops + head.flops) * tp;
    CHECK_CLOSE(got, loom_sim_megatron_flops(4, 2048, 48, 6144, 51200), 1e-9,
                "Megatron FLOPs per iteration (22B, B=4, tp)");
  }
}

/* Korthikanti et al. 2022, section 4: the cost model's itemised activations of a layer
 * (16-bit, dropout, unfused attention, without LayerNorm statistics) equal the formulas */
static void test_activation_formulas(void) {
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "a100-80gb") == 0, "%s", loom_errmsg());
  hw.attention = LOOM_ATTN_UNFUSED;
  struct {
    int h, a, b, s, t;
  } shapes[] = {{6144, 64, 4, 2048, 1}, {6144, 64, 4, 2048, 8}, {12288, 96, 1, 2048, 8},
                {2048, 16, 2, 1024, 4}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    loom_model_spec g = megatron_gpt(shapes[i].h, shapes[i].a, 4, 51200, shapes[i].s);
    for (int sp = 0; sp < 2; sp++)
      for (int rc = 0; rc < 3; rc++) {
        if (sp && shapes[i].t == 1) continue;
        loom_sim_strategy st = strategy(1, shapes[i].t, 1, 1, shapes[i].b, 1, shapes[i].s);
        st.seq_par = sp, st.dropout = true, st.recompute = (loom_recompute)rc;
        loom_sim_ctx c;
        loom_sim_ctx_init(&c, &g, &hw, &st);
        double got = loom_sim_layer_act_bytes(&c, false);
        double want = loom_sim_megatron_act_bytes(shapes[i].s, shapes[i].b, shapes[i].h,
                                                  shapes[i].a, shapes[i].t, sp, (loom_recompute)rc);
        CHECK_CLOSE(got, want, 1e-12, "activation bytes per layer");
        if (fabs(got - want) > 1e-6 * want)
          fprintf(stderr, "  h=%d a=%d b=%d s=%d t=%d sp=%d recompute=%s\n", shapes[i].h,
                  shapes[i].a, shapes[i].b, shapes[i].s, shapes[i].t, sp,
                  loom_recompute_name((loom_recompute)rc));
      }
  }
  /* the paper's own number: 22B without parallelism, s b h (34 + 5 a s / h) per layer */
  double sbh = 2048.0 * 4 * 6144;
  CHECK_CLOSE(loom_sim_megatron_act_bytes(2048, 4, 6144, 64, 1, false, LOOM_RECOMPUTE_NONE),
              sbh * (34 + 5 * 64 * 2048.0 / 6144), 1e-12, "34 + 5as/h");
}

static void test_zero_bytes(void) {
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "a100-80gb") == 0, "%s", loom_errmsg());
  loom_model_spec g = megatron_gpt(4096, 32, 32, 51200, 2048);
  int Nd = 8;
  for (int zero = 0; zero <= 3; zero++) {
    loom_sim_strategy st = strategy(Nd, 1, 1, 1, 1, 1, 2048);
    st.zero = zero;
    loom_sim_ctx c;
    loom_sim_ctx_init(&c, &g, &hw, &st);
    loom_sim_memory m;
    loom_sim_memory_rank(&c, g.layers, g.layers, true, true, 1, &m);
    double P = loom_sim_rank_params(&g, 1, g.layers, true, true);
    double gathered = zero == 3 ? 2 * 2 * loom_sim_rank_params(&g, 1, 1, false, false) : 0;
    double per = (m.weights - gathered + m.grads + m.optimizer) / P;
    CHECK_CLOSE(per, loom_sim_zero_bytes_per_param(zero, Nd), 1e-12, "ZeRO bytes per parameter");
  }
  CHECK_CLOSE(loom_sim_zero_bytes_per_param(1, 64), 4 + 12.0 / 64, 1e-15, "ZeRO-1 formula");
  CHECK_CLOSE(loom_sim_zero_bytes_per_param(2, 64), 2 + 14.0 / 64, 1e-15, "ZeRO-2 formula");
  CHECK_CLOSE(loom_sim_zero_bytes_per_param(3, 64), 16.0 / 64, 1e-15, "ZeRO-3 formula");
}

static void test_bubbles(void) {
  for (int p = 2; p <= 8; p *= 2)
    for (int m = p; m <= 16; m += p)
      for (int v = 1; v <= 2; v++) {
        const char *name = v > 1 ? "interleaved" : "1f1b";
        loom_schedule s;
        CHECK(loom_sched_generate(&s, name, p, v, m) == 0, "%s", loom_errmsg());
        double replay = loom_sched_bubble_fraction(&s, 1, 2);
        double closed = loom_sim_bubble_closed(name, p, m, v);
        CHECK_CLOSE(replay, closed, 1e-9, "bubble: replay vs closed form");
        loom_sched_free(&s);
      }
  CHECK_CLOSE(loom_sim_bubble_closed("gpipe", 4, 8, 1), 3.0 / 8, 1e-15, "(p-1)/m");
  CHECK_CLOSE(loom_sim_bubble_closed("interleaved", 4, 8, 2), 3.0 / 16, 1e-15, "(p-1)/(vm)");
  /* the simulator's measured bubble on a deep model (ends negligible, communication
   * overlapped) is close to the closed form */
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  loom_model_spec g = megatron_gpt(4096, 32, 64, 1024, 2048);
  struct {
    int p, m, v;
  } cases[] = {{4, 8, 1}, {8, 16, 1}, {4, 8, 2}, {8, 32, 2}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    loom_sim_strategy st = strategy(1, 1, cases[i].p, cases[i].v, 1, cases[i].m, 2048);
    st.dtype = LOOM_DT_BF16;
    loom_sim_ctx c;
    loom_sim_ctx_init(&c, &g, &hw, &st);
    loom_schedule s;
    CHECK(loom_sim_schedule(&st, NULL, &s) == 0, "%s", loom_errmsg());
    loom_sim_result r;
    loom_sim_opts o = {NULL, false, 0};
    CHECK(loom_sim_run(&c, &s, &o, &r) == 0, "%s", loom_errmsg());
    double want = loom_sim_bubble_closed(st.schedule, cases[i].p, cases[i].m, cases[i].v);
    CHECK(fabs(r.bubble - want) <= 0.1 * want, "simulated bubble p=%d m=%d v=%d: %.4f vs %.4f",
          cases[i].p, cases[i].m, cases[i].v, r.bubble, want);
    loom_sim_result_free(&r);
    loom_sched_free(&s);
  }
}

static void test_ring_volumes(void) {
  double n = 1 << 20;
  for (int p = 1; p <= 8; p++) {
    double f = (p - 1.0) / p;
    CHECK_CLOSE(loom_hw_ring_bytes(LOOM_COLL_ALLREDUCE, n, p), 2 * f * n, 1e-15, "all-reduce 2(p-1)/p n");
    CHECK_CLOSE(loom_hw_ring_bytes(LOOM_COLL_REDUCE_SCATTER, n, p), f * n, 1e-15, "reduce-scatter");
    CHECK_CLOSE(loom_hw_ring_bytes(LOOM_COLL_ALLGATHER, n, p), f * n, 1e-15, "all-gather");
    CHECK_CLOSE(loom_hw_ring_bytes(LOOM_COLL_ALLTOALL, n, p), f * n, 1e-15, "all-to-all");
  }
  CHECK_CLOSE(loom_hw_ring_bytes(LOOM_COLL_SENDRECV, n, 2), n, 1e-15, "send n");
  /* time = bytes moved / (bandwidth x efficiency) + steps x latency */
  loom_hw_profile hw;
  loom_hw_defaults(&hw);
  hw.tier[0].bandwidth = 100e9, hw.tier[0].latency = 5e-6;
  hw.tier[0].efficiency[LOOM_COLL_ALLREDUCE] = 0.5;
  double t = loom_hw_coll_time(&hw, LOOM_COLL_ALLREDUCE, 1e9, 1, 8);
  CHECK_CLOSE(t, 2 * 7.0 / 8 * 1e9 / 50e9 + 14 * 5e-6, 1e-12, "ring all-reduce time");
  hw.tier[0].algo = LOOM_ALGO_TREE;
  t = loom_hw_coll_time(&hw, LOOM_COLL_ALLREDUCE, 1e9, 1, 8);
  CHECK_CLOSE(t, 2 * 7.0 / 8 * 1e9 / 50e9 + 6 * 5e-6, 1e-12, "tree all-reduce time");
}

int main(void) {
  test_param_counts();
  test_flops();
  test_activation_formulas();
  test_zero_bytes();
  test_bubbles();
  test_ring_volumes();
  return harness_finish("test_sim_closed_forms");
}

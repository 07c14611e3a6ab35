/* The planner: the 530B Turing-NLG shape (105 layers, hidden 20480, 128 heads) on 5,128 A100s
 * is searched (configurations per second printed; the speed is a benchmark figure, in
 * docs/PERFORMANCE.md "Planner speed", not asserted here); every result fits in
 * memory and uses at most the ranks given; the winner is no slower than the Megatron layout
 * of the paper (tp 8, pp 35, interleaved); a small model on this CPU-like profile plans
 * trainable configurations only when asked. */
#include <math.h>

#include "sim_test_util.h"

static void test_turing_530b(void) {
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "a100-80gb") == 0, "%s", loom_errmsg());
  loom_model_spec g = megatron_gpt(20480, 128, 105, 51200, 2048);
  loom_plan_request q;
  memset(&q, 0, sizeof q);
  q.spec = &g, q.hw = &hw, q.gpus = 5128, q.global_batch = 1920, q.seq = 2048;
  q.dtype = LOOM_DT_BF16, q.finalists = 24, q.top = 5;
  loom_plan_result r;
  double t0 = loom_now();
  CHECK(loom_plan_search(&q, &r) == 0, "%s", loom_errmsg());
  double dt = loom_now() - t0;
  printf("530B on 5128 GPUs: %ld configurations in %.3f s (%.0f/s), total with %d simulated "
         "finalists %.3f s\n", r.evaluated, r.search_seconds, r.evaluated / r.search_seconds,
         q.finalists, dt);
  CHECK(r.evaluated > 10000, "searched only %ld configurations", r.evaluated);
  CHECK(r.n > 0, "no result");
  double limit = loom_sim_memory_limit(&hw, 8);
  for (int i = 0; i < r.n; i++) {
    CHECK(r.best[i].mem <= limit, "#%d over memory: %.1f GiB", i, r.best[i].mem / 1073741824.0);
    CHECK(r.best[i].gpus_used <= 5128 && 1920 % (r.best[i].st.dp * r.best[i].st.micro_batch) == 0,
          "#%d uses %d ranks, dp %d", i, r.best[i].gpus_used, r.best[i].st.dp);
    /* sorted by simulated time in steps of 0.1%, the smaller memory first within a step */
    const loom_plan_entry *a = &r.best[i - (i > 0)], *b = &r.best[i];
    if (i)
      CHECK(b->sim_time >= a->sim_time / (1 + 1e-3) &&
                (b->sim_time >= a->sim_time || b->mem >= a->mem),
            "#%d (%.4f s, %.2f GiB) sorted after #%d (%.4f s, %.2f GiB)", i, b->sim_time,
            b->mem / 1073741824.0, i - 1, a->sim_time, a->mem / 1073741824.0);
  }
  /* the paper's layout (tp 8 + sequence parallelism, pp 35, v 3, dp 16, micro-batch 1) */
  loom_sim_strategy st = strategy(16, 8, 35, 3, 1, 120, 2048);
  st.seq_par = true, st.dtype = LOOM_DT_BF16;
  loom_sim_ctx c;
  loom_sim_ctx_init(&c, &g, &hw, &st);
  loom_schedule s;
  CHECK(loom_sim_schedule(&st, NULL, &s) == 0, "%s", loom_errmsg());
  loom_sim_result res;
  loom_sim_opts o = {NULL, false, 0};
  CHECK(loom_sim_run(&c, &s, &o, &res) == 0, "%s", loom_errmsg());
  /* within the ranking's step (0.1%): the first entry is the leanest of the fastest step */
  CHECK(r.best[0].sim_time <= res.step_time * (1 + 1e-3), "the plan (%.3f s) is no slower than "
        "the paper's layout (%.3f s)", r.best[0].sim_time, res.step_time);
  loom_sim_result_free(&res);
  loom_sched_free(&s);
  loom_plan_result_free(&r);
}

static void test_trainable_only(void) {
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "a100-80gb") == 0, "%s", loom_errmsg());
  hw.attention = LOOM_ATTN_UNFUSED;
  loom_model_spec s;
  CHECK(loom_model_preset(&s, "gpt2-124m") == 0, "%s", loom_errmsg());
  loom_plan_request q;
  memset(&q, 0, sizeof q);
  q.spec = &s, q.hw = &hw, q.gpus = 16, q.global_batch = 64, q.seq = 1024;
  q.dtype = LOOM_DT_BF16, q.finalists = 16, q.top = 5, q.trainable_only = true;
  loom_plan_result r;
  CHECK(loom_plan_search(&q, &r) == 0, "%s", loom_errmsg());
  for (int i = 0; i < r.n; i++) {
    CHECK(r.best[i].st.recompute != LOOM_RECOMPUTE_SELECTIVE, "trainable plans: no selective");
    loom_config cfg;
    loom_config_defaults(&cfg);
    CHECK(loom_sim_strategy_to_config(&r.best[i].st, &cfg) == 0 && loom_config_validate(&cfg) == 0,
          "#%d writes a valid train config: %s", i, loom_errmsg());
  }
  loom_plan_result_free(&r);
}

int main(void) {
  test_turing_530b();
  test_trainable_only();
  return harness_finish("test_plan");
}

/* The simulator on Mixture-of-Experts models: Megatron-LM's FLOP count of an MoE model, the
 * all-to-all bytes of expert parallelism against their closed form, the experts' memory over
 * ep and the expert-data-parallel replicas, load imbalance and the capacity factor, the errors
 * for layouts the experts do not fit, the trace's expert all-to-all row, the planner's search
 * of ep, and the published run it is validated on: NVIDIA Megatron-Bridge's performance summary
 * (docs/performance-summary.md, release 26.02), Qwen3-235B-A22B on 256 DGX-H100 GPUs, FP8,
 * 1,633 tokens/s/GPU (within 10%), with Llama3-70B FP8 of the same table as the dense check. */
#include <math.h>
#include <string.h>

#include "loom/decoder.h"
#include "sim_test_util.h"

static loom_model_spec preset(const char *name) {
  loom_model_spec s;
  CHECK(loom_model_preset(&s, name) == 0, "%s", loom_errmsg());
  return s;
}

/* Megatron-LM's num_floating_point_operations (megatron/training/training.py,
 * transformer_flops), written out for a GQA model whose layers are all MoE layers: per token
 * 6 x (attention projections + routed experts x topk + logits) + the causal attention term */
static double megatron_moe_flops(const loom_model_spec *s, double T) {
  double h = s->hidden, q = (double)s->heads * s->head_dim, kv = (double)s->kv_heads * s->head_dim;
  double attn = h * (q + 2 * kv) + q * h, core = q * T; /* 12 q T / 2 for causal */
  double moe = h * 3.0 * s->moe.intermediate * s->moe.top_k + h * 3.0 * s->moe.shared_intermediate;
  return 6 * s->layers * (attn + moe) + 6 * s->layers * core + 6 * h * s->padded_vocab;
}

static void test_flops(void) {
  loom_model_spec s = preset("qwen3-235b-a22b");
  double got = loom_sim_flops_per_token(&s, 4096), want = megatron_moe_flops(&s, 4096);
  CHECK(fabs(got / want - 1) < 1e-12, "Qwen3-235B FLOPs per token %.6g, Megatron's %.6g", got, want);
  /* the published pair: 1,633 tokens/s/GPU are 242 model TFLOP/s/GPU */
  CHECK(fabs(1633 * got / 242e12 - 1) < 0.005, "1633 tokens/s x %.4g FLOPs = %.1f TFLOP/s, "
        "published 242", got, 1633 * got / 1e12);
  loom_model_spec d = preset("llama3-8b");
  CHECK(loom_sim_flops_per_token(&d, 8192) == loom_decoder_flops_per_token(&d, 8192),
        "a dense model keeps the trainer's count");
}

/* a small MoE model on h100-sxm: layers, tokens and the layout */
static int run_moe(const char *preset_name, int layers, loom_sim_strategy *st, loom_sim_result *r,
                   const char *trace) {
  static loom_model_spec s;
  s = preset(preset_name);
  if (layers) s.layers = layers;
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  if (loom_sim_strategy_check(st, &s)) return -1;
  loom_sim_ctx c;
  loom_sim_ctx_init(&c, &s, &hw, st);
  loom_schedule sc;
  CHECK(loom_sim_schedule(st, NULL, &sc) == 0, "%s", loom_errmsg());
  loom_sim_opts o = {trace, false, 0};
  int rc = loom_sim_run(&c, &sc, &o, r);
  loom_sched_free(&sc);
  return rc;
}

static loom_sim_strategy moe_strategy(int dp, int tp, int ep, int etp, int m, int seq) {
  loom_sim_strategy st = strategy(dp, tp, 1, 1, 1, m, seq);
  st.dtype = LOOM_DT_BF16;
  st.seq_par = tp > 1;
  st.ep = ep, st.etp = etp;
  return st;
}

/* the step time of strategy st for model s on profile hw */
static double sim_step(const loom_model_spec *s, const loom_hw_profile *hw,
                       const loom_sim_strategy *st) {
  loom_sim_result r;
  sim_result_of(s, hw, st, &r);
  double t = r.step_time;
  loom_sim_result_free(&r);
  return t;
}

/* per rank and step: 4 all-to-alls per MoE layer and micro-batch of tokens x k x hidden x 2
 * bytes ((ep-1)/ep of them leave the rank), and the count exchange of E x 8 bytes */
static void test_a2a_bytes(void) {
  loom_model_spec s = preset("qwen3-30b-a3b");
  const struct {
    int dp, tp, ep, etp;
  } k[] = {{4, 1, 4, 1}, {4, 2, 8, 1}, {4, 2, 2, 2}, {8, 1, 8, 1}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    int L = 4, m = 2, T = 1024;
    loom_sim_strategy st = moe_strategy(k[i].dp, k[i].tp, k[i].ep, k[i].etp, m, T);
    loom_sim_result r;
    CHECK(run_moe("qwen3-30b-a3b", L, &st, &r, NULL) == 0, "case %zu: %s", i, loom_errmsg());
    double t = (double)T / k[i].tp, ep = k[i].ep;
    double per = 4 * t * s.moe.top_k * s.hidden * 2 + s.moe.experts * 8.0;
    double want = L * m * per * (ep - 1) / ep;
    double got = r.comm_bytes[0][LOOM_COLL_ALLTOALL];
    CHECK(fabs(got - want) <= 1e-9 * want, "case %zu (dp%d tp%d ep%d etp%d): all-to-all %.0f B "
          "per rank per step, closed form %.0f", i, k[i].dp, k[i].tp, k[i].ep, k[i].etp, got, want);
    loom_sim_result_free(&r);
  }
}

/* the experts' state: E/ep experts of 3 x Ie x C / etp on a rank; ZeRO-1 over the edp
 * replicas (16-bit weights, fp32 main gradients in a bf16 run: Megatron) */
static void test_memory(void) {
  loom_model_spec s = preset("qwen3-30b-a3b");
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  for (int ep = 1; ep <= 8; ep *= 2) {
    loom_sim_strategy st = moe_strategy(8, 1, ep, 1, 1, 1024);
    st.zero = 1;
    loom_sim_ctx c;
    loom_sim_ctx_init(&c, &s, &hw, &st);
    loom_sim_memory m;
    loom_sim_memory_rank_of(&c, s.layers, s.layers, s.layers, s.layers, true, 1, 1, &m);
    double Pe, P = loom_sim_rank_params_of(&s, &st, s.layers, s.layers, true, true, &Pe);
    double want_e = (double)s.layers * s.moe.experts / ep * 3 * s.moe.intermediate * s.hidden;
    CHECK(fabs(Pe - want_e) < 1, "ep%d: %.0f expert parameters on a rank, want %.0f", ep, Pe,
          want_e);
    CHECK(fabs(m.weights - 2 * (P + Pe)) < 1 && fabs(m.grads - 4 * (P + Pe)) < 1,
          "ep%d: weights %.0f grads %.0f, want 2 and 4 bytes a parameter", ep, m.weights, m.grads);
    double opt = 12 * (P / 8 + Pe / (8 / ep));
    CHECK(fabs(m.optimizer - opt) < 64, "ep%d: optimizer %.0f, want %.0f (ZeRO-1 over dp 8 and "
          "edp %d)", ep, m.optimizer, opt, 8 / ep);
  }
}

static void test_imbalance(void) {
  double t[4];
  const double f[] = {1.0, 1.5, 2.0, 3.0};
  for (int i = 0; i < 4; i++) {
    loom_sim_strategy st = moe_strategy(8, 1, 8, 1, 4, 2048);
    st.moe_imbalance = f[i];
    loom_sim_result r;
    CHECK(run_moe("qwen3-30b-a3b", 4, &st, &r, NULL) == 0, "%s", loom_errmsg());
    t[i] = r.step_time;
    loom_sim_result_free(&r);
  }
  CHECK(t[0] < t[1] && t[1] < t[2] && t[2] < t[3], "the busiest rank's load stretches the step: "
        "%.4f %.4f %.4f %.4f s", t[0], t[1], t[2], t[3]);
  /* a capacity factor of 1.5 drops what is over it: 2x and 3x imbalance cost what 1.5x does */
  static loom_model_spec s;
  s = preset("qwen3-30b-a3b");
  s.layers = 4;
  s.moe.capacity_factor = 1.5;
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  double tc[2];
  for (int i = 0; i < 2; i++) {
    loom_sim_strategy st = moe_strategy(8, 1, 8, 1, 4, 2048);
    st.moe_imbalance = i ? 3.0 : 1.5;
    tc[i] = sim_step(&s, &hw, &st);
  }
  CHECK(fabs(tc[0] - tc[1]) < 1e-12 && fabs(tc[0] - t[1]) < 1e-9,
        "capacity 1.5: imbalance 1.5 %.6f s, 3 %.6f s, dropless 1.5 %.6f s", tc[0], tc[1], t[1]);
}

/* t[shared][unbalanced]: the step of st on 4 devices of their own (shared 0) and on 2 shared ones
 * (1), with balanced routing (0) and an imbalance of 1.5 (1) */
static void imbalance_steps(const loom_model_spec *s, loom_hw_profile *hw, loom_sim_strategy st,
                            double t[2][2]) {
  for (int shared = 0; shared < 2; shared++)
    for (int i = 0; i < 2; i++) {
      hw->devices_per_node = shared ? 2 : 4;
      st.moe_imbalance = i ? 1.5 : 1;
      t[shared][i] = sim_step(s, hw, &st);
    }
}

/* Unbalanced routing on time-shared devices (more ranks than CPU cores): the other ranks wait
 * while the busiest works on, and the busiest keeps sharing its core with the ranks placed there
 * (sim_share.c). The ops of the routed rows carry the imbalance as their stretch, the layer's
 * cost sums what the busiest rank works beyond the mean one, and with 4 ranks on 2 devices an
 * imbalance costs the step a part of what it costs on 4 devices of their own: a compute
 * instruction of D seconds, the mean rank waiting f of it, takes D (1 + m) with
 * m = (4 (1 - f) - 1) / 3, about 2 D (1 - f) + (2/3) D f against 2 D (1 - f) + 2 D f counting
 * every rank busy: a third of the extra, a little less where the experts' GEMMs run faster on
 * the busiest rank's larger batches, and more than nothing (moving the waiting ranks' cores to
 * the busiest, which the scheduler does not do so soon, would absorb it all). Bounds 0.1 and
 * 0.5 of the dedicated case's extra around that third. */
static void test_imbalance_timeshare(void) {
  static loom_model_spec s;
  s = preset("qwen3-30b-a3b");
  s.layers = 2;
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  hw.timeshare = true;
  /* the marking: routed-row ops stretched by the factor, the rest balanced */
  loom_sim_strategy st = moe_strategy(4, 1, 4, 1, 2, 1024);
  st.moe_imbalance = 1.5;
  loom_sim_ctx c;
  loom_sim_ctx_init(&c, &s, &hw, &st);
  c.moe_layer = true;
  loom_sim_op ops[LOOM_SIM_MAX_OPS];
  int n = loom_sim_layer_ops(&c, ops, LOOM_SIM_MAX_OPS);
  double unb = 0;
  int fc1 = 0, attn = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(ops[i].name, "experts fc1")) fc1 += ops[i].stretch == 1.5;
    if (!strncmp(ops[i].name, "attention", 9)) attn += ops[i].stretch == 1;
    if (!ops[i].hidden) unb += ops[i].time * (1 - 1 / ops[i].stretch);
  }
  CHECK(fc1 == 1 && attn == 2, "experts fc1 stretched by 1.5 (%d), attention balanced (%d of 2)",
        fc1, attn);
  loom_sim_cost lc;
  loom_sim_layer_cost(&c, &lc);
  double sum = 0;
  for (int p = 0; p < LOOM_PHASE_COUNT; p++) sum += lc.unbalanced[p];
  CHECK(unb > 0 && fabs(sum - unb) <= 1e-12 * unb, "unbalanced %.6e s, ops' sum %.6e s", sum, unb);
  /* the step: 4 ranks on 4 devices, then on 2 shared ones */
  double t[2][2];
  imbalance_steps(&s, &hw, moe_strategy(4, 1, 4, 1, 2, 1024), t);
  double own = t[0][1] / t[0][0] - 1, shared = t[1][1] / t[1][0] - 1;
  printf("imbalance 1.5, 4 ranks: +%.2f%% a step on 4 devices, +%.2f%% on 2 shared\n", 100 * own,
         100 * shared);
  CHECK(own > 0.02 && shared > 0.1 * own && shared < 0.5 * own,
        "imbalance 1.5 adds %.1f%% to the step on 4 devices, %.1f%% on 2 shared (%.4f -> %.4f s)",
        100 * own, 100 * shared, t[1][0], t[1][1]);
}

/* The same in a pipeline: pp2 x ep2, 4 ranks on 2 shared devices, each core one rank of each
 * stage. A stage's waiting ranks leave their cores to the other stage's ranks there, which then
 * wait for their own stage's slowest (sim_share.c): nobody gains that time, and a pipeline stage
 * counts all its ranks busy. The imbalance's extra time is then never cheaper than on 4 devices
 * of their own (each instruction's extra is slowed by the sharing, at least 1): at least the
 * dedicated case's extra, where counting the waiting ranks' share made it cheaper. */
static void test_imbalance_timeshare_pipeline(void) {
  loom_model_spec s = preset("qwen3-30b-a3b");
  s.layers = 4;
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  hw.timeshare = true;
  loom_sim_strategy st = moe_strategy(2, 1, 2, 1, 2, 1024);
  st.pp = 2;
  snprintf(st.schedule, sizeof st.schedule, "1f1b");
  double t[2][2];
  imbalance_steps(&s, &hw, st, t);
  double own = t[0][1] - t[0][0], shared = t[1][1] - t[1][0];
  printf("imbalance 1.5, pp2 x ep2: +%.3f ms a step on 4 devices, +%.3f ms on 2 shared\n",
         own * 1e3, shared * 1e3);
  /* 1e-9 s: rounding of the replay's sums */
  CHECK(own > 0 && shared >= own - 1e-9, "imbalance 1.5 adds %.6e s on 4 devices, %.6e s on 2 shared",
        own, shared);
}

static void test_errors(void) {
  loom_model_spec moe = preset("qwen3-30b-a3b"), dense = preset("llama3-8b");
  loom_sim_strategy st = moe_strategy(6, 1, 3, 1, 1, 1024);
  CHECK(loom_sim_strategy_check(&st, &moe) != 0 &&
            HAS(loom_errmsg(), "parallel.ep = 3 does not divide model.moe.experts = 128"),
        "ep not dividing the experts");
  st = moe_strategy(4, 1, 8, 1, 1, 1024);
  CHECK(loom_sim_strategy_check(&st, &moe) != 0 &&
            HAS(loom_errmsg(), "parallel.ep x parallel.etp = 8 x 1 = 8 ranks do not fit the 4 ranks"),
        "ep x etp over the stage's ranks");
  st = moe_strategy(4, 2, 4, 2, 1, 1024);
  CHECK(loom_sim_strategy_check(&st, &moe) == 0, "ep4 etp2 on dp4 x tp2: %s", loom_errmsg());
  st.moe_imbalance = 0.8;
  CHECK(loom_sim_strategy_check(&st, &moe) != 0 && HAS(loom_errmsg(), "must be >= 1"),
        "imbalance below 1");
  st = moe_strategy(4, 1, 2, 1, 1, 1024);
  CHECK(loom_sim_strategy_check(&st, &dense) != 0 && HAS(loom_errmsg(), "has no experts"),
        "ep on a dense model");
  run_result r = run_loom("sim model.preset=qwen3-30b-a3b model.layers=2 parallel.dp=8 "
                          "parallel.ep=8 training.seq_len=1024 --hardware h100-sxm --gpus 8 "
                          "--moe-imbalance 0.5");
  CHECK(r.status != 0 && HAS(r.err, "--moe-imbalance must be a number >= 1"), "CLI imbalance");
  run_done(&r);
  r = run_loom("sim model.preset=qwen3-30b-a3b model.layers=2 parallel.dp=8 parallel.ep=16 "
               "training.seq_len=1024 --hardware h100-sxm --gpus 8");
  CHECK(r.status != 0 && HAS(r.err, "do not fit the 8 ranks"), "CLI ep over the ranks");
  run_done(&r);
}

/* the Chrome trace: a row of its own with each MoE layer's dispatch and combine, forward and
 * backward, of every micro-batch */
static void test_trace(void) {
  loom_sim_strategy st = moe_strategy(8, 1, 8, 1, 3, 1024);
  loom_sim_result r;
  const char *path = "sim-moe-trace.json";
  CHECK(run_moe("qwen3-30b-a3b", 2, &st, &r, path) == 0, "%s", loom_errmsg());
  loom_sim_result_free(&r);
  char *text;
  size_t len;
  CHECK(loom_read_file(path, &text, &len) == 0, "%s", loom_errmsg());
  int n = 0;
  for (const char *p = text; (p = strstr(p, "\"tid\":3,\"ts\"")); p++) n++;
  CHECK(strstr(text, "expert all-to-all") != NULL && n == 2 * 3 * 4,
        "%d all-to-all events on the expert row, want layers x micro-batches x 4 = 24", n);
  free(text);
  remove(path);
}

/* Megatron-Bridge 26.02, DGX-H100: Qwen3-235B-A22B, 256 GPUs, FP8 (per-tensor current
 * scaling), GBS 8192, MBS 1, sequence 4096, TP2 PP8 VP4 EP32 ETP1, alltoall dispatcher with
 * --overlap-moe-expert-parallel-comm, force-balanced dropless routing, no recomputation:
 * 1,633 tokens/s/GPU. The recipe (perf_recipes/qwen/h100/qwen3_moe.py, _benchmark_common)
 * runs sequence parallelism, the distributed optimizer, bf16 gradient reduction, and splits
 * the layers with the embedding and the loss counted as layers (2, 3 x 30, 2). */
static double bridge_235b(int overlap, double *mem) {
  loom_sim_strategy st = strategy(16, 2, 8, 4, 1, 512, 4096);
  st.dtype = LOOM_DT_BF16;
  st.reduce_dtype = LOOM_DT_BF16;
  st.seq_par = true;
  st.zero = 1;
  st.ep = 32, st.etp = 1;
  st.fp8 = true;
  st.ep_overlap = overlap;
  char *p = st.stage_layers;
  p += sprintf(p, "2");
  for (int i = 0; i < 30; i++) p += sprintf(p, ",3");
  sprintf(p, ",2");
  loom_sim_result r;
  CHECK(run_moe("qwen3-235b-a22b", 0, &st, &r, NULL) == 0, "%s", loom_errmsg());
  *mem = 0;
  for (int i = 0; i < r.pp; i++) *mem = fmax(*mem, r.mem[i].total);
  CHECK(r.oom_rank < 0, "the published run fits: %s", r.oom_msg);
  double tps = r.tokens_per_s / r.world;
  loom_sim_result_free(&r);
  return tps;
}

static void test_megatron_bridge(void) {
  double mem, on = bridge_235b(-1, &mem), m2, off = bridge_235b(0, &m2);
  printf("Megatron-Bridge 26.02 Qwen3-235B-A22B, 256 H100, FP8: published 1633 tokens/s/GPU; "
         "loom %.0f (%+.1f%%), %.1f GiB a rank; without the all-to-all overlap %.0f (%+.1f%%)\n",
         on, 100 * (on / 1633 - 1), mem / 1073741824.0, off, 100 * (off / 1633 - 1));
  CHECK(fabs(on / 1633 - 1) <= 0.10, "Qwen3-235B: %.0f tokens/s/GPU against 1633 (limit 10%%)",
        on);
  CHECK(off < 1633 && on > 1633, "the published figure lies between no overlap (%.0f) and "
        "Megatron's overlap (%.0f)", off, on);
  /* the dense FP8 row of the same table: Llama3-70B, 64 GPUs, TP4 PP8 VP5, GBS 256, MBS 1,
   * sequence 8192: 1,621 tokens/s/GPU */
  loom_model_spec s = preset("llama3-8b");
  s.hidden = 8192, s.layers = 80, s.heads = 64, s.kv_heads = 8, s.head_dim = 128;
  s.intermediate = 28672;
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  loom_sim_strategy st = strategy(2, 4, 8, 5, 1, 128, 8192);
  st.dtype = LOOM_DT_BF16, st.reduce_dtype = LOOM_DT_BF16, st.seq_par = true, st.zero = 1;
  st.fp8 = true;
  CHECK(loom_sim_strategy_check(&st, &s) == 0, "%s", loom_errmsg());
  loom_sim_ctx c;
  loom_sim_ctx_init(&c, &s, &hw, &st);
  loom_schedule sc;
  CHECK(loom_sim_schedule(&st, NULL, &sc) == 0, "%s", loom_errmsg());
  loom_sim_result r;
  loom_sim_opts o = {NULL, false, 0};
  CHECK(loom_sim_run(&c, &sc, &o, &r) == 0, "%s", loom_errmsg());
  double tps = r.tokens_per_s / r.world;
  printf("Megatron-Bridge 26.02 Llama3-70B, 64 H100, FP8: published 1621 tokens/s/GPU; loom %.0f "
         "(%+.1f%%)\n", tps, 100 * (tps / 1621 - 1));
  CHECK(fabs(tps / 1621 - 1) <= 0.10, "Llama3-70B FP8: %.0f tokens/s/GPU against 1621", tps);
  CHECK(r.oom_rank < 0, "Llama3-70B fits: %s", r.oom_msg);
  loom_sim_result_free(&r);
  loom_sched_free(&sc);
}

/* the planner searches ep with the rest and says which recipe it assumed */
static void test_plan(void) {
  run_result r = run_loom("plan --model qwen3-30b-a3b model.layers=8 --hardware h100-sxm "
                          "--gpus 16 --global-batch 64 --seq 2048 --finalists 8 --top 3");
  CHECK(r.status == 0, "loom plan: %s", r.err);
  CHECK(HAS(r.out, "128 experts (top 8)", "recipe: Megatron-LM", "  ep etp", "why #1 wins"),
        "plan output");
  run_done(&r);
}

/* the seed's MoE study shape, simulated (--new: a fresh execution even where an earlier one of
 * the test left its state): every point either runs or is out of memory with its
 * remedies (the experts folded or split further among them) */
static void test_sweep(void) {
  char *cmd = loom_sprintf("sweep run '%s/configs/sweeps/qwen3_vl_moe_grid.yaml' --launcher sim "
                           "--log-dir sim-moe-sweep.tmp --color never --new", source_dir());
  run_result r = run_loom(cmd);
  free(cmd);
  CHECK(r.status == 0 && HAS(r.out, "72 points", "succeeded", "out of memory", "0 failed"),
        "sweep: %d %s%s", r.status, r.out, r.err);
  CHECK(HAS(r.out, "try the experts folded over the tensor-parallel ranks (parallel.ep=8") ||
            HAS(r.out, "more expert parallelism (parallel.ep="),
        "an out-of-memory point names an expert-parallel remedy");
  run_done(&r);
}

int main(void) {
  test_flops();
  test_a2a_bytes();
  test_memory();
  test_imbalance();
  test_imbalance_timeshare();
  test_imbalance_timeshare_pipeline();
  test_errors();
  test_trace();
  test_megatron_bridge();
  test_plan();
  test_sweep();
  return harness_finish("test_sim_moe");
}

/* Closed forms of the mechanisms added for the seed's stack (docs/SIMULATOR.md, "The seed's
 * result"), each checked against a count made by hand rather than against the simulator's own
 * output:
 *   - the precision policy's bytes per parameter (ZeRO paper's 2 + 2 + 12 by default; a model
 *     cast to bf16 with bf16 or fp32 AdamW moments; fp32 training) and their ZeRO partitioning;
 *   - the allocator headroom on the per-step allocations only;
 *   - the encoder's Ulysses all-to-all bytes: every block, or only the 4 full-attention blocks
 *     when the windows stay local (forward, recomputed forward, backward);
 *   - DTensor's extra input-gradient all-reduces: 3 more per text layer (q, k, v and gate, up
 *     instead of 2 fused) and 3 more per vision block, whose bytes ring formulas give;
 *   - host dispatch: a module's issue queue replayed op by op (hand-computed on small lists,
 *     and between max(device, host) and device + host on random ones); the DTensor and eager
 *     ops the encoder and a text layer issue, counted by hand from the linears' aten ops; the
 *     host synchronisations of the seed's vision blocks;
 *   - collectives timed under time-sharing (node.collective_ranks_per_core): not slowed again;
 *   - a layer's collectives of a group holding only some of a time-shared node's ranks: priced
 *     as timed (the other ranks compute beside them), a group of every rank stretched. */
#include <math.h>

#include "sim_test_util.h"
#include "loom/config.h"
#include "loom/model.h"
#include "loom/sim_bench.h"

static void test_state_bytes(void) {
  const struct {
    loom_hw_dtype dtype, param, optim;
    double w, g, o;
  } k[] = {
      {LOOM_DT_BF16, LOOM_DT_FP32, LOOM_DT_FP32, 2, 2, 12}, /* mixed precision, ZeRO's K = 12 */
      {LOOM_DT_BF16, LOOM_DT_FP32, LOOM_DT_BF16, 2, 2, 8},  /* fp32 master, bf16 moments */
      {LOOM_DT_BF16, LOOM_DT_BF16, LOOM_DT_FP32, 2, 2, 8},  /* cast to bf16, fp32 moments */
      {LOOM_DT_BF16, LOOM_DT_BF16, LOOM_DT_BF16, 2, 2, 4},  /* the seed's text: 8 in all */
      {LOOM_DT_FP32, LOOM_DT_FP32, LOOM_DT_FP32, 4, 4, 8},  /* fp32: the weights are the master */
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    loom_sim_strategy st = strategy(1, 1, 1, 1, 1, 1, 128);
    st.dtype = k[i].dtype, st.param_dtype = k[i].param, st.optim_dtype = k[i].optim;
    st.vision_param_dtype = LOOM_DT_FP32, st.vision_optim_dtype = LOOM_DT_FP32;
    double w, g, o;
    loom_sim_state_bytes(&st, false, &w, &g, &o);
    CHECK(w == k[i].w && g == k[i].g && o == k[i].o, "case %zu: %g %g %g", i, w, g, o);
    loom_sim_state_bytes(&st, true, &w, &g, &o); /* the encoder's own policy */
    CHECK(o == (k[i].dtype == LOOM_DT_FP32 ? 8 : 12), "vision case %zu: %g", i, o);
  }
}

/* GPU memory of one rank: the state per parameter under ZeRO over dp, and the headroom */
static void test_memory(void) {
  loom_model_spec g = megatron_gpt(1024, 16, 8, 32000, 512);
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm-hf") == 0, "%s", loom_errmsg());
  double P = loom_sim_rank_params(&g, 1, 8, true, true), Pl = loom_sim_rank_params(&g, 1, 1, false, false);
  for (int zero = 0; zero <= 3; zero++) {
    loom_sim_strategy st = strategy(4, 1, 1, 1, 2, 1, 512);
    st.dtype = LOOM_DT_BF16, st.zero = zero;
    st.param_dtype = st.optim_dtype = LOOM_DT_BF16;
    st.recompute = LOOM_RECOMPUTE_FULL;
    loom_sim_ctx c;
    loom_sim_ctx_init(&c, &g, &hw, &st);
    loom_sim_memory m;
    loom_sim_memory_rank(&c, 8, 8, true, true, 1, &m);
    double w = zero >= 3 ? 2 * P / 4 + 2 * 2 * Pl : 2 * P, gr = zero >= 2 ? 2 * P / 4 : 2 * P;
    double o = zero >= 1 ? 4 * P / 4 : 4 * P;
    CHECK(fabs(m.weights - w) < 1 && fabs(m.grads - gr) < 1 && fabs(m.optimizer - o) < 1,
          "ZeRO-%d: %g %g %g against %g %g %g", zero, m.weights, m.grads, m.optimizer, w, gr, o);
    double per_step = m.activations + m.workspace + m.comm_buffers;
    CHECK(fabs(m.fragmentation - 0.10 * per_step) < 1e-6 * per_step &&
              fabs(m.total - (m.weights + m.grads + m.optimizer + 1.10 * per_step)) < 1e-6 * m.total,
          "ZeRO-%d: headroom %g of per-step %g", zero, m.fragmentation, per_step);
  }
}

/* the 32B grid point at 16k tokens, batch 1, vision sp8 or tp8 under text tp8: its config,
 * model and strategy; -1 when any step refuses */
static int seed_point(bool sp, loom_config *cfg, loom_model_spec *spec, loom_sim_strategy *st) {
  loom_config_defaults(cfg);
  const char *kv[] = {"model.preset=qwen2.5-vl-32b", "parallel.tp=8", "data.format=vqa",
                      "data.image_max_pixels=3211264", "data.image_min_pixels=3211264",
                      "training.seq_len=4352", "training.micro_batch_size=1", "training.dtype=bf16",
                      "training.activation_checkpointing=true", "vision.parallel.zero=1",
                      sp ? "vision.parallel.sp=8" : "vision.parallel.sp=1",
                      sp ? "vision.parallel.tp=1" : "vision.parallel.tp=8", NULL};
  for (int i = 0; kv[i]; i++)
    if (loom_config_override(cfg, kv[i])) return -1;
  if (loom_config_validate(cfg) || loom_model_spec_from_config(spec, &cfg->model) ||
      loom_sim_strategy_from_config(st, cfg, 8))
    return -1;
  return 0;
}

/* that point on h100-sxm-hf: the simulator's context and the profile, spec and strategy it
 * points to */
typedef struct {
  loom_hw_profile hw;
  loom_model_spec spec;
  loom_sim_strategy st;
  loom_sim_ctx c;
} seed_sim;

static void seed_ctx(bool sp, seed_sim *s) {
  loom_config cfg;
  CHECK(load_hw(&s->hw, "h100-sxm-hf") == 0, "%s", loom_errmsg());
  CHECK(seed_point(sp, &cfg, &s->spec, &s->st) == 0, "%s", loom_errmsg());
  loom_sim_ctx_init(&s->c, &s->spec, &s->hw, &s->st);
}

/* the bytes each rank sends per step for the 32B grid point at 16k tokens, batch 1 */
static int seed_bytes(const loom_hw_profile *hw, bool sp, double bytes[LOOM_COLL_COUNT]) {
  loom_config cfg;
  loom_model_spec spec;
  loom_sim_strategy st;
  loom_schedule s;
  if (seed_point(sp, &cfg, &spec, &st) || loom_sim_schedule(&st, NULL, &s)) return -1;
  loom_sim_ctx c;
  loom_sim_ctx_init(&c, &spec, hw, &st);
  loom_sim_result r;
  loom_sim_opts o = {NULL, false, 0};
  int rc = loom_sim_run(&c, &s, &o, &r);
  loom_sched_free(&s);
  if (rc) return -1;
  for (int k = 0; k < LOOM_COLL_COUNT; k++) bytes[k] = r.comm_bytes[0][k];
  loom_sim_result_free(&r);
  return 0;
}

static void test_collectives(void) {
  loom_hw_profile hf, local_off, meg_tp;
  CHECK(load_hw(&hf, "h100-sxm-hf") == 0, "%s", loom_errmsg());
  local_off = hf, local_off.vision_sp_local_windows = false;
  meg_tp = hf, meg_tp.tp_dtensor = false;
  /* Qwen2.5-VL-32B's encoder: 32 blocks of hidden 1280, 4 of them full attention; 16384
   * patches per image; the text decoder: 64 layers of hidden 5120, 4352 tokens */
  const double P = 16384, Cv = 1280, e = 2, p = 8, blocks = 32, full = 4;
  const double N = 4352, C = 5120, layers = 64;
  double a[LOOM_COLL_COUNT], b[LOOM_COLL_COUNT];
  /* Ulysses: per block q, k, v, out forward, the same again recomputed, dout and dq, dk, dv
   * backward: 12 x (P/p x Cv) elements, each rank sending (p-1)/p of its buffer */
  double per_block = 12 * (P / p) * Cv * e * (p - 1) / p;
  CHECK(seed_bytes(&hf, true, a) == 0 && seed_bytes(&local_off, true, b) == 0, "%s", loom_errmsg());
  CHECK(fabs(a[LOOM_COLL_ALLTOALL] - full * per_block) < 1e-6 * a[LOOM_COLL_ALLTOALL],
        "all-to-all with local windows: %.0f, expected %.0f", a[LOOM_COLL_ALLTOALL], full * per_block);
  CHECK(fabs(b[LOOM_COLL_ALLTOALL] - blocks * per_block) < 1e-6 * b[LOOM_COLL_ALLTOALL],
        "all-to-all in every block: %.0f, expected %.0f", b[LOOM_COLL_ALLTOALL], blocks * per_block);
  CHECK(a[LOOM_COLL_ALLREDUCE] == b[LOOM_COLL_ALLREDUCE], "the text's all-reduces do not depend on it");
  /* DTensor against Megatron-style TP, vision tp: 3 more backward all-reduces per text layer
   * (q, k, v: 3 instead of 1; gate, up: 2 instead of 1) and per vision block, each of rows x
   * hidden elements and 2 (p-1)/p of them sent */
  CHECK(seed_bytes(&hf, false, a) == 0 && seed_bytes(&meg_tp, false, b) == 0, "%s", loom_errmsg());
  double extra = 3 * (layers * N * C + blocks * P * Cv) * e * 2 * (p - 1) / p;
  CHECK(fabs(a[LOOM_COLL_ALLREDUCE] - b[LOOM_COLL_ALLREDUCE] - extra) < 1e-6 * extra,
        "DTensor's extra all-reduce bytes %.0f, expected %.0f",
        a[LOOM_COLL_ALLREDUCE] - b[LOOM_COLL_ALLREDUCE], extra);
  /* vision tp, Megatron style with recomputation: 2 forward + 2 recomputed + 2 backward
   * all-reduces per block of P x Cv; the text: the same 6 of N x C per layer, the vocabulary-
   * parallel embedding's forward and the head's input gradient (N x C each), the vocabulary-
   * parallel cross-entropy's three fp32 scalars per token (max, sum, target), and the
   * tensor-parallel merger's fc2 output and fc1 input gradient (P/4 merged tokens x 5120) */
  double merger = 2 * (P / 4) * (4 * Cv) * e;
  double meg = (6 * (layers * N * C + blocks * P * Cv) * e + 2 * N * C * e + 3 * N * 4 + merger) *
               2 * (p - 1) / p;
  CHECK(fabs(b[LOOM_COLL_ALLREDUCE] - meg) < 1e-9 * meg, "Megatron-style all-reduce bytes %.0f, "
        "expected %.0f", b[LOOM_COLL_ALLREDUCE], meg);
}

/* loom_sim_module_time: the CPU issues op i at H_i (the host costs up to and including it),
 * the device starts it at max(H_i, end of op i-1); after a sync op the queue is empty. By
 * hand, in ms: */
static void test_host_replay(void) {
  loom_sim_op m[5];
  memset(m, 0, sizeof m);
  /* a module without a synchronisation inside: a issued at 3 runs 3-4; b (host 0) issued at
   * 3 waits for a and runs 4-5: 5 ms, where max(device, host) says 3 and the sum 5 */
  m[0] = (loom_sim_op){.name = "a", .type = LOOM_OP_GEMM, .time = 1e-3, .host = 3e-3};
  m[1] = (loom_sim_op){.name = "b", .type = LOOM_OP_VEC, .time = 1e-3};
  double dev, host, t = loom_sim_module_time(m, 2, &dev, &host);
  CHECK(fabs(t - 5e-3) < 1e-12 && fabs(dev - 2e-3) < 1e-12 && fabs(host - 3e-3) < 1e-12,
        "replay %g (device %g, host %g), expected 5 ms", t, dev, host);
  /* the device-bound order: b (host 0) first, then a: b runs 0-1, a issued at 3 runs 3-4 */
  m[0] = (loom_sim_op){.name = "b", .type = LOOM_OP_VEC, .time = 1e-3};
  m[1] = (loom_sim_op){.name = "a", .type = LOOM_OP_GEMM, .time = 1e-3, .host = 3e-3};
  CHECK(fabs(loom_sim_module_time(m, 2, NULL, NULL) - 4e-3) < 1e-12, "b then a: 4 ms");
  /* a vision block's shape: norm, q, the .item() (a sync), attention, MLP. The period runs
   * from the sync around to it: attention issued at 0.5 runs 0.5-4.5; MLP issued at 3.5 runs
   * 4.5-6.5; the next block's norm issued at 4.5 runs 6.5-7, q issued at 6.5 runs 7-8, the
   * .item() issued at 7 waits for 8: 8 ms (device 7.5, host 7, sum 14.5) */
  m[0] = (loom_sim_op){.name = "norm", .type = LOOM_OP_VEC, .time = 0.5e-3, .host = 1e-3};
  m[1] = (loom_sim_op){.name = "q", .type = LOOM_OP_GEMM, .time = 1e-3, .host = 2e-3};
  m[2] = (loom_sim_op){.name = "item", .type = LOOM_OP_VEC, .host = 0.5e-3, .sync = true};
  m[3] = (loom_sim_op){.name = "attn", .type = LOOM_OP_ATTN, .time = 4e-3, .host = 0.5e-3};
  m[4] = (loom_sim_op){.name = "mlp", .type = LOOM_OP_GEMM, .time = 2e-3, .host = 3e-3};
  t = loom_sim_module_time(m, 5, &dev, &host);
  CHECK(fabs(t - 8e-3) < 1e-12 && fabs(dev - 7.5e-3) < 1e-12 && fabs(host - 7e-3) < 1e-12,
        "block replay %g (device %g, host %g), expected 8 ms", t, dev, host);
  /* with a second sync after q: the period [attn, mlp, norm, q] ends at 8 as above, and
   * [item] alone after it issues at 0.5: 8.5 ms */
  m[1].sync = true;
  CHECK(fabs(loom_sim_module_time(m, 5, NULL, NULL) - 8.5e-3) < 1e-12, "two syncs: 8.5 ms");
  /* scaling every time by n scales the replay by n (n identical blocks) */
  m[1].sync = false;
  for (int i = 0; i < 5; i++) m[i].time *= 7, m[i].host *= 7;
  CHECK(fabs(loom_sim_module_time(m, 5, NULL, NULL) - 56e-3) < 1e-12, "7 blocks: 56 ms");
  /* without host costs the replay is the device's time, whatever the syncs */
  for (int i = 0; i < 5; i++) m[i].host = 0;
  CHECK(fabs(loom_sim_module_time(m, 5, NULL, NULL) - 7 * 7.5e-3) < 1e-12, "no host: the device's time");
  /* random lists: max(device, host) <= replay <= device + host */
  unsigned long long s = 88172645463325252ULL;
  int bad = 0;
  for (int trial = 0; trial < 2000; trial++) {
    loom_sim_op r[12];
    memset(r, 0, sizeof r);
    int n = 1 + trial % 12;
    for (int i = 0; i < n; i++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      r[i].type = (loom_sim_op_type)(s % 4);
      r[i].time = (double)(s >> 40 & 1023) * 1e-6;
      r[i].host = (s >> 20 & 3) ? (double)(s >> 24 & 1023) * 1e-6 : 0;
      r[i].sync = (s >> 34 & 7) == 0;
      r[i].hidden = r[i].type == LOOM_OP_COMM && (s >> 37 & 1);
    }
    double d, h, x = loom_sim_module_time(r, n, &d, &h);
    if (x < fmax(d, h) - 1e-15 || x > d + h + 1e-15) bad++;
  }
  CHECK(bad == 0, "%d random modules outside [max(device, host), device + host]", bad);
}

/* loom_sim_cost_of: each module's replay beyond its device time is the GPU waiting, in the
 * phase of the module's first op; an op outside modules takes max(device, host); a chained
 * module (identical copies back to back) takes the steady state max(device, host) per copy and
 * its first copy's extra as start-up; communication off the compute stream is not device time
 * of the stream */
static void test_host_modules(void) {
  loom_sim_op ops[5];
  memset(ops, 0, sizeof ops);
  ops[0] = (loom_sim_op){.name = "a", .type = LOOM_OP_GEMM, .time = 1e-3, .host = 3e-3, .module = 1};
  ops[1] = (loom_sim_op){.name = "b", .type = LOOM_OP_VEC, .time = 1e-3, .module = 1};
  ops[2] = (loom_sim_op){.name = "c", .type = LOOM_OP_COMM, .time = 4e-3, .host = 2e-3,
                         .hidden = true, .module = 2, .phase = LOOM_PHASE_BWD_IN};
  ops[3] = (loom_sim_op){.name = "d", .type = LOOM_OP_GEMM, .time = 5e-3, .host = 1e-3,
                         .module = 2, .phase = LOOM_PHASE_BWD_IN};
  ops[4] = (loom_sim_op){.name = "e", .type = LOOM_OP_VEC, .time = 1e-3, .host = 2e-3,
                         .phase = LOOM_PHASE_BWD_W};
  loom_sim_cost k;
  loom_sim_cost_of(ops, 5, &k);
  /* module 1: 5 ms (above); module 2: c issued at 2 leaves the stream free, d issued at 3
   * runs 3-8; op e alone: max(1, 2) */
  CHECK(fabs(k.t[LOOM_PHASE_FWD] - 5e-3) < 1e-12 && fabs(k.t[LOOM_PHASE_BWD_IN] - 8e-3) < 1e-12 &&
            fabs(k.t[LOOM_PHASE_BWD_W] - 2e-3) < 1e-12 && fabs(k.host_wait - 7e-3) < 1e-12,
        "module times %g %g %g, host wait %g", k.t[0], k.t[1], k.t[2], k.host_wait);
  /* module 1 chained: per copy max(2, 3) = 3 ms, the first copy 2 ms more (k copies: 5 + 3 (k-1)) */
  ops[0].chained = ops[1].chained = true;
  loom_sim_cost_of(ops, 5, &k);
  CHECK(fabs(k.t[LOOM_PHASE_FWD] - 3e-3) < 1e-12 && fabs(k.startup[LOOM_PHASE_FWD] - 2e-3) < 1e-12,
        "chained: %g per copy, start-up %g", k.t[0], k.startup[0]);
}

/* The seed's vision blocks (16k tokens, batch 1, 32B): every block forward and every
 * recomputed one has exactly one host synchronisation (the .item() before its attention)
 * under TP and in the SP windowed blocks; the SP full blocks add the two .tolist() of
 * unpad_batch_to_pack after their all-to-alls; the text layers have none and are chained. */
static void test_host_syncs(void) {
  for (int sp = 0; sp < 2; sp++) {
    static seed_sim ss; /* the context points into it */
    seed_ctx(sp, &ss);
    loom_sim_ctx c = ss.c;
    static loom_sim_op ops[LOOM_SIM_MAX_OPS];
    int n = loom_sim_embed_ops(&c, ops, LOOM_SIM_MAX_OPS), syncs = 0, items = 0;
    for (int i = 0; i < n; i++) {
      syncs += ops[i].sync;
      items += ops[i].sync && !strcmp(ops[i].name, "vit seqlens max (.item())");
    }
    /* the windowed and the full blocks' lists, forward and recomputed: 4 .item(); SP: the
     * full blocks' 2 .tolist() forward and recomputed */
    CHECK(items == 4 && syncs == (sp ? 8 : 4), "%s: %d syncs, %d .item()", sp ? "sp" : "tp",
          syncs, items);
    n = loom_sim_layer_ops(&c, ops, LOOM_SIM_MAX_OPS);
    int chained = 0;
    syncs = 0;
    for (int i = 0; i < n; i++) syncs += ops[i].sync, chained += ops[i].module && ops[i].chained;
    CHECK(syncs == 0 && chained == n, "text layer: %d syncs, %d of %d ops chained", syncs, chained, n);
  }
}

/* the ops of the 32B grid point (16k tokens, batch 1) on a profile whose DTensor op costs 1 s
 * and eager op `eager` s: the encoder's (embedding ops included) and one text layer's host */
static int seed_host(const loom_hw_profile *base, bool sp, double eager, double *vision,
                     double *layer) {
  loom_hw_profile hw = *base;
  hw.host_dtensor = 1, hw.host_eager = eager;
  loom_config cfg;
  loom_model_spec spec;
  loom_sim_strategy st;
  if (seed_point(sp, &cfg, &spec, &st)) return -1;
  loom_sim_ctx c;
  loom_sim_ctx_init(&c, &spec, &hw, &st);
  static loom_sim_op ops[LOOM_SIM_MAX_OPS];
  int n = loom_sim_embed_ops(&c, ops, LOOM_SIM_MAX_OPS);
  *vision = *layer = 0;
  for (int i = 0; i < n; i++) *vision += ops[i].host;
  n = loom_sim_layer_ops(&c, ops, LOOM_SIM_MAX_OPS);
  for (int i = 0; i < n; i++) *layer += ops[i].host;
  return 0;
}

static void test_host_counts(void) {
  loom_hw_profile hf;
  CHECK(load_hw(&hf, "h100-sxm-hf") == 0, "%s", loom_errmsg());
  CHECK(fabs(hf.host_dtensor - 90e-6) < 1e-15 && fabs(hf.host_eager - 8e-6) < 1e-15,
        "h100-sxm-hf: 90 us per DTensor op, 8 per eager op");
  /* a linear on a 2-D input: forward t + addmm (2); data gradient t + mm (2); weight gradient
   * t + mm + t, the forward t's backward, AccumulateGrad's detach, and with a bias its sum and
   * AccumulateGrad (7); a 3-D input adds the two views forward and their backwards (4, 4) */
  const double f2 = 2, d2 = 2, w = 5, wb = 7, f3 = 4, d3 = 4;
  /* vision tp, DTensor: per block 7 biased linears forward and recomputed, their gradients,
   * 2 redistributes forward (o, down: Partial -> Replicate) and again recomputed, 5 backward
   * (q, k, v, gate, up: the input gradients); the merger's 2 linears and 1 redistribute each
   * way; 32 blocks */
  double block = 2 * (7 * f2 + 2) + 7 * (d2 + wb) + 5;
  double merger = 2 * f2 + 1 + 2 * (d2 + wb) + 1;
  /* a text layer, tp 8 under DTensor: 7 linears on (batch, tokens, hidden), q, k, v biased;
   * forward and recomputation 7 forwards + 2 redistributes; backward 7 data gradients, the
   * weight gradients and 5 redistributes */
  double layer = 2 * (7 * f3 + 2) + 7 * d3 + 3 * wb + 4 * w + 5;
  double v, l;
  CHECK(seed_host(&hf, false, 0, &v, &l) == 0, "%s", loom_errmsg());
  CHECK(v == 32 * block + merger && l == layer, "vision tp: %g DTensor ops (expected %g), text "
        "layer %g (expected %g)", v, 32 * block + merger, l, layer);
  CHECK(seed_host(&hf, true, 0, &v, &l) == 0 && v == 0 && l == layer,
        "vision sp: no DTensor op in the encoder (%g), the same text layer (%g)", v, l);
  /* the SP encoder's eager ops: a windowed block forward (norm1 7 kernels, q k v 3 x 2, rotary
   * 7, attention 4 with the .item() read-back, o 2, residual 1, norm2 7, gate up 2 x 2, SwiGLU
   * 1, down 2, residual 1 = 42) twice (recomputed), backward (down 9, SwiGLU 1, gate up 18,
   * norm2 14, o 9, attention 1, rotary 7, q k v 27, norm1 14 = 100); a full block adds the
   * _SeqAllToAll calls: 6 + 1 forward (twice), 1 + 3 backward; the patch embedding forward
   * and weight gradient; the merger (norm 7, fc1 2, GELU 1, fc2 2, all-gather 1; 9 + 1 + 9
   * backward); the text embedding's gather, all-reduce and gradient (3) */
  double win = 2 * 42 + 100, full = win + 2 * 7 + 4;
  double eager = 28 * win + 4 * full + 2 + 13 + 19 + 3;
  CHECK(seed_host(&hf, true, 1, &v, &l) == 0 && v == eager, "vision sp: %g eager ops, expected %g",
        v, eager);
}


/* The optimizer step's host dispatch (torch.optim.Adam, foreach=False: _single_tensor_adam):
 * 8 device ops per weight-decay tensor, 7 per other tensor, + 2 CPU ops on `step`; counted by
 * hand for one text layer and one vision block of the 32B seed point (tp 8). */
static void test_host_optimizer(void) {
  for (int sp = 0; sp < 2; sp++) {
    static seed_sim ss; /* the context points into it */
    seed_ctx(sp, &ss);
    loom_sim_ctx c = ss.c;
    const loom_hw_profile hf = ss.hw;
    loom_sim_opt_tensors tx, vx;
    /* one text layer, no ends: q k v o gate up down weights (DTensor, decay), q k v biases
     * (DTensor, none), 2 RMSNorm weights (eager, none) */
    loom_sim_opt_tensors_of(&c, 1, false, false, &tx, &vx);
    CHECK(tx.dtensor[0] == 7 && tx.dtensor[1] == 3 && tx.eager[0] == 0 && tx.eager[1] == 2 &&
          !tx.flat, "text layer tensors %d %d %d %d", tx.dtensor[0], tx.dtensor[1], tx.eager[0],
          tx.eager[1]);
    /* 7 x (8 x 90 + 2 x 8) + 3 x (7 x 90 + 2 x 8) + 2 x 9 x 8 = 5152 + 1938 + 144 us */
    double h = loom_sim_opt_host(&hf, &tx);
    CHECK(fabs(h - 7234e-6) < 1e-9, "text layer optimizer host %.6f s", h);
    loom_sim_opt_tensors_of(&c, 0, true, true, &tx, &vx);
    int D = ss.spec.vision.depth;
    if (sp) { /* DeepSpeed ZeRO-1: flat partitions, 30 eager ops */
      CHECK(vx.flat == 1, "sp encoder not flat");
      CHECK(fabs(loom_sim_opt_host(&hf, &vx) - 30 * 8e-6) < 1e-12, "sp encoder host");
    } else { /* per block 7 linear weights + 7 biases DTensor, 2 norms eager; patch embedding
                (eager, decay), merger ln_q (eager) and fc1, fc2 with biases (DTensor) */
      CHECK(!vx.flat && vx.dtensor[0] == 7 * D + 2 && vx.dtensor[1] == 7 * D + 2 &&
                vx.eager[0] == 1 && vx.eager[1] == 2 * D + 1,
            "tp encoder tensors %d %d %d %d", vx.dtensor[0], vx.dtensor[1], vx.eager[0],
            vx.eager[1]);
      /* one block: 7 x 736 + 7 x 646 + 2 x 72 = 9818 us */
      loom_sim_opt_tensors b = {{7, 7}, {0, 2}, 0};
      CHECK(fabs(loom_sim_opt_host(&hf, &b) - 9818e-6) < 1e-9, "tp block host");
    }
  }
  /* profiles without host dispatch: nothing */
  loom_hw_profile h100;
  CHECK(load_hw(&h100, "h100-sxm") == 0, "%s", loom_errmsg());
  loom_sim_opt_tensors one = {{7, 3}, {0, 2}, 0};
  CHECK(loom_sim_opt_host(&h100, &one) == 0, "h100-sxm optimizer host");
}

/* a ring tier of this machine's kind: every collective at half its bandwidth */
static void ring_tier(loom_hw_tier *t, const char *name, int domain, double bandwidth,
                      double latency) {
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->domain = domain;
  t->algo = LOOM_ALGO_RING;
  t->bandwidth = bandwidth;
  t->latency = latency;
  for (int k = 0; k < LOOM_COLL_COUNT; k++) t->efficiency[k] = 0.5;
}

/* 4 ranks of dp2 x tp2 on a CPU profile of 2 cores, every rank busy at every moment, so time-
 * sharing runs each instruction 2x slower (sim_share.c). Collectives the profile timed with 2
 * ranks per core (`loom bench` across two namespaced nodes of one 2-core machine) hold that
 * slowdown already: only the compute is slowed, so the exposed communication (tp all-reduces
 * inside the layers, the dp reduction across the network tier) halves and the compute stays.
 * A tier's own ranks_per_core overrides the node's, for its collectives only: with the shared
 * memory's (tp: T) timed alone and the network's (dp: D) at 2 a core the exposed communication
 * is 2T + D, the other way round T + 2D; together 3 (T + D), three times the case timed at 2 a
 * core, and each above it. */
static void test_timeshared_collectives(void) {
  loom_model_spec s = megatron_gpt(256, 4, 4, 512, 64);
  loom_hw_profile hw;
  loom_bench_profile_defaults(&hw);
  hw.devices_per_node = 2;
  hw.n_tiers = 2;
  ring_tier(&hw.tier[0], "shared-memory-mpi", 2, 4e9, 6e-6);
  ring_tier(&hw.tier[1], "network", 0, 0.2e9, 100e-6);
  loom_sim_strategy st = strategy(2, 2, 1, 1, 4, 1, 64);
  st.dtype = LOOM_DT_FP32;
  double exposed[4], compute[4], step[4], share[4];
  for (int i = 0; i < 4; i++) {
    hw.coll_ranks_per_core = i ? 2 : 1;
    hw.tier[0].ranks_per_core = i == 2 ? 1 : i == 3 ? 2 : 0; /* 0: the node's */
    hw.tier[1].ranks_per_core = i == 3 ? 1 : 0;
    loom_sim_result r;
    sim_result_of(&s, &hw, &st, &r);
    exposed[i] = r.exposed_comm, compute[i] = r.compute_time, step[i] = r.step_time;
    share[i] = r.timeshare;
    loom_sim_result_free(&r);
  }
  printf("dp2 x tp2 on 2 cores: exposed communication %.3f -> %.3f ms, compute %.3f -> %.3f ms, "
         "step %.3f -> %.3f ms\n", exposed[0] * 1e3, exposed[1] * 1e3, compute[0] * 1e3,
         compute[1] * 1e3, step[0] * 1e3, step[1] * 1e3);
  CHECK(share[0] == 2 && share[1] == 2, "4 ranks on 2 cores: %g, %g ranks a core", share[0],
        share[1]);
  /* 5e-3: the replay's fixed point stops once no slowdown moves by 0.1% a round, damped by
   * half, so each instruction's slowdown of 2 is met to within about 0.2% */
  CHECK(exposed[0] > 0 && fabs(exposed[1] - exposed[0] / 2) <= 5e-3 * exposed[1],
        "exposed communication %.6e s timed unshared, %.6e s timed at 2 a core (want half)",
        exposed[0], exposed[1]);
  CHECK(fabs(compute[1] - compute[0]) <= 5e-3 * compute[0], "compute %.6e s and %.6e s",
        compute[0], compute[1]);
  CHECK(fabs(step[0] - step[1] - exposed[1]) <= 5e-3 * exposed[1],
        "the step is shorter by the communication's half: %.6e -> %.6e s, exposed %.6e s",
        step[0], step[1], exposed[1]);
  printf("  per tier: shared memory alone %.3f ms, the network alone %.3f ms\n", exposed[2] * 1e3,
         exposed[3] * 1e3);
  /* the same 5e-3 for the fixed point's slowdown of 2 */
  CHECK(fabs(exposed[2] + exposed[3] - 3 * exposed[1]) <= 5e-3 * exposed[1],
        "2T + D (%.6e s) and T + 2D (%.6e s) add to 3 (T + D) = 3 x %.6e s", exposed[2],
        exposed[3], exposed[1]);
  CHECK(exposed[2] > exposed[1] * (1 + 1e-2) && exposed[3] > exposed[1] * (1 + 1e-2),
        "a tier timed alone is slowed: %.6e and %.6e s over %.6e s", exposed[2], exposed[3],
        exposed[1]);
  CHECK(fabs(compute[2] - compute[0]) <= 5e-3 * compute[0] &&
            fabs(compute[3] - compute[0]) <= 5e-3 * compute[0],
        "compute %.6e, %.6e s against %.6e s", compute[2], compute[3], compute[0]);
}

/* A layer's collectives on a CPU profile of 2 cores (sharing_beside in cost_ops.c). Its cost
 * (loom_sim_layer_cost) keeps each collective's time as timed (comm) and the part the replay
 * slows by the sharing (comm_alone: the time over the ranks per core it is priced as timed at).
 * Checked by hand: the tp all-reduces of dp2 x tp2 on 4 ranks of 2 cores leave 2 ranks beside
 * each group, so comm_alone = comm / 2; tp4 on the same 4 ranks has no rank beside it, so
 * comm_alone = comm; on 4 cores (no sharing) and on two namespaced nodes of 2 ranks of 2 cores
 * each (the node's tier of domain 2: tp holds every rank of its node), comm_alone = comm. The
 * step follows: dp2 x tp2's exposed communication is its tp part as timed and its dp reduction
 * slowed 2x (T + 2D), where counting the tp part slowed too gave 2T + 2D. */
static void test_collectives_beside_compute(void) {
  loom_model_spec s = megatron_gpt(256, 4, 4, 512, 64);
  loom_hw_profile hw;
  loom_bench_profile_defaults(&hw);
  hw.devices_per_node = 2;
  hw.n_tiers = 1;
  loom_hw_tier *t = &hw.tier[0];
  ring_tier(t, "shared-memory-mpi", 0, 4e9, 6e-6);
  const struct {
    int dp, tp, devices, domain;
    double want; /* comm_alone / comm */
    const char *what;
  } k[] = {
      {2, 2, 2, 0, 0.5, "dp2 x tp2 on 2 cores: 2 ranks beside each tp pair"},
      {1, 4, 2, 0, 1, "tp4 on 2 cores: every rank in the all-reduce"},
      {2, 2, 4, 0, 1, "dp2 x tp2 on 4 cores: no sharing"},
      {2, 2, 2, 2, 1, "dp2 x tp2 over two nodes of 2 ranks: tp holds its node"},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    hw.devices_per_node = k[i].devices;
    hw.n_tiers = k[i].domain ? 2 : 1;
    t->domain = k[i].domain;
    if (k[i].domain) hw.tier[1] = *t, hw.tier[1].domain = 0;
    loom_sim_strategy st = strategy(k[i].dp, k[i].tp, 1, 1, 4, 1, 64);
    st.dtype = LOOM_DT_FP32;
    loom_sim_ctx c;
    loom_sim_ctx_init(&c, &s, &hw, &st);
    loom_sim_cost cost;
    loom_sim_layer_cost(&c, &cost);
    for (int ph = 0; ph < 2; ph++) /* forward, backward-input: the tp all-reduces */
      CHECK(cost.comm[ph] > 0 && fabs(cost.comm_alone[ph] - k[i].want * cost.comm[ph]) <=
                                     1e-12 * cost.comm[ph],
            "%s: phase %d comm_alone %.6e s of comm %.6e s (want x%g)", k[i].what, ph,
            cost.comm_alone[ph], cost.comm[ph], k[i].want);
  }
  /* the step: T + 2D against 2T + 2D (D, the dp reduction as timed, from the same step with
   * every collective priced as timed: T + D) */
  hw.devices_per_node = 2, hw.n_tiers = 1, t->domain = 0;
  loom_sim_strategy st = strategy(2, 2, 1, 1, 4, 1, 64);
  st.dtype = LOOM_DT_FP32;
  loom_sim_ctx c;
  loom_sim_ctx_init(&c, &s, &hw, &st);
  loom_sim_cost cost, ends[2];
  loom_sim_layer_cost(&c, &cost);
  loom_sim_embed_cost(&c, &ends[0]);
  loom_sim_head_cost(&c, &ends[1]);
  double T = 0; /* the tp collectives of one micro-batch: the layers', the embedding's, the head's */
  for (int ph = 0; ph < LOOM_PHASE_COUNT; ph++)
    T += cost.comm[ph] * s.layers + ends[0].comm[ph] + ends[1].comm[ph];
  loom_sim_result r, r2;
  sim_result_of(&s, &hw, &st, &r);
  hw.coll_ranks_per_core = 2; /* every collective priced as timed: T + D */
  sim_result_of(&s, &hw, &st, &r2);
  double D = r2.exposed_comm - T;
  printf("dp2 x tp2 on 2 cores: tp all-reduces %.3f ms as timed, dp reduction %.3f ms: exposed "
         "%.3f ms (T + 2D %.3f)\n", T * 1e3, D * 1e3, r.exposed_comm * 1e3, (T + 2 * D) * 1e3);
  /* 5e-3 of the step: the fixed point's slowdown of 2 met to within about 0.2% (above) */
  CHECK(D > 0 && fabs(r.exposed_comm - (T + 2 * D)) <= 5e-3 * r.step_time,
        "exposed %.6e s, want T + 2D = %.6e s (T %.6e, D %.6e)", r.exposed_comm, T + 2 * D, T, D);
  loom_sim_result_free(&r);
  loom_sim_result_free(&r2);
}

int main(void) {
  test_state_bytes();
  test_memory();
  test_collectives();
  test_host_replay();
  test_host_modules();
  test_host_counts();
  test_host_syncs();
  test_host_optimizer();
  test_timeshared_collectives();
  test_collectives_beside_compute();
  return harness_finish("test_sim_mechanisms");
}

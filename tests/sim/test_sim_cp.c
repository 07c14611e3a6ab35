/* The simulator's context parallelism (ring attention, src/sim/cost_cp.c) and Ulysses x TP
 * against closed forms written here from the model dimensions alone:
 *  - Ulysses x TP all-to-all bytes per layer (heads split by tp, then sp);
 *  - cp ring bytes per layer, forward and backward;
 *  - attention FLOPs per cp rank with causal load balancing (1/cp of the causal pairs);
 *  - the ring's exposed time: max(0, hop - step compute) per hop with p2p overlap (plus the
 *    profile's overlap_slowdown share of the hidden part), every hop without it;
 *  - activation memory per layer divided by cp;
 *  - the planner's search space and the trainer's layout rules for Ulysses x TP and cp;
 *  - parallel.cp read from a config, counted in the world, written back (--write-config).
 * Byte counts are exact (same integers in double); times to 1e-12 relative (the same
 * double operations in another order). */
#include <math.h>

#include "sim_test_util.h"

/* ops of one layer named `name` (prefix match) in `phase` (-1: all): bytes, time of the
 * exposed (non-hidden) ops, time of the hidden ones, FLOPs */
typedef struct {
  double bytes, exposed, hidden, flops;
} op_sum;

static op_sum sum_ops(const loom_sim_ctx *c, const char *name, int phase) {
  loom_sim_op ops[LOOM_SIM_MAX_OPS];
  int n = loom_sim_layer_ops(c, ops, LOOM_SIM_MAX_OPS);
  op_sum s = {0, 0, 0, 0};
  for (int i = 0; i < n; i++) {
    if (strncmp(ops[i].name, name, strlen(name)) || (phase >= 0 && (int)ops[i].phase != phase))
      continue;
    s.bytes += ops[i].type == LOOM_OP_COMM ? loom_hw_ring_bytes(ops[i].coll, ops[i].bytes, ops[i].size) : 0;
    if (ops[i].hidden) s.hidden += ops[i].time;
    else s.exposed += ops[i].time;
    s.flops += ops[i].flops;
  }
  return s;
}

static loom_model_spec llama_gqa(void) {
  loom_model_spec s;
  CHECK(loom_model_preset(&s, "llama3-8b") == 0, "%s", loom_errmsg()); /* 32 heads, 8 kv */
  return s;
}

static void test_ulysses_tp_bytes(void) {
  loom_model_spec s = llama_gqa();
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  double B = 2, T = 8192, D = s.head_dim, H = s.heads, KV = s.kv_heads;
  int cases[][2] = {{2, 2}, {2, 4}, {4, 2}, {8, 1}, {1, 8}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int sp = cases[i][0], tp = cases[i][1];
    loom_sim_strategy st = strategy(1, tp, 1, 1, (int)B, 4, (int)T);
    st.sp = sp, st.dtype = LOOM_DT_BF16;
    CHECK(loom_sim_strategy_check(&st, &s) == 0, "sp%d x tp%d refused: %s", sp, tp, loom_errmsg());
    loom_sim_ctx c;
    loom_sim_ctx_init(&c, &s, &hw, &st);
    /* forward: q and out (H/tp heads), k and v (KV/tp heads) on B*T/sp tokens, each sent
     * (sp-1)/sp of; backward the same four again; 2 bytes per bf16 element on the GPU engine */
    double per_dir = (sp - 1.0) / sp * (B * T / sp) * D * (2 * H + 2 * KV) / tp * 2;
    for (int ph = 0; ph < 2; ph++) {
      double got = sum_ops(&c, "ulysses a2a", ph == 0 ? LOOM_PHASE_FWD : LOOM_PHASE_BWD_IN).bytes;
      CHECK(got == per_dir, "sp%d x tp%d %s: all-to-all %.0f bytes, closed form %.0f", sp, tp,
            ph ? "backward" : "forward", got, per_dir);
    }
  }
  /* what the trainer refuses, the simulator refuses: kv heads per tp rank not split by sp */
  loom_sim_strategy st = strategy(1, 8, 1, 1, 1, 4, 8192);
  st.sp = 2;
  CHECK(loom_sim_strategy_check(&st, &s) != 0 && strstr(loom_errmsg(), "kv_heads/tp = 8/8 = 1"),
        "sp2 x tp8 with 8 kv heads: %s", loom_errmsg());
  loom_err_clear();
}

static void test_cp_ring_bytes_and_flops(void) {
  loom_model_spec s = llama_gqa();
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  double B = 1, T = 32768, D = s.head_dim, KV = s.kv_heads;
  loom_sim_strategy one = strategy(1, 1, 1, 1, (int)B, 4, (int)T);
  one.dtype = LOOM_DT_BF16;
  loom_sim_ctx c1;
  loom_sim_ctx_init(&c1, &s, &hw, &one);
  double attn1 = sum_ops(&c1, "attention", LOOM_PHASE_FWD).flops;
  CHECK(attn1 == 4 * B * s.heads * T * (T + 1) / 2 * D, "attention FLOPs cp1 %.6g", attn1);
  for (int tp = 1; tp <= 2; tp++)
    for (int cp = 2; cp <= 8; cp *= 2) {
      loom_sim_strategy st = one;
      st.cp = cp, st.tp = tp;
      loom_sim_ctx c;
      loom_sim_ctx_init(&c, &s, &hw, &st);
      /* a hop carries K and V of the rank's B*T/cp tokens, kv heads split by tp, bf16 */
      double hop = 2 * (B * T / cp) * (KV / tp) * D * 2;
      double fwd = sum_ops(&c, "cp ring", LOOM_PHASE_FWD).bytes;
      double bwd = sum_ops(&c, "cp ring", LOOM_PHASE_BWD_IN).bytes;
      CHECK(fwd == (cp - 1) * hop, "cp%d tp%d forward ring %.0f bytes, closed form (cp-1) x hop %.0f",
            cp, tp, fwd, (cp - 1) * hop);
      /* backward: K/V cp-1 hops again, the dK/dV accumulators cp-1 hops (home at the end) */
      CHECK(bwd == 2 * (cp - 1) * hop, "cp%d tp%d backward ring %.0f bytes, closed form %.0f", cp,
            tp, bwd, 2 * (cp - 1) * hop);
      /* load balancing: each rank computes exactly 1/cp of the causal pairs (of its tp heads) */
      double attn = sum_ops(&c, "attention", LOOM_PHASE_FWD).flops;
      CHECK(attn * cp * tp == attn1, "cp%d tp%d attention FLOPs %.6g x cp x tp != %.6g", cp, tp,
            attn, attn1);
      /* the layer's own rows: B*T/cp tokens through the linears */
      CHECK(c.N == B * T / cp, "cp%d rows %.0f", cp, c.N);
      /* with Ulysses sp2 the ring runs in the attention layout: kv heads/(tp*sp) over the T/cp
       * tokens, and the all-to-alls on B*T/(cp*sp) tokens */
      st.sp = 2;
      loom_sim_ctx_init(&c, &s, &hw, &st);
      double hop_sp = 2 * (B * T / cp) * (KV / (tp * 2)) * D * 2;
      fwd = sum_ops(&c, "cp ring", LOOM_PHASE_FWD).bytes;
      CHECK(fwd == (cp - 1) * hop_sp, "cp%d tp%d sp2 forward ring %.0f bytes, closed form %.0f",
            cp, tp, fwd, (cp - 1) * hop_sp);
      double a2a = sum_ops(&c, "ulysses a2a", LOOM_PHASE_FWD).bytes;
      double a2a_want = 0.5 * (B * T / (cp * 2)) * D * (2.0 * s.heads + 2 * KV) / tp * 2;
      CHECK(a2a == a2a_want, "cp%d tp%d sp2 forward all-to-all %.0f bytes, closed form %.0f", cp,
            tp, a2a, a2a_want);
      CHECK(sum_ops(&c, "attention", LOOM_PHASE_FWD).flops * cp * tp * 2 == attn1,
            "cp%d tp%d sp2 attention FLOPs", cp, tp);
    }
  /* load balancing itself: rank r holds chunks r and 2cp-1-r of s tokens; its causal pairs
   * (full earlier chunks plus the two diagonals) are the same on every rank and sum to
   * T(T+1)/2 -- the identity the cost model's pairs / cp rests on */
  for (int cp = 2; cp <= 16; cp *= 2) {
    double sz = T / (2 * cp), total = 0;
    for (int r = 0; r < cp; r++) {
      double pairs = 0;
      int chunks[2] = {r, 2 * cp - 1 - r};
      for (int k = 0; k < 2; k++) pairs += chunks[k] * sz * sz + sz * (sz + 1) / 2;
      CHECK(pairs == T * (T + 1) / 2 / cp, "cp%d rank %d: %.0f causal pairs, not 1/cp", cp, r, pairs);
      total += pairs;
    }
    CHECK(total == T * (T + 1) / 2, "cp%d: pairs over the ranks %.0f", cp, total);
  }
}

static void test_cp_overlap(void) {
  loom_model_spec s = llama_gqa();
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  CHECK(hw.p2p_overlap, "h100-sxm overlaps point-to-point transfers");
  int cp = 4;
  /* a long sequence (attention per step outweighs a hop) and a short one on a slow ring
   * (the hop outweighs it): exposed = (cp-1) (max(0, hop - step) + slowdown min(hop, step)) */
  for (int variant = 0; variant < 2; variant++) {
    loom_hw_profile h = hw;
    double T = variant ? 4096 : 65536;
    if (variant)
      for (int t = 0; t < h.n_tiers; t++) h.tier[t].bandwidth /= 100;
    loom_sim_strategy st = strategy(1, 1, 1, 1, 1, 4, (int)T);
    st.cp = cp, st.dtype = LOOM_DT_BF16;
    loom_sim_ctx c;
    loom_sim_ctx_init(&c, &s, &h, &st);
    double hop_bytes = 2 * (T / cp) * s.kv_heads * s.head_dim * 2;
    double hop = loom_hw_coll_time(&h, LOOM_COLL_SENDRECV, hop_bytes, 1, cp);
    double step = sum_ops(&c, "attention", LOOM_PHASE_FWD).exposed / cp;
    CHECK(variant ? hop > step : hop < step, "variant %d: hop %.3g s, step %.3g s", variant, hop, step);
    op_sum r = sum_ops(&c, "cp ring k/v", LOOM_PHASE_FWD);
    double want = (cp - 1) * (fmax(0, hop - step) + h.overlap_slowdown * fmin(hop, step));
    CHECK_CLOSE(r.exposed, want, 1e-12, variant ? "exposed ring (comm-bound)" : "exposed ring (compute-bound)");
    CHECK_CLOSE(r.exposed + r.hidden, (cp - 1) * hop, 1e-12, "ring time, hidden + exposed");
    /* without p2p overlap (CPU MPI: no asynchronous progress) every hop is exposed */
    h.p2p_overlap = false;
    loom_sim_ctx_init(&c, &s, &h, &st);
    r = sum_ops(&c, "cp ring k/v", LOOM_PHASE_FWD);
    CHECK_CLOSE(r.exposed, (cp - 1) * hop, 1e-12, "ring without overlap: all exposed");
    CHECK(r.hidden == 0, "ring without overlap hides %.3g s", r.hidden);
  }
}

static void test_cp_memory(void) {
  loom_model_spec s = llama_gqa();
  const char *profiles[] = {"h100-sxm", "a100-80gb"};
  for (int p = 0; p < 2; p++) {
    loom_hw_profile hw;
    CHECK(load_hw(&hw, profiles[p]) == 0, "%s", loom_errmsg());
    for (int loom_cpu = 0; loom_cpu < 2; loom_cpu++) {
      hw.engine_loom_cpu = loom_cpu;
      if (!loom_cpu) hw.attention = LOOM_ATTN_FLASH; /* no T x T tensors */
      loom_sim_strategy st = strategy(1, 2, 1, 1, 1, 4, 16384);
      loom_sim_ctx c;
      loom_sim_ctx_init(&c, &s, &hw, &st);
      double a1 = loom_sim_layer_act_bytes(&c, true);
      for (int cp = 2; cp <= 8; cp *= 2) {
        st.cp = cp;
        loom_sim_ctx_init(&c, &s, &hw, &st);
        /* every saved tensor is per token (rows, log-sum-exp per query): exactly 1/cp */
        CHECK(loom_sim_layer_act_bytes(&c, true) * cp == a1, "%s %s cp%d: %.0f x cp != %.0f",
              profiles[p], loom_cpu ? "loom-cpu" : "gpu", cp, loom_sim_layer_act_bytes(&c, true), a1);
      }
    }
  }
}

static void test_plan_space(void) {
  /* llama3-8b on 16 H100s with 32k tokens: every candidate the planner keeps passes the
   * trainer's layout rules (Ulysses x TP included), and Ulysses x TP layouts are searched:
   * the finalists' strategies are checked against loom_sim_strategy_check */
  loom_model_spec s = llama_gqa();
  s.max_seq = 32768;
  loom_hw_profile hw;
  CHECK(load_hw(&hw, "h100-sxm") == 0, "%s", loom_errmsg());
  loom_plan_request q;
  memset(&q, 0, sizeof q);
  q.spec = &s, q.hw = &hw, q.gpus = 16, q.global_batch = 16, q.seq = 32768;
  q.dtype = LOOM_DT_BF16, q.trainable_only = true, q.finalists = 200, q.top = 5;
  loom_plan_result r;
  CHECK(loom_plan_search(&q, &r) == 0, "plan: %s", loom_errmsg());
  int sptp = 0;
  for (int i = 0; i < r.n; i++) {
    const loom_sim_strategy *st = &r.best[i].st;
    CHECK(loom_sim_strategy_check(st, &s) == 0, "finalist %s: %s", loom_sim_strategy_str(st),
          loom_errmsg());
    if (st->sp > 1 && st->tp > 1) sptp++;
  }
  CHECK(sptp > 0, "no Ulysses x TP layout among %d finalists", r.n);
  loom_plan_result_free(&r);
  /* 128k tokens: cp is searched, and every cp finalist passes the trainer's rules (T divisible
   * by 2cp, sp dividing T/cp) and fits */
  s.max_seq = q.seq = 131072;
  CHECK(loom_plan_search(&q, &r) == 0, "plan: %s", loom_errmsg());
  int with_cp = 0;
  double limit = loom_sim_memory_limit(&hw, hw.devices_per_node);
  for (int i = 0; i < r.n; i++) {
    const loom_sim_strategy *st = &r.best[i].st;
    CHECK(loom_sim_strategy_check(st, &s) == 0, "finalist %s: %s", loom_sim_strategy_str(st),
          loom_errmsg());
    CHECK(r.best[i].mem <= limit && r.best[i].gpus_used <= q.gpus, "finalist %s: %.1f GiB, %d ranks",
          loom_sim_strategy_str(st), r.best[i].mem / 1073741824.0, r.best[i].gpus_used);
    if (st->cp > 1) with_cp++;
  }
  CHECK(with_cp > 0, "no cp layout among %d finalists at 128k tokens", r.n);
  loom_plan_result_free(&r);
}

/* parallel.cp is read from a config and written back (the planner's --write-config), and the
 * world counts it: dp fills what tp*pp*cp*sp leave */
static void test_config_round_trip(void) {
  loom_config cfg;
  loom_config_defaults(&cfg);
  const char *over[] = {"model.preset=tiny-llama", "training.seq_len=64", "parallel.cp=4",
                        "parallel.tp=2"};
  for (size_t i = 0; i < sizeof over / sizeof *over; i++)
    CHECK(loom_config_override(&cfg, over[i]) == 0, "%s: %s", over[i], loom_errmsg());
  loom_sim_strategy st;
  CHECK(loom_sim_strategy_from_config(&st, &cfg, 16) == 0, "%s", loom_errmsg());
  CHECK(st.cp == 4 && st.tp == 2 && st.dp == 2 && loom_sim_world(&st) == 16,
        "cp %d tp %d dp %d world %d", st.cp, st.tp, st.dp, loom_sim_world(&st));
  CHECK(strstr(loom_sim_strategy_str(&st), " cp=4") != NULL, "%s", loom_sim_strategy_str(&st));
  loom_config out;
  loom_config_defaults(&out);
  CHECK(loom_sim_strategy_to_config(&st, &out) == 0, "%s", loom_errmsg());
  CHECK(out.parallel.cp == 4 && out.parallel.tp == 2 && out.parallel.dp == 2,
        "written: cp %ld tp %ld dp %ld", out.parallel.cp, out.parallel.tp, out.parallel.dp);
  /* 12 ranks cannot hold tp2 x cp4 with a whole dp */
  CHECK(loom_sim_strategy_from_config(&st, &cfg, 12) != 0 &&
            strstr(loom_errmsg(), "dp*tp*pp*cp*sp = 1*2*1*4*1 = 8 ranks but the cluster has 12"),
        "12 ranks: %s", loom_errmsg());
  loom_err_clear();
}

int main(void) {
  test_config_round_trip();
  test_ulysses_tp_bytes();
  test_cp_ring_bytes_and_flops();
  test_cp_overlap();
  test_cp_memory();
  test_plan_space();
  return harness_finish("test_sim_cp");
}

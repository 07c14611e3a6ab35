/* The planner's search: every layout of the ranks (tp, Megatron sequence parallelism or
 * Ulysses sp (also with tp: heads split by tp, then sp), context parallelism cp, pp, vpp and
 * schedule, dp filling the rest; for MoE models ep and etp, the experts folded onto the same
 * ranks), micro-batch size, ZeRO stage (what the profile's recipe runs: FSDP2 ZeRO-3,
 * Megatron-LM 0, 1 or 3) and recomputation, checked
 * against the trainer's layout rules, costed in closed form (plan_estimate.c) and pruned by
 * memory; the best `finalists` are then simulated on their
 * real schedules and ranked by the simulated step time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/mesh.h"
#include "sim/plan_internal.h"

typedef struct {
  loom_plan_entry *e;
  int n, cap;
} heap; /* the `cap` best estimates: a max-heap on est_time */

static void heap_push(heap *h, const loom_plan_entry *x) {
  if (h->n == h->cap) {
    if (x->est_time >= h->e[0].est_time) return;
    h->e[0] = *x; /* replace the worst, sift down */
    for (int i = 0;;) {
      int l = 2 * i + 1, r = l + 1, m = i;
      if (l < h->n && h->e[l].est_time > h->e[m].est_time) m = l;
      if (r < h->n && h->e[r].est_time > h->e[m].est_time) m = r;
      if (m == i) break;
      loom_plan_entry t = h->e[i];
      h->e[i] = h->e[m], h->e[m] = t, i = m;
    }
    return;
  }
  int i = h->n++;
  h->e[i] = *x;
  while (i > 0 && h->e[(i - 1) / 2].est_time < h->e[i].est_time) {
    loom_plan_entry t = h->e[i];
    h->e[i] = h->e[(i - 1) / 2], h->e[(i - 1) / 2] = t, i = (i - 1) / 2;
  }
}

static bool layout_ok(const loom_sim_strategy *st, const loom_model_spec *spec) {
  loom_config_parallel p;
  memset(&p, 0, sizeof p);
  p.dp = st->dp, p.tp = st->tp, p.pp = st->pp, p.sp = st->sp, p.vpp = st->vpp;
  p.cp = st->cp > 1 ? st->cp : 1;
  snprintf(p.sp_mode, sizeof p.sp_mode, "%s", st->seq_par ? "megatron" : "ulysses");
  snprintf(p.schedule, sizeof p.schedule, "%s", st->vpp > 1 ? "interleaved" : "1f1b");
  bool ok = loom_mesh_check_model(&p, spec, st->micro_batch, st->seq, loom_sim_world(st)) == 0;
  loom_err_clear();
  return ok;
}

/* by simulated step time in steps of 0.1% (the same step: the smaller memory first). Steps of
 * log time, not "within 0.1% of each other", keep the order transitive, as qsort needs. */
static int by_sim(const void *a, const void *b) {
  const loom_plan_entry *x = a, *y = b;
  double kx = floor(log(x->sim_time) / log1p(1e-3)), ky = floor(log(y->sim_time) / log1p(1e-3));
  if (kx != ky) return kx < ky ? -1 : 1;
  return x->mem < y->mem ? -1 : x->mem > y->mem;
}

/* pp values worth trying: divisors of the layers and powers of two */
static int pp_values(int layers, int limit, int *out) {
  int n = 0;
  for (int p = 1; p <= layers && p <= limit && p <= LOOM_SCHED_MAX_PP; p++) {
    bool pow2 = (p & (p - 1)) == 0;
    if (layers % p == 0 || pow2) out[n++] = p;
  }
  return n;
}

static void simulate_finalists(const loom_plan_request *q, heap *h, loom_plan_result *out) {
  out->best = loom_calloc((size_t)(h->n ? h->n : 1), sizeof *out->best);
  for (int i = 0; i < h->n; i++) {
    loom_plan_entry *e = &h->e[i];
    loom_schedule s;
    loom_sim_result r;
    loom_sim_ctx c;
    loom_sim_ctx_init(&c, q->spec, q->hw, &e->st);
    loom_sim_opts o = {NULL, false, 0};
    if (loom_sim_schedule(&e->st, NULL, &s)) continue;
    int rc = loom_sim_run(&c, &s, &o, &r);
    loom_sched_free(&s);
    if (rc) continue;
    if (r.oom_rank < 0) {
      e->sim_time = r.step_time;
      e->tokens_per_s = r.tokens_per_s;
      e->mfu = r.mfu;
      e->bubble = r.bubble;
      e->exposed_comm = r.exposed_comm;
      double worst = 0;
      for (int p = 0; p < r.pp; p++) worst = fmax(worst, r.mem[p].total);
      e->mem = worst;
      out->best[out->n++] = *e;
    }
    loom_sim_result_free(&r);
  }
  loom_err_clear();
  qsort(out->best, (size_t)out->n, sizeof *out->best, by_sim);
}

int loom_plan_search(const loom_plan_request *q, loom_plan_result *out) {
  memset(out, 0, sizeof *out);
  const loom_model_spec *spec = q->spec;
  const loom_hw_profile *hw = q->hw;
  if (q->gpus < 1 || q->global_batch < 1 || q->seq < 1)
    return loom_err("plan: --gpus, --global-batch and --seq must be positive");
  if (q->seq > spec->max_seq)
    return loom_err("plan: --seq %d exceeds the model's max_seq %d", q->seq, spec->max_seq);
  double t0 = loom_now();
  int per_node = q->gpus < hw->devices_per_node ? q->gpus : hw->devices_per_node;
  double limit = loom_sim_memory_limit(hw, hw->timeshare ? q->gpus : per_node);
  heap h = {loom_calloc((size_t)q->finalists, sizeof(loom_plan_entry)), 0, q->finalists};
  static const int mbs_values[] = {1, 2, 4, 8, 16, 32};
  static const int vpp_values[] = {1, 2, 3, 4, 6, 8};
  int pps[LOOM_SCHED_MAX_PP];
  int npp = pp_values(spec->layers, q->gpus, pps);
  /* selective recomputation only differs from none when attention keeps its T x T scores */
  int nrec = q->trainable_only || hw->attention != LOOM_ATTN_UNFUSED ? 2 : 3;
  const loom_recompute recs[] = {LOOM_RECOMPUTE_NONE, LOOM_RECOMPUTE_FULL, LOOM_RECOMPUTE_SELECTIVE};
  loom_sim_strategy st;
  memset(&st, 0, sizeof st);
  st.seq = q->seq;
  st.dtype = q->dtype;
  st.param_dtype = q->param_dtype, st.optim_dtype = q->optim_dtype, st.reduce_dtype = q->reduce_dtype;
  st.vision_param_dtype = q->vision_param_dtype, st.vision_optim_dtype = q->vision_optim_dtype;
  st.dropout = q->dropout;
  st.bucket_mb = 25;
  st.fp8 = q->fp8;
  st.moe_imbalance = q->moe_imbalance;
  st.ep_overlap = q->ep_overlap;
  /* expert parallelism: ep over the powers of two dividing the experts (1 for a dense model) */
  int eps[16], neps = 0;
  for (int ep = 1; ep <= q->gpus && neps < 16; ep *= 2) {
    if (ep > 1 && (spec->moe.experts <= 0 || spec->moe.experts % ep)) break;
    eps[neps++] = ep;
  }
  /* what the framework runs: FSDP shards everything over dp (ZeRO-3); Megatron-LM's distributed
   * optimizer shards the optimizer state only (ZeRO-1; its FSDP is ZeRO-3), no ZeRO-2 */
  bool fsdp = hw->recipe == LOOM_RECIPE_FSDP2, megatron = hw->recipe == LOOM_RECIPE_MEGATRON;
  for (int tp = 1; tp <= q->gpus && tp <= 64; tp *= 2) {
    if (spec->heads % tp || spec->kv_heads % tp || spec->intermediate % tp) continue;
    for (int sq = 0; sq < 2; sq++) {
      if (sq && tp == 1) continue;
      for (int sp = 1; sp * tp <= q->gpus && sp <= 64; sp *= 2) {
        if (sp > 1 && ((spec->heads / tp) % sp || (spec->kv_heads / tp) % sp || q->seq % sp))
          continue;
        /* cp: 2*cp load-balancing chunks per sequence, text models only (the simulator's
         * encoder has no ring); the trainer's check (sp dividing T/cp...) has the last word */
        bool vlm_model = spec->vision.arch != LOOM_VISION_NONE && q->vision_patches > 0;
        for (int cp = 1; cp * sp * tp <= q->gpus && cp <= 64; cp *= 2) {
        if (cp > 1 && (q->seq % (2 * cp) || vlm_model)) continue;
        for (size_t bi = 0; bi < sizeof mbs_values / sizeof *mbs_values; bi++) {
          int mbs = mbs_values[bi];
          if (mbs > q->global_batch) break;
          if (sq && ((long)mbs * q->seq) % tp) continue;
          static const char *const vmodes[] = {"replicate", "tp", "sp"};
          bool vlm = spec->vision.arch != LOOM_VISION_NONE && q->vision_patches > 0;
          int nv = vlm && tp > 1 ? 3 : 1;
          for (int vi = 0; vi < nv; vi++)
          for (int ri = 0; ri < nrec; ri++)
          for (int ei = 0; ei < neps; ei++)
          for (int ti = 0; ti < 2; ti++) {
            /* experts tensor-parallel as the attention (etp = tp, what loom train runs) or
             * folded (etp = 1: the tp ranks hold different experts; the simulator only) */
            int ep = eps[ei], etp = ti ? 1 : tp;
            if (ti && (tp == 1 || q->trainable_only || spec->moe.experts <= 0)) continue;
            if (spec->moe.experts > 0 && spec->moe.intermediate % etp) continue;
            snprintf(st.vision_mode, sizeof st.vision_mode, "%s", vmodes[vi]);
            st.vision_patches = vlm ? q->vision_patches : 0;
            st.freeze_vision = q->freeze_vision;
            st.tp = tp, st.sp = sp, st.cp = cp, st.seq_par = sq, st.micro_batch = mbs;
            st.ep = ep, st.etp = etp;
            st.recompute = recs[ri];
            st.dp = st.pp = st.vpp = st.microbatches = 1, st.zero = 0;
            snprintf(st.schedule, sizeof st.schedule, "none");
            loom_sim_ctx c;
            loom_sim_ctx_init(&c, spec, hw, &st);
            plan_costs k;
            st.microbatches = 2; /* the layer's cost in the 1F1B steady state */
            loom_sim_layer_cost(&c, &k.layer);
            st.microbatches = 1;
            loom_sim_ctx cd = c;
            cd.moe_layer = false;
            loom_sim_layer_cost(&cd, &k.dense);
            loom_sim_embed_cost(&c, &k.embed);
            loom_sim_head_cost(&c, &k.head);
            for (int pi = 0; pi < npp; pi++) {
              int pp = pps[pi];
              int dp = q->gpus / (tp * sp * cp * pp);
              if (dp < 1) break;
              while (dp > 1 && q->global_batch % (dp * mbs)) dp--;
              if (q->global_batch % (dp * mbs)) continue;
              int m = q->global_batch / (dp * mbs);
              /* the experts tile the stage's ranks (Megatron's folding); loom train carves ep
               * from the data-parallel ranks */
              if ((tp * sp * cp * dp) % (ep * etp) || (q->trainable_only && dp % ep)) {
                out->invalid++;
                continue;
              }
              for (size_t vi = 0; vi < sizeof vpp_values / sizeof *vpp_values; vi++) {
                int vpp = vpp_values[vi];
                if (vpp > 1 && (pp == 1 || pp * vpp > spec->layers)) break;
                if (q->trainable_only && (vpp > LOOM_MAX_CHUNKS || pp * vpp > LOOM_MAX_CHUNKS * 64)) break;
                const char *scheds[2];
                int ns = 0;
                if (pp == 1) scheds[ns++] = "none";
                else if (vpp > 1) scheds[ns++] = "interleaved";
                else scheds[ns++] = "1f1b", scheds[ns++] = "gpipe";
                st.dp = dp, st.pp = pp, st.vpp = vpp, st.microbatches = m;
                if (!layout_ok(&st, spec)) {
                  out->invalid++;
                  continue;
                }
                for (int si = 0; si < ns; si++) {
                  snprintf(st.schedule, sizeof st.schedule, "%s", scheds[si]);
                  for (int zero = 0; zero <= 3; zero++) {
                    if (zero > 0 && dp * cp * sp == 1) break;
                    if (fsdp && zero < 3 && dp * cp * sp > 1) continue;
                    if (megatron && zero == 2) continue;
                    st.zero = zero;
                    loom_sim_ctx_init(&c, spec, hw, &st);
                    plan_eval ev;
                    plan_estimate(&c, &k, &ev);
                    out->evaluated++;
                    if (ev.mem > limit) {
                      out->pruned_memory++;
                      continue;
                    }
                    loom_plan_entry e;
                    memset(&e, 0, sizeof e);
                    e.st = st;
                    e.est_time = ev.time;
                    e.mem = ev.mem;
                    e.gpus_used = loom_sim_world(&st);
                    heap_push(&h, &e);
                  }
                }
              }
            }
          }
        }
        } /* cp */
      }
    }
  }
  double t_search = loom_now() - t0;
  simulate_finalists(q, &h, out);
  free(h.e);
  out->seconds = loom_now() - t0;
  out->search_seconds = t_search;
  if (out->n == 0)
    return loom_err("plan: no configuration of %d ranks fits in %.1f GiB per rank for this model "
                    "and batch (%ld evaluated, %ld over the memory limit); add ranks or use a "
                    "smaller global batch", q->gpus, limit / 1073741824.0, out->evaluated,
                    out->pruned_memory);
  return 0;
}

void loom_plan_result_free(loom_plan_result *r) {
  free(r->best);
  r->best = NULL;
  r->n = 0;
}

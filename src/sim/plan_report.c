/* The planner's report: how much was searched and how fast, the top configurations as a
 * table, and why the best one wins against the runners-up (the parts of the step that
 * differ most: compute, pipeline bubble, exposed communication, memory). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loom/sim.h"

/* the layout's columns, each under its header word (dp tp pp vpp cp sp zero mbs m; MoE
 * models: ep etp) */
#define LAYOUT_HDR "%3s %5s %3s %3s %3s %3s %4s %4s %4s"
static const char *layout(const loom_sim_strategy *st, bool moe) {
  static char s[112];
  char tp[16];
  snprintf(tp, sizeof tp, "%d%s", st->tp, st->seq_par ? "+sp" : "");
  int n = snprintf(s, sizeof s, "%3d %5s %3d %3d %3d %3d %4d %4d %4d", st->dp, tp, st->pp,
                   st->vpp, st->cp > 1 ? st->cp : 1, st->sp, st->zero, st->micro_batch,
                   st->microbatches);
  if (moe && n > 0 && (size_t)n < sizeof s)
    snprintf(s + n, sizeof s - (size_t)n, " %3d %3d", st->ep > 1 ? st->ep : 1,
             st->etp > 0 ? st->etp : st->tp);
  return s;
}

static bool same_layout(const loom_sim_strategy *a, const loom_sim_strategy *b) {
  return a->dp == b->dp && a->tp == b->tp && a->seq_par == b->seq_par && a->pp == b->pp &&
         a->ep == b->ep && a->etp == b->etp &&
         a->vpp == b->vpp && a->sp == b->sp && a->micro_batch == b->micro_batch &&
         a->recompute == b->recompute && !strcmp(a->schedule, b->schedule) &&
         !strcmp(a->vision_mode, b->vision_mode);
}

/* "ep 32 -> 16, tp 2 -> 4": the axes where the runner-up o differs from the winner b */
static const char *differences(const loom_sim_strategy *b, const loom_sim_strategy *o) {
  static char s[160];
  size_t n = 0;
  s[0] = 0;
  const struct {
    const char *name;
    int x, y;
  } axes[] = {{"dp", b->dp, o->dp},         {"tp", b->tp, o->tp},
              {"pp", b->pp, o->pp},         {"vpp", b->vpp, o->vpp},
              {"cp", b->cp > 1 ? b->cp : 1, o->cp > 1 ? o->cp : 1},
              {"sp", b->sp, o->sp},         {"ep", b->ep > 1 ? b->ep : 1, o->ep > 1 ? o->ep : 1},
              {"etp", b->etp > 0 ? b->etp : b->tp, o->etp > 0 ? o->etp : o->tp},
              {"mbs", b->micro_batch, o->micro_batch}, {"zero", b->zero, o->zero},
              {"seq-par", b->seq_par, o->seq_par},
              {"recompute", (int)b->recompute, (int)o->recompute}};
  bool folded = (b->etp > 0 && b->etp != b->tp) || (o->etp > 0 && o->etp != o->tp);
  for (size_t i = 0; i < sizeof axes / sizeof axes[0] && n < sizeof s; i++)
    if (axes[i].x != axes[i].y && (folded || strcmp(axes[i].name, "etp")))
      n += (size_t)snprintf(s + n, sizeof s - n, "%s%s %d -> %d", n ? ", " : "", axes[i].name,
                            axes[i].x, axes[i].y);
  return n ? s : "the schedule";
}

static void why(const loom_plan_request *q, const loom_plan_result *r) {
  const loom_plan_entry *b = &r->best[0];
  const double G = 1073741824.0;
  printf("\nwhy #1 wins:\n");
  printf("  #1 runs %s at %.1f%% MFU: the bubble costs %.1f%% of its pipeline time, exposed "
         "communication %.3f s of %.3f s, peak memory %.1f of %.1f GiB.\n",
         loom_sim_strategy_str(&b->st), 100 * b->mfu, 100 * b->bubble / (1 + b->bubble),
         b->exposed_comm, b->sim_time, b->mem / G,
         loom_sim_memory_limit(q->hw, q->hw->devices_per_node) / G);
  int shown = 0;
  for (int i = 1; i < r->n && shown < 3; i++) {
    const loom_plan_entry *o = &r->best[i];
    if (same_layout(&o->st, &b->st)) {
      if (o->st.zero != b->st.zero && shown == 0)
        printf("  ZeRO stage %d instead of %d changes only the memory here (%.2f vs %.2f GiB) "
               "and %.2f%% of the time\n", o->st.zero, b->st.zero, o->mem / G, b->mem / G,
               100 * (o->sim_time / b->sim_time - 1));
      continue;
    }
    for (int j = 1; j < i; j++) /* one row per layout */
      if (same_layout(&r->best[j].st, &o->st)) goto next;
    double slower = 100 * (o->sim_time / b->sim_time - 1);
    double d_comm = o->exposed_comm - b->exposed_comm;
    double d_bub = o->bubble / (1 + o->bubble) * o->sim_time - b->bubble / (1 + b->bubble) * b->sim_time;
    double d_rest = (o->sim_time - b->sim_time) - d_comm - d_bub;
    if (slower < 0.5) {
      printf("  ties with #%d (%s) within %.2f%%: either is as good%s\n", i + 1,
             loom_sim_strategy_str(&o->st), slower,
             o->mem > b->mem ? "; #1 needs less memory" : "");
    } else {
      const char *reason = d_comm >= d_bub && d_comm >= d_rest ? "more exposed communication"
                           : d_bub >= d_rest ? "a larger pipeline bubble"
                                             : "more compute per rank (recomputation, smaller GEMMs, "
                                               "fewer ranks in use or the optimizer)";
      printf("  beats #%d (%s) by %.1f%%: with %s it loses mostly to %s (communication "
             "%+.3f s, bubble %+.3f s, other %+.3f s)\n", i + 1, loom_sim_strategy_str(&o->st),
             slower, differences(&b->st, &o->st), reason, d_comm, d_bub, d_rest);
    }
    shown++;
  next:;
  }
}

void loom_plan_print(const loom_plan_request *q, const loom_plan_result *r) {
  printf("searched %ld configurations in %.3f s (%.0f configurations/s; %ld over the memory "
         "limit, %ld invalid layouts), then simulated %d finalists (%.3f s in all)\n",
         r->evaluated, r->search_seconds, r->evaluated / fmax(r->search_seconds, 1e-9),
         r->pruned_memory, r->invalid, q->finalists, r->seconds);
  bool moe = q->spec->moe.experts > 0;
  printf("model: %d layers, hidden %d, %d heads", q->spec->layers, q->spec->hidden,
         q->spec->heads);
  if (moe)
    printf(", %d experts (top %d) in %d MoE layers", q->spec->moe.experts, q->spec->moe.top_k,
           loom_model_moe_layers(q->spec));
  printf("; %d ranks of %s; global batch %d x %d tokens; %s%s\n", q->gpus, q->hw->name,
         q->global_batch, q->seq, loom_hw_dtype_name(q->dtype), q->fp8 ? " with FP8 GEMMs" : "");
  printf("recipe: %s (runtime.recipe of the profile)\n\n", loom_hw_recipe_text(q->hw->recipe));
  /* vision-language models: the encoder's strategy over the tp ranks (rows may differ only
   * there) */
  bool vlm = q->spec->vision.arch != LOOM_VISION_NONE && r->n > 0 && r->best[0].st.vision_patches > 0;
  printf("%-3s " LAYOUT_HDR "%s %-11s %-9s%s %6s %10s %10s %10s %6s %8s %7s %8s\n", "#", "dp",
         "tp", "pp", "vpp", "cp", "sp", "zero", "mbs", "m", moe ? "  ep etp" : "", "schedule",
         "recompute", vlm ? " vision   " : "", "ranks", "estimate", "step (s)", "tokens/s", "MFU",
         "mem GiB", "bubble", "comm (s)");
  for (int i = 0; i < r->n && i < q->top; i++) {
    const loom_plan_entry *e = &r->best[i];
    char vis[16] = "";
    if (vlm) snprintf(vis, sizeof vis, " %-9s", e->st.vision_mode);
    printf("%-3d %s %-11s %-9s%s %6d %10.4f %10.4f %10.4g %5.1f%% %8.2f %7.4f %8.4f\n", i + 1,
           layout(&e->st, moe), e->st.schedule, loom_recompute_name(e->st.recompute), vis,
           e->gpus_used,
           e->est_time, e->sim_time, e->tokens_per_s, 100 * e->mfu, e->mem / 1073741824.0,
           e->bubble, e->exposed_comm);
  }
  if (r->n > 0) why(q, r);
}

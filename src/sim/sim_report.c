/* The simulator's report: the step's metrics, what bounds the step (its bottleneck) and the
 * memory of every pipeline rank. MFU is the trainer's definition (loom_mfu): model
 * FLOPs per token from the function the trainer uses, over the step time and the devices' peak
 * for the dtype; absent (with why) when the profile has no peak for the dtype or the figure
 * would exceed 100%. */
#include <math.h>
#include <stdio.h>

#include "loom/core.h"
#include "loom/decoder.h"
#include "loom/hw.h"
#include "loom/sim.h"
#include "sim/sim_internal.h"

/* The step's MFU as a fraction, or NAN with why[] saying why it is absent. */
static double report_mfu(const loom_sim_ctx *c, const loom_sim_result *r, double *fpt,
                         char *why, size_t n, char *peak_name, size_t np) {
  const loom_sim_strategy *st = c->st;
  *fpt = loom_sim_flops_per_token(c->spec, st->seq);
  double tokens = (double)st->dp * st->microbatches * st->micro_batch * st->seq;
  double devices = r->world;
  if (c->hw->timeshare && r->timeshare > 1) devices = r->world / r->timeshare;
  loom_mfu_source src;
  double peak = sim_mfu_peak(c, devices, &src);
  why[0] = 0;
  if (!(peak > 0) || (!c->hw->engine_loom_cpu && !(c->hw->peak_flops[st->dtype] > 0))) {
    snprintf(why, n, "hardware profile '%s' has no %s peak", c->hw->name,
             loom_hw_dtype_name(st->dtype));
    return NAN;
  }
  if (peak_name) snprintf(peak_name, np, "%s", src.name);
  double mfu = loom_mfu(tokens, r->step_time, *fpt, peak);
  if (mfu > 1) {
    snprintf(why, n, "%.1f%% is above the profile's peak: the cost model or profile is wrong",
             100 * mfu);
    return NAN;
  }
  if (!isfinite(mfu)) snprintf(why, n, "no step time");
  return mfu;
}

static void human(double x, char *buf, size_t n) {
  if (x >= 1e9) snprintf(buf, n, "%.2fG", x / 1e9);
  else if (x >= 1e6) snprintf(buf, n, "%.2fM", x / 1e6);
  else if (x >= 1e3) snprintf(buf, n, "%.2fk", x / 1e3);
  else snprintf(buf, n, "%.1f", x);
}

/* The step's time by what it is spent on, on the critical rank: compute, each collective
 * exposed on the compute stream inside the layers (the first stage's layers, embedding and
 * vision encoder, head when there is one stage, per micro-batch), the rest of the exposed
 * communication (data-parallel / ZeRO reductions and gathers, pipeline transfers), the
 * optimizer, the rank's idle time (the pipeline bubble) and, with host dispatch, the part of
 * its compute time the GPU waits for the CPU to issue kernels (the replayed issue queues of
 * the first stage's layers, embedding and encoder, head when there is one stage, per
 * micro-batch): parts that add up to the step; out of memory first when a rank is over the
 * limit. */
static void print_bottleneck(const loom_sim_ctx *c, const loom_sim_result *r) {
  enum { COMPUTE = 0, REDUCTIONS = 1 + LOOM_COLL_COUNT, OPTIMIZER, BUBBLE, HOST, PARTS };
  double part[PARTS] = {0};
  const char *name[PARTS] = {"compute"};
  for (int k = 0; k < LOOM_COLL_COUNT; k++) name[1 + k] = loom_coll_name((loom_coll_kind)k);
  name[REDUCTIONS] = "other communication (gradient reductions, gathers, pipeline transfers)";
  name[OPTIMIZER] = "the optimizer";
  name[BUBBLE] = "the pipeline bubble";
  name[HOST] = "the GPU waiting for the CPU to issue (host dispatch)";
  loom_sim_op ops[LOOM_SIM_MAX_OPS];
  const loom_sim_strategy *st = c->st;
  double per_mb[LOOM_COLL_COUNT] = {0}, layers = (double)c->spec->layers / st->pp;
  for (int part_i = 0; part_i < 3; part_i++) {
    if (part_i == 2 && st->pp > 1) break;
    int n = part_i == 0 ? loom_sim_layer_ops(c, ops, LOOM_SIM_MAX_OPS)
            : part_i == 1 ? loom_sim_embed_ops(c, ops, LOOM_SIM_MAX_OPS)
                          : loom_sim_head_ops(c, ops, LOOM_SIM_MAX_OPS);
    for (int i = 0; i < n; i++)
      if (ops[i].type == LOOM_OP_COMM && !ops[i].hidden)
        per_mb[ops[i].coll] += ops[i].time * (part_i == 0 ? layers : 1);
  }
  double inlayer = 0;
  for (int k = 0; k < LOOM_COLL_COUNT; k++) inlayer += per_mb[k] * st->microbatches;
  double scale = inlayer > r->exposed_comm && inlayer > 0 ? r->exposed_comm / inlayer : 1;
  for (int k = 0; k < LOOM_COLL_COUNT; k++) part[1 + k] = per_mb[k] * st->microbatches * scale;
  part[REDUCTIONS] = fmax(0, r->exposed_comm - inlayer * scale);
  part[COMPUTE] = r->compute_time;
  if (!c->loom_cpu) { /* host dispatch: of the compute time, the GPU waiting for the CPU */
    loom_sim_cost lc, ec, hc;
    loom_sim_layer_cost(c, &lc);
    loom_sim_embed_cost(c, &ec);
    loom_sim_head_cost(c, &hc);
    double w = layers * lc.host_wait + ec.host_wait + (st->pp == 1 ? hc.host_wait : 0);
    for (int p = 0; p < LOOM_PHASE_COUNT; p++) w += st->vpp * lc.startup[p];
    part[HOST] = fmin(w * st->microbatches, part[COMPUTE]);
    part[COMPUTE] -= part[HOST];
  }
  part[OPTIMIZER] = r->optimizer_time;
  /* the critical rank's idle time: waiting for other stages (the bubble) */
  part[BUBBLE] = fmax(0, r->step_time - r->compute_time - r->exposed_comm - r->optimizer_time);
  int order[PARTS];
  for (int i = 0; i < PARTS; i++) order[i] = i;
  for (int i = 1; i < PARTS; i++) /* by share, largest first */
    for (int j = i; j > 0 && part[order[j]] > part[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  double T = r->step_time > 0 ? r->step_time : 1;
  printf("bottleneck     ");
  if (r->oom_rank >= 0)
    printf("memory (rank %d needs %.2f GiB of %.2f GiB); its time: ",
           r->oom_rank * st->dp * st->sp * st->tp, r->mem[r->oom_rank].total / 1073741824.0,
           r->mem_limit / 1073741824.0);
  int shown = 0;
  for (int i = 0; i < PARTS && shown < 4; i++) {
    int p = order[i];
    if (shown && !(part[p] >= 5e-4 * T)) break; /* below 0.05% of the step */
    bool coll = p >= 1 && p <= LOOM_COLL_COUNT;
    printf("%s%s%s %.1f%%%s", shown == 1 ? " (then " : shown ? ", " : "", coll ? "exposed " : "",
           name[p], 100 * part[p] / T, shown == 0 ? " of the step" : "");
    shown++;
  }
  printf("%s\n", shown > 1 ? ")" : "");
}

void loom_sim_print(const loom_sim_ctx *c, const loom_sim_result *r) {
  const loom_sim_strategy *st = c->st;
  const double G = 1073741824.0;
  char tps[32];
  human(r->tokens_per_s, tps, sizeof tps);
  printf("strategy       %s, %s\n", loom_sim_strategy_str(st), loom_hw_dtype_name(st->dtype));
  printf("hardware       %s: %d ranks%s\n", c->hw->name, r->world,
         r->timeshare > 1 ? " (time-sharing the devices)" : "");
  printf("step time      %.4f s\n", r->step_time);
  int seqs = st->dp * st->microbatches * st->micro_batch;
  printf("tokens/s       %s  (%d sequence%s of %d tokens per step)\n", tps, seqs,
         seqs == 1 ? "" : "s", st->seq);
  printf("per device     %.0f tokens/s, %.1f model TFLOP/s (as Megatron-Bridge reports them)\n",
         r->tokens_per_s / r->world, r->model_flops / r->step_time / r->world / 1e12);
  double fpt;
  char why[160];
  char peak_name[64];
  double mfu = report_mfu(c, r, &fpt, why, sizeof why, peak_name, sizeof peak_name);
  if (isfinite(mfu))
    printf("MFU / HFU      %.1f%% / %.1f%%  (against the %s; model FLOPs %.3g per step, %.6g "
           "per token%s)\n", 100 * mfu, 100 * r->hfu, peak_name, r->model_flops, fpt,
           st->fp8 ? "; of the bf16 peak: the GEMMs ran in FP8" : "");
  else
    printf("MFU            not shown: %s  (model FLOPs %.3g per step, %.6g per token)\n", why,
           r->model_flops, fpt);
  printf("bubble         %.4f  (idle / busy compute over the pipeline ranks; %.1f%% of the "
         "pipeline's time)\n", r->bubble, 100 * r->bubble / (1 + r->bubble));
  printf("communication  %.4f s exposed on rank %d's compute stream, %.4f s in all\n",
         r->exposed_comm, r->critical_rank * sim_stage_ranks(st), r->comm_total);
  printf("compute        %.4f s busy (forward/backward), optimizer %.4f s\n", r->compute_time,
         r->optimizer_time);
  print_bottleneck(c, r);
  printf("memory per rank (GiB, limit %.2f):\n", r->mem_limit / G);
  printf("  %-6s %8s %8s %9s %11s %9s %8s %8s %9s\n", "stage", "weights", "grads", "optimizer",
         "activations", "workspace", "buffers", "total", "in flight");
  for (int p = 0; p < r->pp; p++) {
    const loom_sim_memory *m = &r->mem[p];
    if (r->pp > 16 && p > 3 && p < r->pp - 4) {
      if (p == 4) printf("  ...\n");
      continue;
    }
    printf("  %-6d %8.3f %8.3f %9.3f %11.3f %9.3f %8.3f %8.3f %9d%s\n", p, m->weights / G,
           m->grads / G, m->optimizer / G, m->activations / G, m->workspace / G,
           m->comm_buffers / G, m->total / G, m->inflight, m->total > r->mem_limit ? "  OOM" : "");
  }
  if (c->hw->mem_fragmentation > 0)
    printf("  (totals include the allocator's headroom: %.0f%% of the activations, workspace and "
           "buffers, device.memory_fragmentation)\n", 100 * c->hw->mem_fragmentation);
  if (r->comm_bytes) {
    printf("bytes each rank sends per step (MB; comm.h's ring accounting, as comm.json):\n");
    printf("  %-6s %12s %14s %12s %12s %12s\n", "stage", "all-reduce", "reduce-scatter",
           "all-gather", "all-to-all", "send/recv");
    for (int p = 0; p < r->pp && p < 4; p++) {
      printf("  %-6d", p);
      for (int k = 0; k < LOOM_COLL_COUNT; k++) printf(" %*.3f", k == 1 ? 14 : 12, r->comm_bytes[p][k] / 1e6);
      printf("\n");
    }
    if (r->pp > 4) printf("  ...\n");
  }
  if (r->oom_rank >= 0) printf("OUT OF MEMORY: %s\n", r->oom_msg);
}

int loom_sim_write_json(const loom_sim_ctx *c, const loom_sim_result *r, const char *path) {
  const loom_sim_strategy *st = c->st;
  FILE *f = fopen(path, "w");
  if (!f) return loom_err("cannot write '%s'", path);
  fprintf(f, "{\n  \"strategy\": \"%s\",\n  \"hardware\": \"%s\",\n  \"world\": %d,\n",
          loom_sim_strategy_str(st), c->hw->name, r->world);
  double fpt;
  char why[160], mfu_text[224], peak_name[64];
  double mfu = report_mfu(c, r, &fpt, why, sizeof why, peak_name, sizeof peak_name);
  if (isfinite(mfu))
    snprintf(mfu_text, sizeof mfu_text, "%.17g,\n  \"mfu_peak\": \"%s\"", mfu, peak_name);
  else snprintf(mfu_text, sizeof mfu_text, "null,\n  \"mfu_note\": \"%s\"", why);
  fprintf(f, "  \"step_time\": %.9g,\n  \"tokens_per_s\": %.9g,\n  \"flops_per_token\": %.17g,\n"
             "  \"mfu\": %s,\n  \"hfu\": %.6g,\n"
             "  \"bubble\": %.6g,\n  \"exposed_comm\": %.9g,\n  \"comm_total\": %.9g,\n"
             "  \"optimizer_time\": %.9g,\n  \"mem_limit\": %.9g,\n  \"oom_rank\": %d,\n  \"stages\": [\n",
          r->step_time, r->tokens_per_s, fpt, mfu_text, r->hfu, r->bubble, r->exposed_comm,
          r->comm_total, r->optimizer_time, r->mem_limit, r->oom_rank);
  for (int p = 0; p < r->pp; p++) {
    const loom_sim_memory *m = &r->mem[p];
    fprintf(f, "    {\"stage\": %d, \"memory\": %.9g, \"weights\": %.9g, \"grads\": %.9g, "
               "\"optimizer\": %.9g, \"activations\": %.9g, \"inflight\": %d",
            p, m->total, m->weights, m->grads, m->optimizer, m->activations, m->inflight);
    for (int k = 0; k < LOOM_COLL_COUNT; k++)
      fprintf(f, ", \"%s\": %.1f", loom_coll_name((loom_coll_kind)k), r->comm_bytes[p][k]);
    fprintf(f, "}%s\n", p + 1 < r->pp ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  return fclose(f) ? loom_err("cannot write '%s'", path) : 0;
}

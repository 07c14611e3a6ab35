/* The simulator's report: the step's metrics and the memory of every pipeline rank. */
#include <stdio.h>

#include "loom/core.h"
#include "sim/sim_internal.h"

static void human(double x, char *buf, size_t n) {
  if (x >= 1e9) snprintf(buf, n, "%.2fG", x / 1e9);
  else if (x >= 1e6) snprintf(buf, n, "%.2fM", x / 1e6);
  else if (x >= 1e3) snprintf(buf, n, "%.2fk", x / 1e3);
  else snprintf(buf, n, "%.1f", x);
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
  printf("tokens/s       %s  (%d sequences of %d tokens per step)\n", tps,
         st->dp * st->microbatches * st->micro_batch, st->seq);
  printf("MFU / HFU      %.1f%% / %.1f%%  (model FLOPs %.3g per step)\n", 100 * r->mfu,
         100 * r->hfu, r->model_flops);
  printf("bubble         %.4f  (idle / busy compute over the pipeline ranks; %.1f%% of the "
         "pipeline's time)\n", r->bubble, 100 * r->bubble / (1 + r->bubble));
  printf("communication  %.4f s exposed on rank %d's compute stream, %.4f s in all\n",
         r->exposed_comm, r->critical_rank * sim_stage_ranks(st), r->comm_total);
  printf("compute        %.4f s busy (forward/backward), optimizer %.4f s\n", r->compute_time,
         r->optimizer_time);
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
  fprintf(f, "  \"step_time\": %.9g,\n  \"tokens_per_s\": %.9g,\n  \"mfu\": %.6g,\n  \"hfu\": %.6g,\n"
             "  \"bubble\": %.6g,\n  \"exposed_comm\": %.9g,\n  \"comm_total\": %.9g,\n"
             "  \"optimizer_time\": %.9g,\n  \"mem_limit\": %.9g,\n  \"oom_rank\": %d,\n  \"stages\": [\n",
          r->step_time, r->tokens_per_s, r->mfu, r->hfu, r->bubble, r->exposed_comm, r->comm_total,
          r->optimizer_time, r->mem_limit, r->oom_rank);
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

/* `loom plan`: search the parallel strategies of a model on N ranks of a hardware profile
 * (closed-form pruning, then simulation of the finalists), print the best as a table with why
 * the winner wins, and optionally write it as a train config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/core.h"
#include "loom/sim.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom plan --model PRESET|run.yaml --hardware PROFILE --gpus N\n"
          "                 [--global-batch B] [--seq S] [KEY=VALUE ...] [options]\n\n"
          "Search data/tensor/sequence/context/pipeline parallelism (dp, tp with or without\n"
          "Megatron sequence parallelism, Ulysses sp (also with tp), context parallelism cp,\n"
          "pp, vpp and the schedule; for MoE models expert parallelism ep and etp), the ZeRO\n"
          "stage, the\n"
          "micro-batch size and recomputation for the fastest step that fits in memory: every\n"
          "valid layout is costed in closed form, the best are simulated on their schedules.\n\n"
          "  --model M          a preset (gpt2-124m, qwen2.5-7b, llama3-8b, ...) or a train config\n"
          "  --hardware H       a100-80gb, h100-sxm, h100-sxm-hf, h100-fsdp2, h200,\n"
          "                     this-machine or a profile file (its runtime.recipe is the\n"
          "                     framework the plan assumes)\n"
          "  --gpus N           ranks available (dp takes what tp*cp*sp*pp leave; some may idle)\n"
          "  --global-batch B   sequences per optimizer step (default: the config's)\n"
          "  --seq S            tokens per sequence (default: training.seq_len)\n"
          "  --dtype DT         fp32 | bf16 | fp16 (default: bf16 on GPU profiles, else the config's)\n"
          "  --dropout          the recipe uses dropout\n"
          "  --fp8              GEMMs in FP8 (per-tensor current scaling; GPU profiles)\n"
          "  --moe-imbalance F  MoE: the busiest rank's experts get F times the balanced share\n"
          "  --ep-overlap on|off  MoE: all-to-alls behind another micro-batch's compute\n"
          "                     (default: the profile's runtime.ep_comm_overlap)\n"
          "  --finalists K      configurations simulated after the closed form (default 24)\n"
          "  --top N            rows printed (default 10)\n"
          "  --trainable        only what 'loom train' runs (no selective recompute, no fp16);\n"
          "                     implied by --write-config\n"
          "  --write-config F   write the winner as a train config (the model's config + the\n"
          "                     winner's parallel and training keys)\n"
          "  KEY=VALUE          config overrides (model.hidden=20480, ...)\n\n"
          "example:\n"
          "  loom plan --model llama3-8b --hardware h100-sxm --gpus 64 --global-batch 512 --seq 8192\n");
}

typedef struct {
  const char *model, *hardware, *dtype, *write, *imbalance, *ep_overlap;
  int gpus, gbs, seq, finalists, top;
  bool dropout, trainable, fp8;
} plan_args;

static int num(const char *opt, const char *v, int *out) {
  char *end;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || *end || x < 1 || x > 100000000)
    return fprintf(stderr, "loom plan: %s needs a positive integer, got '%s'\n", opt, v ? v : ""), -1;
  *out = (int)x;
  return 0;
}

static int run(loom_config *cfg, const plan_args *a) {
  loom_model_spec spec;
  loom_hw_profile hw;
  if (loom_model_spec_from_config(&spec, &cfg->model) || loom_hw_load(&hw, a->hardware)) return -1;
  loom_plan_request q;
  memset(&q, 0, sizeof q);
  q.spec = &spec;
  q.hw = &hw;
  q.gpus = a->gpus;
  q.seq = a->seq ? a->seq : (int)cfg->training.seq_len;
  q.global_batch = a->gbs;
  if (!q.global_batch)
    q.global_batch = cfg->training.global_batch_size > 0
                         ? (int)cfg->training.global_batch_size
                         : (int)(cfg->training.micro_batch_size * cfg->training.grad_accum * cfg->parallel.dp);
  const char *dt = a->dtype ? a->dtype : (hw.engine_loom_cpu ? cfg->training.dtype : "bf16");
  if (loom_hw_dtype_parse(dt, &q.dtype)) return -1;
  q.dropout = a->dropout;
  q.ep_overlap = -1;
  if (a->imbalance) {
    char *end;
    q.moe_imbalance = strtod(a->imbalance, &end);
    if (*end || end == a->imbalance || !(q.moe_imbalance >= 1) || !(q.moe_imbalance < 1e6))
      return loom_err("--moe-imbalance must be a number >= 1 (1 = balanced routing), got '%s'",
                      a->imbalance);
  }
  if (a->ep_overlap) {
    if (strcmp(a->ep_overlap, "on") && strcmp(a->ep_overlap, "off"))
      return loom_err("--ep-overlap must be on or off, got '%s'", a->ep_overlap);
    q.ep_overlap = !strcmp(a->ep_overlap, "on");
  }
  if (a->fp8 && (hw.engine_loom_cpu || q.dtype != LOOM_DT_BF16))
    return loom_err("--fp8 runs the GEMMs of a bf16 run in FP8 on a GPU profile (profile '%s', "
                    "dtype %s)", hw.name, loom_hw_dtype_name(q.dtype));
  if (a->fp8 && (a->trainable || a->write))
    return loom_err("--fp8 plans are not trainable: loom train runs fp32 or bf16");
  q.fp8 = a->fp8;
  q.trainable_only = a->trainable || a->write;
  if (q.trainable_only && q.dtype == LOOM_DT_FP16)
    return loom_err("fp16 is not a dtype loom train runs; use --dtype bf16 with --write-config");
  q.finalists = a->finalists ? a->finalists : 24;
  /* the images' patches per sample, as loom sim takes them; the planner searches the vision
   * strategy itself, so the config's vision.parallel (read after the patches) may not fit */
  loom_sim_strategy probe;
  loom_sim_strategy_from_config(&probe, cfg, 0);
  q.vision_patches = probe.vision_patches;
  q.freeze_vision = probe.freeze_vision;
  q.param_dtype = probe.param_dtype, q.optim_dtype = probe.optim_dtype;
  q.reduce_dtype = probe.reduce_dtype;
  q.vision_param_dtype = probe.vision_param_dtype, q.vision_optim_dtype = probe.vision_optim_dtype;
  loom_err_clear();
  q.top = a->top ? a->top : 10;
  loom_plan_result r;
  if (loom_plan_search(&q, &r)) return -1;
  loom_plan_print(&q, &r);
  int rc = 0;
  if (a->write) {
    rc = loom_sim_strategy_to_config(&r.best[0].st, cfg);
    if (!rc) rc = loom_config_validate(cfg);
    if (!rc) rc = loom_config_save(cfg, a->write);
    if (!rc) printf("\nwrote the winner to %s (run: mpirun -np %d loom train %s)\n", a->write,
                    r.best[0].gpus_used, a->write);
  }
  loom_plan_result_free(&r);
  return rc;
}

int loom_cmd_plan(int argc, char **argv) {
  plan_args a;
  memset(&a, 0, sizeof a);
  const char *gpus = NULL, *gbs = NULL, *seq = NULL, *finalists = NULL, *top = NULL;
  const loom_cli_opt opts[] = {
      LOOM_OPT_VALUE("--model", &a.model),          LOOM_OPT_VALUE("--hardware", &a.hardware),
      LOOM_OPT_VALUE("--gpus", &gpus),              LOOM_OPT_VALUE("--global-batch", &gbs),
      LOOM_OPT_VALUE("--seq", &seq),                LOOM_OPT_VALUE("--dtype", &a.dtype),
      LOOM_OPT_VALUE("--finalists", &finalists),    LOOM_OPT_VALUE("--top", &top),
      LOOM_OPT_VALUE("--write-config", &a.write),   LOOM_OPT_FLAG("--dropout", &a.dropout),
      LOOM_OPT_FLAG("--trainable", &a.trainable),   LOOM_OPT_FLAG("--fp8", &a.fp8),
      LOOM_OPT_VALUE("--moe-imbalance", &a.imbalance),
      LOOM_OPT_VALUE("--ep-overlap", &a.ep_overlap), {0}};
  loom_cli_parser p = {.command = "plan", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  for (int i = 0; i < p.npos && !prc; i++) /* positional: KEY=VALUE / ~KEY overrides only */
    if (!strchr(p.pos[i], '=') && p.pos[i][0] != '~') {
      fprintf(stderr, "loom plan: unexpected argument '%s' (the model goes after --model)\n",
              p.pos[i]);
      prc = LOOM_CLI_BAD;
    }
  if (!prc && ((gpus && num("--gpus", gpus, &a.gpus)) || (gbs && num("--global-batch", gbs, &a.gbs)) ||
               (seq && num("--seq", seq, &a.seq)) ||
               (finalists && num("--finalists", finalists, &a.finalists)) ||
               (top && num("--top", top, &a.top))))
    prc = LOOM_CLI_BAD;
  if (prc) {
    free(p.pos);
    if (prc == LOOM_CLI_HELP) return usage(stdout), 0;
    return 2;
  }
  if (!a.model || !a.hardware || !a.gpus) {
    fprintf(stderr, "loom plan: --model, --hardware and --gpus are required (see loom plan --help)\n");
    free(p.pos);
    return 2;
  }
  loom_config cfg;
  loom_config_defaults(&cfg);
  int rc = 0;
  if (strstr(a.model, ".yaml") || strstr(a.model, ".yml") || strchr(a.model, '/')) {
    rc = loom_config_load(&cfg, a.model);
  } else {
    char expr[128];
    snprintf(expr, sizeof expr, "model.preset=%s", a.model);
    rc = loom_config_override(&cfg, expr);
  }
  for (int i = 0; i < p.npos && !rc; i++) rc = loom_config_override(&cfg, p.pos[i]);
  free(p.pos);
  if (!rc) rc = loom_config_validate(&cfg);
  if (!rc) rc = run(&cfg, &a);
  if (rc) {
    fprintf(stderr, "loom plan: %s\n", loom_errmsg());
    return 1;
  }
  return 0;
}

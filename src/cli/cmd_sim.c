/* `loom sim`: simulate one training step of a train config (the same YAML and overrides as
 * `loom train`) on a hardware profile: step time, tokens/s, MFU/HFU, bubble, exposed
 * communication, memory per rank, a Chrome trace; or of a user-written schedule file. Exit
 * status: 0, 1 for an invalid config/schedule or a rank out of memory, 2 for bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/core.h"
#include "loom/sim.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: loom sim [CONFIG.yaml] [KEY=VALUE ...] --hardware PROFILE [options]\n"
          "       loom sim --list-hardware\n\n"
          "Simulate one optimizer step of the config's model and parallel layout (parallel.*,\n"
          "training.*) on a cluster described by a hardware profile, replaying the very\n"
          "schedule the trainer runs. Prints step time, tokens/s, MFU and HFU, the pipeline\n"
          "bubble, exposed communication, what bounds the step (compute, a collective, the\n"
          "optimizer, the bubble or memory, with shares) and the memory of every pipeline rank.\n\n"
          "  --hardware NAME|FILE  a100-80gb, h100-sxm (Megatron-LM), h100-sxm-hf (the same\n"
          "                        GPUs under PyTorch eager, HF modules, DTensor TP),\n"
          "                        h100-fsdp2 (PyTorch FSDP2, 500 W), h200,\n"
          "                        this-machine (written by 'loom bench') or a profile file\n"
          "  --nodes N             nodes of the profile (world = N x devices per node); a\n"
          "                        config with parallel.dp=1 fills the world with dp\n"
          "  --gpus N              ranks instead of whole nodes\n"
          "  --schedule FILE       run a user-written schedule (text form, docs/SCHEDULES.md;\n"
          "                        default: parallel.schedule_file); its pp, vpp and\n"
          "                        micro-batches replace the config's\n"
          "  --recompute MODE      none | selective | full (default: from\n"
          "                        training.activation_checkpointing)\n"
          "  --dtype DT            fp32 | bf16 | fp16 (default: training.dtype)\n"
          "  --attention KERNEL    flash | unfused | loom (default: the profile's)\n"
          "  --dropout             the recipe uses dropout (masks and kernels, Megatron GPT)\n"
          "  --fp8                 the layers' GEMMs in FP8 with per-tensor current scaling\n"
          "                        (Transformer Engine; the activations stay bf16; GPU profiles)\n"
          "  --moe-imbalance F     MoE: tokens routed to the busiest rank's experts over the\n"
          "                        balanced share (default 1: balanced, as published benchmarks\n"
          "                        force it); stretches its expert GEMMs and all-to-alls\n"
          "  --ep-overlap on|off   MoE: dispatch/combine all-to-alls overlapped with another\n"
          "                        micro-batch's compute (default: the profile's\n"
          "                        runtime.ep_comm_overlap); experts: parallel.ep, parallel.etp\n"
          "  --vision MODE         vision-language models: the encoder's strategy over the tp\n"
          "                        ranks: replicate (default) | tp | sp\n"
          "  --patches N           patches per sample's image (default: from\n"
          "                        data.image_max_pixels, or the LLaVA image size)\n"
          "  --trace FILE          Chrome trace: one process per rank, compute and\n"
          "                        communication rows (per pipeline stage above 64 ranks)\n"
          "  --json FILE           the metrics, memory and bytes sent per stage as JSON\n"
          "  --breakdown           print the cost of every op of one layer\n\n"
          "examples:\n"
          "  loom sim run.yaml --hardware h100-sxm --nodes 16\n"
          "  loom sim model.preset=llama3-8b training.seq_len=8192 parallel.tp=8 --hardware h200 --nodes 4\n"
          "  loom sim run.yaml --hardware this-machine --gpus 2 --schedule my.sched --trace t.json\n");
}

typedef struct {
  const char *hardware, *schedule, *trace, *recompute, *dtype, *attention, *json, *vision;
  const char *imbalance, *ep_overlap;
  int nodes, gpus, patches;
  bool dropout, breakdown, fp8;
} sim_args;

/* --moe-imbalance F, --ep-overlap on|off and --fp8 onto the strategy */
static int moe_options(const sim_args *a, const loom_hw_profile *hw, loom_sim_strategy *st) {
  if (a->imbalance) {
    char *end;
    double f = strtod(a->imbalance, &end);
    if (*end || end == a->imbalance || !(f >= 1) || !(f < 1e6))
      return loom_err("--moe-imbalance must be a number >= 1 (1 = balanced routing; 1.3 = the "
                      "busiest rank's experts get 30%% more tokens), got '%s'", a->imbalance);
    st->moe_imbalance = f;
  }
  if (a->ep_overlap) {
    if (strcmp(a->ep_overlap, "on") && strcmp(a->ep_overlap, "off"))
      return loom_err("--ep-overlap must be on or off, got '%s'", a->ep_overlap);
    st->ep_overlap = !strcmp(a->ep_overlap, "on");
  }
  if (a->fp8) {
    if (hw->engine_loom_cpu)
      return loom_err("--fp8: the profile '%s' runs loom's executor, which has no FP8 GEMMs; "
                      "use a GPU profile (h100-sxm, h200)", hw->name);
    if (st->dtype != LOOM_DT_BF16)
      return loom_err("--fp8 runs the GEMMs of a bf16 run in FP8: set training.dtype=bf16 (or "
                      "--dtype bf16), not %s", loom_hw_dtype_name(st->dtype));
    st->fp8 = true;
  }
  return 0;
}

static int parse_int(const char *opt, const char *v, int *out) {
  char *end;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || *end || x < 1 || x > 10000000) {
    fprintf(stderr, "loom sim: %s needs a positive integer, got '%s'\n", opt, v ? v : "");
    return -1;
  }
  *out = (int)x;
  return 0;
}

static void print_breakdown(const loom_sim_ctx *c) {
  loom_sim_op ops[LOOM_SIM_MAX_OPS];
  int n = loom_sim_layer_ops(c, ops, LOOM_SIM_MAX_OPS);
  static const char *phase[] = {"fwd", "bwd-in", "bwd-w"};
  printf("one %slayer, one micro-batch, one rank:\n  %-28s %-7s %10s %12s %12s\n",
         c->moe_layer ? "MoE " : "", "op", "phase", "time (ms)", "GFLOP", "MB");
  for (int i = 0; i < n; i++)
    printf("  %-28s %-7s %10.4f %12.4f %12.4f%s%s\n", ops[i].name, phase[ops[i].phase],
           ops[i].time * 1e3, ops[i].flops / 1e9, ops[i].bytes / 1e6,
           ops[i].recompute ? "  recompute" : "", ops[i].hidden ? "  overlapped" : "");
  loom_sim_cost k;
  loom_sim_cost_of(ops, n, &k);
  printf("  total: forward %.4f ms, backward-input %.4f ms, backward-weight %.4f ms "
         "(recompute %.4f, communication exposed %.4f, overlapped %.4f)\n\n",
         k.t[0] * 1e3, k.t[1] * 1e3, k.t[2] * 1e3, k.recompute * 1e3,
         (k.comm[0] + k.comm[1] + k.comm[2]) * 1e3, k.comm_hidden * 1e3);
}

static int run(loom_config *cfg, const sim_args *args) {
  sim_args copy = *args, *a = &copy;
  /* a schedule file in the config (parallel.schedule_file), as loom train takes it */
  if (!a->schedule && cfg->parallel.schedule_file[0]) a->schedule = cfg->parallel.schedule_file;
  loom_model_spec spec;
  loom_hw_profile hw;
  if (loom_model_spec_from_config(&spec, &cfg->model) || loom_hw_load(&hw, a->hardware)) return 1;
  if (a->attention) {
    if (!strcmp(a->attention, "flash")) hw.attention = LOOM_ATTN_FLASH;
    else if (!strcmp(a->attention, "unfused")) hw.attention = LOOM_ATTN_UNFUSED;
    else if (!strcmp(a->attention, "loom")) hw.attention = LOOM_ATTN_LOOM;
    else return loom_err("--attention must be flash, unfused or loom, got '%s'", a->attention), 1;
    if (loom_hw_check(&hw)) return 1;
  }
  int world = a->gpus ? a->gpus : a->nodes * hw.devices_per_node;
  loom_schedule sched;
  memset(&sched, 0, sizeof sched);
  if (a->schedule) { /* the file's shape is the strategy's */
    if (loom_sched_load(&sched, a->schedule)) return 1;
    cfg->parallel.pp = sched.pp;
    cfg->parallel.vpp = sched.vpp;
    cfg->training.grad_accum = sched.microbatches;
    cfg->training.global_batch_size = 0;
    if (sched.vpp > 1) snprintf(cfg->parallel.schedule, sizeof cfg->parallel.schedule, "interleaved");
  }
  loom_sim_strategy st;
  int rc = loom_sim_strategy_from_config(&st, cfg, world);
  if (!rc && a->recompute) rc = loom_recompute_parse(a->recompute, &st.recompute);
  if (!rc && a->dtype) rc = loom_hw_dtype_parse(a->dtype, &st.dtype);
  if (a->dropout) st.dropout = true;
  if (!rc) rc = moe_options(a, &hw, &st);
  if (a->patches) st.vision_patches = a->patches;
  if (!rc && a->vision) {
    if (strcmp(a->vision, "replicate") && strcmp(a->vision, "tp") && strcmp(a->vision, "sp"))
      rc = loom_err("--vision must be replicate, tp or sp, got '%s'", a->vision);
    else snprintf(st.vision_mode, sizeof st.vision_mode, "%s", a->vision);
  }
  if (!rc && a->schedule) snprintf(st.schedule, sizeof st.schedule, "%s", sched.name);
  if (!rc) rc = loom_sim_strategy_check(&st, &spec);
  if (!rc && !a->schedule) rc = loom_sim_schedule(&st, NULL, &sched);
  if (rc) {
    loom_sched_free(&sched);
    return 1;
  }
  loom_sim_ctx c;
  loom_sim_ctx_init(&c, &spec, &hw, &st);
  if (a->breakdown) print_breakdown(&c);
  if (a->breakdown && c.moe_layer && loom_model_moe_layers(&spec) < spec.layers) {
    loom_sim_ctx cd = c; /* the model's dense layers */
    cd.moe_layer = false;
    print_breakdown(&cd);
  }
  loom_sim_opts o = {a->trace, loom_sim_world(&st) <= 64, a->nodes};
  loom_sim_result r;
  rc = loom_sim_run(&c, &sched, &o, &r);
  if (a->schedule && rc) loom_err_prefix("%s: ", a->schedule);
  loom_sched_free(&sched);
  if (rc) return 1;
  loom_sim_print(&c, &r);
  if (a->trace) printf("trace written to %s\n", a->trace);
  if (a->json && loom_sim_write_json(&c, &r, a->json)) {
    loom_sim_result_free(&r);
    return 1;
  }
  int oom = r.oom_rank >= 0;
  if (oom) loom_err("%s%s%s", a->schedule ? a->schedule : "", a->schedule ? ": " : "", r.oom_msg);
  loom_sim_result_free(&r);
  return oom;
}

int loom_cmd_sim(int argc, char **argv) {
  sim_args a = {0};
  const char *config_path = NULL, *nodes = NULL, *gpus = NULL, *patches = NULL;
  bool list_hardware = false;
  const loom_cli_opt opts[] = {
      LOOM_OPT_VALUE("--hardware", &a.hardware),   LOOM_OPT_VALUE("--nodes", &nodes),
      LOOM_OPT_VALUE("--gpus", &gpus),             LOOM_OPT_VALUE("--schedule", &a.schedule),
      LOOM_OPT_VALUE("--recompute", &a.recompute), LOOM_OPT_VALUE("--dtype", &a.dtype),
      LOOM_OPT_VALUE("--attention", &a.attention), LOOM_OPT_VALUE("--vision", &a.vision),
      LOOM_OPT_VALUE("--patches", &patches),       LOOM_OPT_VALUE("--trace", &a.trace),
      LOOM_OPT_VALUE("--json", &a.json),           LOOM_OPT_FLAG("--dropout", &a.dropout),
      LOOM_OPT_FLAG("--breakdown", &a.breakdown),  LOOM_OPT_FLAG("--list-hardware", &list_hardware),
      LOOM_OPT_FLAG("--fp8", &a.fp8),              LOOM_OPT_VALUE("--moe-imbalance", &a.imbalance),
      LOOM_OPT_VALUE("--ep-overlap", &a.ep_overlap), {0}};
  loom_cli_parser p = {.command = "sim", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  char **overrides = p.pos; /* compacted in place: KEY=VALUE / ~KEY, in order */
  int noverrides = 0;
  for (int i = 0; i < p.npos && !prc; i++) {
    if (strchr(p.pos[i], '=') || p.pos[i][0] == '~') {
      overrides[noverrides++] = p.pos[i];
    } else if (config_path) {
      fprintf(stderr, "loom sim: two config files given ('%s' and '%s')\n", config_path, p.pos[i]);
      prc = LOOM_CLI_BAD;
    } else {
      config_path = p.pos[i];
    }
  }
  if (!prc && ((nodes && parse_int("--nodes", nodes, &a.nodes)) ||
               (gpus && parse_int("--gpus", gpus, &a.gpus)) ||
               (patches && parse_int("--patches", patches, &a.patches))))
    prc = LOOM_CLI_BAD;
  if (prc || list_hardware) {
    free(overrides);
    if (prc == LOOM_CLI_HELP) usage(stdout);
    if (!prc) loom_hw_list();
    return prc == LOOM_CLI_BAD ? 2 : 0;
  }
  if (!a.hardware) {
    fprintf(stderr, "loom sim: --hardware is required (a100-80gb, h100-sxm, h100-sxm-hf, h200, this-machine "
            "or a file; see loom sim --list-hardware)\n");
    free(overrides);
    return 2;
  }
  if (a.nodes && a.gpus) {
    fprintf(stderr, "loom sim: give --nodes or --gpus, not both\n");
    free(overrides);
    return 2;
  }
  loom_config cfg;
  loom_config_defaults(&cfg);
  int rc = config_path ? loom_config_load(&cfg, config_path) : 0;
  for (int i = 0; i < noverrides && !rc; i++) rc = loom_config_override(&cfg, overrides[i]);
  free(overrides);
  if (!rc) rc = loom_config_validate(&cfg);
  if (!rc) rc = run(&cfg, &a);
  if (rc) {
    fprintf(stderr, "loom sim: %s\n", loom_errmsg());
    return 1;
  }
  return 0;
}

/* `loom ckpt export` and `loom ckpt import`: argument parsing and messages around
 * loom_hf_export / loom_hf_import (rows of the subcommand table in src/cli/cmd_ckpt.c). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/config.h"
#include "loom/core.h"
#include "loom/hf.h"

static void export_usage(FILE *out) {
  fprintf(out,
          "usage: loom ckpt export CKPT_DIR --out OUT_DIR [--dtype f32|bf16]\n"
          "                        [--max-shard-size 5GB] [--force]\n\n"
          "Write a loom checkpoint directory (config.yaml + model.safetensors) as a Hugging Face\n"
          "checkpoint: GPT2LMHeadModel naming for gpt2 models, LlamaForCausalLM (or\n"
          "Qwen2ForCausalLM when model.qkv_bias) naming for llama models, Qwen3ForCausalLM\n"
          "with q/k norms (model.qk_norm), Qwen3MoeForCausalLM (q/k norms and experts),\n"
          "Qwen2MoeForCausalLM (experts and a shared expert) or MixtralForCausalLM (experts\n"
          "in every layer) for Mixture-of-Experts models (per-expert tensors),\n"
          "Qwen2_5_VLForConditionalGeneration for Qwen2.5-VL, and loom_llava (CLIP/LLaVA names,\n"
          "loom's own architecture) for LLaVA-style models; vocabulary padding rows dropped;\n"
          "config.json with the HF architecture fields. Every tensor is written, or the export\n"
          "is refused naming what has no place. Output larger than the\n"
          "shard size is split into model-0000K-of-0000N.safetensors with\n"
          "model.safetensors.index.json.\n\n"
          "options:\n"
          "  --out DIR              output directory (must not exist unless --force)\n"
          "  --dtype f32|bf16       tensor dtype (default: bf16 when the checkpoint's parameters\n"
          "                         are bf16, training.param_dtype=bf16, which is exact;\n"
          "                         else f32)\n"
          "  --max-shard-size SIZE  e.g. 5GB (10^9 bytes, the default), 500MB, 2GiB\n"
          "  --force                replace an existing output directory\n"
          "  -h, --help             this text\n");
}

static void import_usage(FILE *out) {
  fprintf(out,
          "usage: loom ckpt import HF_DIR --out CKPT_DIR [--config run.yaml] [--force]\n\n"
          "Convert a Hugging Face checkpoint directory (model.safetensors, or shards listed in\n"
          "model.safetensors.index.json) with GPT-2, Llama/Qwen2, Qwen3, Qwen3-MoE, Qwen2-MoE,\n"
          "Mixtral (per-expert, or transformers v5's fused experts.gate_up_proj/down_proj),\n"
          "Qwen2.5-VL or loom_llava tensor names into a loom\n"
          "weights-only checkpoint: model.safetensors (fp32, loom names, padded vocabulary)\n"
          "and config.yaml. The model comes from HF_DIR/config.json unless --config is given.\n"
          "The result has no optimizer state and cannot be resumed: start a new run from it\n"
          "with checkpoint.init_from=CKPT_DIR (checkpoint.init_from also takes HF_DIR itself).\n\n"
          "options:\n"
          "  --out DIR        output checkpoint directory (must not exist unless --force)\n"
          "  --config FILE    run YAML whose model.* section describes the weights\n"
          "  --force          replace an existing output directory\n"
          "  -h, --help       this text\n");
}

/* The export's default dtype: "bf16" when every module of the checkpoint stores bf16
 * parameters (its config.yaml: training.param_dtype, vision.param_dtype), else "f32". An
 * unreadable config.yaml is left for loom_hf_export to report. */
static const char *checkpoint_param_dtype(const char *dir) {
  loom_config c;
  loom_config_defaults(&c);
  char *path = loom_sprintf("%s/config.yaml", dir);
  int rc = loom_config_load(&c, path);
  free(path);
  if (rc) return "f32";
  bool text = !strcmp(c.training.param_dtype, "bf16");
  bool vision = !c.vision.param_dtype[0] || !strcmp(c.vision.param_dtype, "bf16");
  return text && vision ? "bf16" : "f32";
}

int loom_cmd_ckpt_export(int argc, char **argv) {
  const char *out = NULL, *dtype = NULL, *shard = "5GB";
  loom_hf_export_opts o = {LOOM_DT_F32, 0, false};
  const loom_cli_opt opts[] = {LOOM_OPT_VALUE("--out", &out), LOOM_OPT_VALUE("--dtype", &dtype),
                               LOOM_OPT_VALUE("--max-shard-size", &shard),
                               LOOM_OPT_FLAG("--force", &o.force), {0}};
  loom_cli_parser p = {.command = "ckpt export", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  const char *in = p.npos ? p.pos[0] : NULL;
  if (prc == LOOM_CLI_OK && p.npos > 1) {
    fprintf(stderr, "loom ckpt export: unexpected argument '%s' (one CKPT_DIR)\n\n", p.pos[1]);
    prc = LOOM_CLI_BAD;
  }
  free(p.pos);
  if (prc == LOOM_CLI_HELP) return export_usage(stdout), 0;
  if (prc) return 1;
  if (!in || !out) {
    fprintf(stderr, "loom ckpt export: %s\n\n", !in ? "missing CKPT_DIR" : "missing --out DIR");
    return export_usage(stderr), 1;
  }
  if (!dtype) dtype = checkpoint_param_dtype(in);
  if (!strcmp(dtype, "bf16")) o.dtype = LOOM_DT_BF16;
  else if (strcmp(dtype, "f32")) {
    fprintf(stderr, "loom ckpt export: --dtype must be f32 or bf16, not '%s'\n", dtype);
    return 1;
  }
  if (loom_hf_parse_size(shard, &o.max_shard_bytes) || loom_hf_export(in, out, &o)) {
    fprintf(stderr, "loom ckpt export: %s\n", loom_errmsg());
    return 1;
  }
  printf("exported %s -> %s (%s)\n", in, out, dtype);
  return 0;
}

int loom_cmd_ckpt_import(int argc, char **argv) {
  const char *out = NULL;
  loom_hf_import_opts o = {NULL, false};
  const loom_cli_opt opts[] = {LOOM_OPT_VALUE("--out", &out),
                               LOOM_OPT_VALUE("--config", &o.config_path),
                               LOOM_OPT_FLAG("--force", &o.force), {0}};
  loom_cli_parser p = {.command = "ckpt import", .opts = opts};
  int prc = loom_cli_parse(&p, argc, argv, 1);
  const char *in = p.npos ? p.pos[0] : NULL;
  if (prc == LOOM_CLI_OK && p.npos > 1) {
    fprintf(stderr, "loom ckpt import: unexpected argument '%s' (one HF_DIR)\n\n", p.pos[1]);
    prc = LOOM_CLI_BAD;
  }
  free(p.pos);
  if (prc == LOOM_CLI_HELP) return import_usage(stdout), 0;
  if (prc) return 1;
  if (!in || !out) {
    fprintf(stderr, "loom ckpt import: %s\n\n", !in ? "missing HF_DIR" : "missing --out DIR");
    return import_usage(stderr), 1;
  }
  if (loom_hf_import(in, out, &o)) {
    fprintf(stderr, "loom ckpt import: %s\n", loom_errmsg());
    return 1;
  }
  printf("imported %s -> %s (weights only: start a run with checkpoint.init_from=%s; it "
         "cannot be resumed)\n", in, out, out);
  return 0;
}

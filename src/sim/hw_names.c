/* Names of the hardware-profile enums as they appear in YAML files and reports, and what each
 * training recipe keeps and runs. */
#include <string.h>

#include "loom/core.h"
#include "loom/hw.h"

static const char *const dtype_names[LOOM_DT_COUNT] = {"fp32", "bf16", "fp16", "fp8"};
static const char *const recipe_names[LOOM_RECIPE_COUNT] = {"megatron", "fsdp2", "hf-eager",
                                                            "loom"};
static const char *const vop_names[LOOM_VOP_COUNT] = {
    "layernorm_fwd", "layernorm_bwd", "rmsnorm_fwd", "rmsnorm_bwd", "gelu_fwd",
    "gelu_bwd",      "swiglu_fwd",    "swiglu_bwd",  "rope",        "softmax_fwd",
    "softmax_bwd",   "dropout",       "xent_fwd",    "xent_bwd",    "adamw",
    "add",           "copy",          "round_bf16",  "sumsq",       "page_fault"};
static const char *const attn_names[] = {"flash", "unfused", "loom"};
static const char *const unit_names[LOOM_UNIT_COUNT] = {"fma", "avx512_bf16", "amx"};
static const char *const unit_instructions[LOOM_UNIT_COUNT] = {
    "FMA vfmadd231ps", "AVX512_BF16 vdpbf16ps", "AMX tdpbf16ps"};

const char *loom_hw_dtype_name(loom_hw_dtype d) { return d < LOOM_DT_COUNT ? dtype_names[d] : "?"; }

int loom_hw_dtype_parse(const char *s, loom_hw_dtype *out) {
  for (int i = 0; i < LOOM_DT_COUNT; i++)
    if (!strcmp(s, dtype_names[i])) return *out = (loom_hw_dtype)i, 0;
  return loom_err("unknown dtype '%s' (expected fp32, bf16, fp16 or fp8)", s);
}

const char *loom_hw_unit_name(loom_hw_unit u) { return u < LOOM_UNIT_COUNT ? unit_names[u] : "?"; }

const char *loom_hw_unit_instruction(loom_hw_unit u) {
  return u < LOOM_UNIT_COUNT ? unit_instructions[u] : "?";
}

int loom_hw_unit_parse(const char *s, loom_hw_unit *out) {
  for (int i = 0; i < LOOM_UNIT_COUNT; i++)
    if (!strcmp(s, unit_names[i])) return *out = (loom_hw_unit)i, 0;
  return loom_err("unknown unit '%s' (expected amx, avx512_bf16 or fma)", s);
}

const char *loom_vop_name(loom_vop v) { return v < LOOM_VOP_COUNT ? vop_names[v] : "?"; }

const char *loom_attn_kernel_name(loom_attn_kernel k) {
  return k <= LOOM_ATTN_LOOM ? attn_names[k] : "?";
}

const char *loom_hw_recipe_name(loom_hw_recipe r) {
  return r < LOOM_RECIPE_COUNT ? recipe_names[r] : "?";
}

const char *loom_hw_recipe_text(loom_hw_recipe r) {
  switch (r) {
  case LOOM_RECIPE_MEGATRON:
    return "Megatron-LM: 16-bit weights, fp32 main gradients (reduced in fp32), fp32 master "
           "weights and Adam moments sharded by the distributed optimizer (parallel.zero=1)";
  case LOOM_RECIPE_FSDP2:
    return "PyTorch FSDP2: fp32 parameters sharded over dp, bf16 copies all-gathered per layer "
           "(one layer prefetched), fp32 gradients reduce-scattered, eager kernels";
  case LOOM_RECIPE_HF_EAGER:
    return "Hugging Face modules under PyTorch eager: the precision policy of the config, "
           "DTensor tensor parallelism, host dispatch per op";
  case LOOM_RECIPE_LOOM: return "loom's executor: fp32 parameters and gradients, MPI collectives";
  default: return "?";
  }
}

/* Names of the hardware-profile enums as they appear in YAML files and reports. */
#include <string.h>

#include "loom/core.h"
#include "loom/hw.h"

static const char *const dtype_names[LOOM_DT_COUNT] = {"fp32", "bf16", "fp16"};
static const char *const vop_names[LOOM_VOP_COUNT] = {
    "layernorm_fwd", "layernorm_bwd", "rmsnorm_fwd", "rmsnorm_bwd", "gelu_fwd",
    "gelu_bwd",      "swiglu_fwd",    "swiglu_bwd",  "rope",        "softmax_fwd",
    "softmax_bwd",   "dropout",       "xent_fwd",    "xent_bwd",    "adamw",
    "add",           "copy",          "round_bf16",  "sumsq",       "page_fault"};
static const char *const attn_names[] = {"flash", "unfused", "loom"};

const char *loom_hw_dtype_name(loom_hw_dtype d) { return d < LOOM_DT_COUNT ? dtype_names[d] : "?"; }

int loom_hw_dtype_parse(const char *s, loom_hw_dtype *out) {
  for (int i = 0; i < LOOM_DT_COUNT; i++)
    if (!strcmp(s, dtype_names[i])) return *out = (loom_hw_dtype)i, 0;
  return loom_err("unknown dtype '%s' (expected fp32, bf16 or fp16)", s);
}

const char *loom_vop_name(loom_vop v) { return v < LOOM_VOP_COUNT ? vop_names[v] : "?"; }

const char *loom_attn_kernel_name(loom_attn_kernel k) {
  return k <= LOOM_ATTN_LOOM ? attn_names[k] : "?";
}

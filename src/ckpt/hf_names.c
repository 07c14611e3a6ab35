/* Hugging Face names and layouts of loom parameters: the plan (which loom tensors make up
 * each HF tensor, stacked and/or transposed or reshaped) for GPT-2 and Llama/Qwen2/Qwen3 text
 * models, with hf_names_moe.c their Mixture-of-Experts layers (Qwen2-MoE, Qwen3-MoE, Mixtral)
 * and with hf_names_vision.c the vision-language models; the check that a plan
 * covers every parameter; gather (loom -> HF layout) and scatter (HF -> loom); and the HF
 * buffers that are not parameters. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/hf_family.h"
#include "ckpt/hf_plan.h"
#include "loom/core.h"

loom_hf_tensor *hf_plan_add(hf_planner *pl, const char *hf, int nparts, const char *const *loom,
                            bool transpose, bool vocab) {
  if (pl->n == pl->cap) {
    pl->cap = pl->cap ? 2 * pl->cap : 64;
    pl->t = loom_realloc(pl->t, (size_t)pl->cap, sizeof *pl->t);
  }
  loom_hf_tensor *t = &pl->t[pl->n];
  memset(t, 0, sizeof *t);
  LOOM_ASSERT(strlen(hf) < sizeof t->name);
  snprintf(t->name, sizeof t->name, "%s", hf);
  int64_t rows = 0, cols = 0;
  for (int k = 0; k < nparts; k++) {
    const loom_param *p = loom_param_find(pl->lay, loom[k]);
    LOOM_ASSERT(p);
    t->parts[k] = p;
    t->rows[k] = vocab ? pl->spec->vocab_size : p->shape[0];
    rows += t->rows[k];
    cols = p->ndim == 2 ? p->shape[1] : 0;
  }
  t->nparts = nparts;
  t->transpose = transpose;
  t->ndim = cols ? 2 : 1;
  t->shape[0] = transpose ? cols : rows;
  t->shape[1] = cols ? (transpose ? rows : cols) : 0;
  pl->n++;
  return t;
}

loom_hf_tensor *hf_plan_one(hf_planner *pl, const char *hf_fmt, const char *loom_fmt, int i) {
  char hf[128], lm[96];
  snprintf(hf, sizeof hf, hf_fmt, i);
  snprintf(lm, sizeof lm, loom_fmt, i);
  return hf_plan_add(pl, hf, 1, (const char *const[]){lm}, false, false);
}

void hf_plan_reshape(loom_hf_tensor *t, int ndim, const int64_t *dims) {
  size_t n = 1;
  for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
  LOOM_ASSERT(!t->transpose && ndim <= LOOM_HF_MAX_DIMS && n == loom_hf_numel(t));
  t->ndim = ndim;
  memcpy(t->shape, dims, (size_t)ndim * sizeof *dims);
}

/* A tensor of layer l: loom "layers.<l>.<suffix>...", HF fmt with %d = l. */
static void layer_tensor(hf_planner *pl, const char *hf_fmt, int l, int nparts,
                         const char *const *suffix, bool transpose) {
  char hf[128], names[3][64];
  const char *loom[3];
  snprintf(hf, sizeof hf, hf_fmt, l);
  for (int k = 0; k < nparts; k++) {
    snprintf(names[k], sizeof names[k], "layers.%d.%s", l, suffix[k]);
    loom[k] = names[k];
  }
  hf_plan_add(pl, hf, nparts, loom, transpose, false);
}

#define LAYER1(pl, hf, l, loom, tr) layer_tensor(pl, hf, l, 1, (const char *const[]){loom}, tr)
#define ONE(pl, hf, loom, vocab) hf_plan_add(pl, hf, 1, (const char *const[]){loom}, false, vocab)

static int plan_gpt2(hf_planner *pl) {
  const loom_model_spec *s = pl->spec;
  if (s->kv_heads != s->heads)
    return loom_err("HF GPT-2 naming has no grouped-query attention, but this model has "
                    "kv_heads %d != heads %d; export it as a llama-family model instead",
                    s->kv_heads, s->heads);
  if (!s->qkv_bias)
    return loom_err("HF GPT-2 always has attention biases (h.i.attn.c_attn.bias) but this model "
                    "has model.qkv_bias=false, which GPT2LMHeadModel cannot express");
  ONE(pl, "wte.weight", "embed.weight", true);
  ONE(pl, "wpe.weight", "pos_embed.weight", false);
  static const char *const qkv_w[] = {"attn.q.weight", "attn.k.weight", "attn.v.weight"};
  static const char *const qkv_b[] = {"attn.q.bias", "attn.k.bias", "attn.v.bias"};
  for (int l = 0; l < s->layers; l++) {
    LAYER1(pl, "h.%d.ln_1.weight", l, "attn_norm.weight", false);
    LAYER1(pl, "h.%d.ln_1.bias", l, "attn_norm.bias", false);
    layer_tensor(pl, "h.%d.attn.c_attn.weight", l, 3, qkv_w, true);
    layer_tensor(pl, "h.%d.attn.c_attn.bias", l, 3, qkv_b, false);
    LAYER1(pl, "h.%d.attn.c_proj.weight", l, "attn.o.weight", true);
    LAYER1(pl, "h.%d.attn.c_proj.bias", l, "attn.o.bias", false);
    LAYER1(pl, "h.%d.ln_2.weight", l, "mlp_norm.weight", false);
    LAYER1(pl, "h.%d.ln_2.bias", l, "mlp_norm.bias", false);
    LAYER1(pl, "h.%d.mlp.c_fc.weight", l, "mlp.up.weight", true);
    LAYER1(pl, "h.%d.mlp.c_fc.bias", l, "mlp.up.bias", false);
    LAYER1(pl, "h.%d.mlp.c_proj.weight", l, "mlp.down.weight", true);
    LAYER1(pl, "h.%d.mlp.c_proj.bias", l, "mlp.down.bias", false);
  }
  ONE(pl, "ln_f.weight", "final_norm.weight", false);
  ONE(pl, "ln_f.bias", "final_norm.bias", false);
  if (!s->tied_embeddings) ONE(pl, "lm_head.weight", "lm_head.weight", true);
  return 0;
}

void hf_plan_llama_text(hf_planner *pl, const char *prefix, const char *head_name, bool mixtral) {
  const loom_model_spec *s = pl->spec;
  char hf[160];
#define P(fmt) (snprintf(hf, sizeof hf, "%s" fmt, prefix), hf)
  ONE(pl, P("embed_tokens.weight"), "embed.weight", true);
  static const char *const qkv[] = {"q", "k", "v"};
  for (int l = 0; l < s->layers; l++) {
    LAYER1(pl, P("layers.%%d.input_layernorm.weight"), l, "attn_norm.weight", false);
    for (int k = 0; k < 3; k++) {
      char fmt[160], lm[32];
      snprintf(fmt, sizeof fmt, "%slayers.%%d.self_attn.%s_proj.weight", prefix, qkv[k]);
      snprintf(lm, sizeof lm, "attn.%s.weight", qkv[k]);
      LAYER1(pl, fmt, l, lm, false);
      if (!s->qkv_bias) continue;
      snprintf(fmt, sizeof fmt, "%slayers.%%d.self_attn.%s_proj.bias", prefix, qkv[k]);
      snprintf(lm, sizeof lm, "attn.%s.bias", qkv[k]);
      LAYER1(pl, fmt, l, lm, false);
    }
    if (s->qk_norm) { /* Qwen3: per-head RMSNorm weights (D) */
      LAYER1(pl, P("layers.%%d.self_attn.q_norm.weight"), l, "attn.q_norm.weight", false);
      LAYER1(pl, P("layers.%%d.self_attn.k_norm.weight"), l, "attn.k_norm.weight", false);
    }
    LAYER1(pl, P("layers.%%d.self_attn.o_proj.weight"), l, "attn.o.weight", false);
    LAYER1(pl, P("layers.%%d.post_attention_layernorm.weight"), l, "mlp_norm.weight", false);
    if (loom_model_layer_is_moe(s, l)) {
      hf_plan_moe_layer(pl, prefix, l, mixtral);
      continue;
    }
    LAYER1(pl, P("layers.%%d.mlp.gate_proj.weight"), l, "mlp.gate.weight", false);
    LAYER1(pl, P("layers.%%d.mlp.up_proj.weight"), l, "mlp.up.weight", false);
    LAYER1(pl, P("layers.%%d.mlp.down_proj.weight"), l, "mlp.down.weight", false);
  }
  ONE(pl, P("norm.weight"), "final_norm.weight", false);
#undef P
  if (!s->tied_embeddings) ONE(pl, head_name, "lm_head.weight", true);
}

static int plan_model(hf_planner *pl) {
  const loom_model_spec *s = pl->spec;
  if (s->vision.arch != LOOM_VISION_NONE && (s->qk_norm || s->moe.experts > 0))
    return loom_err("this vision-language model's text decoder has %s, which its Hugging Face "
                    "class (%s) does not compute; loom exports q/k norms and experts for text "
                    "models only", s->moe.experts > 0 ? "Mixture-of-Experts layers"
                                                      : "q/k norms (model.qk_norm)",
                    s->vision.arch == LOOM_VISION_QWEN ? "Qwen2_5_VLForConditionalGeneration"
                                                       : "loom_llava");
  hf_family f;
  switch (s->vision.arch) {
  case LOOM_VISION_QWEN:
    if (s->arch != LOOM_ARCH_LLAMA)
      return loom_err("a Qwen2.5-VL vision encoder on a gpt2 text model has no Hugging Face "
                      "class (Qwen2_5_VLForConditionalGeneration has a Qwen2 text model)");
    hf_plan_llama_text(pl, "model.", "lm_head.weight", false);
    return hf_plan_qwen_vision(pl);
  case LOOM_VISION_LLAVA:
    if (s->arch != LOOM_ARCH_LLAMA)
      return loom_err("a LLaVA-style model with a gpt2 text model cannot be exported: the "
                      "exporter writes its text model with Llama/Qwen2 names");
    hf_plan_llama_text(pl, "language_model.model.", "language_model.lm_head.weight", false);
    return hf_plan_llava_vision(pl);
  default:
    if (hf_family_of(s, &f)) return LOOM_ERR;
    if (f == HF_GPT2) return plan_gpt2(pl);
    hf_plan_llama_text(pl, "model.", "lm_head.weight", f == HF_MIXTRAL);
    return 0;
  }
}

int loom_hf_plan(const loom_model_spec *spec, const loom_param_layout *lay,
                 loom_hf_tensor **out, int *count) {
  hf_planner pl = {spec, lay, NULL, 0, 0};
  *out = NULL;
  *count = 0;
  if (plan_model(&pl) || loom_hf_plan_check(spec, lay, pl.t, pl.n)) {
    free(pl.t);
    return LOOM_ERR;
  }
  *out = pl.t;
  *count = pl.n;
  return 0;
}

/* "a, b, c and 5 more" of the names for which pick(i) holds (up to 6 named). */
static void list_names(char *buf, size_t cap, const loom_param_layout *lay, const int *uses,
                       int want, int *count, size_t *values) {
  size_t k = 0;
  int shown = 0;
  *count = 0;
  *values = 0;
  buf[0] = 0;
  for (int i = 0; i < lay->count; i++) {
    if (want == 0 ? uses[i] != 0 : uses[i] <= 1) continue;
    (*count)++;
    *values += lay->params[i].numel;
    if (shown < 6 && k < cap)
      k += (size_t)snprintf(buf + k, cap - k, "%s%s", shown ? ", " : "", lay->params[i].name),
          shown++;
  }
  if (*count > shown && k < cap) snprintf(buf + k, cap - k, " and %d more", *count - shown);
}

int loom_hf_plan_check(const loom_model_spec *spec, const loom_param_layout *lay,
                       const loom_hf_tensor *t, int n) {
  int *uses = loom_calloc((size_t)lay->count + 1, sizeof *uses);
  size_t hf_values = 0;
  for (int k = 0; k < n; k++) {
    hf_values += loom_hf_numel(&t[k]);
    for (int j = 0; j < t[k].nparts; j++) {
      int i = (int)(t[k].parts[j] - lay->params);
      LOOM_ASSERT(i >= 0 && i < lay->count);
      uses[i]++;
    }
  }
  char names[512];
  int count;
  size_t values, padding = 0;
  int rc = 0;
  list_names(names, sizeof names, lay, uses, 0, &count, &values);
  if (count)
    rc = loom_err("the Hugging Face export has no place for %d tensor%s of this model (%zu "
                  "values): %s; writing the others would silently drop them, so nothing was "
                  "written", count, count > 1 ? "s" : "", values, names);
  if (!rc) {
    list_names(names, sizeof names, lay, uses, 2, &count, &values);
    if (count)
      rc = loom_err("internal error: %d tensor%s would be written twice: %s", count,
                    count > 1 ? "s" : "", names);
  }
  for (int i = 0; i < lay->count; i++) {
    const loom_param *p = &lay->params[i];
    if (!strcmp(p->name, "embed.weight") || !strcmp(p->name, "lm_head.weight"))
      padding += (size_t)(p->shape[0] - spec->vocab_size) * (size_t)p->shape[1];
  }
  size_t loom_values = 0;
  for (int i = 0; i < lay->count; i++) loom_values += lay->params[i].numel;
  if (!rc && hf_values + padding != loom_values)
    rc = loom_err("internal error: the Hugging Face tensors hold %zu values but the model has "
                  "%zu (%zu of them vocabulary padding)", hf_values, loom_values, padding);
  free(uses);
  return rc;
}

size_t loom_hf_numel(const loom_hf_tensor *t) {
  size_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
  return n;
}

/* Columns of the stacked loom matrix (1 for vectors). */
static size_t stacked_cols(const loom_hf_tensor *t) {
  const loom_param *p = t->parts[0];
  return p->ndim == 2 ? (size_t)p->shape[1] : 1;
}

/* Copy (or transpose-copy) between the stacked loom matrix and the HF tensor. to_hf chooses
 * the direction. The stacked matrix has R rows in total; part k covers rows [r0, r0+rows[k]).
 * Transposes go through 32x32 tiles to stay cache friendly on large matrices. A reshaped HF
 * tensor holds the stacked matrix's elements in the same order (a plain copy). */
static void move(const loom_hf_tensor *t, float *params, float *hf, bool to_hf) {
  size_t C = stacked_cols(t), R = 0, r0 = 0;
  for (int k = 0; k < t->nparts; k++) R += (size_t)t->rows[k];
  for (int k = 0; k < t->nparts; k++) {
    float *p = params + t->parts[k]->offset;
    size_t rows = (size_t)t->rows[k];
    if (!t->transpose) {
      float *h = hf + r0 * C;
      if (to_hf) memcpy(h, p, rows * C * sizeof(float));
      else memcpy(p, h, rows * C * sizeof(float));
    } else {
      for (size_t rb = 0; rb < rows; rb += 32)
        for (size_t cb = 0; cb < C; cb += 32)
          for (size_t r = rb; r < rb + 32 && r < rows; r++)
            for (size_t c = cb; c < cb + 32 && c < C; c++) {
              float *h = hf + c * R + r0 + r;
              if (to_hf) *h = p[r * C + c];
              else p[r * C + c] = *h;
            }
    }
    r0 += rows;
  }
}

void loom_hf_gather(const loom_hf_tensor *t, const float *params, float *dst) {
  move(t, (float *)params, dst, true); /* params only read when to_hf */
}

void loom_hf_scatter(const loom_hf_tensor *t, const float *src, float *params) {
  move(t, params, (float *)src, false); /* src only read when !to_hf */
}

/* s == prefix + decimal digits + suffix */
static bool match_layer(const char *s, const char *prefix, const char *suffix) {
  size_t n = strlen(prefix);
  if (strncmp(s, prefix, n)) return false;
  s += n;
  if (!isdigit((unsigned char)*s)) return false;
  while (isdigit((unsigned char)*s)) s++;
  return !strcmp(s, suffix);
}

bool loom_hf_is_ignorable(const char *n) {
  return match_layer(n, "h.", ".attn.bias") || match_layer(n, "h.", ".attn.masked_bias") ||
         match_layer(n, "model.layers.", ".self_attn.rotary_emb.inv_freq") ||
         match_layer(n, "language_model.model.layers.", ".self_attn.rotary_emb.inv_freq");
}

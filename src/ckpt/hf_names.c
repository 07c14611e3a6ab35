/* Hugging Face names and layouts of loom parameters: the plan (which loom tensors make up
 * each HF tensor, stacked and/or transposed), gather (loom -> HF layout) and scatter (HF ->
 * loom), and the HF buffers that are not parameters. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/hf.h"

typedef struct {
  const loom_model_spec *spec;
  const loom_param_layout *lay;
  loom_hf_tensor *t;
  int n, cap;
} planner;

/* Add an HF tensor made of the loom tensors names[0..nparts) ("layers.%d." prefixed when
 * layer >= 0). vocab: keep only the first vocab_size rows. */
static void add(planner *pl, const char *hf_name, int layer, int nparts, const char *const *names,
               bool transpose, bool vocab) {
  if (pl->n == pl->cap) {
    pl->cap = pl->cap ? 2 * pl->cap : 64;
    pl->t = realloc(pl->t, (size_t)pl->cap * sizeof *pl->t);
    LOOM_ASSERT(pl->t);
  }
  loom_hf_tensor *t = &pl->t[pl->n];
  memset(t, 0, sizeof *t);
  if (layer >= 0) snprintf(t->name, sizeof t->name, hf_name, layer);
  else snprintf(t->name, sizeof t->name, "%s", hf_name);
  int64_t rows = 0, cols = 0;
  for (int k = 0; k < nparts; k++) {
    char name[64];
    if (layer >= 0) snprintf(name, sizeof name, "layers.%d.%s", layer, names[k]);
    else snprintf(name, sizeof name, "%s", names[k]);
    const loom_param *p = loom_param_find(pl->lay, name);
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
}

#define ONE(pl, hf, layer, loom, tr, vocab) \
  add(pl, hf, layer, 1, (const char *const[]){loom}, tr, vocab)

static int plan_gpt2(planner *pl) {
  const loom_model_spec *s = pl->spec;
  if (s->kv_heads != s->heads)
    return loom_err("HF GPT-2 naming has no grouped-query attention, but this model has "
                    "kv_heads %d != heads %d; export it as a llama-family model instead",
                    s->kv_heads, s->heads);
  if (!s->qkv_bias)
    return loom_err("HF GPT-2 always has attention biases (h.i.attn.c_attn.bias) but this model "
                    "has model.qkv_bias=false, which GPT2LMHeadModel cannot express");
  ONE(pl, "wte.weight", -1, "embed.weight", false, true);
  ONE(pl, "wpe.weight", -1, "pos_embed.weight", false, false);
  static const char *const qkv_w[] = {"attn.q.weight", "attn.k.weight", "attn.v.weight"};
  static const char *const qkv_b[] = {"attn.q.bias", "attn.k.bias", "attn.v.bias"};
  for (int l = 0; l < s->layers; l++) {
    ONE(pl, "h.%d.ln_1.weight", l, "attn_norm.weight", false, false);
    ONE(pl, "h.%d.ln_1.bias", l, "attn_norm.bias", false, false);
    add(pl, "h.%d.attn.c_attn.weight", l, 3, qkv_w, true, false);
    add(pl, "h.%d.attn.c_attn.bias", l, 3, qkv_b, false, false);
    ONE(pl, "h.%d.attn.c_proj.weight", l, "attn.o.weight", true, false);
    ONE(pl, "h.%d.attn.c_proj.bias", l, "attn.o.bias", false, false);
    ONE(pl, "h.%d.ln_2.weight", l, "mlp_norm.weight", false, false);
    ONE(pl, "h.%d.ln_2.bias", l, "mlp_norm.bias", false, false);
    ONE(pl, "h.%d.mlp.c_fc.weight", l, "mlp.up.weight", true, false);
    ONE(pl, "h.%d.mlp.c_fc.bias", l, "mlp.up.bias", false, false);
    ONE(pl, "h.%d.mlp.c_proj.weight", l, "mlp.down.weight", true, false);
    ONE(pl, "h.%d.mlp.c_proj.bias", l, "mlp.down.bias", false, false);
  }
  ONE(pl, "ln_f.weight", -1, "final_norm.weight", false, false);
  ONE(pl, "ln_f.bias", -1, "final_norm.bias", false, false);
  if (!s->tied_embeddings) ONE(pl, "lm_head.weight", -1, "lm_head.weight", false, true);
  return 0;
}

static void plan_llama(planner *pl) {
  const loom_model_spec *s = pl->spec;
  ONE(pl, "model.embed_tokens.weight", -1, "embed.weight", false, true);
  static const char *const qkv[] = {"q", "k", "v"};
  for (int l = 0; l < s->layers; l++) {
    ONE(pl, "model.layers.%d.input_layernorm.weight", l, "attn_norm.weight", false, false);
    for (int k = 0; k < 3; k++) {
      char hf[96], lm[32];
      snprintf(hf, sizeof hf, "model.layers.%%d.self_attn.%s_proj.weight", qkv[k]);
      snprintf(lm, sizeof lm, "attn.%s.weight", qkv[k]);
      ONE(pl, hf, l, lm, false, false);
      if (!s->qkv_bias) continue;
      snprintf(hf, sizeof hf, "model.layers.%%d.self_attn.%s_proj.bias", qkv[k]);
      snprintf(lm, sizeof lm, "attn.%s.bias", qkv[k]);
      ONE(pl, hf, l, lm, false, false);
    }
    ONE(pl, "model.layers.%d.self_attn.o_proj.weight", l, "attn.o.weight", false, false);
    ONE(pl, "model.layers.%d.post_attention_layernorm.weight", l, "mlp_norm.weight", false,
        false);
    ONE(pl, "model.layers.%d.mlp.gate_proj.weight", l, "mlp.gate.weight", false, false);
    ONE(pl, "model.layers.%d.mlp.up_proj.weight", l, "mlp.up.weight", false, false);
    ONE(pl, "model.layers.%d.mlp.down_proj.weight", l, "mlp.down.weight", false, false);
  }
  ONE(pl, "model.norm.weight", -1, "final_norm.weight", false, false);
  if (!s->tied_embeddings) ONE(pl, "lm_head.weight", -1, "lm_head.weight", false, true);
}

int loom_hf_plan(const loom_model_spec *spec, const loom_param_layout *lay,
                 loom_hf_tensor **out, int *count) {
  planner pl = {spec, lay, NULL, 0, 0};
  *out = NULL;
  *count = 0;
  if (spec->arch == LOOM_ARCH_GPT2) {
    if (plan_gpt2(&pl)) {
      free(pl.t);
      return LOOM_ERR;
    }
  } else {
    plan_llama(&pl);
  }
  *out = pl.t;
  *count = pl.n;
  return 0;
}

size_t loom_hf_numel(const loom_hf_tensor *t) {
  return (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
}

/* Columns of the stacked loom matrix (1 for vectors). */
static size_t stacked_cols(const loom_hf_tensor *t) {
  return t->ndim == 2 ? (size_t)(t->transpose ? t->shape[0] : t->shape[1]) : 1;
}

/* Copy (or transpose-copy) between the stacked loom matrix and the HF tensor. to_hf chooses
 * the direction. The stacked matrix has R rows in total; part k covers rows [r0, r0+rows[k]).
 * Transposes go through 32x32 tiles to stay cache friendly on large matrices. */
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
         match_layer(n, "model.layers.", ".self_attn.rotary_emb.inv_freq");
}

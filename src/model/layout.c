/* Parameter layout: the ordered list of named tensors carved out of one flat float buffer,
 * and closed-form parameter counts. The order here is the order of the flat buffer, of
 * model.safetensors, and of every optimizer-state buffer. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/model.h"

typedef struct {
  loom_param_layout *lay;
  int cap;
} builder;

static void add(builder *b, const char *name, int rows, int cols, bool decay) {
  loom_param_layout *lay = b->lay;
  if (lay->count == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 64;
    lay->params = realloc(lay->params, (size_t)b->cap * sizeof *lay->params);
    LOOM_ASSERT(lay->params);
  }
  loom_param *p = &lay->params[lay->count++];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->ndim = cols > 0 ? 2 : 1;
  p->shape[0] = rows;
  p->shape[1] = cols > 0 ? cols : 0;
  p->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
  p->offset = lay->total;
  p->decay = decay;
  /* keep every tensor 16-float (64-byte) aligned inside the flat buffer */
  lay->total += (p->numel + 15) & ~(size_t)15;
}

static void addf(builder *b, int layer, const char *suffix, int rows, int cols, bool decay) {
  char name[64];
  snprintf(name, sizeof name, "layers.%d.%s", layer, suffix);
  add(b, name, rows, cols, decay);
}

int loom_param_layout_build(loom_param_layout *lay, const loom_model_spec *s) {
  memset(lay, 0, sizeof *lay);
  builder b = {lay, 0};
  bool gpt2 = s->arch == LOOM_ARCH_GPT2;
  int C = s->hidden, QD = s->heads * s->head_dim, KD = s->kv_heads * s->head_dim;
  int I = s->intermediate;
  add(&b, "embed.weight", s->padded_vocab, C, true);
  if (gpt2) add(&b, "pos_embed.weight", s->max_seq, C, true);
  for (int l = 0; l < s->layers; l++) {
    addf(&b, l, "attn_norm.weight", C, 0, false);
    if (gpt2) addf(&b, l, "attn_norm.bias", C, 0, false);
    addf(&b, l, "attn.q.weight", QD, C, true);
    if (s->qkv_bias) addf(&b, l, "attn.q.bias", QD, 0, false);
    addf(&b, l, "attn.k.weight", KD, C, true);
    if (s->qkv_bias) addf(&b, l, "attn.k.bias", KD, 0, false);
    addf(&b, l, "attn.v.weight", KD, C, true);
    if (s->qkv_bias) addf(&b, l, "attn.v.bias", KD, 0, false);
    addf(&b, l, "attn.o.weight", C, QD, true);
    if (gpt2) addf(&b, l, "attn.o.bias", C, 0, false);
    addf(&b, l, "mlp_norm.weight", C, 0, false);
    if (gpt2) addf(&b, l, "mlp_norm.bias", C, 0, false);
    if (!gpt2) addf(&b, l, "mlp.gate.weight", I, C, true);
    addf(&b, l, "mlp.up.weight", I, C, true);
    if (gpt2) addf(&b, l, "mlp.up.bias", I, 0, false);
    addf(&b, l, "mlp.down.weight", C, I, true);
    if (gpt2) addf(&b, l, "mlp.down.bias", C, 0, false);
  }
  add(&b, "final_norm.weight", C, 0, false);
  if (gpt2) add(&b, "final_norm.bias", C, 0, false);
  if (!s->tied_embeddings) add(&b, "lm_head.weight", s->padded_vocab, C, true);
  return 0;
}

void loom_param_layout_free(loom_param_layout *lay) {
  free(lay->params);
  memset(lay, 0, sizeof *lay);
}

const loom_param *loom_param_find(const loom_param_layout *lay, const char *name) {
  for (int i = 0; i < lay->count; i++)
    if (!strcmp(lay->params[i].name, name)) return &lay->params[i];
  return NULL;
}

size_t loom_model_count_params(const loom_model_spec *s, bool include_padding) {
  loom_param_layout lay;
  loom_param_layout_build(&lay, s);
  size_t n = 0;
  for (int i = 0; i < lay.count; i++) n += lay.params[i].numel;
  loom_param_layout_free(&lay);
  if (!include_padding) {
    size_t pad_rows = (size_t)(s->padded_vocab - s->vocab_size);
    n -= pad_rows * (size_t)s->hidden * (s->tied_embeddings ? 1 : 2);
  }
  return n;
}

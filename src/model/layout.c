/* Parameter layout: the ordered list of named tensors carved out of one flat float buffer,
 * for the whole model or for the shard one rank holds (tensor-parallel slices, pipeline
 * chunks), and closed-form parameter counts. The order here is the order of the flat buffer,
 * of model.safetensors, and of every optimizer-state buffer.
 *
 * Tensor parallelism (Megatron): q/k/v, mlp.gate/up and the vocabulary (embed, lm_head) are
 * split by rows (output features); attn.o and mlp.down by columns (input features); norms,
 * the row-parallel biases and positions are replicated.
 *
 * A Mixture-of-Experts layer (loom_model_layer_is_moe) holds, instead of mlp.*, the router
 * moe.router.weight (E, C) (replicated), every routed expert's SwiGLU as tensors of its own
 * (moe.experts.{e}.gate/up.weight (Ie, C), .down.weight (C, Ie); all gates, then all ups,
 * then all downs, so the gates of consecutive experts are one contiguous matrix), split over
 * tp like the dense MLP, and with a shared expert moe.shared.gate/up/down.weight and
 * moe.shared_gate.weight (1, C). With auxiliary-loss-free balancing (bias_update_rate > 0)
 * moe.router.bias (E) follows the router: a state the decoder moves after each step
 * (loom_decoder_moe_end_step), flagged frozen so that the optimizer neither updates it nor
 * counts it in the gradient norm, and saved in checkpoints like every tensor. Qwen3's
 * attn.q_norm.weight and attn.k_norm.weight (D) are replicated.
 *
 * Expert parallelism (shard ep > 1): a rank holds only its routed experts [ep_rank*E/ep,
 * (ep_rank+1)*E/ep) (global expert numbers in the names), and all of them, layer by layer,
 * after every other tensor: the flat buffer is the dense region [0, expert_begin), the same
 * tensors on every data-parallel rank, then the expert region [expert_begin, total), the same
 * experts only on the ranks of one expert-data-parallel group (param flag `expert`). Every ep
 * rank's layout has the same offsets; with ep = 1 the order is the one above.
 * Experts folded on the tensor-parallel ranks (shard experts_over_tp): tp rank r holds experts
 * [r*E/tp, (r+1)*E/tp) whole, in their usual place; they are neither split nor replicated over
 * tp (tp_replicated false), reduced over dp like the tp-split tensors. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/model.h"

typedef struct {
  loom_param_layout *lay;
  int cap;
  const loom_shard *sh;
} builder;

/* grows: global rows x cols; split_dim: -1 (replicated), 0 (rows), 1 (cols) */
static void add(builder *b, const char *name, int rows, int cols, bool decay, int split_dim,
                int local_vocab) {
  loom_param_layout *lay = b->lay;
  if (lay->count == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 64;
    lay->params = loom_realloc(lay->params, (size_t)b->cap, sizeof *lay->params);
  }
  loom_param *p = &lay->params[lay->count++];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  int tp = b->sh->tp, r = b->sh->tp_rank;
  if (b->sh->module == LOOM_MODULE_ALL && !strncmp(name, "vision.", 7))
    split_dim = -1; /* inside the whole model the encoder is replicated */
  p->ndim = cols > 0 ? 2 : 1;
  p->gshape[0] = rows;
  p->gshape[1] = cols > 0 ? cols : 0;
  p->shape[0] = rows;
  p->shape[1] = p->gshape[1];
  p->split_dim = tp > 1 ? split_dim : -1;
  if (p->split_dim >= 0) {
    int n = local_vocab ? local_vocab : p->gshape[split_dim] / tp;
    p->shape[split_dim] = n;
    p->split_start = r * n;
    if (local_vocab) p->gshape[0] = local_vocab * tp;
  }
  p->tp_replicated = split_dim < 0;
  p->seq_partial = split_dim < 0 && strncmp(name, "vision.", 7) != 0;
  p->numel = (size_t)p->shape[0] * (size_t)(cols > 0 ? p->shape[1] : 1);
  p->offset = lay->total;
  p->decay = decay;
  /* keep every tensor 16-float (64-byte) aligned inside the flat buffer */
  lay->total += (p->numel + 15) & ~(size_t)15;
}

static bool ep_sliced(const builder *b) { return b->sh->ep > 1; }

/* The routed experts of layer l this rank holds: all gates, then all ups, then all downs. */
static void add_experts(builder *b, const loom_model_spec *s, int l) {
  const loom_moe_spec *m = &s->moe;
  int C = s->hidden, Ie = m->intermediate, El = m->experts, e0 = 0;
  bool over_tp = b->sh->experts_over_tp && b->sh->tp > 1;
  if (ep_sliced(b)) El = m->experts / b->sh->ep, e0 = b->sh->ep_rank * El;
  if (over_tp) El = m->experts / b->sh->tp, e0 = b->sh->tp_rank * El;
  static const char *const part[3] = {"gate", "up", "down"};
  char n[64];
  for (int p = 0; p < 3; p++)
    for (int e = e0; e < e0 + El; e++) {
      snprintf(n, sizeof n, "layers.%d.moe.experts.%d.%s.weight", l, e, part[p]);
      if (p < 2) add(b, n, Ie, C, true, over_tp ? -1 : 0, 0);
      else add(b, n, C, Ie, true, over_tp ? -1 : 1, 0);
      loom_param *t = &b->lay->params[b->lay->count - 1];
      t->expert = ep_sliced(b);
      if (over_tp) t->tp_replicated = t->seq_partial = false; /* this tp rank's own experts */
    }
}

static void add_moe(builder *b, const loom_model_spec *s, int l) {
  const loom_moe_spec *m = &s->moe;
  int C = s->hidden, Is = m->shared_intermediate;
  char n[64];
  snprintf(n, sizeof n, "layers.%d.moe.router.weight", l);
  add(b, n, m->experts, C, true, -1, 0);
  if (m->bias_update_rate > 0) { /* the balancing bias: set by the decoder, not by AdamW */
    snprintf(n, sizeof n, "layers.%d.moe.router.bias", l);
    add(b, n, m->experts, 0, false, -1, 0);
    b->lay->params[b->lay->count - 1].frozen = true;
  }
  if (!ep_sliced(b)) add_experts(b, s, l); /* else after every other tensor */
  static const char *const part[3] = {"gate", "up", "down"};
  if (Is > 0) {
    for (int p = 0; p < 3; p++) {
      snprintf(n, sizeof n, "layers.%d.moe.shared.%s.weight", l, part[p]);
      if (p < 2) add(b, n, Is, C, true, 0, 0);
      else add(b, n, C, Is, true, 1, 0);
    }
    snprintf(n, sizeof n, "layers.%d.moe.shared_gate.weight", l);
    add(b, n, 1, C, true, -1, 0);
  }
}

static void add_layer(builder *b, const loom_model_spec *s, int l) {
  bool gpt2 = s->arch == LOOM_ARCH_GPT2;
  int C = s->hidden, QD = s->heads * s->head_dim, KD = s->kv_heads * s->head_dim;
  int I = s->intermediate;
  char n[64];
#define L(suffix, rows, cols, decay, split)                  \
  do {                                                       \
    snprintf(n, sizeof n, "layers.%d.%s", l, suffix);        \
    add(b, n, rows, cols, decay, split, 0);                  \
  } while (0)
  L("attn_norm.weight", C, 0, false, -1);
  if (gpt2) L("attn_norm.bias", C, 0, false, -1);
  L("attn.q.weight", QD, C, true, 0);
  if (s->qkv_bias) L("attn.q.bias", QD, 0, false, 0);
  L("attn.k.weight", KD, C, true, 0);
  if (s->qkv_bias) L("attn.k.bias", KD, 0, false, 0);
  L("attn.v.weight", KD, C, true, 0);
  if (s->qkv_bias) L("attn.v.bias", KD, 0, false, 0);
  if (s->qk_norm) {
    L("attn.q_norm.weight", s->head_dim, 0, false, -1);
    L("attn.k_norm.weight", s->head_dim, 0, false, -1);
  }
  L("attn.o.weight", C, QD, true, 1);
  if (gpt2) L("attn.o.bias", C, 0, false, -1);
  L("mlp_norm.weight", C, 0, false, -1);
  if (gpt2) L("mlp_norm.bias", C, 0, false, -1);
  if (loom_model_layer_is_moe(s, l)) {
    add_moe(b, s, l);
    return;
  }
  if (!gpt2) L("mlp.gate.weight", I, C, true, 0);
  L("mlp.up.weight", I, C, true, 0);
  if (gpt2) L("mlp.up.bias", I, 0, false, 0);
  L("mlp.down.weight", C, I, true, 1);
  if (gpt2) L("mlp.down.bias", C, 0, false, -1);
#undef L
}

/* The vision encoder's tensors. In the vision module (shard module LOOM_MODULE_VISION) they
 * are split over the encoder's own tensor-parallel ranks as Megatron splits a ViT: q/k/v,
 * mlp.gate/up and merger.fc1 by rows, attn.o, mlp.down and merger.fc2 by columns; norms,
 * row-parallel biases, the patch embedding and positions replicated. Inside the whole model
 * (LOOM_MODULE_ALL) they are replicated. */
static void add_vision(builder *b, const loom_model_spec *s) {
  const loom_vision_spec *v = &s->vision;
  int Cv = v->hidden, I = v->intermediate, C = s->hidden;
  bool qwen = v->arch == LOOM_VISION_QWEN;
  char n[96];
#define VS(fmt, i, rows, cols, decay, split)         \
  do {                                               \
    snprintf(n, sizeof n, fmt, i);                   \
    add(b, n, rows, cols, decay, split, 0);          \
  } while (0)
#define V(fmt, i, rows, cols, decay) VS(fmt, i, rows, cols, decay, -1)
#define R(fmt, i, rows, cols, decay) VS(fmt, i, rows, cols, decay, 0) /* column-parallel */
#define C1(fmt, i, rows, cols, decay) VS(fmt, i, rows, cols, decay, 1) /* row-parallel */
  V("vision.patch_embed.weight%.0d", 0, Cv, loom_vision_patch_values(v), true);
  if (!qwen) {
    V("vision.patch_embed.bias%.0d", 0, Cv, 0, false);
    int side = v->image_size / v->patch;
    V("vision.pos_embed.weight%.0d", 0, side * side, Cv, true);
  }
  for (int i = 0; i < v->depth; i++) {
    V("vision.blocks.%d.attn_norm.weight", i, Cv, 0, false);
    if (!qwen) V("vision.blocks.%d.attn_norm.bias", i, Cv, 0, false);
    R("vision.blocks.%d.attn.q.weight", i, Cv, Cv, true);
    R("vision.blocks.%d.attn.q.bias", i, Cv, 0, false);
    R("vision.blocks.%d.attn.k.weight", i, Cv, Cv, true);
    R("vision.blocks.%d.attn.k.bias", i, Cv, 0, false);
    R("vision.blocks.%d.attn.v.weight", i, Cv, Cv, true);
    R("vision.blocks.%d.attn.v.bias", i, Cv, 0, false);
    C1("vision.blocks.%d.attn.o.weight", i, Cv, Cv, true);
    V("vision.blocks.%d.attn.o.bias", i, Cv, 0, false);
    V("vision.blocks.%d.mlp_norm.weight", i, Cv, 0, false);
    if (!qwen) V("vision.blocks.%d.mlp_norm.bias", i, Cv, 0, false);
    if (qwen) {
      R("vision.blocks.%d.mlp.gate.weight", i, I, Cv, true);
      R("vision.blocks.%d.mlp.gate.bias", i, I, 0, false);
    }
    R("vision.blocks.%d.mlp.up.weight", i, I, Cv, true);
    R("vision.blocks.%d.mlp.up.bias", i, I, 0, false);
    C1("vision.blocks.%d.mlp.down.weight", i, Cv, I, true);
    V("vision.blocks.%d.mlp.down.bias", i, Cv, 0, false);
  }
  int in = Cv * v->merge * v->merge;
  if (qwen) {
    V("vision.merger.norm.weight%.0d", 0, Cv, 0, false);
    R("vision.merger.fc1.weight%.0d", 0, in, in, true);
    R("vision.merger.fc1.bias%.0d", 0, in, 0, false);
    C1("vision.merger.fc2.weight%.0d", 0, C, in, true);
  } else {
    V("vision.post_norm.weight%.0d", 0, Cv, 0, false);
    V("vision.post_norm.bias%.0d", 0, Cv, 0, false);
    R("vision.merger.fc1.weight%.0d", 0, C, in, true);
    R("vision.merger.fc1.bias%.0d", 0, C, 0, false);
    C1("vision.merger.fc2.weight%.0d", 0, C, C, true);
  }
  V("vision.merger.fc2.bias%.0d", 0, C, 0, false);
#undef V
#undef R
#undef C1
#undef VS
}

int loom_vision_patch_values(const loom_vision_spec *v) {
  return 3 * (v->temporal > 0 ? v->temporal : 1) * v->patch * v->patch;
}

void loom_shard_full(loom_shard *sh, const loom_model_spec *spec) {
  memset(sh, 0, sizeof *sh);
  sh->tp = sh->sp = sh->cp = 1;
  sh->n_chunks = 1;
  sh->chunk_first[0] = 0;
  sh->chunk_last[0] = spec->layers;
  sh->chunk_embed[0] = sh->chunk_head[0] = true;
}

int loom_shard_vocab_local(const loom_shard *sh, const loom_model_spec *spec) {
  return (spec->padded_vocab + sh->tp - 1) / sh->tp;
}

int loom_param_layout_build_shard(loom_param_layout *lay, const loom_model_spec *s,
                                  const loom_shard *sh) {
  memset(lay, 0, sizeof *lay);
  builder b = {lay, 0, sh};
  bool gpt2 = s->arch == LOOM_ARCH_GPT2;
  if (sh->module == LOOM_MODULE_VISION) {
    if (s->vision.arch != LOOM_VISION_NONE) add_vision(&b, s);
    lay->expert_begin = lay->total;
    return 0;
  }
  bool embed = false, head = false;
  for (int c = 0; c < sh->n_chunks; c++) embed |= sh->chunk_embed[c], head |= sh->chunk_head[c];
  int C = s->hidden, vloc = loom_shard_vocab_local(sh, s);
  if (embed || (head && s->tied_embeddings))
    add(&b, "embed.weight", s->padded_vocab, C, true, 0, sh->tp > 1 ? vloc : 0);
  if (embed && gpt2) add(&b, "pos_embed.weight", s->max_seq, C, true, -1, 0);
  if (embed && s->vision.arch != LOOM_VISION_NONE && sh->module == LOOM_MODULE_ALL)
    add_vision(&b, s);
  for (int c = 0; c < sh->n_chunks; c++)
    for (int l = sh->chunk_first[c]; l < sh->chunk_last[c]; l++) add_layer(&b, s, l);
  if (head) {
    add(&b, "final_norm.weight", C, 0, false, -1, 0);
    if (gpt2) add(&b, "final_norm.bias", C, 0, false, -1, 0);
    if (!s->tied_embeddings)
      add(&b, "lm_head.weight", s->padded_vocab, C, true, 0, sh->tp > 1 ? vloc : 0);
  }
  lay->expert_begin = lay->total;
  if (ep_sliced(&b)) /* the expert region */
    for (int c = 0; c < sh->n_chunks; c++)
      for (int l = sh->chunk_first[c]; l < sh->chunk_last[c]; l++)
        if (loom_model_layer_is_moe(s, l)) add_experts(&b, s, l);
  return 0;
}

int loom_param_layout_build(loom_param_layout *lay, const loom_model_spec *spec) {
  loom_shard sh;
  loom_shard_full(&sh, spec);
  return loom_param_layout_build_shard(lay, spec, &sh);
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

/* The cost model's totals: the derived per-rank shapes, sums of an op list into compute-stream
 * time per phase (exposed communication included, overlapped communication apart), the
 * closed-form parameter count of a rank, and the optimizer step. */
#include <math.h>
#include <string.h>

#include "sim/sim_internal.h"

void loom_sim_ctx_init(loom_sim_ctx *c, const loom_model_spec *spec, const loom_hw_profile *hw,
                       const loom_sim_strategy *st) {
  c->spec = spec;
  c->hw = hw;
  c->st = st;
  int tp = st->tp > 0 ? st->tp : 1, sp = st->sp > 0 ? st->sp : 1;
  c->N = (double)st->micro_batch * st->seq / sp / sim_cp(st); /* cp: T/cp tokens per rank */
  c->Nr = st->seq_par && tp > 1 ? c->N / tp : c->N;
  c->lh = (double)spec->heads / tp;
  c->lkv = (double)spec->kv_heads / tp;
  c->li = (double)spec->intermediate / tp;
  c->vloc = tp > 1 ? (double)((spec->padded_vocab + tp - 1) / tp) : spec->padded_vocab;
  c->loom_cpu = hw->engine_loom_cpu;
  c->act_bytes = c->loom_cpu || st->dtype == LOOM_DT_FP32 ? 4 : 2;
  c->moe_layer = loom_model_moe_layers(spec) > 0;
}

void loom_sim_cost_of(const loom_sim_op *ops, int n, loom_sim_cost *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < n; i++) {
    const loom_sim_op *o = &ops[i];
    if (o->type == LOOM_OP_COMM) {
      out->coll_bytes[o->phase][o->coll] += loom_hw_ring_bytes(o->coll, o->bytes, o->size);
      if (o->hidden) {
        out->comm_hidden += o->time;
      } else {
        out->t[o->phase] += o->time;
        out->comm[o->phase] += o->time;
        out->comm_alone[o->phase] += o->time / (o->sharing > 1 ? o->sharing : 1);
      }
    } else {
      out->t[o->phase] += o->time;
      out->flops += o->flops;
      if (o->recompute) out->flops_recompute += o->flops;
    }
    if (o->recompute && !o->hidden) out->recompute += o->time;
    if (!o->hidden && o->stretch > 1) out->unbalanced[o->phase] += o->time * (1 - 1 / o->stretch);
  }
  /* host dispatch: each module's issue queue replayed op by op (loom_sim_module_time); its
   * time beyond the device's is the GPU waiting for the CPU, counted in the phase of the
   * module's first op. An op outside modules (module 0) keeps max(device, host): it stands in
   * a stream of other ops, not after a synchronisation. A chained module (one of identical
   * copies back to back, no synchronisation between them) costs per copy the queue's steady
   * state, max(device, host): k copies replayed take E + (k-1) max(device, host), E one copy's
   * replay from an empty queue (whichever of the two is longer, the queue's lag repeats each
   * copy), so E - max(device, host) goes to startup, once per run of copies. */
  for (int i = 0; i < n;) {
    int j = i;
    do j++;
    while (j < n && ops[i].module != 0 && ops[j].module == ops[i].module);
    double dev, host, t = loom_sim_module_time(ops + i, j - i, &dev, &host);
    if (ops[i].module == 0 || ops[i].chained) { /* max(device, host); a chain's first copy's
                                                   extra wait once, as start-up */
      double steady = fmax(dev, host);
      if (ops[i].module != 0) out->startup[ops[i].phase] += t - steady;
      t = steady;
    }
    if (t > dev) {
      out->t[ops[i].phase] += t - dev;
      out->host_wait += t - dev;
    }
    i = j;
  }
}

double loom_sim_module_time(const loom_sim_op *ops, int n, double *device, double *host) {
  double dev = 0, hst = 0;
  int last = -1;
  for (int i = 0; i < n; i++) {
    if (!(ops[i].type == LOOM_OP_COMM && ops[i].hidden)) dev += ops[i].time;
    hst += ops[i].host;
    if (ops[i].sync) last = i;
  }
  if (device) *device = dev;
  if (host) *host = hst;
  if (hst <= 0) return dev; /* nothing to issue: the device's time (no host dispatch modelled) */
  /* the period starts after the last synchronisation (the queue is empty there) */
  double cpu = 0, gpu = 0;
  for (int k = 0; k < n; k++) {
    const loom_sim_op *o = &ops[(last + 1 + k) % n];
    cpu += o->host;                                           /* issued */
    double d = o->type == LOOM_OP_COMM && o->hidden ? 0 : o->time;
    gpu = fmax(cpu, gpu) + d;                                 /* started, then run */
    if (o->sync) cpu = gpu = fmax(cpu, gpu);                  /* the host waits */
  }
  return fmax(cpu, gpu); /* a synchronisation follows the module */
}

void loom_sim_layer_cost(const loom_sim_ctx *c, loom_sim_cost *out) {
  loom_sim_op ops[LOOM_SIM_MAX_OPS];
  loom_sim_cost_of(ops, loom_sim_layer_ops(c, ops, LOOM_SIM_MAX_OPS), out);
}

void loom_sim_embed_cost(const loom_sim_ctx *c, loom_sim_cost *out) {
  loom_sim_op ops[LOOM_SIM_MAX_OPS];
  loom_sim_cost_of(ops, loom_sim_embed_ops(c, ops, LOOM_SIM_MAX_OPS), out);
}

void loom_sim_head_cost(const loom_sim_ctx *c, loom_sim_cost *out) {
  loom_sim_op ops[LOOM_SIM_MAX_OPS];
  loom_sim_cost_of(ops, loom_sim_head_ops(c, ops, LOOM_SIM_MAX_OPS), out);
}

/* one layer without its MLP: norms, q/k norms (replicated), attention (split by tp) */
static double attn_params(const loom_model_spec *s, int tp) {
  double C = s->hidden, QD = (double)s->heads * s->head_dim, KD = (double)s->kv_heads * s->head_dim;
  bool gpt2 = s->arch == LOOM_ARCH_GPT2;
  double per = (gpt2 ? 4 : 2) * C;                 /* norms (replicated) */
  if (s->qk_norm) per += 2.0 * s->head_dim;        /* q_norm, k_norm */
  per += C * (QD + 2 * KD) / tp;                   /* q, k, v */
  if (s->qkv_bias) per += (QD + 2 * KD) / tp;
  per += QD * C / tp + (gpt2 ? C : 0);             /* o (+ replicated bias) */
  return per;
}

static double dense_mlp_params(const loom_model_spec *s, int tp) {
  double C = s->hidden, I = s->intermediate;
  return s->arch == LOOM_ARCH_GPT2 ? 2 * I * C / tp + I / tp + C : 3 * I * C / tp;
}

double loom_sim_layer_params(const loom_model_spec *s, const loom_sim_strategy *st, bool moe,
                             double *expert) {
  int tp = st->tp > 0 ? st->tp : 1;
  double C = s->hidden, n = attn_params(s, tp);
  *expert = 0;
  if (!moe || s->moe.experts <= 0) return n + dense_mlp_params(s, tp);
  const loom_moe_spec *m = &s->moe;
  n += (double)m->experts * C;                     /* router (replicated) */
  if (m->shared_intermediate > 0) n += 3.0 * m->shared_intermediate * C / tp + C; /* + gate */
  *expert = (double)m->experts / sim_ep(st) * 3 * m->intermediate * C / sim_etp(st);
  return n;
}

int loom_sim_moe_layers_in(const loom_model_spec *s, int first, int count) {
  int n = 0;
  for (int l = first; l < first + count; l++) n += loom_model_layer_is_moe(s, l);
  return n;
}

double loom_sim_rank_params_of(const loom_model_spec *s, const loom_sim_strategy *st,
                               int layers, int moe, bool embed, bool head, double *expert) {
  double e, n = loom_sim_rank_params(s, st->tp > 0 ? st->tp : 1, 0, embed, head);
  n += (layers - moe) * loom_sim_layer_params(s, st, false, &e);
  n += moe * loom_sim_layer_params(s, st, true, &e);
  *expert = moe * e;
  return n;
}

double loom_sim_rank_params(const loom_model_spec *s, int tp, int layers, bool embed, bool head) {
  double C = s->hidden;
  bool gpt2 = s->arch == LOOM_ARCH_GPT2;
  double per = attn_params(s, tp) + dense_mlp_params(s, tp);
  double vloc = tp > 1 ? (double)((s->padded_vocab + tp - 1) / tp) : s->padded_vocab;
  double n = per * layers;
  if (embed || (head && s->tied_embeddings)) n += vloc * C;
  if (embed && gpt2) n += (double)s->max_seq * C;
  if (head) n += (gpt2 ? 2 : 1) * C + (s->tied_embeddings ? 0 : vloc * C);
  if (embed) n += loom_sim_vision_params(s);
  return n;
}

double loom_sim_vision_params(const loom_model_spec *s) {
  const loom_vision_spec *v = &s->vision;
  if (v->arch == LOOM_VISION_NONE) return 0;
  bool qwen = v->arch == LOOM_VISION_QWEN;
  double Cv = v->hidden, I = v->intermediate, C = s->hidden;
  double pv = 3.0 * v->temporal * v->patch * v->patch, in = Cv * v->merge * v->merge;
  double n = Cv * pv;
  if (!qwen) n += Cv + pow((double)(v->image_size / v->patch), 2) * Cv;
  double block = (qwen ? 2 : 4) * Cv + 4 * (Cv * Cv + Cv) + (qwen ? 2 : 1) * (I * Cv + I) + Cv * I + Cv;
  n += v->depth * block;
  n += qwen ? Cv + in * in + in + C * in : 2 * Cv + C * in + C + C * C;
  return n + C;
}

double loom_sim_optimizer_time(const loom_sim_ctx *c, double params, double owned) {
  const loom_hw_profile *hw = c->hw;
  loom_hw_dtype dt = c->st->dtype;
  if (c->loom_cpu) {
    double t = loom_hw_vop_time(hw, dt, LOOM_VOP_COPY, params, 4, 0);   /* zero the grads */
    t += loom_hw_vop_time(hw, dt, LOOM_VOP_SUMSQ, owned, 4, 2);         /* global norm */
    t += loom_hw_vop_time(hw, dt, LOOM_VOP_ADD, owned, 8, 1);           /* clipping */
    t += loom_hw_vop_time(hw, dt, LOOM_VOP_ADAMW, owned, 28, 12);
    if (c->st->zero > 0) t += loom_hw_vop_time(hw, dt, LOOM_VOP_COPY, owned, 4, 0);
    if (dt == LOOM_DT_BF16) t += loom_hw_vop_time(hw, dt, LOOM_VOP_ROUND, params, 8, 1);
    /* native bf16 GEMMs: the bf16 copy of the weights is refreshed at the first forward */
    if (dt == LOOM_DT_BF16) t += loom_hw_vop_time(hw, dt, LOOM_VOP_ROUND, params, 6, 1);
    return t;
  }
  /* mixed-precision Adam: fp32 main grads and master weights, moments, 16-bit copy */
  double t = owned * hw->optimizer_bytes_per_param / (hw->mem_bw * hw->mem_eff);
  t += params * (dt == LOOM_DT_FP32 ? 4 : 2) / (hw->mem_bw * hw->mem_eff); /* zero the grads */
  /* FP8: the new weights cast once a step (Transformer Engine caches them over the step's
   * micro-batches): read 2 bytes, write the fp8 copy and its transpose */
  if (c->st->fp8) t += params * 4 / (hw->mem_bw * hw->mem_eff);
  return t + 6 * hw->kernel_overhead;
}

void loom_sim_opt_tensors_of(const loom_sim_ctx *c, int layers, bool embed, bool head,
                             loom_sim_opt_tensors *text, loom_sim_opt_tensors *vision) {
  const loom_model_spec *s = c->spec;
  const loom_sim_strategy *st = c->st;
  memset(text, 0, sizeof *text);
  memset(vision, 0, sizeof *vision);
  bool gpt2 = s->arch == LOOM_ARCH_GPT2;
  /* per layer: linear weights (decay), biases and norm weights (no decay); the linears are
   * DTensors under parallelize_module (tp > 1, runtime.tp_style: dtensor) */
  int w = gpt2 ? 4 : 7, b = gpt2 ? 4 : (s->qkv_bias ? 3 : 0), norms = gpt2 ? 4 : 2;
  bool dt = c->hw->tp_dtensor && st->tp > 1;
  text->flat = st->zero >= 1 && st->dp > 1;
  int *lin = dt ? text->dtensor : text->eager;
  /* an MoE model's MoE layers (spread evenly; Hugging Face's Qwen2/3-MoE and Mixtral): q, k, v,
   * o, the router and every local expert's gate, up and down as nn.Linear modules of their own,
   * and the shared expert's three and its gate; the experts are not tensor-parallel */
  int L = s->layers > 0 ? s->layers : 1;
  int moe = (int)lround((double)layers * loom_model_moe_layers(s) / L);
  int experts = s->moe.experts > 0 ? 3 * (s->moe.experts / sim_ep(st)) : 0;
  int moe_dense = 5 + (s->moe.shared_intermediate > 0 ? 4 : 0); /* split like the attention */
  lin[0] += (layers - moe) * w + moe * moe_dense;
  text->eager[0] += moe * experts;
  lin[1] += layers * b;
  text->eager[1] += layers * (norms + (s->qk_norm ? 2 : 0));
  if (embed) text->eager[0] += 1 + (gpt2 ? 1 : 0);        /* token (and position) embedding */
  if (head) text->eager[1] += gpt2 ? 2 : 1, text->eager[0] += s->tied_embeddings ? 0 : 1;
  const loom_vision_spec *v = &s->vision;
  if (!embed || v->arch == LOOM_VISION_NONE || st->freeze_vision) return;
  int z = st->vision_zero_own ? st->vision_zero : st->zero;
  bool vsp = !strcmp(st->vision_mode, "sp") && st->tp > 1;
  bool vtp = !strcmp(st->vision_mode, "tp") && st->tp > 1 && c->hw->tp_dtensor;
  /* the SP encoder runs under DeepSpeed (its ZeRO engine); Qwen2.5-VL's block: norm1, norm2,
   * q, k, v, proj, gate, up, down with biases; patch embedding (no bias); merger ln_q, fc1,
   * fc2 with biases */
  vision->flat = z >= 1 && (vsp || st->dp > 1); /* a ZeRO engine over more than one replica */
  int *vl = vtp ? vision->dtensor : vision->eager;
  bool qwen = v->arch == LOOM_VISION_QWEN;
  int vw = qwen ? 7 : 4, vb = vw, vn = qwen ? 2 : 4;
  vl[0] += v->depth * vw + 2;       /* block linears, merger fc1 and fc2 */
  vl[1] += v->depth * vb + 2;
  vision->eager[1] += v->depth * vn + 1; /* norms, the merger's ln_q */
  vision->eager[0] += 1;                 /* patch embedding */
}

double loom_sim_opt_host(const loom_hw_profile *hw, const loom_sim_opt_tensors *t) {
  if (hw->host_dtensor <= 0 && hw->host_eager <= 0) return 0;
  if (t->flat) return LOOM_SIM_OPT_FLAT_OPS * hw->host_eager;
  double dev[2] = {LOOM_SIM_ADAM_OPS_DECAY, LOOM_SIM_ADAM_OPS_NODECAY}, h = 0;
  for (int g = 0; g < 2; g++) {
    h += t->dtensor[g] * (dev[g] * hw->host_dtensor + LOOM_SIM_ADAM_CPU_OPS * hw->host_eager);
    h += t->eager[g] * (dev[g] + LOOM_SIM_ADAM_CPU_OPS) * hw->host_eager;
  }
  return h;
}

double loom_sim_optimizer_step_time(const loom_sim_ctx *c, int layers, bool embed, bool head,
                                    double params, double owned) {
  double t = loom_sim_optimizer_time(c, params, owned);
  if (c->loom_cpu || (c->hw->host_dtensor <= 0 && c->hw->host_eager <= 0)) return t;
  loom_sim_opt_tensors tx, vx;
  loom_sim_opt_tensors_of(c, layers, embed, head, &tx, &vx);
  double pv = embed ? loom_sim_vision_params(c->spec) : 0;
  double fv = params > 0 ? fmin(1, pv / params) : 0;
  return fmax(t * (1 - fv), loom_sim_opt_host(c->hw, &tx)) + fmax(t * fv, loom_sim_opt_host(c->hw, &vx));
}

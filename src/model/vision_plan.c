/* The vision encoder's memory plan (every buffer carved once from one arena, sized for the
 * largest batch and this rank's share of it), creation for one process or split over tensor-
 * and sequence-parallel ranks, and the exchanges the split needs (Ulysses all-to-all, the
 * tensor-parallel sum). Shapes as in vision_internal.h. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/ring_attention.h"
#include "model/vision_internal.h"

typedef struct {
  char *base;
  size_t used;
} carver;

static void *carve(carver *c, size_t bytes) {
  bytes = (bytes + 63) & ~(size_t)63;
  void *p = c->base ? c->base + c->used : NULL;
  c->used += bytes;
  return p;
}
#define CF(n) ((float *)carve(c, (size_t)(n) * sizeof(float)))

static size_t max3(size_t a, size_t b, size_t c) {
  size_t m = a > b ? a : b;
  return m > c ? m : c;
}

static void plan(loom_vision *v, carver *c) {
  int unit = v->s.merge * v->s.merge;
  size_t Pg = (size_t)v->maxPg, Pl = Pg / (size_t)v->sp, Ml = Pl / (size_t)unit;
  size_t Cv = (size_t)v->Cv, Cl = (size_t)v->Cl, Il = (size_t)v->Il, phl = (size_t)v->phl;
  size_t Ct = (size_t)v->Ct, half = (size_t)v->D / 2, PC = Pl * Cl;
  bool split = v->sp > 1 && !v->ring; /* Ulysses: attention in the head layout */
  v->cosb = carve(c, Pg * half * sizeof(double));
  v->sinb = carve(c, Pg * half * sizeof(double));
  v->unit_perm = carve(c, (Pg / (size_t)unit + 1) * sizeof(int));
  v->seg_win = carve(c, (Pg + 3) * sizeof(int));
  v->seg_full = carve(c, (Pg + 3) * sizeof(int));
  v->patches_w = CF(Pl * v->pv);
  v->resid = CF((size_t)(v->s.depth + 1) * Pl * Cv);
  for (int l = 0; l < v->s.depth; l++) {
    vis_layer *L = &v->L[l];
    L->ln1 = CF(Pl * Cv), L->mean1 = CF(Pl), L->rstd1 = CF(Pl);
    L->qh = CF(PC), L->kh = CF(PC), L->vh = CF(PC), L->atth = CF(PC);
    L->att = split ? CF(PC) : L->atth;
    L->lse = CF(Pl * (size_t)v->Hl);
    L->mid = CF(Pl * Cv), L->ln2 = CF(Pl * Cv), L->mean2 = CF(Pl), L->rstd2 = CF(Pl);
    L->gate = v->s.arch == LOOM_VISION_QWEN ? CF(Pl * Il) : NULL;
    L->up = CF(Pl * Il), L->act = CF(Pl * Il);
  }
  v->lnm = CF(Pl * Cv), v->meanm = CF(Pl), v->rstdm = CF(Pl);
  v->h1 = CF(Ml * phl), v->g1 = CF(Ml * phl), v->outw = CF(Ml * Ct);
  v->outg = v->sp > 1 ? CF(Ml * (size_t)v->sp * Ct) : v->outw;
  v->ring_work = v->ring ? CF(loom_ring_seg_attention_work_floats((int)Pl, v->Hl, v->D)) : NULL;
  v->dres = CF(Pl * Cv), v->dn = CF(Pl * Cv), v->tmp = CF(Pl * (Cv > Ct ? Cv : Ct) + Ml * Ct);
  v->dq = CF(PC), v->dk = CF(PC), v->dv = CF(PC), v->datt = CF(PC);
  v->dqh = split ? CF(PC) : v->dq, v->dkh = split ? CF(PC) : v->dk;
  v->dvh = split ? CF(PC) : v->dv, v->datth = split ? CF(PC) : v->datt;
  v->a2a = split ? CF(2 * PC) : NULL;
  v->dact = CF(Pl * Il), v->da = CF(Pl * Il), v->db = CF(Pl * Il);
  v->dh1 = CF(Ml * phl), v->dg1 = CF(Ml * phl), v->doutw = CF(Ml * Ct), v->dln = CF(Pl * Cv);
  size_t wide = max3(Cv, Il, (size_t)v->pv);
  wide = max3(wide, (size_t)v->ph, Ct);
  v->round_x = v->d->bf16 ? CF(Pl * wide) : NULL;
  v->round_dy = v->d->bf16 ? CF(Pl * wide) : NULL;
}

int loom_vision_create_parallel(loom_vision **out, loom_decoder *d, int max_patches,
                                const loom_comm *tp_comm, const loom_comm *sp_comm, bool ring) {
  const loom_vision_spec *s = &d->spec.vision;
  if (s->arch == LOOM_VISION_NONE) return loom_err("the model has no vision encoder");
  int unit = s->merge * s->merge;
  if (max_patches < unit) return loom_err("vision: plan for at least %d patches", unit);
  bool module = d->shard.module == LOOM_MODULE_VISION;
  int tp = module ? d->shard.tp : 1, sp = module ? d->shard.sp : 1;
  int ph = s->arch == LOOM_VISION_QWEN ? s->hidden * unit : d->spec.hidden;
  ring = ring && sp > 1;
  int hsplit = ring ? tp : tp * sp; /* the ring keeps every local head */
  if (s->heads % hsplit || s->intermediate % tp || ph % tp)
    return loom_err("vision.parallel: tp*sp = %d*%d must divide the encoder's %d heads, and tp "
                    "its MLP width %d and projector width %d", tp, sp, s->heads, s->intermediate,
                    ph);
  /* the encoder's linears read the rounded copy of the weights (bf16 mode) */
  if (d->bf16) loom_decoder_params_lp_reserve(d);
  loom_vision *v = loom_calloc(1, sizeof *v);
  v->d = d;
  v->s = *s;
  v->Ct = d->spec.hidden;
  v->Cv = s->hidden, v->H = s->heads, v->D = s->hidden / s->heads, v->I = s->intermediate;
  v->pv = loom_vision_patch_values(s);
  v->in = s->hidden * unit;
  v->ph = ph;
  v->tp = tp, v->sp = sp, v->ring = ring;
  v->tp_rank = module ? d->shard.tp_rank : 0, v->sp_rank = module ? d->shard.sp_rank : 0;
  v->tp_comm = tp > 1 ? tp_comm : NULL, v->sp_comm = sp > 1 ? sp_comm : NULL;
  v->Hl = v->H / tp, v->Cl = v->Hl * v->D, v->Il = v->I / tp, v->phl = ph / tp;
  v->Hs = ring ? v->Hl : v->Hl / sp;
  v->maxP = max_patches / unit * unit;
  v->maxPg = (v->maxP + sp * unit - 1) / (sp * unit) * (sp * unit);
  v->L = loom_calloc((size_t)s->depth, sizeof *v->L);
  carver c = {NULL, 0};
  plan(v, &c);
  v->arena = loom_alloc(c.used);
  v->arena_bytes = c.used;
  c.base = v->arena;
  c.used = 0;
  plan(v, &c);
  *out = v;
  return 0;
}

int loom_vision_create(loom_vision **out, loom_decoder *d, int max_patches) {
  return loom_vision_create_parallel(out, d, max_patches, NULL, NULL, false);
}

size_t loom_vision_arena_bytes(const loom_vision *v) { return v ? v->arena_bytes : 0; }

void loom_vision_free(loom_vision *v) {
  if (!v) return;
  loom_free(v->arena);
  free(v->L);
  free(v);
}

/* x (Pl, Hl, D) -> y (Pg, Hs, D): block j of the send buffer holds head group j of this
 * rank's patches; block i received holds this rank's head group of rank i's patches. */
void vis_to_heads(loom_vision *v, const float *x, float *y) {
  int sp = v->sp, Pl = v->Pl, Hl = v->Hl, Hs = v->Hs, D = v->D;
  size_t blk = (size_t)Pl * Hs * D, row = (size_t)Hs * D * sizeof(float);
  float *send = v->a2a, *recv = v->a2a + blk * sp;
  for (int j = 0; j < sp; j++)
    for (int p = 0; p < Pl; p++)
      memcpy(send + j * blk + (size_t)p * Hs * D, x + ((size_t)p * Hl + (size_t)j * Hs) * D, row);
  loom_comm_alltoall_f32(v->sp_comm, send, recv, blk);
  memcpy(y, recv, blk * sp * sizeof(float)); /* block i = patches of rank i, in order */
}

/* x (Pg, Hs, D) -> y (Pl, Hl, D), the inverse of vis_to_heads. */
void vis_to_patches(loom_vision *v, const float *x, float *y) {
  int sp = v->sp, Pl = v->Pl, Hl = v->Hl, Hs = v->Hs, D = v->D;
  size_t blk = (size_t)Pl * Hs * D, row = (size_t)Hs * D * sizeof(float);
  float *send = v->a2a, *recv = v->a2a + blk * sp;
  memcpy(send, x, blk * sp * sizeof(float));
  loom_comm_alltoall_f32(v->sp_comm, send, recv, blk);
  for (int j = 0; j < sp; j++)
    for (int p = 0; p < Pl; p++)
      memcpy(y + ((size_t)p * Hl + (size_t)j * Hs) * D, recv + j * blk + (size_t)p * Hs * D, row);
}

void vis_tp_sum(loom_vision *v, float *x, size_t n) {
  if (v->tp > 1) loom_comm_allreduce_f32(v->tp_comm, x, n, LOOM_OP_SUM);
}

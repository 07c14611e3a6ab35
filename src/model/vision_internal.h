/* Private to the vision encoder (vision_encoder.c, vision_plan.c, vision_prep.c).
 *
 * Parallel shapes: the encoder may be split over tp ranks (heads, MLP and projector columns)
 * and sp ranks (Ulysses: patches). P real patches are padded to Pg (a multiple of sp * merge^2,
 * the padding is one extra attention segment whose tokens are dropped); each sp rank holds
 * Pl = Pg/sp consecutive patches of the window order, starting at p0. Cl = Hl*D is the local
 * attention width (Hl = H/tp heads); attention runs on all Pg patches with Hs = Hl/sp heads. */
#ifndef LOOM_VISION_INTERNAL_H
#define LOOM_VISION_INTERNAL_H
#include "loom/vision.h"
#include "model/decoder_internal.h"

typedef struct {
  float *ln1, *mean1, *rstd1;   /* (Pl,Cv), (Pl), (Pl) */
  float *qh, *kh, *vh, *atth;   /* (Pg, Hs, D) after rotary; attention output; all Pl*Cl */
  float *att;                   /* (Pl, Cl) attention output by patch (== atth when sp == 1) */
  float *lse;                   /* (Hs, Pg) */
  float *mid;                   /* (Pl,Cv) residual after attention */
  float *ln2, *mean2, *rstd2;   /* (Pl,Cv), (Pl), (Pl) */
  float *gate, *up, *act;       /* (Pl,Il): qwen gate/up/silu(gate)*up; llava -/up/gelu(up) */
} vis_layer;

struct loom_vision {
  loom_decoder *d;     /* parameter container (the vision module's, or the whole model) */
  loom_vision_spec s;
  int Ct;              /* text hidden: width of the output tokens */
  int Cv, H, D, I, pv; /* vision hidden, heads, head size, MLP size, values per patch */
  int in;              /* merger input width: Cv * merge^2 */
  int ph;              /* projector hidden width (qwen: in; llava: Ct) */
  /* parallelism */
  int tp, tp_rank, sp, sp_rank;
  bool ring;           /* the sp ranks are a context-parallel ring (ring attention), not Ulysses */
  const loom_comm *tp_comm, *sp_comm;
  int Hl, Cl, Il, phl, Hs; /* local heads, attention width, MLP width, projector width; heads
                              in attention (Hl/sp) */
  int maxP, maxPg;     /* planned real patches; planned padded patches */
  int P, M;            /* patches and tokens of the current forward (real) */
  int Pg, Mg, Pl, Ml, p0; /* padded patches/tokens; this rank's patches/tokens; first patch */
  /* per-batch tables (global, window order) */
  double *cosb, *sinb;         /* (Pg, D/2) rotary table (padding: identity) */
  int *unit_perm;              /* (M) window order -> original merged unit */
  int *seg_win, n_win;         /* window segments (+ the padding segment) */
  int *seg_full, n_full_seg;   /* one segment per image frame (+ the padding segment) */
  /* activations of this rank's patches (window order for qwen) */
  float *patches_w;            /* (Pl, pv) pixels in window order */
  float *resid;                /* (depth+1, Pl, Cv) input of each block, then the output */
  vis_layer *L;                /* depth */
  float *lnm, *meanm, *rstdm;  /* (Pl,Cv) merger norm (qwen) / post norm (llava) */
  float *h1, *g1;              /* (Ml, phl) fc1 output, after GELU */
  float *outw;                 /* (Ml, Ct) tokens in window order */
  float *outg;                 /* (Mg, Ct) every rank's tokens (== outw when sp == 1) */
  /* backward scratch */
  float *dres, *dn, *tmp;      /* (Pl,Cv), (Pl,Cv), (Pl*max(Cv,Ct) + Ml*Ct) */
  float *dq, *dk, *dv, *datt;  /* (Pl, Cl) by patch (forward: q/k/v before the all-to-all) */
  float *dqh, *dkh, *dvh, *datth; /* (Pg, Hs, D) (== the by-patch ones when sp == 1) */
  float *a2a;                  /* (2 * Pl * Cl) all-to-all send and receive */
  float *ring_work;            /* ring attention scratch (ring), else NULL */
  float *dact, *da, *db;       /* (Pl,Il) */
  float *dh1, *dg1;            /* (Ml, phl) */
  float *doutw, *dln;          /* (Ml, Ct), (Pl, Cv) */
  float *round_x, *round_dy;   /* bf16 rounding */
  void *arena;
  size_t arena_bytes;
};

int vis_check_input(const loom_vision *v, const loom_vision_input *in);
/* Tables for a batch: window order, segments, rotary table, padding and this rank's slice. */
void vis_prepare(loom_vision *v, const loom_vision_input *in);
/* Ulysses exchanges: x (Pl, Hl, D) by patch -> y (Pg, Hs, D) by head group, and back. */
void vis_to_heads(loom_vision *v, const float *x, float *y);
void vis_to_patches(loom_vision *v, const float *x, float *y);
/* Sum a partial result over the encoder's tensor-parallel ranks (no-op for tp == 1). */
void vis_tp_sum(loom_vision *v, float *x, size_t n);
#endif

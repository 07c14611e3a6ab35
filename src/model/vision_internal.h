/* Private to the vision encoder (vision_encoder.c, vision_prep.c). */
#ifndef LOOM_VISION_INTERNAL_H
#define LOOM_VISION_INTERNAL_H
#include "loom/vision.h"
#include "model/decoder_internal.h"

typedef struct {
  float *ln1, *mean1, *rstd1;   /* (P,Cv), (P), (P) */
  float *q, *k, *v, *att, *lse; /* (P,Cv) x4 (q,k after rope), (H,P) */
  float *mid;                   /* (P,Cv) residual after attention */
  float *ln2, *mean2, *rstd2;   /* (P,Cv), (P), (P) */
  float *gate, *up, *act;       /* (P,I): qwen gate/up/silu(gate)*up; llava -/up/gelu(up) */
} vis_layer;

struct loom_vision {
  loom_decoder *d;
  loom_vision_spec s;
  int Ct;              /* text hidden: width of the output tokens */
  int Cv, H, D, I, pv; /* vision hidden, heads, head size, MLP size, values per patch */
  int in;              /* merger input width: Cv * merge^2 */
  int maxP, P, M;      /* planned patches; patches and tokens of the current forward */
  /* per-batch tables */
  double *cosb, *sinb;         /* (P, D/2) rotary table, window order */
  int *unit_perm;              /* (M) window order -> original merged unit */
  int *seg_win, n_win;         /* window segments (patches, window order) */
  int *seg_full, n_full_seg;   /* one segment per image frame */
  /* activations (window order for qwen) */
  const float *pixels;         /* (P, pv) as given (original order) */
  float *patches_w;            /* (P, pv) pixels in window order */
  float *resid;                /* (depth+1, P, Cv) input of each block, then the output */
  vis_layer *L;                /* depth */
  float *lnm, *meanm, *rstdm;  /* (P,Cv) merger norm (qwen) / post norm (llava) */
  float *h1, *g1;              /* (M, hidden of the projector) fc1 output, after GELU */
  float *outw;                 /* (M, Ct) tokens in window order */
  /* backward scratch */
  float *dres, *dn, *dq, *dk, *dv, *datt, *tmp; /* (P,Cv) */
  float *dact, *da, *db;       /* (P,I) */
  float *dh1, *dg1;            /* (M, projector hidden) */
  float *doutw, *dln;          /* (M, Ct), (P, Cv) */
  float *round_x, *round_dy;   /* bf16 rounding */
  void *arena;
};

int vis_check_input(const loom_vision *v, const loom_vision_input *in);
void vis_prepare(loom_vision *v, const loom_vision_input *in);
#endif

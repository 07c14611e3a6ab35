/* Private to the gradient synchroniser (grad_sync.c) and its ZeRO-3 parameter manager
 * (zero3.c). */
#ifndef LOOM_GRAD_SYNC_INTERNAL_H
#define LOOM_GRAD_SYNC_INTERNAL_H
#include "loom/grad_sync.h"

typedef struct {
  size_t begin, end;      /* flat range */
  int remaining;          /* layers whose last backward has not finished */
  bool started;
  loom_comm_request req;
  loom_bf16 *buf16;       /* bf16 words in flight (training.reduce_dtype=bf16), else NULL */
} bucket;

/* ZeRO-3 gather unit: the tensors of one layer, or (index layers) the non-layer "ends". */
typedef struct {
  size_t range[2][2];     /* up to two flat ranges [begin, end) */
  int nranges;
  int refs;               /* users holding the gathered parameters */
  bool resident;          /* gathered and not released */
  bool inflight;          /* a prefetch is on its way */
  void *req[2];           /* loom_comm_request of the prefetch, per range */
  int *counts[2];         /* their per-replica counts (alive until the wait) */
} z3_unit;

struct loom_grad_sync {
  loom_decoder *d;
  const loom_mesh *m;
  int zero;
  bool seqpar, tied_pp;
  bool reduce_bf16;       /* training.reduce_dtype=bf16: data-parallel sums in bf16 */
  int nb;
  bucket *b;
  int *layer_bucket;      /* (spec.layers) bucket of each global layer held, -1 otherwise */
  int *param_layer;       /* (layout.count) global layer of each tensor, -1 for the ends,
                             LOOM_GS_EXPERT for the expert region's tensors */
  /* expert parallelism: the expert region [xb, xe) of the flat buffer (this rank's routed
   * experts, layout.c) is outside every bucket, ZeRO partition and ZeRO-3 unit: held whole,
   * its gradients summed over the expert-data-parallel group (edp: the ranks holding the same
   * experts) at the end of the step, updated in place; its AdamW moments follow the owned
   * range's in the optimizer state. xb = xe = layout.total without ep. */
  size_t xb, xe;
  const loom_comm *edp;   /* NULL: no other rank holds these experts */
  /* ZeRO 1-3 over edp: the part [exb, exe) of the expert region whose moments this rank keeps
   * (reduce-scattered gradients in gx, the updated weights all-gathered over edp); without
   * ZeRO or edp the whole region, gx NULL (the gradients reduced in place in the buffer) */
  size_t exb, exe;
  float *gx;              /* (exe - exb) or NULL */
  int *ecounts;           /* (edp size) owned expert floats per edp rank */
  /* ZeRO */
  int *counts;            /* (grad_comm.size) owned floats per replica */
  size_t own_begin, own_end;
  float *gshard;          /* (own_end - own_begin) reduced gradient of the owned range */
  /* ZeRO-3 */
  float *pshard;          /* (own_end - own_begin) the owned parameters (fp32 master) */
  z3_unit *units;         /* (spec.layers + 1): per global layer, then the ends */
  size_t *rank_begin;     /* (grad_comm.size + 1) flat start of each replica's owned range */
};

#define LOOM_GS_EXPERT (-2)
int loom_gs_layer_of(const char *name);
/* zero3.c */
void loom_z3_setup(loom_grad_sync *g);
void loom_z3_free(loom_grad_sync *g);
void loom_z3_hook(void *ctx, int layer, int event);
void loom_z3_reduce_ends(loom_grad_sync *g);
void loom_gs_seqpar_reduce(loom_grad_sync *g, int layer);
/* data-parallel reduce-scatter in the policy's reduce dtype (grad_sync.c) */
void loom_gs_reduce_scatter_v(loom_grad_sync *g, const float *in, float *out, const int *counts);
#endif

/* Per-tensor gradient norms of a checkpoint saved with checkpoint.save_gradients: reads
 * gradients.safetensors, or every gradients-r<rank>.safetensors of a sharded checkpoint, and
 * joins the pieces of each tensor (tensor-parallel slices, ZeRO ranges) through the
 * "loom.pieces" metadata, so the norms are those of the whole tensors. */
#ifndef LOOM_GRAD_NORMS_H
#define LOOM_GRAD_NORMS_H
#include <stdint.h>

typedef struct {
  char *name;        /* tensor name (loom names) */
  int64_t numel;     /* elements over all pieces */
  double l2;         /* sqrt(sum of squares) in double */
  double max_abs;
  int64_t nonfinite; /* NaN/inf elements */
} loom_grad_norm;

typedef struct {
  loom_grad_norm *tensors;  /* in the order first seen */
  int count;
  double total_l2;          /* global norm over all tensors */
  long step;                /* from the metadata, -1 when absent */
  int files;
} loom_grad_norms;

/* path: a checkpoint directory or one gradients*.safetensors file. */
int loom_grad_norms_read(const char *path, loom_grad_norms *out);
void loom_grad_norms_free(loom_grad_norms *g);
#endif

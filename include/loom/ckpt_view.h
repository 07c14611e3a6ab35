/* The global view of a checkpoint directory (`loom ckpt inspect`, src/ckpt/checkpoint_view.c):
 * the tensors as the model sees them, however many ranks wrote them in pieces. */
#ifndef LOOM_CKPT_VIEW_H
#define LOOM_CKPT_VIEW_H
#include <stdbool.h>
#include <stdint.h>

#include "loom/safetensors.h"

/* The tensors of a checkpoint directory as the model sees them: the pieces of every file
 * (index.json's lists, else every *.safetensors of the directory) merged into global tensors,
 * each once with its global shape (a piece's gshape [n, 0] is the vector [n]); pieces that
 * several ranks wrote alike (replicated norms under tensor parallelism) count once. Files
 * named optimizer* hold the AdamW moments (entries exp_avg.<tensor>, exp_avg_sq.<tensor>),
 * gradients* the saved gradients; every other file parameters. */
enum {
  LOOM_CKPT_PARAMS,     /* the model's parameters (model*, vision-model*, any other file) */
  LOOM_CKPT_EXP_AVG,    /* AdamW first moments */
  LOOM_CKPT_EXP_AVG_SQ, /* AdamW second moments */
  LOOM_CKPT_OPT_OTHER,  /* other entries of optimizer files */
  LOOM_CKPT_GRADS,      /* gradients (checkpoint.save_gradients) */
  LOOM_CKPT_GROUPS
};
typedef struct {
  char *name;       /* global tensor name (moments without their exp_avg. prefix) */
  loom_dtype dtype; /* of its first piece; mixed_dtype when pieces differ */
  bool mixed_dtype;
  int ndim;
  int64_t shape[LOOM_ST_MAX_DIMS]; /* global shape */
  int64_t numel, held;             /* global elements; elements its distinct pieces hold */
  int pieces;                      /* distinct pieces */
  double sumsq, l2, min, max;      /* over the held elements (min/max NaN when none) */
  int64_t nonfinite;
} loom_ckpt_tensor;
typedef struct {
  loom_ckpt_tensor *t; /* (n) in order of first appearance over the files */
  int n;
} loom_ckpt_group;
typedef struct {
  loom_ckpt_group group[LOOM_CKPT_GROUPS];
  int64_t count[LOOM_CKPT_GROUPS]; /* global elements per group (parameters: the model's size) */
  int64_t bytes;                   /* tensor bytes over all files, replicas included */
  char **files;                    /* (nfiles) paths read */
  int nfiles;
  void *pieces[LOOM_CKPT_GROUPS]; /* private: distinct pieces seen per tensor */
} loom_ckpt_view;
/* Read every file of dir (headers and data are validated as on load). */
int loom_ckpt_view_read(const char *dir, loom_ckpt_view *v);
void loom_ckpt_view_free(loom_ckpt_view *v);
/* "parameters", "exp_avg", "exp_avg_sq", "optimizer_other", "gradients". */
const char *loom_ckpt_group_name(int group);

#endif

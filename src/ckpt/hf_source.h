/* Private to the Hugging Face import (hf_import.c, hf_source.c): every tensor of an HF
 * directory under the name the plan (hf_names*.c) gives it. The fused expert tensors of
 * transformers v5 (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]) are
 * seen as the per-expert tensors of transformers 4.x (mlp.experts.{e}.gate_proj.weight
 * [I, H], up_proj, down_proj [H, I]): each one a contiguous slice of the fused tensor. */
#ifndef LOOM_HF_SOURCE_H
#define LOOM_HF_SOURCE_H
#include <stddef.h>

#include "loom/hf.h"

typedef struct {
  char *name;         /* HF name (without GPT-2's "transformer." prefix) */
  loom_st_file *file; /* the file holding it */
  int index;          /* its index in that file */
  size_t offset;      /* elements into the file's tensor (a slice of a fused tensor), else 0 */
  int ndim;
  int64_t shape[LOOM_HF_MAX_DIMS]; /* this tensor's shape (a slice's, not the fused one's) */
  char *fused;                     /* the fused tensor a slice is cut from, else NULL */
} hf_entry;

typedef struct {
  int nfiles, n;
  loom_st_file **files;
  hf_entry *e;
  int *order;  /* entries sorted by name, for hf_source_find */
  char *where; /* the file to blame for a missing tensor (model.safetensors or the index) */
} hf_source;

/* Open DIR's model.safetensors or sharded index; names normalised (GPT-2's prefix, the
 * "model." prefixes of transformers >= 4.52 VLMs) and fused expert tensors split. Errors name
 * the file; *s is left empty on error. */
int hf_source_open(hf_source *s, const char *dir);
void hf_source_free(hf_source *s);
/* Index of the tensor of that name, or -1. */
int hf_source_find(const hf_source *s, const char *name);
/* transformers v5 loads Mixtral under Qwen's names (mlp.gate, mlp.experts.*): give them
 * Mixtral's (block_sparse_moe.gate, block_sparse_moe.experts.{e}.w1/w3/w2). */
void hf_source_mixtral_names(hf_source *s);
/* The last fused tensor read whole (file, index) and its values, for the next slices. */
typedef struct {
  const loom_st_file *file;
  int index;
  float *buf;
} hf_fused_cache;
/* Entry i as fp32 into dst (the entry's elements); a slice reads its fused tensor once into
 * *cache and copies from there while the next slices are of the same tensor. */
int hf_source_read(const hf_source *s, int i, float *dst, hf_fused_cache *cache);
void hf_fused_cache_free(hf_fused_cache *c);
#endif

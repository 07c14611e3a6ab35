/* The KV cache of generation: per layer, batch row and key-value head, max_seq slots of
 * head_dim keys and values, so that attention of one query reads one contiguous (S, D)
 * block per head. Layout (L, B, Hkv, S, D) for K and V each. */
#include <stdlib.h>

#include "loom/generate.h"

int loom_kv_cache_create(loom_kv_cache *c, const loom_model_spec *s, int batch, int max_seq) {
  memset(c, 0, sizeof *c);
  if (batch < 1 || max_seq < 1)
    return loom_err("KV cache: batch (%d) and max_seq (%d) must be positive", batch, max_seq);
  c->layers = s->layers;
  c->batch = batch;
  c->kv_heads = s->kv_heads;
  c->max_seq = max_seq;
  c->head_dim = s->head_dim;
  size_t n = (size_t)c->layers * batch * c->kv_heads * max_seq * c->head_dim;
  c->k = loom_alloc(n * sizeof(float)); /* (L, B, Hkv, S, D) */
  c->v = loom_alloc(n * sizeof(float)); /* (L, B, Hkv, S, D) */
  c->len = calloc((size_t)batch, sizeof *c->len);
  LOOM_ASSERT(c->len);
  return 0;
}

void loom_kv_cache_free(loom_kv_cache *c) {
  loom_free(c->k);
  loom_free(c->v);
  free(c->len);
  memset(c, 0, sizeof *c);
}

static size_t block(const loom_kv_cache *c, int layer, int row, int head) {
  return ((((size_t)layer * c->batch + row) * c->kv_heads + head) * c->max_seq) * c->head_dim;
}

float *loom_kv_cache_k(const loom_kv_cache *c, int layer, int row, int head) {
  return c->k + block(c, layer, row, head);
}

float *loom_kv_cache_v(const loom_kv_cache *c, int layer, int row, int head) {
  return c->v + block(c, layer, row, head);
}

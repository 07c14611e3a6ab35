/* ZeRO-3: parameters partitioned over the data-parallel replicas. Each replica keeps only its
 * owned range of the flat parameter buffer (pshard, the fp32 master copy AdamW updates). The
 * tensors of a layer — or of the "ends": embedding, positions, final norm, LM head — are
 * gathered into the flat buffer just before use (all-gather of the replicas' pieces), the next
 * layer is prefetched with a non-blocking all-gather, and after use the pages are handed back
 * to the operating system (madvise MADV_DONTNEED), so only the layers in use are resident. A
 * layer's gradients are reduce-scattered into the owned gradient shard as soon as its backward
 * finishes (every micro-batch), and its gradient pages are released the same way. */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sync/grad_sync_internal.h"
#include "loom/kernels.h"

/* Hand the whole pages inside flat range [b, e) of base back to the OS; they read as zeros. */
static void release_pages(float *base, size_t b, size_t e) {
  static uintptr_t page = 0;
  if (!page) page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)(base + b) + page - 1) & ~(page - 1);
  uintptr_t hi = (uintptr_t)(base + e) & ~(page - 1);
  if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* Zero flat range [b, e) of base, releasing its whole pages. */
static void clear_range(float *base, size_t b, size_t e) {
  release_pages(base, b, e);
  static size_t page_floats = 0;
  if (!page_floats) page_floats = (size_t)sysconf(_SC_PAGESIZE) / sizeof(float);
  /* the partial pages at both ends keep their memory: zero them by hand */
  size_t head = b + (page_floats - ((uintptr_t)(base + b) / sizeof(float)) % page_floats) % page_floats;
  if (head > e) head = e;
  memset(base + b, 0, (head - b) * sizeof(float));
  size_t tail = e - ((uintptr_t)(base + e) / sizeof(float)) % page_floats;
  if (tail < head) tail = head;
  memset(base + tail, 0, (e - tail) * sizeof(float));
}

static z3_unit *unit_of(loom_grad_sync *g, int layer) {
  z3_unit *u = &g->units[layer < 0 ? g->d->spec.layers : layer];
  return u->nranges ? u : NULL;
}

/* floats of flat range [a, b) owned by each replica (prefix order = flat order) */
static void piece_counts(const loom_grad_sync *g, size_t a, size_t b, int *counts) {
  for (int i = 0; i < g->m->grad_comm.size; i++) {
    size_t lo = a > g->rank_begin[i] ? a : g->rank_begin[i];
    size_t hi = b < g->rank_begin[i + 1] ? b : g->rank_begin[i + 1];
    counts[i] = hi > lo ? (int)(hi - lo) : 0;
  }
}

static void start_gather(loom_grad_sync *g, z3_unit *u) {
  loom_decoder *d = g->d;
  for (int k = 0; k < u->nranges; k++) {
    size_t a = u->range[k][0], b = u->range[k][1];
    size_t lo = a > g->own_begin ? a : g->own_begin, hi = b < g->own_end ? b : g->own_end;
    if (hi > lo) memcpy(d->params + lo, g->pshard + (lo - g->own_begin), (hi - lo) * sizeof(float));
    int *counts = loom_alloc((size_t)g->m->grad_comm.size * sizeof(int));
    piece_counts(g, a, b, counts);
    loom_comm_request *r = loom_alloc(sizeof *r);
    loom_comm_iallgather_v_f32(&g->m->grad_comm, d->params + a, counts, r);
    u->req[k] = r;
    u->counts[k] = counts; /* must outlive the request */
  }
  u->inflight = true;
}

static void finish_gather(loom_grad_sync *g, z3_unit *u) {
  for (int k = 0; k < u->nranges; k++) {
    loom_comm_wait((loom_comm_request *)u->req[k]);
    loom_free(u->req[k]);
    loom_free(u->counts[k]);
    u->req[k] = NULL;
    u->counts[k] = NULL;
    if (g->d->bf16) /* the rounded copy the matmuls read */
      loom_round_bf16_f32(g->d->params_lp + u->range[k][0], g->d->params + u->range[k][0],
                          u->range[k][1] - u->range[k][0]);
  }
  u->inflight = false;
  u->resident = true;
}

static void release_unit(loom_grad_sync *g, z3_unit *u) {
  u->resident = false;
  for (int k = 0; k < u->nranges; k++) {
    release_pages(g->d->params, u->range[k][0], u->range[k][1]);
    if (g->d->bf16) release_pages(g->d->params_lp, u->range[k][0], u->range[k][1]);
  }
}

static void acquire(loom_grad_sync *g, int layer, int direction) {
  z3_unit *u = unit_of(g, layer);
  if (!u || u->refs++ > 0) return;
  if (!u->resident) {
    if (!u->inflight) start_gather(g, u);
    finish_gather(g, u);
  }
  if (layer < 0) return;
  int next = layer + direction; /* prefetch the layer this pass needs next */
  if (next >= 0 && next < g->d->spec.layers) {
    z3_unit *n = unit_of(g, next);
    if (n && !n->resident && !n->inflight) start_gather(g, n);
  }
}

static void reduce_scatter_range(loom_grad_sync *g, size_t a, size_t b) {
  int n = g->m->grad_comm.size;
  int *counts = loom_malloc((size_t)n * sizeof(int));
  piece_counts(g, a, b, counts);
  size_t lo = a > g->own_begin ? a : g->own_begin, hi = b < g->own_end ? b : g->own_end;
  size_t mine = hi > lo ? hi - lo : 0;
  float *recv = loom_alloc((mine + 1) * sizeof(float));
  if (n > 1) loom_gs_reduce_scatter_v(g, g->d->grads + a, recv, counts);
  else memcpy(recv, g->d->grads + a, mine * sizeof(float));
  for (size_t i = 0; i < mine; i++) g->gshard[lo - g->own_begin + i] += recv[i];
  loom_free(recv);
  free(counts);
  clear_range(g->d->grads, a, b);
}

void loom_z3_hook(void *ctx, int layer, int event) {
  loom_grad_sync *g = ctx;
  z3_unit *u = unit_of(g, layer);
  if (!u) return;
  switch (event) {
  case LOOM_PARAMS_ACQUIRE_FWD: acquire(g, layer, +1); break;
  case LOOM_PARAMS_ACQUIRE_BWD: acquire(g, layer, -1); break;
  case LOOM_PARAMS_RELEASE:
    if (--u->refs == 0) release_unit(g, u);
    break;
  case LOOM_PARAMS_GRADS_DONE: /* a block's gradients of this micro-batch are complete */
    loom_gs_seqpar_reduce(g, layer);
    for (int k = 0; k < u->nranges; k++) reduce_scatter_range(g, u->range[k][0], u->range[k][1]);
    break;
  }
}

/* End of the backward: prefetches nobody used are completed and dropped; the ends (whose
 * gradients collect from the embedding and the head) are reduced now. */
void loom_z3_reduce_ends(loom_grad_sync *g) {
  for (int l = 0; l <= g->d->spec.layers; l++) {
    z3_unit *u = &g->units[l];
    if (!u->nranges || !u->inflight) continue;
    finish_gather(g, u);
    if (u->refs == 0) release_unit(g, u);
  }
  z3_unit *e = unit_of(g, LOOM_UNIT_ENDS);
  if (e)
    for (int k = 0; k < e->nranges; k++) reduce_scatter_range(g, e->range[k][0], e->range[k][1]);
}

void loom_z3_setup(loom_grad_sync *g) {
  loom_decoder *d = g->d;
  int n = g->m->grad_comm.size, L = d->spec.layers;
  g->rank_begin = loom_malloc((size_t)(n + 1) * sizeof(size_t));
  g->rank_begin[0] = 0;
  for (int i = 0; i < n; i++) g->rank_begin[i + 1] = g->rank_begin[i] + (size_t)g->counts[i];
  g->pshard = loom_alloc_for((g->own_end - g->own_begin + 1) * sizeof(float),
                             "this rank's ZeRO-3 parameter shard");
  g->units = loom_calloc((size_t)L + 1, sizeof *g->units);
  size_t first = d->layout.total, last = 0;
  for (int i = 0; i < d->layout.count; i++) {
    int l = g->param_layer[i];
    if (l < 0) continue;
    size_t b = d->layout.params[i].offset;
    size_t e = i + 1 < d->layout.count ? d->layout.params[i + 1].offset : d->layout.total;
    z3_unit *u = &g->units[l];
    if (!u->nranges) u->nranges = 1, u->range[0][0] = b;
    u->range[0][1] = e;
    first = b < first ? b : first;
    last = e > last ? e : last;
  }
  z3_unit *ends = &g->units[L];
  if (first > 0) ends->range[ends->nranges][0] = 0, ends->range[ends->nranges++][1] = first;
  if (last < g->xb && last > 0) /* (the expert region after it stays resident) */
    ends->range[ends->nranges][0] = last, ends->range[ends->nranges++][1] = g->xb;
  /* the rounded copy the matmuls read, written range by range as layers are gathered */
  if (d->bf16) loom_decoder_params_lp_reserve(d);
  d->param_hook = loom_z3_hook;
  d->param_hook_ctx = g;
}

void loom_z3_free(loom_grad_sync *g) {
  if (g->units)
    for (int l = 0; l <= g->d->spec.layers; l++)
      for (int k = 0; k < 2; k++) {
        if (g->units[l].req[k]) loom_comm_wait((loom_comm_request *)g->units[l].req[k]);
        loom_free(g->units[l].req[k]);
        loom_free(g->units[l].counts[k]);
      }
  free(g->units);
  free(g->rank_begin);
  loom_free(g->pshard);
}

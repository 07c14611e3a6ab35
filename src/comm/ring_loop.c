/* The ring's communication loops (ring_internal.h): non-blocking K/V exchange posted before
 * each block's compute; in backward the dK/dV accumulators travel with the blocks and come
 * home. Counted by comm.c as send/recv: each rank sends 2 (cp-1) blk floats forward and
 * 4 (cp-1) blk floats backward. */
#include <string.h>

#include "comm/ring_internal.h"
#include "loom/core.h"

enum { TAG_FWD_K = 11, TAG_FWD_V, TAG_BWD_K, TAG_BWD_V, TAG_BWD_DK, TAG_BWD_DV };

static int next_rank(const loom_comm *c) { return (c->rank + 1) % c->size; }
static int prev_rank(const loom_comm *c) { return (c->rank + c->size - 1) % c->size; }

void ring_add_into(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

void ring_loop_forward(const loom_comm *c, size_t blk, const float *k, const float *v,
                       float *kv[2][2], ring_fwd_fn fn, void *ctx) {
  int cp = c->size, me = c->rank;
  const float *ck = k, *cv = v; /* the block held at this step: this rank's own first */
  for (int step = 0; step < cp; step++) {
    loom_comm_request req[4];
    int slot = step % 2;
    if (step < cp - 1) { /* pass the held block on and receive the next, during the compute */
      loom_comm_isend_f32(c, ck, blk, next_rank(c), TAG_FWD_K, &req[0]);
      loom_comm_isend_f32(c, cv, blk, next_rank(c), TAG_FWD_V, &req[1]);
      loom_comm_irecv_f32(c, kv[slot][0], blk, prev_rank(c), TAG_FWD_K, &req[2]);
      loom_comm_irecv_f32(c, kv[slot][1], blk, prev_rank(c), TAG_FWD_V, &req[3]);
    }
    fn(ctx, ck, cv, (me - step + cp) % cp);
    if (step < cp - 1) {
      for (int i = 0; i < 4; i++) loom_comm_wait(&req[i]);
      ck = kv[slot][0], cv = kv[slot][1];
    }
  }
}

void ring_loop_backward(const loom_comm *c, size_t blk, const float *k, const float *v,
                        float *dk, float *dv, float *kv[2][2], float *acc[2][2], ring_bwd_fn fn,
                        void *ctx) {
  int cp = c->size, me = c->rank;
  memset(dk, 0, blk * sizeof(float));
  memset(dv, 0, blk * sizeof(float));
  loom_comm_request kvreq[4], sendacc[2], recvacc[2];
  int sending = 0, receiving = 0;
  const float *ck = k, *cv = v;
  for (int step = 0; step < cp; step++) {
    int slot = step % 2, src = (me - step + cp) % cp;
    if (step < cp - 1) {
      loom_comm_isend_f32(c, ck, blk, next_rank(c), TAG_BWD_K, &kvreq[0]);
      loom_comm_isend_f32(c, cv, blk, next_rank(c), TAG_BWD_V, &kvreq[1]);
      loom_comm_irecv_f32(c, kv[slot][0], blk, prev_rank(c), TAG_BWD_K, &kvreq[2]);
      loom_comm_irecv_f32(c, kv[slot][1], blk, prev_rank(c), TAG_BWD_V, &kvreq[3]);
    }
    if (step == 0) { /* this rank's own block: its gradient stays here */
      fn(ctx, ck, cv, dk, dv, src);
    } else {
      /* the accumulator of src's block: started here at step 1, else received from the
       * previous rank (posted at the end of the last step) */
      float *ak = acc[slot][0], *av = acc[slot][1];
      if (step == 1) {
        memset(ak, 0, blk * sizeof(float));
        memset(av, 0, blk * sizeof(float));
      } else {
        for (int i = 0; i < 2; i++) loom_comm_wait(&recvacc[i]);
        receiving = 0;
      }
      fn(ctx, ck, cv, ak, av, src);
      if (sending) /* the other slot's send must be done before it receives into it */
        for (int i = 0; i < 2; i++) loom_comm_wait(&sendacc[i]);
      loom_comm_isend_f32(c, ak, blk, next_rank(c), TAG_BWD_DK, &sendacc[0]);
      loom_comm_isend_f32(c, av, blk, next_rank(c), TAG_BWD_DV, &sendacc[1]);
      sending = 1;
      /* the next step's accumulator (after the last step: this rank's own, coming home) */
      loom_comm_irecv_f32(c, acc[1 - slot][0], blk, prev_rank(c), TAG_BWD_DK, &recvacc[0]);
      loom_comm_irecv_f32(c, acc[1 - slot][1], blk, prev_rank(c), TAG_BWD_DV, &recvacc[1]);
      receiving = 1;
    }
    if (step < cp - 1) {
      for (int i = 0; i < 4; i++) loom_comm_wait(&kvreq[i]);
      ck = kv[slot][0], cv = kv[slot][1];
    }
  }
  if (receiving) { /* every other rank's contribution to this rank's dk/dv */
    for (int i = 0; i < 2; i++) loom_comm_wait(&recvacc[i]);
    ring_add_into(dk, acc[cp % 2][0], blk);
    ring_add_into(dv, acc[cp % 2][1], blk);
  }
  if (sending)
    for (int i = 0; i < 2; i++) loom_comm_wait(&sendacc[i]);
}

/* Private to the rings (ring_attention.c: causal text chunks; ring_seg_attention.c: vision
 * segments): the two loops that pass K/V blocks (and dK/dV accumulators) around the ring with
 * the next exchange posted before the held block is computed (ring_loop.c). */
#ifndef LOOM_RING_INTERNAL_H
#define LOOM_RING_INTERNAL_H
#include <stddef.h>

#include "loom/comm.h"

/* compute on the K/V block (k, v) that ring rank src owns */
typedef void (*ring_fwd_fn)(void *ctx, const float *k, const float *v, int src);
/* the same, adding the block's gradients into (gk, gv) (laid out like k, v) */
typedef void (*ring_bwd_fn)(void *ctx, const float *k, const float *v, float *gk, float *gv,
                            int src);

/* cp steps: step s computes on the block of rank (me - s) mod cp; blocks of blk floats (K and
 * V each); kv: two slots of received (K, V) blocks. */
void ring_loop_forward(const loom_comm *c, size_t blk, const float *k, const float *v,
                       float *kv[2][2], ring_fwd_fn fn, void *ctx);
/* Backward: the K/V blocks go around again; the gradient of each block accumulates in an
 * accumulator that travels with it (acc: two slots of (dK, dV)) and arrives at its owner after
 * cp-1 hops. Writes dk, dv (B..., like k, v): every rank's contribution to this rank's block. */
void ring_loop_backward(const loom_comm *c, size_t blk, const float *k, const float *v,
                        float *dk, float *dv, float *kv[2][2], float *acc[2][2], ring_bwd_fn fn,
                        void *ctx);
void ring_add_into(float *dst, const float *src, size_t n);
#endif

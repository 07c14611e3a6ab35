/* Context parallelism: ring attention over the cp ranks of the mesh (cp_comm): the causal
 * text ring below, and (end of file) the vision encoder's ring within segments.
 *
 * Each sequence of T tokens is cut into 2*cp chunks of c = T/(2cp) tokens; cp rank r holds
 * chunks r and 2cp-1-r (causal load balancing, the Megatron-LM / TransformerEngine
 * convention), so every rank does the same attention work. A rank's tensors hold its
 * Tl = T/cp tokens of each sequence in that order: (B, [chunk r ; chunk 2cp-1-r], heads, D).
 *
 * Forward: the K/V blocks go around the ring (rank r sends to r+1, receives from r-1) in cp
 * steps; the exchange for the next step is posted before the current block is computed.
 * Each (query chunk, key chunk) pair is flash attention on c x c tokens (diagonal: causal,
 * earlier key chunk: full, later: skipped); partial outputs are merged with their
 * log-sum-exp. Backward: the K/V blocks go around again, and each block's dK/dV accumulator
 * travels with it, collecting every rank's contribution, back to its owner (cp-1 hops of
 * K/V and cp-1 hops of dK/dV; the owner's own contribution never leaves it).
 *
 * Bytes each rank sends per layer and micro-batch (counted as send/recv by comm.c):
 *   forward  (cp-1) * 2 * B*Tl*Hkv*D * 4 = 2 (cp-1)/cp * B*T*Hkv*D * 4
 *   backward twice that (K/V again, then dK/dV). */
#ifndef LOOM_RING_ATTENTION_H
#define LOOM_RING_ATTENTION_H
#include <stdbool.h>
#include <stddef.h>

#include "loom/comm.h"

typedef struct {
  const loom_comm *comm; /* the ring: cp ranks, in chunk order */
  int B, Tl;             /* sequences; tokens of each sequence on this rank (two chunks) */
  int Hq, Hkv, D;        /* query heads, key/value heads (GQA: Hq % Hkv == 0), head dim */
  bool causal;           /* false: full attention (every pair of chunks visible) */
  float *work;           /* loom_ring_attention_work_floats() floats of scratch */
  /* packed documents (NULL: none): the segments of the whole sequences, (B, T = cp*Tl) by
   * global position, as loom_attn_mask wants them; every block is masked by them (queries
   * and keys at their global positions), and a block no query of which shares a document
   * with its keys is skipped */
  const int *seg_lo, *seg_hi;
} loom_ring_attn;

/* Global chunk index (of 2*cp) of a rank's first (half 0) or second (half 1) chunk. */
static inline int loom_cp_chunk(int cp_rank, int half, int cp) {
  return half ? 2 * cp - 1 - cp_rank : cp_rank;
}

/* How query chunk qi sees key chunk kj (global chunk indices), before packed documents
 * (ring_attention.c refines it: a pair sharing no document is skipped, and the flash kernels
 * mask each block by the segments of both chunks). */
typedef enum { LOOM_RING_SKIP = 0, LOOM_RING_FULL, LOOM_RING_CAUSAL } loom_ring_block;
static inline loom_ring_block loom_ring_block_kind(int qi, int kj, bool causal) {
  if (!causal) return LOOM_RING_FULL;
  return kj < qi ? LOOM_RING_FULL : kj == qi ? LOOM_RING_CAUSAL : LOOM_RING_SKIP;
}

size_t loom_ring_attention_work_floats(int B, int Tl, int Hq, int Hkv, int D);

/* q (B,Tl,Hq,D), k, v (B,Tl,Hkv,D) -> out (B,Tl,Hq,D), lse (B,Hq,Tl): attention of this
 * rank's queries over the keys of the whole sequence (all cp ranks), scale 1/sqrt(D).
 * Every rank of the ring calls it together. */
void loom_ring_attention_forward(const loom_ring_attn *r, float *out, float *lse,
                                 const float *q, const float *k, const float *v);
/* Writes dq (B,Tl,Hq,D), dk, dv (B,Tl,Hkv,D): the gradients of this rank's q, k, v from
 * every rank's queries, given dout and the forward's out and lse. */
void loom_ring_attention_backward(const loom_ring_attn *r, float *dq, float *dk, float *dv,
                                  const float *dout, const float *out, const float *lse,
                                  const float *q, const float *k, const float *v);

/* Bidirectional attention within segments on a ring (the vision encoder's windows and whole
 * frames): rank r holds the P consecutive tokens [r*P, (r+1)*P) of one sequence; a query sees
 * the keys of its own segment, wherever they are (seg: boundaries over the whole sequence,
 * seg[0] = 0 < seg[1] < ... < seg[nseg], as loom_seg_attention_*). Same ring as above (K/V
 * blocks of P x H x D, the same volumes); each block pair is computed row by row over the
 * keys of the query's segment that the block holds (no tiles: segments may cross block
 * boundaries anywhere), merged by log-sum-exp. Shapes: q, k, v, out (P,H,D); lse (H,P). */
typedef struct {
  const loom_comm *comm;
  int P, H, D;
  const int *seg;
  int nseg;
  float *work; /* loom_ring_seg_attention_work_floats() floats */
} loom_ring_seg_attn;

size_t loom_ring_seg_attention_work_floats(int P, int H, int D);
void loom_ring_seg_attention_forward(const loom_ring_seg_attn *r, float *out, float *lse,
                                     const float *q, const float *k, const float *v);
/* Writes dq, dk, dv (P,H,D). */
void loom_ring_seg_attention_backward(const loom_ring_seg_attn *r, float *dq, float *dk,
                                      float *dv, const float *dout, const float *out,
                                      const float *lse, const float *q, const float *k,
                                      const float *v);
#endif

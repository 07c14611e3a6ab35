/* Interleaved 1F1B (Megatron-LM's forward_backward_pipelining_with_interleaving), vpp >= 2
 * chunks per rank, rank r holding virtual stages c*pp + r.
 *
 * Micro-batches are taken in groups of N (N = pp when pp divides m): the k-th forward on
 * every rank is entry k of a table that lists, group after group, chunk 0 for the group's
 * micro-batches, then chunk 1, ... chunk vpp-1 (Megatron's get_schedule_table with
 * microbatch_group_size_per_vp_stage = N). The k-th backward is entry k with the chunk
 * mirrored (vpp-1-c), so backwards start on the last chunk. Rank r runs
 * w = (pp-r-1)*2 + (vpp-1)*N warmup forwards (capped at m*vpp), then pairs forward(w+k),
 * backward(k), then the remaining backwards.
 *
 * Megatron requires m % pp == 0 with its default N. Here any m works: when pp does not
 * divide m, N is the smallest group size Megatron would accept (see group_size), which keeps
 * the bubble at (pp-1)/(vpp*m) for every m >= pp; m < pp gives one group of m micro-batches
 * and a bubble of ((pp-1) + (pp-m)(vpp-1)) / (vpp*m). The tests check both and that every
 * such schedule validates (no deadlock). */
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

/* Micro-batches per group N: pp when pp divides m (Megatron's default), else the smallest
 * N in [pp, m] whose last group (m % N) is empty or holds at least pp micro-batches, which is
 * Megatron's condition on microbatch_group_size_per_vp_stage; m when m <= pp. */
static int group_size(int pp, int m) {
  if (m <= pp) return m;
  for (int n = pp; n < m; n++)
    if (m % n == 0 || m % n >= pp) return n;
  return m;
}

/* table[k] = (chunk, mb) of the k-th forward, k < m*vpp: for each group of N micro-batches
 * (the last one holding the rest), chunk 0 over the group, then chunk 1, ... */
static void build_table(const loom_schedule *s, int n, int *tchunk, int *tmb) {
  int m = s->microbatches, k = 0;
  for (int start = 0; start < m; start += n) {
    int end = start + n >= m ? m : start + n;
    for (int c = 0; c < s->vpp; c++)
      for (int mb = start; mb < end; mb++) {
        tchunk[k] = c;
        tmb[k] = mb;
        k++;
      }
  }
}

void sched_generate_interleaved(loom_schedule *s) {
  int pp = s->pp, vpp = s->vpp, m = s->microbatches, total = m * vpp;
  int *tchunk = loom_malloc((size_t)total * sizeof *tchunk);
  int *tmb = loom_malloc((size_t)total * sizeof *tmb);
  unsigned char *loaded = loom_malloc((size_t)m);
  int n = group_size(pp, m);
  build_table(s, n, tchunk, tmb);
  for (int r = 0; r < pp; r++) {
    memset(loaded, 0, (size_t)m);
    long w = (long)(pp - r - 1) * 2 + (long)(vpp - 1) * n;
    int warmup = w < total ? (int)w : total;
    for (int k = 0; k < warmup; k++) sched_emit_forward(s, r, tchunk[k], tmb[k], loaded);
    for (int k = 0; k < total - warmup; k++) {
      int f = warmup + k;
      sched_emit_forward(s, r, tchunk[f], tmb[f], loaded);
      sched_emit_backward(s, r, vpp - 1 - tchunk[k], tmb[k]);
    }
    for (int k = total - warmup; k < total; k++)
      sched_emit_backward(s, r, vpp - 1 - tchunk[k], tmb[k]);
    sched_emit_tail(s, r);
  }
  free(tchunk);
  free(tmb);
  free(loaded);
}

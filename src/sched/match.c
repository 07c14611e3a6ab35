/* Send/recv matching: each activation or gradient crossing a virtual stage boundary for one
 * micro-batch is a message with a key (direction, boundary, mb); every key must have exactly
 * one send and one recv. Fields and peers are checked before (validate.c), so a matching
 * key also means consistent ranks and chunks. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

long sched_key(const loom_schedule *s, int rank, const loom_instr *in) {
  int v = loom_sched_vstage(s, rank, in->chunk), bounds = s->pp * s->vpp - 1;
  int dir = in->kind == LOOM_INSTR_SEND_GRAD || in->kind == LOOM_INSTR_RECV_GRAD;
  int b = in->kind == LOOM_INSTR_SEND_ACT || in->kind == LOOM_INSTR_RECV_GRAD ? v : v - 1;
  return ((long)dir * bounds + b) * s->microbatches + in->mb;
}

/* The instruction that would match `in` on its peer, as text. */
static void counterpart(const loom_schedule *s, int rank, const loom_instr *in, char *buf,
                        size_t n) {
  static const loom_instr_kind other[LOOM_INSTR_COUNT] = {
      [LOOM_INSTR_SEND_ACT] = LOOM_INSTR_RECV_ACT, [LOOM_INSTR_RECV_ACT] = LOOM_INSTR_SEND_ACT,
      [LOOM_INSTR_SEND_GRAD] = LOOM_INSTR_RECV_GRAD, [LOOM_INSTR_RECV_GRAD] = LOOM_INSTR_SEND_GRAD};
  int v = loom_sched_vstage(s, rank, in->chunk);
  int down = in->kind == LOOM_INSTR_SEND_ACT || in->kind == LOOM_INSTR_RECV_GRAD;
  int peer_v = down ? v + 1 : v - 1;
  loom_instr want = {other[in->kind], loom_sched_vstage_chunk(s, peer_v), in->mb, rank};
  loom_instr_format(&want, buf, n);
}

static int unmatched(const loom_schedule *s, int r, int i) {
  const loom_instr *in = &s->instr[r][i];
  char want[96];
  counterpart(s, r, in, want, sizeof want);
  if (sched_is_send(in->kind))
    return loom_err("%sunmatched send: rank %d has no '%s' to receive it", sched_where(s, r, i),
                    in->peer, want);
  return loom_err("%srecv with no matching send: rank %d has no '%s'", sched_where(s, r, i),
                  in->peer, want);
}

int sched_match(const loom_schedule *s, sched_links *links) {
  links->peer_index = NULL;
  long nkeys = sched_key_count(s);
  int *at_rank[2], *at_index[2]; /* [0] send, [1] recv: where each key was seen */
  for (int d = 0; d < 2; d++) {
    at_rank[d] = loom_malloc((size_t)(nkeys ? nkeys : 1) * sizeof(int));
    at_index[d] = loom_malloc((size_t)(nkeys ? nkeys : 1) * sizeof(int));
    for (long k = 0; k < nkeys; k++) at_rank[d][k] = -1;
  }
  int rc = 0;
  for (int r = 0; r < s->pp && !rc; r++)
    for (int i = 0; i < s->count[r] && !rc; i++) {
      const loom_instr *in = &s->instr[r][i];
      if (!sched_is_send(in->kind) && !sched_is_recv(in->kind)) continue;
      int d = sched_is_recv(in->kind);
      long k = sched_key(s, r, in);
      if (at_rank[d][k] >= 0) {
        rc = loom_err("%sduplicate: rank %d instruction %d already %s this %s of micro-batch %d",
                      sched_where(s, r, i), at_rank[d][k], at_index[d][k],
                      d ? "receives" : "sends",
                      in->kind == LOOM_INSTR_SEND_ACT || in->kind == LOOM_INSTR_RECV_ACT
                          ? "activation" : "gradient",
                      in->mb);
        break;
      }
      at_rank[d][k] = r;
      at_index[d][k] = i;
    }
  /* Report the first unmatched message in (rank, index) order. */
  for (int r = 0; r < s->pp && !rc; r++)
    for (int i = 0; i < s->count[r] && !rc; i++) {
      const loom_instr *in = &s->instr[r][i];
      if (!sched_is_send(in->kind) && !sched_is_recv(in->kind)) continue;
      if (at_rank[!sched_is_recv(in->kind)][sched_key(s, r, in)] < 0) rc = unmatched(s, r, i);
    }
  if (!rc) {
    links->peer_index = loom_calloc((size_t)(unsigned)s->pp, sizeof *links->peer_index);
    for (int r = 0; r < s->pp; r++) {
      links->peer_index[r] = loom_malloc((size_t)(s->count[r] ? s->count[r] : 1) * sizeof(int));
      for (int i = 0; i < s->count[r]; i++) {
        const loom_instr *in = &s->instr[r][i];
        int is_msg = sched_is_send(in->kind) || sched_is_recv(in->kind);
        links->peer_index[r][i] =
            is_msg ? at_index[!sched_is_recv(in->kind)][sched_key(s, r, in)] : -1;
      }
    }
  }
  for (int d = 0; d < 2; d++) {
    free(at_rank[d]);
    free(at_index[d]);
  }
  return rc;
}

void sched_links_free(const loom_schedule *s, sched_links *links) {
  if (!links->peer_index) return;
  for (int r = 0; r < s->pp; r++) free(links->peer_index[r]);
  free(links->peer_index);
  links->peer_index = NULL;
}

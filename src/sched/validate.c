/* loom_sched_validate and its first pass: the schedule's shape (sched_check_shape, beside the
 * container in schedule.c), then each instruction on its own (kind, fields present and in
 * range, send/recv peers consistent with the chunk placement, first/last virtual stage
 * rules). Later passes: match.c, validate_order.c, deadlock.c. */
#include <stdio.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

/* Where the neighbouring virtual stage lives, for peer messages. */
static int wrong_peer(const loom_schedule *s, int r, int i, int v, int want_v, const char *dir) {
  return loom_err("%swrong peer: %s virtual stage %d (chunk %d on rank %d) is stage %d, which "
                  "is chunk %d on rank %d",
                  sched_where(s, r, i), dir, v, loom_sched_vstage_chunk(s, v), r, want_v,
                  loom_sched_vstage_chunk(s, want_v), loom_sched_vstage_rank(s, want_v));
}

/* Send/recv placement: the peer must hold the neighbouring virtual stage. */
static int check_peer(const loom_schedule *s, int r, int i) {
  const loom_instr *in = &s->instr[r][i];
  int v = loom_sched_vstage(s, r, in->chunk), last = s->pp * s->vpp - 1;
  if (s->pp == 1)
    return loom_err("%spp = 1 keeps every chunk on rank 0: data passes between chunks locally, "
                    "so a schedule with pp = 1 has no send or recv",
                    sched_where(s, r, i));
  switch (in->kind) {
  case LOOM_INSTR_SEND_ACT:
    if (v == last)
      return loom_err("%sthe last virtual stage (chunk %d on rank %d) computes the loss; its "
                      "output is not sent",
                      sched_where(s, r, i), in->chunk, r);
    if (in->peer != loom_sched_vstage_rank(s, v + 1))
      return wrong_peer(s, r, i, v, v + 1, "the output of");
    break;
  case LOOM_INSTR_RECV_ACT:
    if (v == 0)
      return loom_err("%sthe first virtual stage (chunk 0 on rank 0) reads its input with "
                      "'load'; it receives no activation",
                      sched_where(s, r, i));
    if (in->peer != loom_sched_vstage_rank(s, v - 1))
      return wrong_peer(s, r, i, v, v - 1, "the input of");
    break;
  case LOOM_INSTR_SEND_GRAD:
    if (v == 0)
      return loom_err("%sthe first virtual stage (chunk 0 on rank 0) has no upstream stage to "
                      "send an input gradient to",
                      sched_where(s, r, i));
    if (in->peer != loom_sched_vstage_rank(s, v - 1))
      return wrong_peer(s, r, i, v, v - 1, "the input gradient of");
    break;
  case LOOM_INSTR_RECV_GRAD:
    if (v == last)
      return loom_err("%sthe last virtual stage (chunk %d on rank %d) gets its output gradient "
                      "from the loss; it receives none",
                      sched_where(s, r, i), in->chunk, r);
    if (in->peer != loom_sched_vstage_rank(s, v + 1))
      return wrong_peer(s, r, i, v, v + 1, "the output gradient of");
    break;
  default:
    break;
  }
  return 0;
}

static int check_instr(const loom_schedule *s, int r, int i) {
  const loom_instr *in = &s->instr[r][i];
  if ((unsigned)in->kind >= LOOM_INSTR_COUNT)
    return loom_err("%sunknown instruction kind %d", sched_where(s, r, i), (int)in->kind);
  const sched_kind_info *k = &sched_kinds[in->kind];
  unsigned used = k->required | k->optional;
  if (k->required & SCHED_F_CHUNK || (k->optional & SCHED_F_CHUNK && in->chunk != -1)) {
    if (in->chunk < 0 || in->chunk >= s->vpp)
      return loom_err("%schunk=%d is out of range: each rank holds chunks 0..%d (vpp=%d)",
                      sched_where(s, r, i), in->chunk, s->vpp - 1, s->vpp);
  } else if (in->chunk != -1) {
    return loom_err("%s%s takes no chunk (chunk=%d; set -1)", sched_where(s, r, i), k->name,
                    in->chunk);
  }
  if (used & SCHED_F_MB) {
    if (in->mb < 0 || in->mb >= s->microbatches)
      return loom_err("%smb=%d is out of range: the schedule has microbatches=%d (0..%d)",
                      sched_where(s, r, i), in->mb, s->microbatches, s->microbatches - 1);
  } else if (in->mb != -1) {
    return loom_err("%s%s takes no micro-batch (mb=%d; set -1)", sched_where(s, r, i), k->name,
                    in->mb);
  }
  if (used & (SCHED_F_TO | SCHED_F_FROM)) {
    if (in->peer < 0 || in->peer >= s->pp)
      return loom_err("%s%s=%d is out of range: pipeline ranks are 0..%d (pp=%d)",
                      sched_where(s, r, i), used & SCHED_F_TO ? "to" : "from", in->peer,
                      s->pp - 1, s->pp);
    return check_peer(s, r, i);
  }
  if (in->peer != -1)
    return loom_err("%s%s takes no peer rank (peer=%d; set -1)", sched_where(s, r, i), k->name,
                    in->peer);
  if (in->kind == LOOM_INSTR_LOAD_MB && r != 0 && r != s->pp - 1)
    return loom_err("%srank %d holds neither the first virtual stage (rank 0) nor the last "
                    "(rank %d), so it loads no data",
                    sched_where(s, r, i), r, s->pp - 1);
  return 0;
}

int sched_check_fields(const loom_schedule *s) {
  if (!s->count || !s->instr)
    return loom_err("schedule has no instruction lists (not generated or parsed?)");
  for (int r = 0; r < s->pp; r++) {
    if (s->count[r] < 0 || (s->count[r] > 0 && !s->instr[r]))
      return loom_err("rank %d: broken instruction list (count %d)", r, s->count[r]);
    for (int i = 0; i < s->count[r]; i++)
      if (check_instr(s, r, i)) return LOOM_ERR;
  }
  return 0;
}

int loom_sched_validate(const loom_schedule *s) {
  if (sched_check_shape(s) || sched_check_fields(s)) return LOOM_ERR;
  sched_links links;
  if (sched_match(s, &links)) return LOOM_ERR;
  int rc = sched_check_order(s);
  if (!rc) rc = sched_check_deadlock(s, &links);
  sched_links_free(s, &links);
  return rc;
}

/* Order within each rank's list: every forward(c, mb) exactly once, after its input is
 * available (load on the first/last virtual stage, recv-act or the previous local chunk);
 * backward exactly once (or backward-input then backward-weight), after its forward and its
 * output gradient; sends after what they send; reduce-grads after every backward of its
 * chunks; optimizer-step last, after every chunk's gradients are reduced. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

/* Instruction index at which each event happened on the rank being checked, -1 if not yet. */
typedef struct {
  int *fwd, *bwd, *bwd_in, *bwd_w;    /* (vpp * m) */
  int *recv_act, *recv_grad;          /* (vpp * m) */
  int *load;                          /* (m) */
  int *reduced;                       /* (vpp) */
  int opt;
} rank_state;

enum { N_UNIT_ARRAYS = 6 };

static void state_reset(rank_state *st, int *mem, int units, int m, int vpp) {
  int total = N_UNIT_ARRAYS * units + m + vpp;
  for (int j = 0; j < total; j++) mem[j] = -1;
  int **arrays[N_UNIT_ARRAYS] = {&st->fwd, &st->bwd, &st->bwd_in, &st->bwd_w,
                                 &st->recv_act, &st->recv_grad};
  for (int a = 0; a < N_UNIT_ARRAYS; a++) *arrays[a] = mem + a * units;
  st->load = mem + N_UNIT_ARRAYS * units;
  st->reduced = st->load + m;
  st->opt = -1;
}

/* Index of the backward that produced the input gradient of (c, mb), -1 if none yet. */
static int input_grad_at(const rank_state *st, int u) {
  return st->bwd[u] >= 0 ? st->bwd[u] : st->bwd_in[u];
}

static int check_forward(const loom_schedule *s, const rank_state *st, int r, int i) {
  const loom_instr *in = &s->instr[r][i];
  int c = in->chunk, mb = in->mb, u = sched_unit(s, c, mb);
  int v = loom_sched_vstage(s, r, c), last = s->pp * s->vpp - 1;
  if (st->fwd[u] >= 0)
    return loom_err("%sduplicate forward: 'forward chunk=%d mb=%d' already ran at instruction "
                    "%d", sched_where(s, r, i), c, mb, st->fwd[u]);
  if ((v == 0 || v == last) && st->load[mb] < 0)
    return loom_err("%smicro-batch %d is not loaded: the %s virtual stage needs its %s; add "
                    "'load mb=%d' before it", sched_where(s, r, i), mb,
                    v == 0 ? "first" : "last", v == 0 ? "tokens" : "targets", mb);
  if (v > 0 && s->pp > 1 && st->recv_act[u] < 0)
    return loom_err("%sits input activation has not been received: add 'recv-act chunk=%d mb=%d "
                    "from=%d' before it", sched_where(s, r, i), c, mb,
                    loom_sched_vstage_rank(s, v - 1));
  if (v > 0 && s->pp == 1 && st->fwd[sched_unit(s, c - 1, mb)] < 0)
    return loom_err("%sits input is the output of 'forward chunk=%d mb=%d' on this rank, which "
                    "has not run yet", sched_where(s, r, i), c - 1, mb);
  return 0;
}

static int check_backward(const loom_schedule *s, const rank_state *st, int r, int i) {
  const loom_instr *in = &s->instr[r][i];
  int c = in->chunk, mb = in->mb, u = sched_unit(s, c, mb);
  int v = loom_sched_vstage(s, r, c), last = s->pp * s->vpp - 1;
  if (input_grad_at(st, u) >= 0)
    return loom_err("%sduplicate backward: chunk %d mb %d already ran backward at instruction "
                    "%d", sched_where(s, r, i), c, mb, input_grad_at(st, u));
  if (st->fwd[u] < 0)
    return loom_err("%sbackward before forward: 'forward chunk=%d mb=%d' has not run on this "
                    "rank yet", sched_where(s, r, i), c, mb);
  if (v < last && s->pp > 1 && st->recv_grad[u] < 0)
    return loom_err("%sits output gradient has not been received: add 'recv-grad chunk=%d "
                    "mb=%d from=%d' before it", sched_where(s, r, i), c, mb,
                    loom_sched_vstage_rank(s, v + 1));
  if (v < last && s->pp == 1 && input_grad_at(st, sched_unit(s, c + 1, mb)) < 0)
    return loom_err("%sits output gradient comes from 'backward chunk=%d mb=%d' on this rank, "
                    "which has not run yet", sched_where(s, r, i), c + 1, mb);
  return 0;
}

static int check_backward_weight(const loom_schedule *s, const rank_state *st, int r, int i) {
  const loom_instr *in = &s->instr[r][i];
  int u = sched_unit(s, in->chunk, in->mb);
  if (st->bwd[u] >= 0)
    return loom_err("%s'backward chunk=%d mb=%d' at instruction %d already computed the weight "
                    "gradient", sched_where(s, r, i), in->chunk, in->mb, st->bwd[u]);
  if (st->bwd_w[u] >= 0)
    return loom_err("%sduplicate backward-weight (first at instruction %d)",
                    sched_where(s, r, i), st->bwd_w[u]);
  if (st->bwd_in[u] < 0)
    return loom_err("%sbackward-weight before backward-input: 'backward-input chunk=%d mb=%d' "
                    "has not run yet", sched_where(s, r, i), in->chunk, in->mb);
  return 0;
}

static int check_reduce(const loom_schedule *s, const rank_state *st, int r, int i) {
  const loom_instr *in = &s->instr[r][i];
  int c0 = in->chunk < 0 ? 0 : in->chunk, c1 = in->chunk < 0 ? s->vpp : in->chunk + 1;
  for (int c = c0; c < c1; c++) {
    if (st->reduced[c] >= 0)
      return loom_err("%sthe gradients of chunk %d were already reduced at instruction %d",
                      sched_where(s, r, i), c, st->reduced[c]);
    for (int mb = 0; mb < s->microbatches; mb++) {
      int u = sched_unit(s, c, mb);
      if (st->bwd[u] < 0 && st->bwd_w[u] < 0)
        return loom_err("%sthe weight gradients of chunk %d are incomplete: 'backward chunk=%d "
                        "mb=%d'%s has not run (reduce-grads goes after every backward of its "
                        "chunks)", sched_where(s, r, i), c, c, mb,
                        st->bwd_in[u] >= 0 ? " (its backward-weight)" : "");
    }
  }
  return 0;
}

/* Check instruction i against the state, then record it. */
static int step(const loom_schedule *s, rank_state *st, int r, int i) {
  const loom_instr *in = &s->instr[r][i];
  if (st->opt >= 0)
    return loom_err("%scomes after optimizer-step (instruction %d), which must be the last "
                    "instruction of the rank", sched_where(s, r, i), st->opt);
  int u = in->chunk >= 0 && in->mb >= 0 ? sched_unit(s, in->chunk, in->mb) : -1;
  int *slot = NULL;
  switch (in->kind) {
  case LOOM_INSTR_FORWARD:
    if (check_forward(s, st, r, i)) return LOOM_ERR;
    slot = &st->fwd[u];
    break;
  case LOOM_INSTR_BACKWARD:
  case LOOM_INSTR_BACKWARD_INPUT:
    if (check_backward(s, st, r, i)) return LOOM_ERR;
    slot = in->kind == LOOM_INSTR_BACKWARD ? &st->bwd[u] : &st->bwd_in[u];
    break;
  case LOOM_INSTR_BACKWARD_WEIGHT:
    if (check_backward_weight(s, st, r, i)) return LOOM_ERR;
    slot = &st->bwd_w[u];
    break;
  case LOOM_INSTR_SEND_ACT:
    if (st->fwd[u] < 0)
      return loom_err("%ssends the output of 'forward chunk=%d mb=%d', which has not run yet",
                      sched_where(s, r, i), in->chunk, in->mb);
    break;
  case LOOM_INSTR_SEND_GRAD:
    if (input_grad_at(st, u) < 0)
      return loom_err("%ssends the input gradient of 'backward chunk=%d mb=%d', which has not "
                      "run yet", sched_where(s, r, i), in->chunk, in->mb);
    break;
  case LOOM_INSTR_RECV_ACT:
    slot = &st->recv_act[u];
    break;
  case LOOM_INSTR_RECV_GRAD:
    slot = &st->recv_grad[u];
    break;
  case LOOM_INSTR_LOAD_MB:
    if (st->load[in->mb] >= 0)
      return loom_err("%sduplicate: micro-batch %d was already loaded at instruction %d",
                      sched_where(s, r, i), in->mb, st->load[in->mb]);
    slot = &st->load[in->mb];
    break;
  case LOOM_INSTR_REDUCE_GRADS:
    if (check_reduce(s, st, r, i)) return LOOM_ERR;
    for (int c = 0; c < s->vpp; c++)
      if (in->chunk < 0 || in->chunk == c) st->reduced[c] = i;
    break;
  case LOOM_INSTR_OPTIMIZER_STEP:
    for (int c = 0; c < s->vpp; c++)
      if (st->reduced[c] < 0)
        return loom_err("%sthe gradients of chunk %d have not been reduced: add 'reduce-grads' "
                        "before the optimizer step", sched_where(s, r, i), c);
    st->opt = i;
    break;
  default: /* gather-params: no ordering rule */
    break;
  }
  if (slot) *slot = i; /* duplicates of sends/recvs were reported by the matching pass */
  return 0;
}

/* After the last instruction: every forward and backward ran, and the step ended. */
static int check_complete(const loom_schedule *s, const rank_state *st, int r) {
  int n = s->count[r];
  char end[200];
  char last[96];
  if (n) loom_instr_format(&s->instr[r][n - 1], last, sizeof last);
  if (n) snprintf(end, sizeof end, "rank %d, end of list (after instruction %d '%s')", r, n - 1,
                  last);
  else snprintf(end, sizeof end, "rank %d, end of list (the list is empty)", r);
  for (int c = 0; c < s->vpp; c++)
    for (int mb = 0; mb < s->microbatches; mb++) {
      int u = sched_unit(s, c, mb);
      if (st->fwd[u] < 0)
        return loom_err("%s: 'forward chunk=%d mb=%d' is missing: every chunk runs forward once "
                        "per micro-batch", end, c, mb);
      if (st->bwd_in[u] >= 0 && st->bwd_w[u] < 0)
        return loom_err("%sits 'backward-weight chunk=%d mb=%d' is missing",
                        sched_where(s, r, st->bwd_in[u]), c, mb);
      if (input_grad_at(st, u) < 0)
        return loom_err("%smissing backward: 'backward chunk=%d mb=%d' (or backward-input + "
                        "backward-weight) never follows", sched_where(s, r, st->fwd[u]), c, mb);
    }
  if (st->opt < 0)
    return loom_err("%s: no optimizer-step: every rank ends its list with one", end);
  return 0;
}

int sched_check_order(const loom_schedule *s) {
  int units = s->vpp * s->microbatches;
  int *mem = loom_malloc(((size_t)N_UNIT_ARRAYS * units + s->microbatches + s->vpp) * sizeof(int));
  int rc = 0;
  for (int r = 0; r < s->pp && !rc; r++) {
    rank_state st;
    state_reset(&st, mem, units, s->microbatches, s->vpp);
    for (int i = 0; i < s->count[r] && !rc; i++) rc = step(s, &st, r, i);
    if (!rc) rc = check_complete(s, &st, r);
  }
  free(mem);
  return rc;
}

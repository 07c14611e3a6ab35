/* The schedule container: kind keywords and their fields, its shape limits, building per-rank
 * lists, freeing, and the one-line text of an instruction used by the text form and by error
 * messages. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "sched/sched_internal.h"

#define CM (SCHED_F_CHUNK | SCHED_F_MB)
const sched_kind_info sched_kinds[LOOM_INSTR_COUNT] = {
    [LOOM_INSTR_FORWARD] = {"forward", CM, 0},
    [LOOM_INSTR_BACKWARD] = {"backward", CM, 0},
    [LOOM_INSTR_BACKWARD_INPUT] = {"backward-input", CM, 0},
    [LOOM_INSTR_BACKWARD_WEIGHT] = {"backward-weight", CM, 0},
    [LOOM_INSTR_SEND_ACT] = {"send-act", CM | SCHED_F_TO, 0},
    [LOOM_INSTR_RECV_ACT] = {"recv-act", CM | SCHED_F_FROM, 0},
    [LOOM_INSTR_SEND_GRAD] = {"send-grad", CM | SCHED_F_TO, 0},
    [LOOM_INSTR_RECV_GRAD] = {"recv-grad", CM | SCHED_F_FROM, 0},
    [LOOM_INSTR_LOAD_MB] = {"load", SCHED_F_MB, 0},
    [LOOM_INSTR_REDUCE_GRADS] = {"reduce-grads", 0, SCHED_F_CHUNK},
    [LOOM_INSTR_GATHER_PARAMS] = {"gather-params", 0, SCHED_F_CHUNK},
    [LOOM_INSTR_OPTIMIZER_STEP] = {"optimizer-step", 0, 0},
};

const char *loom_instr_kind_name(loom_instr_kind kind) {
  return (unsigned)kind < LOOM_INSTR_COUNT ? sched_kinds[kind].name : NULL;
}

/* The shape limits of a schedule (sched_internal.h): sched_init checks them before it
 * allocates (the generators and the text loader start there), and so does validation. */
int sched_check_shape(const loom_schedule *s) {
  if (s->pp < 1 || s->pp > LOOM_SCHED_MAX_PP)
    return loom_err("pp = %d is out of range: it must be 1..%d", s->pp, LOOM_SCHED_MAX_PP);
  if (s->vpp < 1 || s->vpp > LOOM_SCHED_MAX_VPP)
    return loom_err("vpp = %d is out of range: it must be 1..%d", s->vpp, LOOM_SCHED_MAX_VPP);
  if (s->microbatches < 1 || s->microbatches > LOOM_SCHED_MAX_MICROBATCHES)
    return loom_err("microbatches = %d is out of range: it must be 1..%d", s->microbatches,
                    LOOM_SCHED_MAX_MICROBATCHES);
  long units = (long)s->pp * s->vpp * s->microbatches;
  if (units > LOOM_SCHED_MAX_UNITS)
    return loom_err("pp * vpp * microbatches = %d * %d * %d = %ld exceeds %ld: the schedule "
                    "would hold too many instructions; use fewer micro-batches or chunks",
                    s->pp, s->vpp, s->microbatches, units, LOOM_SCHED_MAX_UNITS);
  return 0;
}

int sched_init(loom_schedule *s, const char *name, int pp, int vpp, int microbatches) {
  memset(s, 0, sizeof *s);
  s->pp = pp;
  s->vpp = vpp;
  s->microbatches = microbatches;
  if (sched_check_shape(s)) {
    memset(s, 0, sizeof *s);
    return LOOM_ERR;
  }
  snprintf(s->name, sizeof s->name, "%s", name);
  s->count = loom_calloc((size_t)pp, sizeof *s->count);
  s->instr = loom_calloc((size_t)pp, sizeof *s->instr);
  return 0;
}

/* Capacity is kept implicitly: lists grow to the next power of two. */
void sched_push(loom_schedule *s, int rank, loom_instr_kind kind, int chunk, int mb, int peer) {
  int n = s->count[rank];
  if ((n & (n - 1)) == 0) { /* n is 0 or a power of two: full */
    size_t cap = n ? 2 * (size_t)n : 16;
    s->instr[rank] = loom_realloc(s->instr[rank], cap, sizeof(loom_instr));
  }
  s->instr[rank][n] = (loom_instr){kind, chunk, mb, peer};
  s->count[rank] = n + 1;
}

void loom_sched_free(loom_schedule *s) {
  if (!s) return;
  if (s->instr)
    for (int r = 0; r < s->pp; r++) free(s->instr[r]);
  free(s->instr);
  free(s->count);
  memset(s, 0, sizeof *s);
}

void loom_instr_format(const loom_instr *in, char *buf, size_t n) {
  if (!n) return;
  const char *name = loom_instr_kind_name(in->kind);
  if (!name) {
    snprintf(buf, n, "unknown-kind(%d) chunk=%d mb=%d peer=%d", (int)in->kind, in->chunk,
             in->mb, in->peer);
    return;
  }
  const sched_kind_info *k = &sched_kinds[in->kind];
  unsigned fields = k->required;
  if ((k->optional & SCHED_F_CHUNK) && in->chunk >= 0) fields |= SCHED_F_CHUNK;
  static const char *const keys[4] = {"chunk", "mb", "to", "from"}; /* bit order of SCHED_F_* */
  const int vals[4] = {in->chunk, in->mb, in->peer, in->peer};
  size_t len = (size_t)snprintf(buf, n, "%s", name);
  for (int f = 0; f < 4 && len < n; f++)
    if (fields & (1u << f)) len += (size_t)snprintf(buf + len, n - len, " %s=%d", keys[f], vals[f]);
}

const char *sched_where(const loom_schedule *s, int rank, int index) {
  static _Thread_local char buf[160];
  char text[96];
  loom_instr_format(&s->instr[rank][index], text, sizeof text);
  snprintf(buf, sizeof buf, "rank %d, instruction %d '%s': ", rank, index, text);
  return buf;
}

int sched_name_ok(const char *name, size_t n) {
  if (n == 0 || n > 31) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '.' || c == '+' || c == '-'))
      return 0;
  }
  return 1;
}

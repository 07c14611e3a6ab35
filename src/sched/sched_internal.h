/* Internal helpers shared by the schedule sources: the field table of each instruction kind,
 * a growable per-rank list builder, message keys for send/recv matching, and the replay
 * (asynchronous sends, blocking receives) used by deadlock detection and the bubble. */
#ifndef LOOM_SCHED_INTERNAL_H
#define LOOM_SCHED_INTERNAL_H
#include "loom/sched.h"

/* Fields an instruction kind carries in the text form. */
enum { SCHED_F_CHUNK = 1, SCHED_F_MB = 2, SCHED_F_TO = 4, SCHED_F_FROM = 8 };
typedef struct {
  const char *name;  /* keyword in the text form */
  unsigned required; /* SCHED_F_* that must be present */
  unsigned optional; /* SCHED_F_* that may be present (the field is -1 when absent) */
} sched_kind_info;
extern const sched_kind_info sched_kinds[LOOM_INSTR_COUNT];

static inline int sched_is_compute(loom_instr_kind k) {
  return k == LOOM_INSTR_FORWARD || k == LOOM_INSTR_BACKWARD ||
         k == LOOM_INSTR_BACKWARD_INPUT || k == LOOM_INSTR_BACKWARD_WEIGHT;
}
static inline int sched_is_send(loom_instr_kind k) {
  return k == LOOM_INSTR_SEND_ACT || k == LOOM_INSTR_SEND_GRAD;
}
static inline int sched_is_recv(loom_instr_kind k) {
  return k == LOOM_INSTR_RECV_ACT || k == LOOM_INSTR_RECV_GRAD;
}

/* The shape limits: pp, vpp, microbatches and their product in range (schedule.c; the first
 * check of every builder, loader and validation). 0, or LOOM_ERR naming the value. */
int sched_check_shape(const loom_schedule *s);
/* Empty schedule with pp lists (no instructions); checks the shape limits. */
int sched_init(loom_schedule *s, const char *name, int pp, int vpp, int microbatches);
/* Append one instruction to rank's list (grows it). */
void sched_push(loom_schedule *s, int rank, loom_instr_kind kind, int chunk, int mb, int peer);
/* Generator building blocks (generate.c). The forward of (chunk, mb) on rank, preceded by
 * `load mb` when the rank holds the first or last virtual stage and has not loaded mb yet
 * (loaded: the rank's (microbatches) flags), then recv-act, and followed by send-act where
 * the neighbouring stage is on another rank; the backward with recv-grad before and
 * send-grad after; the tail (reduce-grads, optimizer-step). */
void sched_emit_forward(loom_schedule *s, int rank, int chunk, int mb, unsigned char *loaded);
void sched_emit_backward(loom_schedule *s, int rank, int chunk, int mb);
void sched_emit_tail(loom_schedule *s, int rank);
/* The lists of each generator into an initialised schedule (generate_*.c). */
void sched_generate_none(loom_schedule *s);
void sched_generate_gpipe(loom_schedule *s);
void sched_generate_1f1b(loom_schedule *s);
void sched_generate_interleaved(loom_schedule *s);

/* Index of (chunk, mb) in per-rank state arrays. */
static inline int sched_unit(const loom_schedule *s, int chunk, int mb) {
  return chunk * s->microbatches + mb;
}

/* Growable NUL-terminated text (text_write.c); data is malloc'd, starts NULL. */
typedef struct {
  char *data;
  size_t len, cap;
} sched_text;
void sched_text_put(sched_text *b, const char *s);

/* A schedule name the text form carries: 1..31 characters of [A-Za-z0-9_.+-] (n = length). */
int sched_name_ok(const char *name, size_t n);

/* "rank R, instruction I 'TEXT': " prefix for error messages (static buffer). */
const char *sched_where(const loom_schedule *s, int rank, int index);

/* Per instruction of every rank, the index of the matched instruction on the peer rank (the
 * send of a recv, the recv of a send), -1 elsewhere. Built by sched_match, which fails on an
 * unmatched or duplicated message (fields must already be checked). */
typedef struct {
  int **peer_index; /* (pp) x (count[r]) */
} sched_links;
int sched_match(const loom_schedule *s, sched_links *links);
void sched_links_free(const loom_schedule *s, sched_links *links);

/* Validation passes, in the order loom_sched_validate runs them: shape (sched_check_shape,
 * above) and every instruction's fields and placement (validate.c), send/recv matching
 * (match.c), the order within each rank (validate_order.c), deadlock by replay (deadlock.c). */
int sched_check_fields(const loom_schedule *s);
int sched_check_order(const loom_schedule *s);
int sched_check_deadlock(const loom_schedule *s, const sched_links *links);

/* Message key of a send or recv: one per (direction, virtual stage boundary, mb), in
 * [0, sched_key_count). Boundary b lies between virtual stages b and b+1. */
static inline long sched_key_count(const loom_schedule *s) {
  return 2L * (s->pp * s->vpp - 1 > 0 ? s->pp * s->vpp - 1 : 0) * s->microbatches;
}
long sched_key(const loom_schedule *s, int rank, const loom_instr *in);

/* Replay: every rank runs its list in order; an instruction takes cost[kind] time; a recv
 * waits until its matched send has run (its data is ready at the send's end). The caller sets
 * cost and provides busy and blocked; start/end receive per-instruction times when non-NULL
 * ((pp) x (count[r]) arrays the caller owns). Returns 0 when every rank finished, 1 on
 * deadlock with blocked[r] = the index rank r is stuck at (count[r] when it finished). */
typedef struct {
  double cost[LOOM_INSTR_COUNT]; /* in */
  double makespan;               /* out: latest end over all ranks */
  double *busy;                  /* (pp) out: sum of compute costs per rank */
  double **start;                /* optional out */
  double **end;                  /* optional out */
  int *blocked;                  /* (pp) out */
} sched_replay_state;
int sched_replay(const loom_schedule *s, const sched_links *links, sched_replay_state *st);
#endif

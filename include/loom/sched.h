/* loom schedule IR: a training step as, for each pipeline rank, a list of instructions.
 *
 * Generators (no pipeline, GPipe, 1F1B, interleaved 1F1B) produce the lists; the executor
 * (src/exec) runs them on real tensors and MPI; the simulator (src/sim) replays the very same
 * lists on a cost model. A schedule has a text form that parses back, so a user can write a
 * custom strategy in a file, validate it, simulate it and train with it.
 *
 * Model chunks: the layers are split into pp * vpp chunks ("virtual stages"), numbered
 * v = 0 .. pp*vpp-1 in model order. Pipeline rank r holds the vpp chunks v = c*pp + r for
 * local chunk index c = 0 .. vpp-1 (Megatron's interleaving; vpp = 1 gives one chunk per rank).
 * Chunk v = 0 holds the embedding; chunk v = pp*vpp-1 holds the final norm, the LM head and
 * the loss. In every instruction, `chunk` is the LOCAL chunk index c on the executing rank,
 * `mb` the micro-batch (0 .. microbatches-1), `peer` the other pipeline rank of a send/recv.
 *
 * Data flow: forward(c, mb) on the rank of virtual stage v consumes the activation produced by
 * forward of stage v-1 (received with recv-act unless both stages are on the same rank, which
 * happens only when pp == 1) and produces the input of stage v+1. backward(c, mb) consumes the
 * gradient of stage v's output (from stage v+1, recv-grad) and produces the gradient of its
 * input for stage v-1 (send-grad). A send is matched with exactly one recv of the same
 * (virtual stage boundary, mb, direction). */
#ifndef LOOM_SCHED_H
#define LOOM_SCHED_H
#include <stdbool.h>
#include <stddef.h>

typedef enum {
  LOOM_INSTR_FORWARD = 0,     /* forward(chunk, mb) */
  LOOM_INSTR_BACKWARD,        /* backward(chunk, mb): input and weight gradients */
  LOOM_INSTR_BACKWARD_INPUT,  /* input-gradient half of backward (zero-bubble schedules) */
  LOOM_INSTR_BACKWARD_WEIGHT, /* weight-gradient half; after BACKWARD_INPUT of (chunk, mb) */
  LOOM_INSTR_SEND_ACT,        /* send output activation of (chunk, mb) to peer */
  LOOM_INSTR_RECV_ACT,        /* receive input activation of (chunk, mb) from peer */
  LOOM_INSTR_SEND_GRAD,       /* send gradient of the input of (chunk, mb) to peer */
  LOOM_INSTR_RECV_GRAD,       /* receive gradient of the output of (chunk, mb) from peer */
  LOOM_INSTR_LOAD_MB,         /* load micro-batch mb (tokens on the first stage, targets on
                                 the last) */
  LOOM_INSTR_REDUCE_GRADS,    /* data-parallel / ZeRO gradient reduction, tied-embedding sync */
  LOOM_INSTR_GATHER_PARAMS,   /* ZeRO parameter all-gather */
  LOOM_INSTR_OPTIMIZER_STEP,  /* clip + AdamW */
  LOOM_INSTR_COUNT
} loom_instr_kind;

typedef struct {
  loom_instr_kind kind;
  int chunk; /* local chunk index, -1 when not applicable */
  int mb;    /* micro-batch, -1 when not applicable */
  int peer;  /* pipeline rank of the other side of a send/recv, -1 otherwise */
} loom_instr;

typedef struct {
  char name[32];      /* generator name or "custom" */
  int pp;             /* pipeline ranks */
  int vpp;            /* chunks per rank */
  int microbatches;   /* micro-batches per optimizer step */
  int *count;         /* (pp) instructions per rank */
  loom_instr **instr; /* (pp) lists */
} loom_schedule;

/* Generate "none" (pp must be 1), "gpipe", "1f1b" or "interleaved" (vpp >= 2; Megatron's
 * requirement microbatches % pp == 0 is lifted where the generator handles remainders, else a
 * clear error). Errors name the argument and the numbers. */
int loom_sched_generate(loom_schedule *s, const char *name, int pp, int vpp, int microbatches);
/* The forward-only schedule of an evaluation ("forward", src/sched/generate_eval.c): each
 * micro-batch forward through every virtual stage with its load / recv-act / send-act, in the
 * order (mb, virtual stage) on every rank; no backward, reduce-grads or optimizer step. */
int loom_sched_generate_forward(loom_schedule *s, int pp, int vpp, int microbatches);
/* Validate a forward-only schedule: fields, matching, only forward-pass instructions, every
 * forward exactly once after its input, no deadlock. */
int loom_sched_validate_forward(const loom_schedule *s);
/* Check the lists: every send matched by one recv (same boundary, mb, direction, peers
 * consistent with the chunk placement), every forward(c, mb) exactly once and before its
 * backward, each chunk's input available before its forward, no deadlock when sends are
 * asynchronous and recvs block. Errors name the rank, the instruction index and text, and the
 * reason. */
int loom_sched_validate(const loom_schedule *s);
/* Text form (see docs/SCHEDULES.md); malloc'd. */
char *loom_sched_to_text(const loom_schedule *s);
/* Parse the text form; errors name the file and line. Does not validate. */
int loom_sched_parse(loom_schedule *s, const char *text, const char *filename);
int loom_sched_load(loom_schedule *s, const char *path);
void loom_sched_free(loom_schedule *s);
/* Short text of one instruction, e.g. "forward chunk=0 mb=3". */
void loom_instr_format(const loom_instr *in, char *buf, size_t n);
/* Virtual stage of local chunk c on pipeline rank r, and the inverse. */
static inline int loom_sched_vstage(const loom_schedule *s, int rank, int chunk) {
  return chunk * s->pp + rank;
}
static inline int loom_sched_vstage_rank(const loom_schedule *s, int v) { return v % s->pp; }
static inline int loom_sched_vstage_chunk(const loom_schedule *s, int v) { return v / s->pp; }

/* Limits on the shape of a schedule (generators and the parser reject larger ones). */
#define LOOM_SCHED_MAX_PP 4096
#define LOOM_SCHED_MAX_VPP 256
#define LOOM_SCHED_MAX_MICROBATCHES 65536
#define LOOM_SCHED_MAX_UNITS (1L << 22) /* pp * vpp * microbatches */

/* Keyword of an instruction kind in the text form ("forward", "send-act", ...); NULL when out
 * of range. */
const char *loom_instr_kind_name(loom_instr_kind kind);

/* Per-rank timeline grid (malloc'd): the lists replayed with forward 1, backward 2,
 * backward-input/-weight 1, everything else 0, one cell per unit of time, e.g.
 *   rank 0 | F0 F1 F2 F3 .  .  .  .  .  .  B0 B0 F4 ...
 * (F forward, B backward, I backward-input, W backward-weight, followed by the micro-batch and,
 * when vpp > 1, ".chunk"; a backward fills 2 cells; "." idle). Validates first; NULL with
 * loom_err set for an invalid schedule. */
char *loom_sched_to_grid(const loom_schedule *s);

/* Ownership: generate, parse and load overwrite *s (without freeing what it held); on failure
 * *s is left empty (zeroed), so loom_sched_free is always safe to call. */

/* Bubble fraction of the schedule replayed with forward = t_fwd, backward = t_bwd
 * (backward-input and backward-weight t_bwd/2 each), everything else 0, sends asynchronous:
 * sum over ranks of idle time / sum over ranks of busy time, idle being the step's makespan
 * minus the rank's busy time. This is Megatron's definition (bubble time over ideal time), so
 * with t_bwd = 2 t_fwd: GPipe and 1F1B give (pp-1)/m, interleaved (pp-1)/(vpp*m) for
 * m >= pp (docs/SCHEDULES.md has m < pp). Idle over the whole step is bubble / (1 + bubble).
 * Validates first; returns -1 (with loom_err set) for an invalid schedule or non-positive
 * costs. */
double loom_sched_bubble_fraction(const loom_schedule *s, double t_fwd, double t_bwd);
/* Peak number of (chunk, mb) pairs on `rank` whose forward has run and whose backward (or
 * backward-weight) has not, walking the list in order: 1F1B gives min(pp - rank, m), GPipe m.
 * -1 (with loom_err set) for a rank out of range. */
int loom_sched_peak_inflight(const loom_schedule *s, int rank);
/* Replay with a timing model (the simulator's use of the lists): ranks advance under the
 * executor's communication model (sends never wait, a recv waits until its matched send has
 * run) and `fn` times each instruction. It gets `start` (when the rank reaches it) and, for a
 * recv, `arrival` (the `ready` its matched send reported), and sets `end` (when the rank may
 * run its next instruction, >= start) and, for a send, `ready` (when its data is available
 * to the recv). A rank's instructions are timed in list order. The optimizer steps are a
 * barrier (the executor all-reduces the global gradient norm over every rank first): they all
 * start at the latest time any rank reaches its own. Returns 0, or -1 with loom_err
 * when sends and recvs do not match or the lists deadlock (validate first for the full
 * diagnosis). makespan: the latest end over all ranks. */
typedef struct {
  double start, arrival; /* in */
  double end, ready;     /* out */
} loom_sched_timing;
typedef void (*loom_sched_timing_fn)(void *ctx, int rank, int index, const loom_instr *in,
                                     loom_sched_timing *t);
int loom_sched_replay_timed(const loom_schedule *s, loom_sched_timing_fn fn, void *ctx,
                            double *makespan);
#endif

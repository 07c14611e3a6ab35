/* Collectives over one communicator, with the bytes each rank sends counted per kind of
 * collective (for checking communication volume against the analytic count) and a timeout:
 * a rank that waits longer than the timeout in a collective aborts the whole job with the
 * collective, the communicator and the rank in the message, instead of hanging.
 *
 * A communicator of size 1 (and every communicator when MPI is not running) makes every
 * collective a local no-op (or copy), so single-process code runs through the same calls.
 *
 * Counted bytes are the payload each rank sends under a ring algorithm (what NCCL and Open
 * MPI's ring/bandwidth-optimal algorithms move), for n payload bytes per rank and p ranks:
 *   all-reduce 2(p-1)/p n,  reduce-scatter (p-1)/p n (n = full input),
 *   all-gather (p-1)/p n (n = full output),  all-to-all (p-1)/p n,  send n.
 * Double-precision all-reduces carry scalars (loss sums, token counts, norms) and broadcasts
 * carry control data; neither is counted.
 *
 * Bytes are also split by communicator (axis) and by where they go (src/comm/comm_bytes.c):
 * a ring sends everything to the next rank of the communicator, an all-to-all spreads it
 * evenly over the others, a send goes to its peer; bytes to a rank on another node (another
 * host, loom_dist_node_of) are inter-node, the rest intra-node. */
#ifndef LOOM_COMM_H
#define LOOM_COMM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  LOOM_COLL_ALLREDUCE = 0,
  LOOM_COLL_REDUCE_SCATTER,
  LOOM_COLL_ALLGATHER,
  LOOM_COLL_ALLTOALL,
  LOOM_COLL_SENDRECV,
  LOOM_COLL_COUNT
} loom_coll_kind;

typedef struct {
  void *handle;   /* MPI_Comm (opaque here) or NULL when size == 1 without MPI */
  int size, rank;
  const char *name; /* "tp", "dp", ... for messages */
  double timeout_s;
  int *members;     /* (size) world rank of each rank of the communicator; NULL without MPI */
} loom_comm;

/* The communicators bytes are counted by (loom_comm.name), the last one for any other name. */
#define LOOM_COMM_AXES 10
const char *loom_comm_axis_name(int axis);

/* Per-process traffic counters (bytes this rank sent, ring-algorithm accounting). */
typedef struct {
  double bytes[LOOM_COLL_COUNT];
  long calls[LOOM_COLL_COUNT];
  double intra[LOOM_COMM_AXES]; /* by communicator: bytes to ranks on this rank's node */
  double inter[LOOM_COMM_AXES]; /* ... and to ranks on other nodes */
} loom_comm_stats;
extern loom_comm_stats loom_comm_counters;
void loom_comm_stats_reset(void);
const char *loom_coll_name(loom_coll_kind k);
/* comm.json's text (malloc'd, on rank 0 of `world`; NULL on the others): the bytes every rank
 * of `world` sent per step over `steps` steps, by kind of collective, by communicator and
 * intra-/inter-node, with the node of each rank. Every rank of `world` calls it. */
char *loom_comm_report_json(const loom_comm *world, long steps, size_t *len);

typedef enum { LOOM_OP_SUM = 0, LOOM_OP_MAX } loom_reduce_op;

/* In-place float all-reduce of n values. */
void loom_comm_allreduce_f32(const loom_comm *c, float *x, size_t n, loom_reduce_op op);
void loom_comm_allreduce_f64(const loom_comm *c, double *x, size_t n, loom_reduce_op op);
/* in (size*n) -> out (n): rank r gets the sum of block r. */
void loom_comm_reduce_scatter_f32(const loom_comm *c, const float *in, float *out, size_t n);
/* in (n) -> out (size*n), block r from rank r. in may alias out + rank*n. */
void loom_comm_allgather_f32(const loom_comm *c, const float *in, float *out, size_t n);
/* in (size*n) -> out (size*n): block j of rank i lands in block i of rank j. */
void loom_comm_alltoall_f32(const loom_comm *c, const float *in, float *out, size_t n);

/* Uneven blocks: rank r gets/contributes counts[r] floats; blocks are laid out in rank order
 * (displacements are prefix sums of counts). */
void loom_comm_reduce_scatter_v_f32(const loom_comm *c, const float *in, float *out,
                                    const int *counts);
void loom_comm_allgather_v_f32(const loom_comm *c, float *inout, const int *counts);

/* Non-blocking all-reduce (for overlapping gradient reduction with backward). */
typedef struct {
  void *req; /* MPI_Request */
  const loom_comm *comm;
  const char *what;
  double t0, bytes; /* issue time and counted bytes (for the trace) */
  void *extra;      /* buffers the operation needs until it completes */
} loom_comm_request;
void loom_comm_iallreduce_f32(const loom_comm *c, float *x, size_t n, loom_comm_request *r);
void loom_comm_ireduce_scatter_f32(const loom_comm *c, const float *in, float *out, size_t n,
                                   loom_comm_request *r);
void loom_comm_wait(loom_comm_request *r);
/* One poll of r, not waiting: 1 when it has completed (then as after loom_comm_wait, which
 * returns at once on it), else 0. A sender's poll is what moves a large point-to-point message
 * over TCP: Open MPI has no progress thread, and without the kernel's cross-memory copy (shared
 * memory within a node uses it) the receiver gets the data only as the sender polls. */
int loom_comm_test(loom_comm_request *r);
/* Non-blocking in-place all-gather with uneven blocks (ZeRO-3 parameter prefetch); counts must
 * stay valid until the wait. */
void loom_comm_iallgather_v_f32(const loom_comm *c, float *inout, const int *counts,
                                loom_comm_request *r);

/* Point to point on a communicator (pipeline): non-blocking send, blocking receive. */
void loom_comm_isend_f32(const loom_comm *c, const float *x, size_t n, int peer, int tag,
                         loom_comm_request *r);
void loom_comm_recv_f32(const loom_comm *c, float *x, size_t n, int peer, int tag);
/* Non-blocking receive, completed by loom_comm_wait (with the communicator's timeout). */
void loom_comm_irecv_f32(const loom_comm *c, float *x, size_t n, int peer, int tag,
                         loom_comm_request *r);
void loom_comm_barrier(const loom_comm *c);
/* Broadcast n bytes from rank `root`. */
void loom_comm_bcast_bytes(const loom_comm *c, void *data, size_t n, int root);
/* Returns non-zero on every rank when rc is non-zero on any rank (agree on failure). */
int loom_comm_any_failed(const loom_comm *c, int rc);
/* Every rank calls this with its status (and loom_errmsg() when rc != 0): true when any rank
 * failed; out: the lowest failing rank, how many failed, whether all ranks failed with the
 * same message, and that rank's message (on every rank). src/comm/agree.c */
typedef struct {
  int rank, count;
  bool all_same;
  char msg[2048];
} loom_failure;
bool loom_comm_agree(const loom_comm *c, int rc, loom_failure *out);
#endif

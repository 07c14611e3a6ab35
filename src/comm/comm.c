/* Collectives on one communicator: MPI non-blocking operations completed by a polling wait
 * with a deadline (abort on timeout instead of hanging), ring-algorithm byte accounting, and
 * local fallbacks when the communicator has one rank. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "loom/comm.h"
#include "loom/core.h"
#include "loom/mesh.h"
#include "loom/trace.h"

loom_comm_stats loom_comm_counters;

void loom_comm_stats_reset(void) { memset(&loom_comm_counters, 0, sizeof loom_comm_counters); }

const char *loom_coll_name(loom_coll_kind k) {
  static const char *names[] = {"all-reduce", "reduce-scatter", "all-gather", "all-to-all",
                                "send/recv"};
  return k < LOOM_COLL_COUNT ? names[k] : "?";
}

static MPI_Comm mpi(const loom_comm *c) { return (MPI_Comm)c->handle; }

/* The timeout: this rank (world rank and node) and, when the communicator spans nodes, its
 * ranks on the other nodes, the likely culprits (a node or the network to it). */
static void timed_out(const loom_comm *c, const char *what) {
  int me = loom_dist_rank();
  char *far = loom_nodes_remote_peers(c);
  if (far)
    loom_dist_abort("rank %d on %s: no progress for %.0f s in %s on the '%s' communicator (%d "
                    "ranks) with %s; that node or the network to it has probably failed (or a "
                    "rank there is stuck). Aborting all ranks (raise parallel.timeout_s if steps "
                    "are legitimately this slow).",
                    me, loom_dist_node_name(loom_dist_node_of(me)), c->timeout_s, what, c->name,
                    c->size, far);
  loom_dist_abort("rank %d: no progress for %.0f s in %s on the '%s' communicator (%d ranks); "
                  "another rank has probably failed or is stuck. Aborting all ranks (raise "
                  "parallel.timeout_s if steps are legitimately this slow).", me, c->timeout_s,
                  what, c->name, c->size);
}

/* Between polls of a wait (once its first 200 polls found nothing): 20 us where every rank on
 * this machine has a core of its own; 200 us where they outnumber its cores. Each poll of a TCP
 * transfer is system calls, and a rank that wakes every 20 us takes that time from the ranks
 * computing on its core: pp2 x dp2 across two namespaced nodes of 2 ranks each on 2 cores ran
 * its step in 0.37 s with 20 us naps and 0.33 s with 200 us (docs/SIMULATOR.md, "The polling,
 * isolated"); 1 ms slowed dp2 x tp2 by 20%, its transfers progressing only when polled. Set by
 * loom_nodes_gather (loom_dist_machine_ranks). */
long loom_comm_poll_nap_ns = 20000;

void loom_comm_poll(void *request, const loom_comm *c, const char *what) {
  MPI_Request *req = request;
  double start = loom_now();
  struct timespec nap = {0, loom_comm_poll_nap_ns};
  for (long spins = 0;; spins++) {
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (spins > 200) nanosleep(&nap, NULL);
    if ((spins & 255) == 0 && c->timeout_s > 0 && loom_now() - start > c->timeout_s)
      timed_out(c, what);
  }
}

void loom_comm_allreduce_f32(const loom_comm *c, float *x, size_t n, loom_reduce_op op) {
  if (c->size <= 1 || n == 0) return;
  MPI_Request req;
  double t0 = loom_now(), bytes = 2.0 * (c->size - 1) / c->size * (double)n * sizeof(float);
  MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, op == LOOM_OP_MAX ? MPI_MAX : MPI_SUM,
                 mpi(c), &req);
  loom_comm_poll(&req, c, "all-reduce");
  loom_comm_count(c, LOOM_COLL_ALLREDUCE, bytes, LOOM_PEER_RING);
  loom_trace_record(LOOM_TRACE_COMM, "all-reduce", c->name, t0, loom_now(), bytes);
}

void loom_comm_allreduce_f64(const loom_comm *c, double *x, size_t n, loom_reduce_op op) {
  if (c->size <= 1 || n == 0) return;
  MPI_Request req;
  MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_DOUBLE, op == LOOM_OP_MAX ? MPI_MAX : MPI_SUM,
                 mpi(c), &req);
  loom_comm_poll(&req, c, "all-reduce"); /* scalars (loss, counts, norms): not counted */
}

void loom_comm_reduce_scatter_f32(const loom_comm *c, const float *in, float *out, size_t n) {
  if (c->size <= 1) {
    if (out != in) memmove(out, in, n * sizeof(float));
    return;
  }
  MPI_Request req;
  double t0 = loom_now(), bytes = (double)(c->size - 1) * (double)n * sizeof(float);
  MPI_Ireduce_scatter_block(in, out, (int)n, MPI_FLOAT, MPI_SUM, mpi(c), &req);
  loom_comm_poll(&req, c, "reduce-scatter");
  loom_comm_count(c, LOOM_COLL_REDUCE_SCATTER, bytes, LOOM_PEER_RING);
  loom_trace_record(LOOM_TRACE_COMM, "reduce-scatter", c->name, t0, loom_now(), bytes);
}

void loom_comm_allgather_f32(const loom_comm *c, const float *in, float *out, size_t n) {
  if (c->size <= 1) {
    if (out != in) memmove(out, in, n * sizeof(float));
    return;
  }
  MPI_Request req;
  double t0 = loom_now(), bytes = (double)(c->size - 1) * (double)n * sizeof(float);
  const void *src = in == out + (size_t)c->rank * n ? MPI_IN_PLACE : (const void *)in;
  MPI_Iallgather(src, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, mpi(c), &req);
  loom_comm_poll(&req, c, "all-gather");
  loom_comm_count(c, LOOM_COLL_ALLGATHER, bytes, LOOM_PEER_RING);
  loom_trace_record(LOOM_TRACE_COMM, "all-gather", c->name, t0, loom_now(), bytes);
}

void loom_comm_reduce_scatter_v_f32(const loom_comm *c, const float *in, float *out,
                                    const int *counts) {
  if (c->size <= 1) {
    if (out != in) memmove(out, in, (size_t)counts[0] * sizeof(float));
    return;
  }
  MPI_Request req;
  double total = 0;
  for (int i = 0; i < c->size; i++) total += counts[i];
  double t0 = loom_now(), bytes = (double)(c->size - 1) / c->size * total * sizeof(float);
  MPI_Ireduce_scatter(in, out, counts, MPI_FLOAT, MPI_SUM, mpi(c), &req);
  loom_comm_poll(&req, c, "reduce-scatter");
  loom_comm_count(c, LOOM_COLL_REDUCE_SCATTER, bytes, LOOM_PEER_RING);
  loom_trace_record(LOOM_TRACE_COMM, "reduce-scatter", c->name, t0, loom_now(), bytes);
}

void loom_comm_allgather_v_f32(const loom_comm *c, float *inout, const int *counts) {
  if (c->size <= 1) return;
  int displs[1024];
  LOOM_ASSERT(c->size <= 1024);
  double total = 0;
  for (int i = 0; i < c->size; i++) {
    displs[i] = (int)total;
    total += counts[i];
  }
  MPI_Request req;
  double t0 = loom_now(), bytes = (double)(c->size - 1) / c->size * total * sizeof(float);
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, inout, counts, displs, MPI_FLOAT, mpi(c),
                  &req);
  loom_comm_poll(&req, c, "all-gather");
  loom_comm_count(c, LOOM_COLL_ALLGATHER, bytes, LOOM_PEER_RING);
  loom_trace_record(LOOM_TRACE_COMM, "all-gather", c->name, t0, loom_now(), bytes);
}

void loom_comm_alltoall_f32(const loom_comm *c, const float *in, float *out, size_t n) {
  if (c->size <= 1) {
    if (out != in) memmove(out, in, n * sizeof(float));
    return;
  }
  MPI_Request req;
  double t0 = loom_now(), bytes = (double)(c->size - 1) * (double)n * sizeof(float);
  MPI_Ialltoall(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, mpi(c), &req);
  loom_comm_poll(&req, c, "all-to-all");
  loom_comm_count(c, LOOM_COLL_ALLTOALL, bytes, LOOM_PEER_ALL);
  loom_trace_record(LOOM_TRACE_COMM, "all-to-all", c->name, t0, loom_now(), bytes);
}

void loom_comm_iallreduce_f32(const loom_comm *c, float *x, size_t n, loom_comm_request *r) {
  r->comm = c;
  r->what = "all-reduce (gradient bucket)";
  r->req = NULL;
  r->extra = NULL;
  if (c->size <= 1 || n == 0) return;
  MPI_Request *req = loom_alloc(sizeof *req);
  r->t0 = loom_now();
  r->bytes = 2.0 * (c->size - 1) / c->size * (double)n * sizeof(float);
  MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, mpi(c), req);
  r->req = req;
  loom_comm_count(c, LOOM_COLL_ALLREDUCE, r->bytes, LOOM_PEER_RING);
}

void loom_comm_ireduce_scatter_f32(const loom_comm *c, const float *in, float *out, size_t n,
                                   loom_comm_request *r) {
  r->comm = c;
  r->what = "reduce-scatter (gradient bucket)";
  r->req = NULL;
  r->extra = NULL;
  if (c->size <= 1) {
    if (out != in) memmove(out, in, n * sizeof(float));
    return;
  }
  MPI_Request *req = loom_alloc(sizeof *req);
  r->t0 = loom_now();
  r->bytes = (double)(c->size - 1) * (double)n * sizeof(float);
  MPI_Ireduce_scatter_block(in, out, (int)n, MPI_FLOAT, MPI_SUM, mpi(c), req);
  r->req = req;
  loom_comm_count(c, LOOM_COLL_REDUCE_SCATTER, r->bytes, LOOM_PEER_RING);
}

/* a completed request: traced, its buffers freed; a later wait or test returns at once */
static void request_done(loom_comm_request *r) {
  loom_trace_record(LOOM_TRACE_COMM, r->what, r->comm->name, r->t0, loom_now(), r->bytes);
  loom_free(r->req);
  loom_free(r->extra);
  r->extra = NULL;
  r->req = NULL;
}

void loom_comm_wait(loom_comm_request *r) {
  if (!r->req) return;
  loom_comm_poll((MPI_Request *)r->req, r->comm, r->what);
  request_done(r);
}

int loom_comm_test(loom_comm_request *r) {
  if (!r->req) return 1;
  int done = 0;
  MPI_Test((MPI_Request *)r->req, &done, MPI_STATUS_IGNORE);
  if (done) request_done(r);
  return done;
}

void loom_comm_isend_f32(const loom_comm *c, const float *x, size_t n, int peer, int tag,
                         loom_comm_request *r) {
  r->comm = c;
  r->what = "send";
  r->extra = NULL;
  MPI_Request *req = loom_alloc(sizeof *req);
  r->t0 = loom_now();
  r->bytes = (double)n * sizeof(float);
  MPI_Isend(x, (int)n, MPI_FLOAT, peer, tag, mpi(c), req);
  r->req = req;
  loom_comm_count(c, LOOM_COLL_SENDRECV, r->bytes, peer);
}

/* Non-blocking receive (the context-parallel ring posts it before computing on the block it
 * holds); not counted: the sender counts the bytes. */
void loom_comm_irecv_f32(const loom_comm *c, float *x, size_t n, int peer, int tag,
                         loom_comm_request *r) {
  r->comm = c;
  r->what = "receive";
  r->extra = NULL;
  MPI_Request *req = loom_alloc(sizeof *req);
  r->t0 = loom_now();
  r->bytes = (double)n * sizeof(float);
  MPI_Irecv(x, (int)n, MPI_FLOAT, peer, tag, mpi(c), req);
  r->req = req;
}

void loom_comm_recv_f32(const loom_comm *c, float *x, size_t n, int peer, int tag) {
  MPI_Request req;
  double t0 = loom_now();
  MPI_Irecv(x, (int)n, MPI_FLOAT, peer, tag, mpi(c), &req);
  loom_comm_poll(&req, c, "receive");
  loom_trace_record(LOOM_TRACE_COMM, "receive", c->name, t0, loom_now(), (double)n * sizeof(float));
}

void loom_comm_barrier(const loom_comm *c) {
  if (c->size <= 1) return;
  MPI_Request req;
  MPI_Ibarrier(mpi(c), &req);
  loom_comm_poll(&req, c, "barrier");
}

void loom_comm_bcast_bytes(const loom_comm *c, void *data, size_t n, int root) {
  if (c->size <= 1) return;
  MPI_Request req;
  MPI_Ibcast(data, (int)n, MPI_BYTE, root, mpi(c), &req);
  loom_comm_poll(&req, c, "broadcast");
}

int loom_comm_any_failed(const loom_comm *c, int rc) {
  if (c->size <= 1) return rc != 0;
  double f[1] = {rc != 0 ? 1.0 : 0.0};
  loom_comm_allreduce_f64(c, f, 1, LOOM_OP_MAX);
  return f[0] != 0;
}

void loom_comm_iallgather_v_f32(const loom_comm *c, float *inout, const int *counts,
                                loom_comm_request *r) {
  r->comm = c;
  r->what = "all-gather (parameters)";
  r->req = NULL;
  if (c->size <= 1) return;
  LOOM_ASSERT(c->size <= 1024);
  int *displs = loom_alloc((size_t)c->size * sizeof(int)); /* freed with the request */
  double total = 0;
  for (int i = 0; i < c->size; i++) {
    displs[i] = (int)total;
    total += counts[i];
  }
  MPI_Request *req = loom_alloc(sizeof *req + 0);
  r->t0 = loom_now();
  r->bytes = (double)(c->size - 1) / c->size * total * sizeof(float);
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, inout, counts, displs, MPI_FLOAT, mpi(c), req);
  r->req = req;
  r->extra = displs;
  loom_comm_count(c, LOOM_COLL_ALLGATHER, r->bytes, LOOM_PEER_RING);
}

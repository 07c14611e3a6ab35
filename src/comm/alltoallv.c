/* Expert parallelism's communication: the expert-parallel communicator split out of the
 * data-parallel one, the exchange of per-destination row counts and the uneven all-to-all
 * (MPI_Alltoallv) of the MoE dispatch and combine, with the same timeout and byte accounting
 * as the other collectives (src/comm/comm.c). */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "loom/comm_ep.h"
#include "loom/core.h"
#include "loom/mesh.h"
#include "loom/trace.h"

static MPI_Comm mpi(const loom_comm *c) { return (MPI_Comm)c->handle; }

void loom_comm_split(loom_comm *out, const loom_comm *parent, int color, int key,
                     const char *name) {
  memset(out, 0, sizeof *out);
  out->name = name;
  out->timeout_s = parent->timeout_s;
  out->size = 1;
  if (!loom_dist_active() || parent->size <= 1) return;
  MPI_Comm c;
  MPI_Comm_split(mpi(parent), color, key, &c);
  out->handle = (void *)c;
  MPI_Comm_size(c, &out->size);
  MPI_Comm_rank(c, &out->rank);
  MPI_Group group, world;
  MPI_Comm_group(c, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int *ranks = loom_calloc((size_t)out->size, sizeof(int));
  out->members = loom_calloc((size_t)out->size, sizeof(int));
  for (int i = 0; i < out->size; i++) ranks[i] = i;
  MPI_Group_translate_ranks(group, out->size, ranks, world, out->members);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  free(ranks);
}

void loom_comm_split_free(loom_comm *c) {
  if (c->handle) {
    MPI_Comm h = mpi(c);
    MPI_Comm_free(&h);
  }
  free(c->members);
  memset(c, 0, sizeof *c);
  c->size = 1;
}

void loom_comm_alltoall_i32(const loom_comm *c, const int *in, int *out, int n) {
  if (c->size <= 1) {
    if (out != in) memmove(out, in, (size_t)n * sizeof(int));
    return;
  }
  MPI_Request req;
  MPI_Ialltoall(in, n, MPI_INT, out, n, MPI_INT, mpi(c), &req);
  loom_comm_poll(&req, c, "all-to-all (expert row counts)");
}

void loom_comm_alltoallv_rows_f32(const loom_comm *c, const float *send, const int *send_rows,
                                  float *recv, const int *recv_rows, size_t width) {
  int p = c->size;
  if (p <= 1) {
    if (recv != send) memmove(recv, send, (size_t)send_rows[0] * width * sizeof(float));
    return;
  }
  int *v = loom_malloc(4 * (size_t)p * sizeof(int)); /* send counts, displs, recv counts, displs */
  int *sc = v, *sd = v + p, *rc = v + 2 * p, *rd = v + 3 * p;
  size_t so = 0, ro = 0;
  double bytes = 0;
  for (int r = 0; r < p; r++) {
    size_t s = (size_t)send_rows[r] * width, q = (size_t)recv_rows[r] * width;
    LOOM_ASSERT(so + s <= INT32_MAX && ro + q <= INT32_MAX);
    sc[r] = (int)s, sd[r] = (int)so, rc[r] = (int)q, rd[r] = (int)ro;
    so += s, ro += q;
    if (r != c->rank) bytes += (double)s * sizeof(float);
  }
  double t0 = loom_now();
  MPI_Request req;
  MPI_Ialltoallv(send, sc, sd, MPI_FLOAT, recv, rc, rd, MPI_FLOAT, mpi(c), &req);
  loom_comm_poll(&req, c, "all-to-all (expert rows)");
  loom_comm_count(c, LOOM_COLL_ALLTOALL, bytes, LOOM_PEER_ALL);
  loom_trace_record(LOOM_TRACE_COMM, "all-to-all", c->name, t0, loom_now(), bytes);
  free(v);
}

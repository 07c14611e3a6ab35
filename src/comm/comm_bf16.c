/* bf16 gradient reductions over MPI: a user-defined sum on 16-bit words (fp32 add, round to
 * nearest even), conversions in and out of the fp32 gradient buffers, byte accounting and
 * the timeout-guarded wait of comm.c (loom_comm_wait). See comm_bf16.h. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "loom/comm_bf16.h"
#include "loom/kernels.h"

/* inout[i] = bf16(in[i] + inout[i]), the sum in fp32 (exact for most pairs, then one rounding) */
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  const loom_bf16 *a = in;
  loom_bf16 *b = inout;
  for (int i = 0; i < *len; i++) b[i] = loom_f32_to_bf16(loom_bf16_to_f32(a[i]) + loom_bf16_to_f32(b[i]));
}

static MPI_Op bf16_sum_op(void) {
  static MPI_Op op = MPI_OP_NULL;
  if (op == MPI_OP_NULL) MPI_Op_create(sum_bf16, 1, &op);
  return op;
}

static loom_bf16 *to_bf16(const float *x, size_t n) {
  loom_bf16 *h = loom_alloc((n ? n : 1) * sizeof(loom_bf16));
  loom_f32_to_bf16_n(h, x, n);
  return h;
}

static void widen(float *x, const loom_bf16 *h, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = loom_bf16_to_f32(h[i]);
}

void loom_comm_iallreduce_bf16(const loom_comm *c, float *x, size_t n, loom_comm_request *r,
                               loom_bf16 **buf) {
  r->comm = c;
  r->what = "all-reduce bf16 (gradient bucket)";
  r->req = NULL;
  r->extra = NULL;
  *buf = NULL;
  if (c->size <= 1 || n == 0) return;
  *buf = to_bf16(x, n);
  MPI_Request *req = loom_alloc(sizeof *req);
  r->t0 = loom_now();
  r->bytes = 2.0 * (c->size - 1) / c->size * (double)n * sizeof(loom_bf16);
  MPI_Iallreduce(MPI_IN_PLACE, *buf, (int)n, MPI_UINT16_T, bf16_sum_op(), (MPI_Comm)c->handle,
                 req);
  r->req = req;
  loom_comm_count(c, LOOM_COLL_ALLREDUCE, r->bytes, LOOM_PEER_RING);
}

void loom_comm_wait_bf16(loom_comm_request *r, float *x, size_t n, loom_bf16 **buf) {
  loom_comm_wait(r);
  if (!*buf) return;
  widen(x, *buf, n);
  loom_free(*buf);
  *buf = NULL;
}

void loom_comm_allreduce_bf16(const loom_comm *c, float *x, size_t n) {
  loom_comm_request r;
  loom_bf16 *buf;
  loom_comm_iallreduce_bf16(c, x, n, &r, &buf);
  r.what = "all-reduce bf16";
  loom_comm_wait_bf16(&r, x, n, &buf);
}

void loom_comm_reduce_scatter_v_bf16(const loom_comm *c, const float *in, float *out,
                                     const int *counts) {
  size_t total = 0;
  for (int i = 0; i < c->size; i++) total += (size_t)counts[i];
  size_t mine = (size_t)counts[c->rank];
  if (c->size <= 1) { /* no reduction: nothing is sent, nothing is rounded */
    if (out != in) memmove(out, in, mine * sizeof(float));
    return;
  }
  loom_bf16 *send = to_bf16(in, total), *recv = loom_alloc((mine + 1) * sizeof(loom_bf16));
  loom_comm_request r = {0};
  MPI_Request *req = loom_alloc(sizeof *req);
  r.comm = c;
  r.what = "reduce-scatter bf16";
  r.t0 = loom_now();
  r.bytes = (double)(c->size - 1) / c->size * (double)total * sizeof(loom_bf16);
  MPI_Ireduce_scatter(send, recv, counts, MPI_UINT16_T, bf16_sum_op(), (MPI_Comm)c->handle, req);
  r.req = req;
  loom_comm_count(c, LOOM_COLL_REDUCE_SCATTER, r.bytes, LOOM_PEER_RING);
  loom_comm_wait(&r);
  widen(out, recv, mine);
  loom_free(send);
  loom_free(recv);
}

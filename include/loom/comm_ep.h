/* Expert parallelism's communication (src/comm/alltoallv.c): the expert-parallel group carved
 * out of a data-parallel communicator, and the uneven all-to-alls of the MoE dispatch and
 * combine (each rank sends a different number of rows to each peer). */
#ifndef LOOM_COMM_EP_H
#define LOOM_COMM_EP_H
#include <stddef.h>

#include "loom/comm.h"

/* The ranks of `parent` with the same color, ordered by key (MPI_Comm_split), as a
 * communicator called `name`. Without MPI (or a parent of one rank) a communicator of one.
 * Every rank of parent calls it. */
void loom_comm_split(loom_comm *out, const loom_comm *parent, int color, int key,
                     const char *name);
/* Free what loom_comm_split made. */
void loom_comm_split_free(loom_comm *c);
/* out[p*n .. (p+1)*n) = rank p's in[me*n .. (me+1)*n) (MPI_Alltoall of ints: the row counts
 * before an uneven exchange). Not counted as traffic (control data). */
void loom_comm_alltoall_i32(const loom_comm *c, const int *in, int *out, int n);
/* Uneven all-to-all of rows of `width` floats: send holds send_rows[p] rows for each rank p
 * one after another (rank order), recv receives recv_rows[p] rows from each rank p, in rank
 * order. Counted as all-to-all bytes (the rows this rank sends to others). */
void loom_comm_alltoallv_rows_f32(const loom_comm *c, const float *send, const int *send_rows,
                                  float *recv, const int *recv_rows, size_t width);
#endif

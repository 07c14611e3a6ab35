/* bf16 data-parallel gradient reductions (training.reduce_dtype=bf16, FSDP2's
 * MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)): each rank's fp32 values are rounded to
 * bf16 (nearest even), sent as 2-byte words, and summed by an MPI operation that adds two
 * bf16 values in fp32 and rounds the sum to bf16 (what a bf16 NCCL sum does per step of its
 * ring); the result is widened back into the fp32 buffer. Bytes are counted as 2 per value. */
#ifndef LOOM_COMM_BF16_H
#define LOOM_COMM_BF16_H
#include "loom/comm.h"
#include "loom/core.h"

/* In-place sum of x (n) over c. */
void loom_comm_allreduce_bf16(const loom_comm *c, float *x, size_t n);
/* Non-blocking form: *buf holds the bf16 words until loom_comm_wait_bf16 widens them into x. */
void loom_comm_iallreduce_bf16(const loom_comm *c, float *x, size_t n, loom_comm_request *r,
                               loom_bf16 **buf);
void loom_comm_wait_bf16(loom_comm_request *r, float *x, size_t n, loom_bf16 **buf);
/* in (sum of counts) -> out (counts[rank]): rank r gets the sum of block r (blocks in rank
 * order), as loom_comm_reduce_scatter_v_f32. */
void loom_comm_reduce_scatter_v_bf16(const loom_comm *c, const float *in, float *out,
                                     const int *counts);
#endif

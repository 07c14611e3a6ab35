/* Point-to-point requests polled without waiting (src/comm/comm.c, loom_comm_test), what the
 * pipeline executor does after every block so that its sends move over TCP: rank 0 sends 1 MiB
 * (beyond every transport's eager size) to rank 1 and polls it until done; a second poll and a
 * wait on the completed request return at once; rank 1 receives it whole (compared exactly:
 * the bytes are copied, not computed). Then the other way round with the receive polled.
 *
 * usage (under mpirun -np 2): comm_p2p_check */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "loom/comm.h"
#include "loom/core.h"
#include "loom/mesh.h"

enum { N = 1 << 18 }; /* floats: 1 MiB */

static void fill(float *x, int salt) {
  for (int i = 0; i < N; i++) x[i] = (float)((i * 2654435761u + (unsigned)salt) % 100003);
}

static int same(const float *x, int salt) {
  for (int i = 0; i < N; i++)
    if (x[i] != (float)((i * 2654435761u + (unsigned)salt) % 100003)) return 0;
  return 1;
}

int main(int argc, char **argv) {
  if (loom_dist_init(&argc, &argv)) return 1;
  loom_mesh m;
  if (loom_dist_world() != 2 || loom_mesh_create_on(&m, 1, 1, 2, 1, 1, 60, 0)) {
    fprintf(stderr, "comm_p2p_check: run under mpirun -np 2 (%s)\n", loom_errmsg());
    return 1;
  }
  const loom_comm *c = &m.cp_comm;
  int me = c->rank;
  float *buf = calloc(N, sizeof(float));
  loom_comm_request r;
  if (me == 0) { /* a send polled to completion */
    fill(buf, 1);
    loom_comm_isend_f32(c, buf, N, 1, 7, &r);
    long polls = 0;
    while (!loom_comm_test(&r)) polls++;
    CHECK(r.req == NULL, "a completed send holds no request (after %ld polls)", polls);
    CHECK(loom_comm_test(&r) == 1, "polling a completed request says done");
    loom_comm_wait(&r); /* returns at once */
  } else {
    loom_comm_recv_f32(c, buf, N, 0, 7);
    CHECK(same(buf, 1), "rank 1 received the 1 MiB sent");
  }
  if (me == 1) { /* the other way: a blocking send against a polled receive */
    fill(buf, 2);
    loom_comm_isend_f32(c, buf, N, 0, 8, &r);
    loom_comm_wait(&r);
  } else {
    loom_comm_irecv_f32(c, buf, N, 1, 8, &r);
    while (!loom_comm_test(&r)) {
    }
    CHECK(same(buf, 2), "rank 0's polled receive holds the 1 MiB sent");
  }
  /* every rank's verdict: the job fails when any rank failed */
  double f[1] = {harness_failed};
  loom_comm_allreduce_f64(&m.world_comm, f, 1, LOOM_OP_SUM);
  if (me == 0)
    printf("p2p_check: %d passed on rank 0, %.0f failed on both ranks\n", harness_passed, f[0]);
  free(buf);
  loom_mesh_free(&m);
  loom_dist_finalize();
  return f[0] > 0;
}

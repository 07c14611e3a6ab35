/* Private to src/comm: the byte accounting every collective calls (comm_bytes.c), the polling
 * wait of every request (comm.c), the node table gathered when MPI starts and the text that names a communicator's ranks by node
 * (nodes.c). */
#ifndef LOOM_COMM_INTERNAL_H
#define LOOM_COMM_INTERNAL_H
#include "loom/comm.h"

/* peer of loom_comm_count: a ring (everything to the next rank of the communicator), or an
 * all-to-all (spread evenly over the other ranks); else the communicator rank sent to */
#define LOOM_PEER_RING (-1)
#define LOOM_PEER_ALL  (-2)
/* Add `bytes` this rank sent in one collective of kind k on c to loom_comm_counters. */
void loom_comm_count(const loom_comm *c, loom_coll_kind k, double bytes, int peer);

/* Wait for an MPI request (an MPI_Request *), polling with naps of loom_comm_poll_nap_ns; past
 * c's timeout abort every rank with a message that names `what` and c's ranks on other nodes. */
void loom_comm_poll(void *request, const loom_comm *c, const char *what);
/* the nap between polls, ns: 20 us, or 200 us where this node's ranks outnumber its cores
 * (loom_nodes_gather) */
extern long loom_comm_poll_nap_ns;

/* Gather every world rank's host name (collective over MPI_COMM_WORLD; loom_dist_init). */
void loom_nodes_gather(void);
/* "ranks 2-3 on loom-node1, 5 on loom-node2": the ranks of c on nodes other than this rank's
 * (malloc'd; NULL when every rank of c is on this rank's node). */
char *loom_nodes_remote_peers(const loom_comm *c);
#endif

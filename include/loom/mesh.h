/* Ranks and the device mesh: MPI start-up (only when launched by mpirun/srun), the mesh with
 * named axes (pp, dp, cp, sp, tp; tp innermost so tensor-parallel peers are neighbours) built
 * with MPI_Comm_split, and layout checks against the model that run before any work starts.
 *
 * rank = (((pp_rank * dp + dp_rank) * cp + cp_rank) * sp + sp_rank) * tp + tp_rank */
#ifndef LOOM_MESH_H
#define LOOM_MESH_H
#include <stdbool.h>

#include "loom/comm.h"
#include "loom/config.h"
#include "loom/model.h"

typedef struct {
  int world, rank;                    /* ranks in the mesh; this rank's index in it */
  int first;                          /* world rank of mesh rank 0 */
  bool member;                        /* this process belongs to the mesh */
  int pp, dp, cp, sp, tp;             /* axis sizes */
  int pp_rank, dp_rank, cp_rank, sp_rank, tp_rank;
  loom_comm world_comm;
  loom_comm tp_comm;    /* same (pp, dp, cp, sp): tensor-parallel peers */
  loom_comm sp_comm;    /* same (pp, dp, cp, tp): Ulysses peers */
  loom_comm cp_comm;    /* same (pp, dp, sp, tp): the context-parallel ring (rank order) */
  loom_comm dp_comm;    /* same (pp, cp, sp, tp) */
  loom_comm pp_comm;    /* same (dp, cp, sp, tp): the pipeline of this rank */
  loom_comm grad_comm;  /* same (pp, tp): dp x cp x sp ranks holding replicas of the same
                           params (gradients summed, ZeRO partitions over them) */
  loom_comm mp_comm;    /* same (dp, cp, sp): pp x tp ranks holding different params */
  loom_comm embed_comm; /* first and last pipeline stage of this (dp, cp, sp, tp): tied
                           embedding */
} loom_mesh;

/* Start MPI when this process was launched by mpirun/srun (environment says so); otherwise
 * run as one rank without MPI. Idempotent. */
int loom_dist_init(int *argc, char ***argv);
bool loom_dist_active(void);
int loom_dist_rank(void);  /* world rank (0 without MPI) */
int loom_dist_world(void); /* world size (1 without MPI) */
void loom_dist_finalize(void);
/* Abort every rank with a message (stderr of this rank first). */
void loom_dist_abort(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* Take every rank down with exit code `code`, printing nothing (the caller reported). */
void loom_dist_abort_quiet(int code) __attribute__((noreturn));

/* Where the ranks run (src/comm/nodes.c): the host name of every world rank, gathered when
 * MPI starts; nodes are numbered in the order of their lowest rank. One node without MPI. */
int loom_dist_nodes(void);
int loom_dist_node_of(int world_rank);
const char *loom_dist_node_name(int node);
/* The world ranks on this rank's machine (one kernel, told by its boot id: namespaced "nodes"
 * of one machine share it and its cores); 1 without MPI. Where they outnumber the machine's
 * cores, waiting ranks poll every 200 us instead of 20 us (src/comm/comm.c). */
int loom_dist_machine_ranks(void);
/* this rank's index among them (world-rank order); 0 without MPI */
int loom_dist_machine_index(void);
/* ... and that nap between polls, us */
long loom_dist_poll_nap_us(void);

/* Before the mesh (collective over the world): every rank belongs to one launch and runs one
 * loom with one config. Each rank's own count from its launcher (OMPI_COMM_WORLD_SIZE,
 * SLURM_STEP_NUM_TASKS, PMI_SIZE, read before MPI_Init) must be MPI's world size; every rank's
 * launch (Open MPI job id, else PMIx namespace, else Slurm job.step; and LOOM_LAUNCH_ID when
 * set), loom version and executable contents, and config_hash must be rank 0's. The error
 * names the first rank that disagrees, its node and both values; every rank fails alike. */
int loom_mesh_check_job(uint64_t config_hash);
/* Build the mesh for config.parallel on the current world; checks the product of the axes
 * against the world size. */
int loom_mesh_create(loom_mesh *m, const loom_config_parallel *p, double timeout_s);
/* A mesh of pp*dp*cp*sp*tp ranks over world ranks [first, first + n) (a module's own ranks);
 * every world rank calls it, those outside get member = false. */
int loom_mesh_create_on(loom_mesh *m, int pp, int dp, int cp, int sp, int tp, double timeout_s,
                        int first);
void loom_mesh_free(loom_mesh *m);
/* Where the mesh's ranks run, as one line: "nodes: loom-node0: ranks 0-1 (tp), loom-node1:
 * ranks 2-3 (tp)" (in brackets, the axes whose groups there stay inside the node); NULL when
 * they all run on one node. *warnings: lines (malloc'd, NULL if none) for tp, sp or cp groups
 * that span nodes: their traffic, the heaviest, then crosses the network. */
char *loom_mesh_placement(const loom_mesh *m, char **warnings);
/* Every model/layout mismatch that makes the layout impossible, with the numbers: tp not
 * dividing heads / kv heads / intermediate, sp not dividing heads / kv heads / seq_len (or
 * seq_len/cp), seq_len not divisible by 2cp, pp larger than layers, Megatron SP without tp, ... */
int loom_mesh_check_model(const loom_config_parallel *p, const loom_model_spec *spec, int B,
                          int T, int world);
#endif

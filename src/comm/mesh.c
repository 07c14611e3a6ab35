/* MPI start-up and the device mesh: axis communicators split from MPI_COMM_WORLD, the check
 * that every rank belongs to one launch of one loom with one config, and the layout checks
 * that must fail before any work starts. */
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "loom/core.h"
#include "loom/mesh.h"

static bool mpi_started = false;
static long launch_world = -1; /* the ranks the launcher says it started (-1: it does not say) */

static bool launched_by_mpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_RANK") || getenv("PMIX_RANK") ||
         getenv("SLURM_PROCID");
}

/* Core's out-of-memory report calls this after printing its message: one rank out of memory
 * takes the job down at once instead of leaving the others in a collective until its timeout. */
static void oom_abort_job(int exit_status) {
  if (mpi_started) MPI_Abort(MPI_COMM_WORLD, exit_status);
}

int loom_dist_init(int *argc, char ***argv) {
  if (mpi_started || !launched_by_mpi()) return 0;
  /* read before MPI_Init, which may set these itself (a singleton says 1) */
  const char *n = getenv("OMPI_COMM_WORLD_SIZE");
  if (!n) n = getenv("SLURM_STEP_NUM_TASKS");
  if (!n) n = getenv("PMI_SIZE");
  launch_world = n ? atol(n) : -1;
  int provided;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    return loom_err("MPI_Init failed; is this process started by mpirun or srun?");
  mpi_started = true;
  loom_set_rank(loom_dist_rank(), loom_dist_world());
  loom_nodes_gather(); /* where every rank runs (comm.json, placement, timeout messages) */
  loom_set_oom_handler(oom_abort_job);
  return 0;
}

bool loom_dist_active(void) { return mpi_started; }

int loom_dist_rank(void) {
  int r = 0;
  if (mpi_started) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int loom_dist_world(void) {
  int n = 1;
  if (mpi_started) MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void loom_dist_finalize(void) {
  if (mpi_started) MPI_Finalize();
  mpi_started = false;
  loom_set_oom_handler(NULL);
}

void loom_dist_abort(const char *fmt, ...) {
  /* one write per line: ranks that fail together print whole lines, not interleaved pieces */
  char line[4096];
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(line, sizeof line, "loom: ");
  n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  fflush(stderr);
  if (write(STDERR_FILENO, line, (size_t)n) < 0) { /* nothing left to report it to */ }
  if (mpi_started) MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

void loom_dist_abort_quiet(int code) {
  fflush(stdout);
  fflush(stderr);
  if (mpi_started) MPI_Abort(MPI_COMM_WORLD, code);
  exit(code);
}

/* What a rank says about the job it belongs to (loom_mesh_check_job). */
typedef struct {
  int32_t mpi_world, launch_world; /* MPI_Comm_size; the launcher's count (-1: unknown) */
  uint64_t config_hash, exe_hash;  /* the resolved config; this rank's loom executable */
  char version[32];                /* LOOM_VERSION_STRING */
  char job[96];                    /* the launch: Open MPI job id, else PMIx namespace, else
                                      Slurm job.step */
  char launch[96];                 /* LOOM_LAUNCH_ID ("" when unset) */
} job_identity;

static void job_identity_fill(job_identity *id, uint64_t config_hash) {
  memset(id, 0, sizeof *id);
  MPI_Comm_size(MPI_COMM_WORLD, &id->mpi_world);
  id->launch_world = (int32_t)launch_world;
  id->config_hash = config_hash;
  char *exe = NULL;
  size_t len = 0;
  if (loom_read_file("/proc/self/exe", &exe, &len) == 0) id->exe_hash = loom_hash64(exe, len, 0);
  loom_err_clear(); /* unreadable: 0, compared like any other value */
  free(exe);
  snprintf(id->version, sizeof id->version, "%s", LOOM_VERSION_STRING);
  const char *ompi = getenv("OMPI_MCA_ess_base_jobid"), *ns = getenv("PMIX_NAMESPACE");
  const char *sj = getenv("SLURM_JOB_ID"), *ss = getenv("SLURM_STEP_ID");
  if (ompi)
    snprintf(id->job, sizeof id->job, "Open MPI job %s", ompi);
  else if (ns)
    snprintf(id->job, sizeof id->job, "PMIx namespace %s", ns);
  else if (sj)
    snprintf(id->job, sizeof id->job, "Slurm job %s.%s", sj, ss ? ss : "?");
  const char *l = getenv("LOOM_LAUNCH_ID");
  snprintf(id->launch, sizeof id->launch, "%s", l ? l : "");
}

int loom_mesh_check_job(uint64_t config_hash) {
  if (!mpi_started) return 0;
  job_identity mine;
  job_identity_fill(&mine, config_hash);
  int world = mine.mpi_world;
  job_identity *all = loom_calloc((size_t)world, sizeof *all); /* (world) */
  MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                MPI_COMM_WORLD);
  int rc = 0;
  const job_identity *a = &all[0];
  const char *n0 = loom_dist_node_name(loom_dist_node_of(0));
  /* every rank runs the same test on the same table: all fail alike, naming the same rank */
  for (int r = 0; r < world && !rc; r++) {
    const job_identity *b = &all[r];
    const char *nr = loom_dist_node_name(loom_dist_node_of(r));
    if (b->launch_world >= 0 && b->launch_world != b->mpi_world)
      rc = loom_err("rank %d on %s was started as one of %d ranks, but MPI joined %d: the ranks "
                    "did not start as one MPI job (srun without a PMI plugin Open MPI can use "
                    "starts one-rank jobs: use srun --mpi=pmix, or mpirun)", r, nr,
                    b->launch_world, b->mpi_world);
    else if (r == 0)
      continue;
    else if (strcmp(a->job, b->job) || strcmp(a->launch, b->launch))
      rc = loom_err("rank %d on %s belongs to another launch (%s%s%s) than rank 0 on %s (%s%s%s); "
                    "start every rank of a job with one mpirun or srun and one environment",
                    r, nr, b->job, b->launch[0] ? ", LOOM_LAUNCH_ID " : "", b->launch, n0,
                    a->job, a->launch[0] ? ", LOOM_LAUNCH_ID " : "", a->launch);
    else if (strcmp(a->version, b->version) || a->exe_hash != b->exe_hash)
      rc = loom_err("rank %d on %s runs another loom executable (%s, contents %016llx) than "
                    "rank 0 on %s (%s, %016llx); install the same build on every node", r, nr,
                    b->version, (unsigned long long)b->exe_hash, n0, a->version,
                    (unsigned long long)a->exe_hash);
    else if (a->config_hash != b->config_hash)
      rc = loom_err("rank %d on %s was given another config (hash %016llx) than rank 0 on %s "
                    "(%016llx); give every rank the same config file and overrides (a file "
                    "that differs between nodes, or an MPMD launch 'mpirun A : B')", r, nr,
                    (unsigned long long)b->config_hash, n0, (unsigned long long)a->config_hash);
  }
  free(all);
  return rc;
}

static void make_comm(loom_comm *c, MPI_Comm parent, int color, int key, const char *name,
                      double timeout) {
  c->name = name;
  c->timeout_s = timeout;
  c->members = NULL;
  if (!mpi_started) {
    c->handle = NULL;
    c->size = 1;
    c->rank = 0;
    return;
  }
  MPI_Comm out;
  MPI_Comm_split(parent, color, key, &out);
  if (out == MPI_COMM_NULL) { /* not a member (e.g. middle pipeline stages for "embed") */
    c->handle = NULL;
    c->size = 1;
    c->rank = 0;
    return;
  }
  c->handle = (void *)out;
  MPI_Comm_size(out, &c->size);
  MPI_Comm_rank(out, &c->rank);
  /* the world rank of each rank of the communicator (which node its bytes go to) */
  MPI_Group group, world;
  MPI_Comm_group(out, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int *ranks = loom_calloc((size_t)c->size, sizeof(int));
  c->members = loom_calloc((size_t)c->size, sizeof(int));
  for (int i = 0; i < c->size; i++) ranks[i] = i;
  MPI_Group_translate_ranks(group, c->size, ranks, world, c->members);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  free(ranks);
}

/* The mesh over world ranks [first, first + count); every world rank takes part in the
 * communicator splits, those outside get member = false and single-rank communicators.
 * rank = (((pp_rank * dp + dp_rank) * cp + cp_rank) * sp + sp_rank) * tp + tp_rank: tp
 * innermost, then Ulysses sp, then cp (Megatron puts cp right outside tp; the Ulysses
 * all-to-all, the heavier exchange, stays between the closer ranks), then dp and pp. */
static int mesh_build(loom_mesh *m, int pp, int dp, int cp, int sp, int tp, double timeout_s,
                      int first, int count) {
  int wrank = 0;
  if (mpi_started) MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  memset(m, 0, sizeof *m);
  m->pp = pp, m->dp = dp, m->cp = cp, m->sp = sp, m->tp = tp;
  m->world = count;
  m->first = first;
  m->member = wrank >= first && wrank < first + count;
  int r = m->member ? wrank - first : 0;
  m->rank = r;
  m->tp_rank = r % m->tp;
  m->sp_rank = r / m->tp % m->sp;
  m->cp_rank = r / (m->tp * m->sp) % m->cp;
  m->dp_rank = r / (m->tp * m->sp * m->cp) % m->dp;
  m->pp_rank = r / (m->tp * m->sp * m->cp * m->dp);
  MPI_Comm w = mpi_started ? MPI_COMM_WORLD : MPI_COMM_NULL;
  int P = m->pp_rank, D = m->dp_rank, X = m->cp_rank, S = m->sp_rank, T = m->tp_rank;
  int DP = m->dp, CP = m->cp, SP = m->sp, TP = m->tp, U = MPI_UNDEFINED;
  bool in = m->member;
  /* R: the replica index within (pp, tp) — dp x cp x sp ranks that hold the same parameters */
  int R = (D * CP + X) * SP + S;
  make_comm(&m->world_comm, w, in ? 0 : U, r, "world", timeout_s);
  make_comm(&m->tp_comm, w, in ? P * DP * CP * SP + R : U, T, "tp", timeout_s);
  make_comm(&m->sp_comm, w, in ? ((P * DP + D) * CP + X) * TP + T : U, S, "sp", timeout_s);
  make_comm(&m->cp_comm, w, in ? ((P * DP + D) * SP + S) * TP + T : U, X, "cp", timeout_s);
  make_comm(&m->dp_comm, w, in ? ((P * CP + X) * SP + S) * TP + T : U, D, "dp", timeout_s);
  make_comm(&m->pp_comm, w, in ? R * TP + T : U, P, "pp", timeout_s);
  make_comm(&m->grad_comm, w, in ? P * TP + T : U, R, "dp x cp x sp", timeout_s);
  make_comm(&m->mp_comm, w, in ? R : U, P * TP + T, "pp x tp", timeout_s);
  bool ends = in && (P == 0 || P == m->pp - 1);
  make_comm(&m->embed_comm, w, ends ? R * TP + T : U, P, "embed", timeout_s);
  return 0;
}

int loom_mesh_create(loom_mesh *m, const loom_config_parallel *p, double timeout_s) {
  memset(m, 0, sizeof *m);
  int world = 1;
  if (mpi_started) MPI_Comm_size(MPI_COMM_WORLD, &world);
  long product = p->pp * p->dp * p->cp * p->sp * p->tp;
  if (product != world) {
    if (world == 1)
      return loom_err("parallel.pp*dp*cp*sp*tp = %ld*%ld*%ld*%ld*%ld = %ld ranks, but this is "
                      "one process; start it with 'mpirun -np %ld loom train ...' (or 'loom "
                      "train --nproc %ld ...')", p->pp, p->dp, p->cp, p->sp, p->tp, product,
                      product, product);
    return loom_err("parallel.pp*dp*cp*sp*tp = %ld*%ld*%ld*%ld*%ld = %ld, but mpirun started %d "
                    "ranks; make the product equal the number of ranks", p->pp, p->dp, p->cp,
                    p->sp, p->tp, product, world);
  }
  return mesh_build(m, (int)p->pp, (int)p->dp, (int)p->cp, (int)p->sp, (int)p->tp, timeout_s,
                    0, world);
}

int loom_mesh_create_on(loom_mesh *m, int pp, int dp, int cp, int sp, int tp, double timeout_s,
                        int first) {
  int world = 1;
  if (mpi_started) MPI_Comm_size(MPI_COMM_WORLD, &world);
  int count = pp * dp * cp * sp * tp;
  if (first < 0 || first + count > world)
    return loom_err("a mesh of %d ranks from rank %d does not fit in the %d ranks started",
                    count, first, world);
  return mesh_build(m, pp, dp, cp, sp, tp, timeout_s, first, count);
}

void loom_mesh_free(loom_mesh *m) {
  if (!mpi_started) return;
  loom_comm *all[] = {&m->world_comm, &m->tp_comm,   &m->sp_comm, &m->cp_comm, &m->dp_comm,
                      &m->pp_comm,    &m->grad_comm, &m->mp_comm, &m->embed_comm};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    MPI_Comm c = (MPI_Comm)all[i]->handle;
    if (c != MPI_COMM_NULL && c != NULL) MPI_Comm_free(&c);
    all[i]->handle = NULL;
    free(all[i]->members);
    all[i]->members = NULL;
  }
}

int loom_mesh_check_model(const loom_config_parallel *p, const loom_model_spec *s, int B,
                          int T, int world) {
  long tp = p->tp, sp = p->sp, pp = p->pp, vpp = p->vpp;
  bool megatron = !strcmp(p->sp_mode, "megatron");
  if (s->heads % tp)
    return loom_err("parallel.tp (%ld) must divide model.heads (%d)", tp, s->heads);
  if (s->kv_heads % tp)
    return loom_err("parallel.tp (%ld) must divide model.kv_heads (%d) (key/value heads are "
                    "split across tensor-parallel ranks)", tp, s->kv_heads);
  if (s->intermediate % tp)
    return loom_err("parallel.tp (%ld) must divide model.intermediate (%d)", tp, s->intermediate);
  if (s->moe.experts > 0 && (s->moe.intermediate % tp || s->moe.shared_intermediate % tp))
    return loom_err("parallel.tp (%ld) must divide model.moe.intermediate (%d) and "
                    "model.moe.shared_intermediate (%d): every expert's inner dimension is "
                    "split over the tensor-parallel ranks", tp, s->moe.intermediate,
                    s->moe.shared_intermediate);
  if (p->cp > 1) {
    long cp = p->cp;
    if (T % (2 * cp))
      return loom_err("parallel.cp (%ld) splits each sequence into 2*cp = %ld chunks (causal "
                      "load balancing): training.seq_len (%d) must be divisible by %ld", cp,
                      2 * cp, T, 2 * cp);
    if (megatron && tp > 1 && ((long)B * T / cp) % tp)
      return loom_err("Megatron sequence parallelism splits the B*T/cp = %ld tokens a "
                      "context-parallel rank holds across parallel.tp = %ld ranks; make them "
                      "divisible by tp", (long)B * T / cp, tp);
  }
  if (sp > 1) {
    if (megatron)
      return loom_err("parallel.sp (%ld) is the Ulysses axis, but parallel.sp_mode is megatron; "
                      "Megatron sequence parallelism runs over the tp ranks: set parallel.sp=1",
                      sp);
    /* Ulysses x TP: tp splits the heads first, the all-to-all then trades sequence shards
     * for shards of this tp rank's heads/tp (and kv_heads/tp) heads; key/value heads are
     * never replicated, so both quotients must split over sp */
    if ((s->heads / tp) % sp || (s->kv_heads / tp) % sp)
      return loom_err("parallel.sp (%ld) must divide the heads each tensor-parallel rank holds: "
                      "model.heads/tp = %d/%ld = %ld and model.kv_heads/tp = %d/%ld = %ld "
                      "(Ulysses splits a tp rank's heads over sp; key/value heads are not "
                      "replicated); make sp*tp divide both, e.g. lower parallel.sp or "
                      "parallel.tp", sp, s->heads, tp, s->heads / tp, s->kv_heads, tp,
                      s->kv_heads / tp);
    if (T % sp)
      return loom_err("parallel.sp (%ld) must divide training.seq_len (%d)", sp, T);
    if (p->cp > 1 && (T / p->cp) % sp)
      return loom_err("parallel.sp (%ld) must divide the training.seq_len / parallel.cp = %d / "
                      "%ld = %ld tokens of a sequence on each context-parallel rank", sp, T,
                      p->cp, T / p->cp);
  }
  if (megatron && tp > 1 && ((long)B * T) % tp)
    return loom_err("Megatron sequence parallelism splits the B*T = %d tokens of a micro-batch "
                    "across parallel.tp = %ld ranks; make B*T divisible by tp", B * T, tp);
  if (pp * vpp > s->layers)
    return loom_err("parallel.pp*vpp = %ld*%ld = %ld pipeline chunks but the model has only %d "
                    "layers", pp, vpp, pp * vpp, s->layers);
  if (!strcmp(p->schedule, "interleaved") && vpp < 2 && pp > 1)
    return loom_err("parallel.schedule interleaved needs parallel.vpp >= 2 (found %ld)", vpp);
  if (vpp > 1 && strcmp(p->schedule, "interleaved") && !p->schedule_file[0])
    return loom_err("parallel.vpp = %ld needs parallel.schedule: interleaved", vpp);
  (void)world;
  return 0;
}

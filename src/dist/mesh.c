/* MPI start-up and the device mesh: axis communicators split from MPI_COMM_WORLD, and the
 * layout checks that must fail before any work starts. */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/mesh.h"

static bool mpi_started = false;

static bool launched_by_mpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_RANK") || getenv("PMIX_RANK") ||
         getenv("SLURM_PROCID");
}

int loom_dist_init(int *argc, char ***argv) {
  if (mpi_started || !launched_by_mpi()) return 0;
  int provided;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    return loom_err("MPI_Init failed; is this process started by mpirun or srun?");
  mpi_started = true;
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
}

void loom_dist_abort(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "loom: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  if (mpi_started) MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

static void make_comm(loom_comm *c, MPI_Comm parent, int color, int key, const char *name,
                      double timeout) {
  c->name = name;
  c->timeout_s = timeout;
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
}

int loom_mesh_create(loom_mesh *m, const loom_config_parallel *p, double timeout_s) {
  memset(m, 0, sizeof *m);
  m->world = 1;
  if (mpi_started) {
    MPI_Comm_size(MPI_COMM_WORLD, &m->world);
    MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
  }
  m->pp = (int)p->pp, m->dp = (int)p->dp, m->sp = (int)p->sp, m->tp = (int)p->tp;
  long product = (long)m->pp * m->dp * m->sp * m->tp;
  if (product != m->world) {
    if (m->world == 1)
      return loom_err("parallel.pp*dp*sp*tp = %d*%d*%d*%d = %ld ranks, but this is one process; "
                      "start it with 'mpirun -np %ld loom train ...' (or 'loom train --nproc "
                      "%ld ...')", m->pp, m->dp, m->sp, m->tp, product, product, product);
    return loom_err("parallel.pp*dp*sp*tp = %d*%d*%d*%d = %ld, but mpirun started %d ranks; "
                    "make the product equal the number of ranks", m->pp, m->dp, m->sp, m->tp,
                    product, m->world);
  }
  int r = m->rank;
  m->tp_rank = r % m->tp;
  m->sp_rank = r / m->tp % m->sp;
  m->dp_rank = r / (m->tp * m->sp) % m->dp;
  m->pp_rank = r / (m->tp * m->sp * m->dp);
  MPI_Comm w = mpi_started ? MPI_COMM_WORLD : MPI_COMM_NULL;
  int pp = m->pp_rank, dp = m->dp_rank, sp = m->sp_rank, tp = m->tp_rank;
  int DP = m->dp, SP = m->sp, TP = m->tp;
  make_comm(&m->world_comm, w, 0, r, "world", timeout_s);
  make_comm(&m->tp_comm, w, (pp * DP + dp) * SP + sp, tp, "tp", timeout_s);
  make_comm(&m->sp_comm, w, (pp * DP + dp) * TP + tp, sp, "sp", timeout_s);
  make_comm(&m->dp_comm, w, (pp * SP + sp) * TP + tp, dp, "dp", timeout_s);
  make_comm(&m->pp_comm, w, (dp * SP + sp) * TP + tp, pp, "pp", timeout_s);
  make_comm(&m->grad_comm, w, pp * TP + tp, dp * SP + sp, "dp x sp", timeout_s);
  make_comm(&m->mp_comm, w, dp * SP + sp, pp * TP + tp, "pp x tp", timeout_s);
  bool ends = pp == 0 || pp == m->pp - 1;
  make_comm(&m->embed_comm, w, ends ? (dp * SP + sp) * TP + tp : MPI_UNDEFINED, pp, "embed",
            timeout_s);
  return 0;
}

void loom_mesh_free(loom_mesh *m) {
  if (!mpi_started) return;
  loom_comm *all[] = {&m->world_comm, &m->tp_comm, &m->sp_comm, &m->dp_comm,
                      &m->pp_comm,    &m->grad_comm, &m->mp_comm, &m->embed_comm};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    MPI_Comm c = (MPI_Comm)all[i]->handle;
    if (c != MPI_COMM_NULL && c != NULL) MPI_Comm_free(&c);
    all[i]->handle = NULL;
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
  if (sp > 1) {
    if (megatron)
      return loom_err("parallel.sp (%ld) is the Ulysses axis, but parallel.sp_mode is megatron; "
                      "Megatron sequence parallelism runs over the tp ranks: set parallel.sp=1",
                      sp);
    if (tp > 1)
      return loom_err("Ulysses sequence parallelism (parallel.sp=%ld) with parallel.tp=%ld is "
                      "not supported yet; use one of them", sp, tp);
    if (s->heads % sp || s->kv_heads % sp)
      return loom_err("parallel.sp (%ld) must divide model.heads (%d) and model.kv_heads (%d)",
                      sp, s->heads, s->kv_heads);
    if (T % sp)
      return loom_err("parallel.sp (%ld) must divide training.seq_len (%d)", sp, T);
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

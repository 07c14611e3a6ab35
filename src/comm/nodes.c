/* Where the ranks run: the host name of every world rank (MPI_Get_processor_name, gathered once
 * when MPI starts), nodes numbered in the order of their lowest rank; the line that says where
 * the mesh's ranks are and which axes stay inside a node, the warnings for tensor-, sequence-
 * and context-parallel groups that span nodes, and the names of a communicator's ranks on
 * other nodes for the timeout message. A node is a host name: ranks on one host share memory
 * (Open MPI's vader transport), ranks on different hosts talk over the network. */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "loom/core.h"
#include "loom/mesh.h"

enum { NAME_MAX_LEN = MPI_MAX_PROCESSOR_NAME };

static int n_nodes = 0; /* 0: not gathered (one process, or before MPI started) */
static int n_ranks = 0;
static int *rank_node = NULL;   /* (n_ranks) node of each world rank */
static char *node_names = NULL; /* (n_nodes, NAME_MAX_LEN) */
static int machine_ranks = 1;   /* world ranks on this rank's machine (its boot id) */
static int machine_index = 0;   /* this rank's index among them, in world-rank order */

/* Ranks that outnumber the cores of the machine they run on poll less often
 * (loom_comm_poll_nap_ns). A machine is a kernel, told by its boot id: nodes made of network
 * namespaces on one machine (scripts/nodes.sh) have host names of their own but share its
 * cores. (Collective over MPI_COMM_WORLD.) */
static void set_poll_nap(int world) {
  enum { ID_LEN = 40 };
  char mine[ID_LEN] = "", *all = loom_calloc((size_t)world, ID_LEN); /* (world, ID_LEN) */
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f || !fgets(mine, ID_LEN, f)) snprintf(mine, ID_LEN, "host:%.30s", loom_dist_node_name(0));
  if (f) fclose(f);
  MPI_Allgather(mine, ID_LEN, MPI_CHAR, all, ID_LEN, MPI_CHAR, MPI_COMM_WORLD);
  int me, here = 0, before = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  for (int r = 0; r < world; r++)
    if (!strncmp(all + (size_t)r * ID_LEN, all + (size_t)me * ID_LEN, ID_LEN))
      here++, before += r < me;
  free(all);
  machine_ranks = here;
  machine_index = before;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  loom_comm_poll_nap_ns = here > (cores > 0 ? cores : 1) ? 200000 : 20000;
}

void loom_nodes_gather(void) {
  int world, len = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  char mine[NAME_MAX_LEN];
  memset(mine, 0, sizeof mine);
  MPI_Get_processor_name(mine, &len);
  char *all = loom_calloc((size_t)world, NAME_MAX_LEN); /* (world, NAME_MAX_LEN) */
  MPI_Allgather(mine, NAME_MAX_LEN, MPI_CHAR, all, NAME_MAX_LEN, MPI_CHAR, MPI_COMM_WORLD);
  free(rank_node);
  free(node_names);
  rank_node = loom_calloc((size_t)world, sizeof(int));
  node_names = loom_calloc((size_t)world, NAME_MAX_LEN);
  n_nodes = 0;
  for (int r = 0; r < world; r++) {
    const char *name = all + (size_t)r * NAME_MAX_LEN;
    int k = 0;
    while (k < n_nodes && strncmp(node_names + (size_t)k * NAME_MAX_LEN, name, NAME_MAX_LEN)) k++;
    if (k == n_nodes) memcpy(node_names + (size_t)n_nodes++ * NAME_MAX_LEN, name, NAME_MAX_LEN);
    rank_node[r] = k;
  }
  n_ranks = world;
  free(all);
  set_poll_nap(world);
}

int loom_dist_nodes(void) { return n_nodes > 0 ? n_nodes : 1; }

int loom_dist_machine_ranks(void) { return machine_ranks; }

int loom_dist_machine_index(void) { return machine_index; }

long loom_dist_poll_nap_us(void) { return loom_comm_poll_nap_ns / 1000; }

int loom_dist_node_of(int world_rank) {
  return n_nodes > 0 && world_rank >= 0 && world_rank < n_ranks ? rank_node[world_rank] : 0;
}

const char *loom_dist_node_name(int node) {
  static char here[NAME_MAX_LEN];
  if (n_nodes > 0 && node >= 0 && node < n_nodes) return node_names + (size_t)node * NAME_MAX_LEN;
  if (!here[0] && gethostname(here, sizeof here - 1)) snprintf(here, sizeof here, "localhost");
  return here;
}

/* A growing string. */
typedef struct {
  char *s;
  size_t n, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (t->n + (size_t)need + 1 > t->cap) {
    t->cap = 2 * (t->n + (size_t)need + 1);
    t->s = loom_realloc(t->s, t->cap, 1);
  }
  va_start(ap, fmt);
  vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
  va_end(ap);
  t->n += (size_t)need;
}

/* ranks (ascending) as "0-1, 4, 6-8" */
static void put_ranges(text *t, const int *r, int n) {
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && r[j + 1] == r[j] + 1) j++;
    put(t, "%s%d", i ? ", " : "", r[i]);
    if (j > i) put(t, "-%d", r[j]);
    i = j + 1;
  }
}

char *loom_nodes_remote_peers(const loom_comm *c) {
  if (!c->members || loom_dist_nodes() < 2) return NULL;
  int me = loom_dist_node_of(c->members[c->rank]);
  int *r = loom_calloc((size_t)c->size, sizeof(int));
  text t = {0};
  for (int node = 0; node < loom_dist_nodes(); node++) {
    if (node == me) continue;
    int n = 0; /* world ranks of c on this node, ascending (members are in communicator order) */
    for (int i = 0; i < c->size; i++)
      if (loom_dist_node_of(c->members[i]) == node) r[n++] = c->members[i];
    if (!n) continue;
    for (int a = 1; a < n; a++) /* insertion sort: communicators are small */
      for (int b = a; b > 0 && r[b - 1] > r[b]; b--) {
        int x = r[b];
        r[b] = r[b - 1], r[b - 1] = x;
      }
    put(&t, "%s%s ", t.n ? ", " : "", n > 1 ? "ranks" : "rank");
    put_ranges(&t, r, n);
    put(&t, " on %s", loom_dist_node_name(node));
  }
  free(r);
  return t.s;
}

/* The axes in the mesh's rank order (tp innermost): size and stride of each. */
typedef struct {
  const char *name;
  int size, stride;
} axis;

static int mesh_axes(const loom_mesh *m, axis *ax) {
  int sizes[5] = {m->tp, m->sp, m->cp, m->dp, m->pp};
  static const char *names[5] = {"tp", "sp", "cp", "dp", "pp"};
  int stride = 1;
  for (int a = 0; a < 5; a++) {
    ax[a] = (axis){names[a], sizes[a], stride};
    stride *= sizes[a];
  }
  return 5;
}

/* the node of mesh rank r */
static int node_at(const loom_mesh *m, int r) { return loom_dist_node_of(m->first + r); }

/* Does the group of axis `a` that contains mesh rank r sit on one node? */
static bool group_on_one_node(const loom_mesh *m, const axis *a, int r) {
  int base = r - (r / a->stride % a->size) * a->stride;
  for (int k = 1; k < a->size; k++)
    if (node_at(m, base + k * a->stride) != node_at(m, base)) return false;
  return true;
}

/* The axes (size > 1) whose every group with a rank on `node` lies inside it, as " (tp, dp)" */
static void put_inside_axes(text *t, const loom_mesh *m, const axis *ax, int nax, int node) {
  int shown = 0;
  for (int a = 0; a < nax; a++) {
    if (ax[a].size < 2) continue;
    bool inside = true, any = false;
    for (int r = 0; r < m->world && inside; r++)
      if (node_at(m, r) == node) any = true, inside = group_on_one_node(m, &ax[a], r);
    if (any && inside) put(t, "%s%s", shown++ ? ", " : " (", ax[a].name);
  }
  if (shown) put(t, ")");
}

/* Warnings for the tp, sp and cp groups that span nodes. */
static char *span_warnings(const loom_mesh *m, const axis *ax, const int *per_node) {
  text t = {0};
  int block = 1; /* consecutive ranks that hold whole groups of this axis and the inner ones */
  for (int a = 0; a < 3; a++) {
    block *= ax[a].size;
    if (ax[a].size < 2) continue;
    int r = 0;
    while (r < m->world && group_on_one_node(m, &ax[a], r)) r++;
    if (r == m->world) continue;
    bool fits = true; /* could consecutive placement keep every group inside a node? */
    for (int node = 0; node < loom_dist_nodes(); node++)
      if (per_node[node] % block) fits = false;
    int base = r - (r / ax[a].stride % ax[a].size) * ax[a].stride;
    int other = base;
    for (int k = 1; k < ax[a].size; k++)
      if (node_at(m, base + k * ax[a].stride) != node_at(m, base)) other = base + k * ax[a].stride;
    if (t.n) put(&t, "\n");
    put(&t,
        "warning: parallel.%s groups span nodes (ranks %d on %s and %d on %s are in one), so "
        "%s traffic, the heaviest, crosses the network; ",
        ax[a].name, m->first + base, loom_dist_node_name(node_at(m, base)), m->first + other,
        loom_dist_node_name(node_at(m, other)), ax[a].name);
    if (fits)
      put(&t, "place consecutive ranks on the same node (mpirun's default --map-by slot with "
              "'slots=N' in the hostfile, not --map-by node)");
    else
      put(&t,
          "the nodes hold numbers of ranks that are not multiples of %d (the ranks of whole "
          "%s groups): give each node a multiple of %d ranks, or a smaller parallel.%s",
          block, ax[a].name, block, ax[a].name);
  }
  return t.s;
}

char *loom_mesh_placement(const loom_mesh *m, char **warnings) {
  *warnings = NULL;
  int first_node = node_at(m, 0);
  bool one = true;
  for (int r = 1; r < m->world; r++) one = one && node_at(m, r) == first_node;
  if (one) return NULL;
  axis ax[5];
  int nax = mesh_axes(m, ax);
  int nodes = loom_dist_nodes();
  int *per_node = loom_calloc((size_t)nodes, sizeof(int));
  int *ranks = loom_calloc((size_t)m->world, sizeof(int));
  bool *done = loom_calloc((size_t)nodes, sizeof(bool));
  for (int r = 0; r < m->world; r++) per_node[node_at(m, r)]++;
  text t = {0};
  put(&t, "nodes: ");
  for (int r0 = 0; r0 < m->world; r0++) { /* nodes in the order of their lowest mesh rank */
    int node = node_at(m, r0);
    if (done[node]) continue;
    done[node] = true;
    int n = 0;
    for (int r = r0; r < m->world; r++)
      if (node_at(m, r) == node) ranks[n++] = m->first + r;
    put(&t, "%s%s: %s ", r0 ? ", " : "", loom_dist_node_name(node), n > 1 ? "ranks" : "rank");
    put_ranges(&t, ranks, n);
    put_inside_axes(&t, m, ax, nax, node);
  }
  *warnings = span_warnings(m, ax, per_node);
  free(per_node), free(ranks), free(done);
  return t.s;
}

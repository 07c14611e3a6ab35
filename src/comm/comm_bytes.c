/* Byte accounting of the collectives: every collective adds the bytes this rank sends (ring
 * accounting, comm.h) to its kind, and to its communicator split by where the bytes go — to a
 * rank on this rank's node (intra-node) or on another (inter-node); and comm.json's text, the
 * bytes per step of every rank gathered on rank 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "loom/core.h"
#include "loom/mesh.h"

static const char *const axis_names[LOOM_COMM_AXES] = {
    "tp", "sp", "cp", "dp", "pp", "dp x cp x sp", "pp x tp", "embed", "world", "other"};

const char *loom_comm_axis_name(int axis) {
  return axis >= 0 && axis < LOOM_COMM_AXES ? axis_names[axis] : "other";
}

static int axis_of(const char *name) {
  for (int a = 0; a < LOOM_COMM_AXES - 1; a++)
    if (name && !strcmp(name, axis_names[a])) return a;
  return LOOM_COMM_AXES - 1;
}

/* the part of `bytes` that goes to ranks on other nodes */
static double inter_bytes(const loom_comm *c, double bytes, int peer) {
  if (!c->members || loom_dist_nodes() < 2) return 0;
  int me = loom_dist_node_of(c->members[c->rank]);
  if (peer == LOOM_PEER_RING)
    return loom_dist_node_of(c->members[(c->rank + 1) % c->size]) != me ? bytes : 0;
  if (peer == LOOM_PEER_ALL) {
    int far = 0;
    for (int i = 0; i < c->size; i++) far += i != c->rank && loom_dist_node_of(c->members[i]) != me;
    return c->size > 1 ? bytes * far / (c->size - 1) : 0;
  }
  return peer >= 0 && peer < c->size && loom_dist_node_of(c->members[peer]) != me ? bytes : 0;
}

void loom_comm_count(const loom_comm *c, loom_coll_kind k, double bytes, int peer) {
  loom_comm_counters.bytes[k] += bytes;
  loom_comm_counters.calls[k]++;
  int a = axis_of(c->name);
  double far = inter_bytes(c, bytes, peer);
  loom_comm_counters.inter[a] += far;
  loom_comm_counters.intra[a] += bytes - far;
}

/* a host name as a JSON string body (they are letters, digits, dots and dashes; anything else
 * is escaped) */
static void put_name(char *out, size_t cap, const char *s) {
  size_t n = 0;
  for (; *s && n + 7 < cap; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') out[n++] = '\\', out[n++] = (char)ch;
    else if (ch < 0x20) n += (size_t)snprintf(out + n, cap - n, "\\u%04x", ch);
    else out[n++] = (char)ch;
  }
  out[n] = 0;
}

enum { ROW = LOOM_COLL_COUNT + 2 * LOOM_COMM_AXES }; /* kinds, then intra and inter by axis */

/* one rank's object of bytes_per_step: its kinds, node, intra/inter totals and axes */
static size_t rank_json(char *t, size_t cap, int r, const double *row, const char *node) {
  size_t n = (size_t)snprintf(t, cap, "    {\"rank\": %d", r);
  for (int k = 0; k < LOOM_COLL_COUNT; k++)
    n += (size_t)snprintf(t + n, cap - n, ", \"%s\": %.1f", loom_coll_name(k), row[k]);
  const double *intra = row + LOOM_COLL_COUNT, *inter = intra + LOOM_COMM_AXES;
  double in = 0, out = 0;
  for (int a = 0; a < LOOM_COMM_AXES; a++) in += intra[a], out += inter[a];
  n += (size_t)snprintf(t + n, cap - n,
                        ", \"node\": \"%s\", \"intra_node\": %.1f, "
                        "\"inter_node\": %.1f, \"axes\": {",
                        node, in, out);
  int shown = 0;
  for (int a = 0; a < LOOM_COMM_AXES; a++) {
    if (intra[a] == 0 && inter[a] == 0) continue;
    n += (size_t)snprintf(t + n, cap - n,
                          "%s\"%s\": {\"intra_node\": %.1f, \"inter_node\": "
                          "%.1f}",
                          shown++ ? ", " : "", axis_names[a], intra[a], inter[a]);
  }
  return n + (size_t)snprintf(t + n, cap - n, "}}");
}

char *loom_comm_report_json(const loom_comm *world, long steps, size_t *len) {
  int W = world->size;
  double *all = loom_calloc((size_t)W * ROW, sizeof(double)); /* (W, ROW) */
  double *mine = all + (size_t)world->rank * ROW, per = steps > 0 ? 1.0 / (double)steps : 0;
  for (int k = 0; k < LOOM_COLL_COUNT; k++) mine[k] = loom_comm_counters.bytes[k] * per;
  for (int a = 0; a < LOOM_COMM_AXES; a++) {
    mine[LOOM_COLL_COUNT + a] = loom_comm_counters.intra[a] * per;
    mine[LOOM_COLL_COUNT + LOOM_COMM_AXES + a] = loom_comm_counters.inter[a] * per;
  }
  loom_comm_allreduce_f64(world, all, (size_t)W * ROW, LOOM_OP_SUM);
  if (world->rank != 0) {
    free(all);
    return NULL;
  }
  char node[2048];
  size_t cap = 512 + (size_t)W * (ROW * 48 + sizeof node + 64), n = 0;
  char *t = loom_malloc(cap);
  n += (size_t)snprintf(t + n, cap - n, "{\n  \"steps\": %ld,\n  \"bytes_per_step\": [\n", steps);
  for (int r = 0; r < W; r++) {
    int host = loom_dist_node_of(world->members ? world->members[r] : 0);
    put_name(node, sizeof node, loom_dist_node_name(host));
    n += rank_json(t + n, cap - n, r, all + (size_t)r * ROW, node);
    n += (size_t)snprintf(t + n, cap - n, "%s\n", r + 1 < W ? "," : "");
  }
  n += (size_t)snprintf(t + n, cap - n, "  ]\n}\n");
  free(all);
  *len = n;
  return t;
}

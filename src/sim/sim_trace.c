/* The simulator's Chrome trace (chrome://tracing, Perfetto), in the layout of `loom train
 * --trace`: one process per rank, thread 0 "compute" holding every instruction of the
 * schedule named by its text ("forward chunk=0 mb=1"), thread 1 "communication" holding
 * pipeline transfers, data-parallel and ZeRO reductions, with their bytes, (vision-language
 * models, first stage) thread 2 "vision encoder" with the encoder's part of each forward and
 * backward, and (MoE models) thread 3 "expert all-to-all" with the dispatch and combine of
 * every MoE layer, forward and backward. The ranks of one
 * pipeline stage share a timeline; with per_world_rank every world rank gets its rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "sim/sim_internal_run.h"

void sim_event_add(sim_run *R, int rank, int tid, int instr, const char *name, double t0,
                   double t1, double bytes) {
  if (!R->record) return;
  if (R->n_ev == R->cap_ev) {
    if (R->cap_ev >= (1 << 24)) return;
    R->cap_ev = R->cap_ev ? 2 * R->cap_ev : 4096;
    R->ev = loom_realloc(R->ev, (size_t)R->cap_ev, sizeof *R->ev);
  }
  R->ev[R->n_ev++] = (sim_event){rank, tid, instr, name, t0, t1, bytes};
}

void sim_a2a_layer_of(const loom_sim_op *ops, int n, sim_a2a_layer *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < n; i++) {
    const loom_sim_op *o = &ops[i];
    bool bwd = o->phase != LOOM_PHASE_FWD, a2a = o->type == LOOM_OP_COMM &&
                                                 (!strncmp(o->name, "ep dispatch", 11) ||
                                                  !strncmp(o->name, "ep combine", 10));
    double *at = bwd ? &out->bwd : &out->fwd;
    /* an overlapped all-to-all is its hidden op and, right after it, its exposed remainder */
    bool rest = i > 0 && ops[i - 1].hidden && !strcmp(ops[i - 1].name, o->name) && !o->hidden;
    if (a2a && !rest && out->n < SIM_A2A_EVENTS) {
      double dur = o->time;
      if (o->hidden && i + 1 < n && !ops[i + 1].hidden && !strcmp(ops[i + 1].name, o->name))
        dur += ops[i + 1].time;
      out->ev[out->n++] = (sim_a2a_event){o->name, bwd, *at, dur, o->bytes};
    }
    if (!o->hidden) *at += o->time;
  }
}

void sim_trace_a2a(sim_run *R, int rank, int index, const loom_instr *in, double t0, double t1) {
  const sim_vstage *v = &R->vs[loom_sched_vstage(R->s, rank, in->chunk)];
  if (!R->record || v->moe == 0 || in->kind == LOOM_INSTR_BACKWARD_WEIGHT) return;
  bool bwd = in->kind != LOOM_INSTR_FORWARD;
  const sim_a2a_layer *L = &R->a2a[R->paired[rank][index] ? 0 : 1];
  double moe = bwd ? L->bwd : L->fwd, dense = bwd ? R->dense_bwd : R->dense_fwd;
  double layers = v->moe * moe + (v->layers - v->moe) * dense;
  if (!(layers > 0) || !(t1 > t0)) return;
  /* the layers run back to back at the end of a forward (after the embedding) and at the start
   * of a backward (before it), their share of the instruction scaled to its duration */
  const loom_sim_cost *k = R->paired[rank][index] ? &v->cost : &v->solo;
  double all = bwd ? k->t[LOOM_PHASE_BWD_IN] + k->t[LOOM_PHASE_BWD_W] : k->t[LOOM_PHASE_FWD];
  double scale = (t1 - t0) / fmax(all, layers), span = layers * scale;
  double at = bwd ? t0 : t1 - span;
  for (int l = 0; l < v->layers; l++) {
    int k = bwd ? v->layers - 1 - l : l;
    /* the MoE layers spread evenly over the chunk */
    bool is_moe = (int)((double)(k + 1) * v->moe / v->layers) >
                  (int)((double)k * v->moe / v->layers);
    if (is_moe)
      for (int e = 0; e < L->n; e++)
        if (L->ev[e].bwd == bwd)
          sim_event_add(R, rank, 3, -1, L->ev[e].name, at + L->ev[e].offset * scale,
                        at + (L->ev[e].offset + L->ev[e].dur) * scale, L->ev[e].bytes);
    at += (is_moe ? moe : dense) * scale;
  }
}

static int by_start(const void *a, const void *b) {
  const sim_event *x = a, *y = b;
  if (x->rank != y->rank) return x->rank - y->rank;
  if (x->tid != y->tid) return x->tid - y->tid;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  return x->instr - y->instr;
}

int sim_trace_write(const sim_run *R, const char *path, bool per_world_rank) {
  const loom_sim_strategy *st = R->c->st;
  int S = sim_stage_ranks(st), pp = R->s->pp; /* dp x cp x sp x tp */
  int rows = per_world_rank ? S : 1;
  qsort(R->ev, (size_t)R->n_ev, sizeof *R->ev, by_start);
  char *tmp = loom_tmp_path(path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    free(tmp);
    return loom_err("cannot write the trace '%s'", path);
  }
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"simulated\":true,\"strategy\":\"%s\"},"
             "\"traceEvents\":[\n", loom_sim_strategy_str(st));
  int first = 1;
  for (int r = 0; r < pp; r++)
    for (int k = 0; k < rows; k++) {
      int pid = per_world_rank ? r * S + k : r;
      char label[96];
      if (per_world_rank) snprintf(label, sizeof label, "rank %d", pid);
      else snprintf(label, sizeof label, "rank %d (pipeline stage; %d ranks alike)", r * S, S);
      fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"%s\"}},\n"
                 "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},\n"
                 "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"communication\"}}",
              first ? "" : ",\n", pid, label, pid, pid);
      if (r == 0 && R->vs[0].vision[LOOM_PHASE_FWD] > 0)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":2,\"args\":{\"name\":\"vision encoder\"}}", pid);
      if (R->a2a[0].n > 0)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":3,"
                   "\"args\":{\"name\":\"expert all-to-all\"}}", pid);
      first = 0;
      for (int j = 0; j < R->n_ev; j++) {
        const sim_event *e = &R->ev[j];
        if (e->rank != r) continue;
        char name[96];
        if (e->name) snprintf(name, sizeof name, "%s", e->name);
        else loom_instr_format(&R->s->instr[r][e->instr], name, sizeof name);
        fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                   "\"ts\":%.3f,\"dur\":%.3f,\"args\":{",
                name, e->tid == 1 || e->tid == 3 ? "comm" : e->tid == 2 ? "vision" : "compute",
                pid, e->tid, e->t0 * 1e6, (e->t1 - e->t0) * 1e6);
        if (e->instr >= 0 && e->tid == 0) fprintf(f, "\"comm_ms\":%.4f", R->exposed[r][e->instr] * 1e3);
        if (e->bytes >= 0) fprintf(f, "%s\"bytes\":%.0f", e->instr >= 0 && e->tid == 0 ? "," : "", e->bytes);
        fprintf(f, "}}");
      }
    }
  fprintf(f, "\n]}\n");
  int bad = ferror(f);
  if (fclose(f) || bad) {
    remove(tmp);
    free(tmp);
    return loom_err("cannot write the trace '%s'", path);
  }
  int rc = rename(tmp, path) ? loom_err("cannot rename the trace into '%s'", path) : 0;
  free(tmp);
  return rc;
}

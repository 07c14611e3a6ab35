/* The simulator's Chrome trace (chrome://tracing, Perfetto), in the layout of `loom train
 * --trace`: one process per rank, thread 0 "compute" holding every instruction of the
 * schedule named by its text ("forward chunk=0 mb=1"), thread 1 "communication" holding
 * pipeline transfers, data-parallel and ZeRO reductions, with their bytes, and (vision-language
 * models, first stage) thread 2 "vision encoder" with the encoder's part of each forward and
 * backward. The ranks of one
 * pipeline stage share a timeline; with per_world_rank every world rank gets its rows. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "sim/sim_internal_run.h"

void sim_event_add(sim_run *R, int rank, int tid, int instr, const char *name, double t0,
                   double t1, double bytes) {
  if (!R->record) return;
  if (R->n_ev == R->cap_ev) {
    if (R->cap_ev >= (1 << 24)) return;
    R->cap_ev = R->cap_ev ? 2 * R->cap_ev : 4096;
    R->ev = realloc(R->ev, (size_t)R->cap_ev * sizeof *R->ev);
    LOOM_ASSERT(R->ev);
  }
  R->ev[R->n_ev++] = (sim_event){rank, tid, instr, name, t0, t1, bytes};
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
      first = 0;
      for (int j = 0; j < R->n_ev; j++) {
        const sim_event *e = &R->ev[j];
        if (e->rank != r) continue;
        char name[96];
        if (e->name) snprintf(name, sizeof name, "%s", e->name);
        else loom_instr_format(&R->s->instr[r][e->instr], name, sizeof name);
        fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                   "\"ts\":%.3f,\"dur\":%.3f,\"args\":{",
                name, e->tid == 1 ? "comm" : e->tid == 2 ? "vision" : "compute", pid, e->tid, e->t0 * 1e6, (e->t1 - e->t0) * 1e6);
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

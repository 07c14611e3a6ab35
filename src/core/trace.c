/* In-memory Chrome trace events and their JSON output (see trace.h). */
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/trace.h"

typedef struct {
  int tid;
  char name[48], detail[48];
  double t0, t1, bytes;
} event;

static bool enabled = false;
static event *events = NULL;
static size_t n_events = 0, cap_events = 0;
static double origin = 0;

void loom_trace_enable(bool on) {
  enabled = on;
  if (on && origin == 0) origin = loom_now();
}

bool loom_trace_enabled(void) { return enabled; }

void loom_trace_record(int tid, const char *name, const char *detail, double t0, double t1,
                       double bytes) {
  if (!enabled) return;
  if (n_events == cap_events) {
    if (cap_events >= (1u << 22)) return; /* 4M events: stop recording rather than grow */
    cap_events = cap_events ? 2 * cap_events : 4096;
    events = loom_realloc(events, cap_events, sizeof *events);
  }
  event *e = &events[n_events++];
  e->tid = tid;
  snprintf(e->name, sizeof e->name, "%s", name);
  snprintf(e->detail, sizeof e->detail, "%s", detail ? detail : "");
  e->t0 = t0;
  e->t1 = t1;
  e->bytes = bytes;
}

static int write_fragment(const char *path, int rank) {
  FILE *f = fopen(path, "w");
  if (!f) return loom_err("cannot write trace fragment '%s'", path);
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n"
             "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},\n"
             "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"communication\"}}",
          rank, rank, rank, rank);
  for (size_t i = 0; i < n_events; i++) {
    const event *e = &events[i];
    fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
               "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"detail\":\"%s\"",
            e->name, e->tid ? "comm" : "compute", rank, e->tid, (e->t0 - origin) * 1e6,
            (e->t1 - e->t0) * 1e6, e->detail);
    if (e->bytes >= 0) fprintf(f, ",\"bytes\":%.0f", e->bytes);
    fprintf(f, "}}");
  }
  fprintf(f, "\n");
  return fclose(f) == 0 ? 0 : loom_err("cannot write trace fragment '%s'", path);
}

int loom_trace_write(const char *path, int rank, int world, void (*barrier)(void *), void *ctx) {
  char *frag = loom_sprintf("%s.rank%d", path, rank);
  int rc = write_fragment(frag, rank);
  free(frag);
  if (barrier) barrier(ctx);
  if (rank != 0 || rc) return rc;
  size_t cap = 1 << 16, len = 0;
  char *out = loom_malloc(cap);
  len += (size_t)snprintf(out, cap, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  for (int r = 0; r < world && !rc; r++) {
    char *p = loom_sprintf("%s.rank%d", path, r), *data;
    size_t n;
    rc = loom_read_file(p, &data, &n);
    if (!rc) {
      while (len + n + 8 > cap) cap *= 2, out = loom_realloc(out, cap, 1);
      if (r) out[len++] = ',';
      memcpy(out + len, data, n);
      len += n;
      free(data);
      remove(p);
    }
    free(p);
  }
  len += (size_t)snprintf(out + len, cap - len, "]}\n");
  if (!rc) rc = loom_write_file_atomic(path, out, len);
  free(out);
  return rc;
}

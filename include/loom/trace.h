/* Chrome trace of a real run (chrome://tracing, Perfetto): one process row per rank, a thread
 * row for compute (schedule instructions) and one for communication (every collective and
 * point-to-point message, with its bytes). Recording is off unless enabled; events are kept
 * in memory and written once at the end: each rank writes its fragment, rank 0 merges them. */
#ifndef LOOM_TRACE_H
#define LOOM_TRACE_H
#include <stdbool.h>

enum { LOOM_TRACE_COMPUTE = 0, LOOM_TRACE_COMM = 1 };

void loom_trace_enable(bool on);
bool loom_trace_enabled(void);
/* name and detail are copied; t0/t1 from loom_now(); bytes < 0 when not applicable */
void loom_trace_record(int tid, const char *name, const char *detail, double t0, double t1,
                       double bytes);
/* Write this rank's events to <path>.rank<r>; rank 0 then merges all of them into path.
 * `barrier` is called between the two phases (all ranks), may be NULL for one process. */
int loom_trace_write(const char *path, int rank, int world, void (*barrier)(void *), void *ctx);
#endif

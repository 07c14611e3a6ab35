/* Fault injection for the crash tests: LOOM_FAULT=kill-<where>:RANK:STEP makes that rank
 * SIGKILL itself at the named point, LOOM_FAULT=pause-<where>:RANK:STEP makes it sleep there
 * (LOOM_FAULT_PAUSE_S, default 5 s) (src/comm/fault.c: it knows the rank); other LOOM_FAULT
 * kinds are the run driver's (src/train/run_step.c). */
#ifndef LOOM_FAULT_H
#define LOOM_FAULT_H
#include <stdbool.h>

/* where: "save" (this rank's checkpoint files written, the checkpoint not yet complete),
 * "marker" (rank 0: COMPLETE written, directory not yet renamed), "prune" (rank 0: an old
 * checkpoint renamed to *.pruned.tmp, not yet deleted); step: the checkpoint's step. */
void loom_fault_point(const char *where, long step);
/* LOOM_FAULT_ONCE=FILE: true only for the first caller (creates FILE); true when unset. */
bool loom_fault_fire_once(void);
#endif

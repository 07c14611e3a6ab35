/* Fault injection for the crash tests: LOOM_FAULT=kill-<where>:RANK:STEP makes that rank
 * SIGKILL itself at the named point (see fault.c); other LOOM_FAULT kinds are run.c's. */
#ifndef LOOM_TRAIN_FAULT_H
#define LOOM_TRAIN_FAULT_H
/* where: "save" (this rank's checkpoint files written, the checkpoint not yet complete),
 * "marker" (rank 0: COMPLETE written, directory not yet renamed), "prune" (rank 0: an old
 * checkpoint renamed to *.pruned.tmp, not yet deleted); step: the checkpoint's step. */
void loom_fault_point(const char *where, long step);
/* LOOM_FAULT_ONCE=FILE: true only for the first caller (creates FILE); true when unset. */
#include <stdbool.h>
bool loom_fault_fire_once(void);
#endif

/* Fault injection points for the crash tests (LOOM_FAULT=kill-<where>:RANK:STEP): the rank
 * kills itself with SIGKILL, as `kill -9` would, at a chosen point of a checkpoint save or
 * prune; LOOM_FAULT=pause-<where>:RANK:STEP makes it say so on stderr and sleep there
 * (LOOM_FAULT_PAUSE_S seconds, default 5: the multi-node fault test cuts a node's link while a
 * checkpoint is half written). Unset LOOM_FAULT costs one getenv per point. With
 * LOOM_FAULT_ONCE=FILE a fault fires only where FILE does not exist yet (and creates it): a
 * relaunched job runs through. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom/mesh.h"
#include "loom/fault.h"

bool loom_fault_fire_once(void) {
  const char *once = getenv("LOOM_FAULT_ONCE");
  if (!once || !*once) return true;
  int fd = open(once, O_CREAT | O_EXCL | O_WRONLY, 0644); /* the first process to get here */
  if (fd < 0) return false;
  close(fd);
  return true;
}

void loom_fault_point(const char *where, long step) {
  const char *f = getenv("LOOM_FAULT");
  char kind[24];
  int rank;
  long at;
  bool pausing = f && !strncmp(f, "pause-", 6);
  if (!f || (strncmp(f, "kill-", 5) && !pausing) ||
      sscanf(f + (pausing ? 6 : 5), "%23[a-z]:%d:%ld", kind, &rank, &at) != 3)
    return;
  if (strcmp(kind, where) || at != step || rank != loom_dist_rank()) return;
  if (!loom_fault_fire_once()) return;
  if (pausing) {
    const char *s = getenv("LOOM_FAULT_PAUSE_S");
    double secs = s && atof(s) > 0 ? atof(s) : 5;
    fprintf(stderr, "loom: LOOM_FAULT: rank %d paused %.0f s during %s of checkpoint %ld\n", rank,
            secs, where, step);
    fflush(stderr);
    struct timespec t = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
    while (nanosleep(&t, &t) != 0) {
    }
    return;
  }
  fprintf(stderr, "loom: LOOM_FAULT: rank %d killed during %s of checkpoint %ld\n", rank, where,
          step);
  fflush(stderr);
  kill(getpid(), SIGKILL);
  pause();
}

/* Fault injection points for the crash tests (LOOM_FAULT=kill-<where>:RANK:STEP): the rank
 * kills itself with SIGKILL, as `kill -9` would, at a chosen point of a checkpoint save or
 * prune. Unset LOOM_FAULT costs one getenv per point. With LOOM_FAULT_ONCE=FILE a fault fires
 * only where FILE does not exist yet (and creates it): a relaunched job runs through. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  if (!f || strncmp(f, "kill-", 5) || sscanf(f + 5, "%23[a-z]:%d:%ld", kind, &rank, &at) != 3)
    return;
  if (strcmp(kind, where) || at != step || rank != loom_dist_rank()) return;
  if (!loom_fault_fire_once()) return;
  fprintf(stderr, "loom: LOOM_FAULT: rank %d killed during %s of checkpoint %ld\n", rank, where,
          step);
  fflush(stderr);
  kill(getpid(), SIGKILL);
  pause();
}

/* A stop signal that lands inside a oneDNN GEMM leaves the heap intact. oneDNN 2.6's JIT GEMM
 * kernels point rsp at a heap buffer while they run (oneDNN issue #4845): a signal frame
 * written there corrupts the heap, and glibc aborts in a later free(). loom_train_signals_install
 * therefore runs the handler on an alternate stack and keeps the OpenMP workers out of the
 * signals' reach (run_stop.c). Checked two ways:
 *  - what the install leaves: SA_ONSTACK on SIGINT/SIGTERM/SIGUSR1, an alternate stack at least
 *    as large as the CPU's signal frame, the stop signals blocked in every OpenMP worker and
 *    open in the main thread;
 *  - where the signal frame lands: child processes run the GEMM of the crash's core dump (fc2
 *    of the tiny model, 64 x 64 x 512, fp32, whose kernel had rsp in the heap for 75% of the
 *    signals sent to it on a Zen 3) in a loop; a SIGTERM arrives at a random moment; at once
 *    after the GEMM it interrupted, the child searches its heap for the frame the kernel
 *    wrote: the xsave area's software bytes (FP_XSTATE_MAGIC1, the size, FP_XSTATE_MAGIC2 at
 *    its end; Linux's x86 signal ABI). None may be there, and each child must run 2000 more
 *    GEMMs and exit 0. With the handler on the normal stack 23 of 24 children died (SIGSEGV,
 *    or SIGABRT in free()) on a Zen 3; the search itself is checked on a planted frame. */
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "loom/kernels.h"
#include "train/run_internal.h"

static void check_install(void) {
  omp_set_num_threads(3); /* workers exist to be checked, on any machine */
  loom_train_signals_install();
  const int sigs[] = {SIGINT, SIGTERM, SIGUSR1};
  for (int i = 0; i < 3; i++) {
    struct sigaction sa;
    sigaction(sigs[i], NULL, &sa);
    CHECK(sa.sa_flags & SA_ONSTACK, "signal %d: handler not on the alternate stack", sigs[i]);
  }
  stack_t ss;
  sigaltstack(NULL, &ss);
  long need = sysconf(_SC_SIGSTKSZ);
  CHECK(!(ss.ss_flags & SS_DISABLE) && ss.ss_sp && (long)ss.ss_size >= need,
        "alternate stack: flags %d, %zu bytes (the CPU's frame needs %ld)", ss.ss_flags,
        ss.ss_size, need);
  int workers = 0, open_workers = 0;
#pragma omp parallel reduction(+ : workers, open_workers)
  {
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    if (omp_get_thread_num() != 0) {
      workers++;
      open_workers += !sigismember(&now, SIGTERM) || !sigismember(&now, SIGINT) ||
                      !sigismember(&now, SIGUSR1);
    }
  }
  CHECK(workers == 2 && open_workers == 0, "%d of %d OpenMP workers take stop signals",
        open_workers, workers);
  sigset_t main_now;
  pthread_sigmask(SIG_BLOCK, NULL, &main_now);
  CHECK(!sigismember(&main_now, SIGTERM) && !sigismember(&main_now, SIGINT) &&
            !sigismember(&main_now, SIGUSR1),
        "the main thread blocks a stop signal");
}

/* The [heap] mapping of this process: [lo, hi) */
static void heap_range(const unsigned char **lo, const unsigned char **hi) {
  *lo = *hi = NULL;
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  unsigned long a, b;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, "[heap]") && sscanf(line, "%lx-%lx", &a, &b) == 2)
      *lo = (const unsigned char *)a, *hi = (const unsigned char *)b;
  if (f) fclose(f);
}

/* Whether [lo, hi) holds a signal frame's xsave area: the software bytes at byte 464 of the
 * fxsave image (magic1 0x46505853, the extended size, the features, the xstate size) and
 * magic2 0x46505845 right after the xstate. */
static uint32_t __attribute__((no_sanitize_address)) le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
/* (the whole mapping is read, freed chunks and allocator metadata included: not checked by
 * AddressSanitizer in its build) */
static bool __attribute__((no_sanitize_address))
holds_signal_frame(const unsigned char *lo, const unsigned char *hi) {
  for (const unsigned char *p = lo; p + 24 <= hi; p += 4) {
    if (le32(p) != 0x46505853u) continue;
    uint32_t xstate_size = le32(p + 16);
    const unsigned char *fx = p - 464, *m2 = fx + xstate_size;
    if (fx < lo || xstate_size < 512 || m2 + 4 > hi) continue;
    if (le32(m2) == 0x46505845u) return true;
  }
  return false;
}

/* The child: GEMMs until the signal has been seen, a look at the heap, then 2000 more GEMMs
 * with heap traffic. Exit 0; 3: no signal came; 4: its frame is in the heap. */
static void child_gemms(int ready_fd) {
  loom_run run;
  memset(&run, 0, sizeof run);
  run.ranks.job.world = 1;
  enum { M = 64, N = 64, K = 512 };
  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K);
  float *c = malloc(sizeof(float) * M * N);
  for (int i = 0; i < M * K; i++) a[i] = (float)(i % 17) * 0.01f;
  for (int i = 0; i < N * K; i++) b[i] = (float)(i % 13) * 0.01f;
  void *keep[16] = {0};
  long after = -1;
  bool framed = false;
  for (long it = 0; it < 200000 && after != 0; it++) {
    loom_gemm_f32(0, 1, M, N, K, a, K, b, K, NULL, 0.0f, c, N); /* c = a b^T: fc2's shape */
    if (it == 20 && write(ready_fd, "r", 1) != 1) _exit(5); /* past the JIT's code generation */
    if (after < 0 && loom_run_stop_agree(&run) == SIGTERM) {
      const unsigned char *lo, *hi;
      heap_range(&lo, &hi);
      framed = lo && holds_signal_frame(lo, hi);
      after = 2000;
    }
    if (after > 0) { /* heap traffic beside oneDNN's buffers: a clobbered chunk aborts */
      int slot = (int)(it % 16);
      free(keep[slot]);
      keep[slot] = malloc(4096 + 1024 * (size_t)(it % 13));
      if (keep[slot]) memset(keep[slot], (int)it, 64);
      after--;
    }
  }
  for (int i = 0; i < 16; i++) free(keep[i]);
  free(a), free(b), free(c);
  _exit(framed ? 4 : after == 0 ? 0 : 3);
}

static void check_signals_in_gemms(int children) {
  int died = 0, unsignalled = 0, framed = 0;
  srand(7);
  for (int k = 0; k < children; k++) {
    fflush(NULL);
    int ready[2];
    if (pipe(ready)) abort();
    pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      omp_set_num_threads(1);
      loom_train_signals_install();
      child_gemms(ready[1]);
    }
    close(ready[1]);
    char r;
    bool up = read(ready[0], &r, 1) == 1;
    close(ready[0]);
    /* 0-2 ms into the loop of GEMMs (about 0.2 ms each) */
    struct timespec t = {0, (rand() % 2000) * 1000L};
    if (up) nanosleep(&t, NULL);
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
      died++;
      fprintf(stderr, "child %d: killed by signal %d (%s)\n", k, WTERMSIG(status),
              strsignal(WTERMSIG(status)));
    } else if (WEXITSTATUS(status) == 3) unsignalled++;
    else if (WEXITSTATUS(status) == 4) framed++;
  }
  CHECK(died == 0, "%d of %d children crashed after a SIGTERM inside their GEMMs", died, children);
  CHECK(unsignalled == 0, "%d children never saw their SIGTERM", unsignalled);
  CHECK(framed == 0, "%d of %d children found the signal's frame in their heap", framed, children);
  printf("  %d of %d children: a SIGTERM inside the GEMM loop, no signal frame in the heap, "
         "2000 more GEMMs, exit 0\n", children - died - unsignalled - framed, children);
}

/* The search finds a frame's xsave bytes where they are, and nothing in plain data. */
static void check_frame_search(void) {
  unsigned char *buf = calloc(1, 8192);
  for (int i = 0; i < 8192; i++) buf[i] = (unsigned char)(i * 7);
  CHECK(!holds_signal_frame(buf, buf + 8192), "a frame found in plain data");
  unsigned char *fx = buf + 1024;
  uint32_t magic1 = 0x46505853u, size = 0x988, magic2 = 0x46505845u;
  memcpy(fx + 464, &magic1, 4);
  memcpy(fx + 464 + 16, &size, 4);
  CHECK(!holds_signal_frame(buf, buf + 8192), "magic1 alone taken for a frame");
  memcpy(fx + size, &magic2, 4);
  CHECK(holds_signal_frame(buf, buf + 8192), "the frame's xsave bytes not found");
  free(buf);
}

int main(int argc, char **argv) {
  check_frame_search();
  check_signals_in_gemms(argc > 1 ? atoi(argv[1]) : 24);
  check_install();
  return harness_finish("test_signal_stack");
}

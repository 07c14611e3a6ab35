/* The step profiler (include/loom/prof.h): a stack of open parts on the thread outside
 * OpenMP parallel regions; each push or pop charges the time since the previous event to the
 * part on top, so nested parts get exclusive time and the parts sum to the step. */
#include "loom/prof.h"

#include <omp.h>
#include <string.h>

#include "loom/core.h"

bool loom_prof_on;

enum { DEPTH = 16 };
static loom_prof_report rep;
static loom_part stack[DEPTH];
static int depth;
static double last, t_start;

static void charge(double now) {
  if (depth > 0) rep.seconds[stack[depth - 1]] += now - last;
  last = now;
}

void loom_prof_start(void) {
  memset(&rep, 0, sizeof rep);
  depth = 0;
  t_start = last = loom_now();
  stack[depth++] = LOOM_PART_OTHER;
  rep.calls[LOOM_PART_OTHER] = 1;
  loom_prof_on = true;
}

void loom_prof_stop(loom_prof_report *r) {
  double now = loom_now();
  charge(now);
  depth = 0;
  loom_prof_on = false;
  rep.total = now - t_start;
  *r = rep;
}

void loom_prof_push(loom_part p) {
  if (omp_in_parallel()) return;
  LOOM_ASSERT(depth < DEPTH && p >= 0 && p < LOOM_PART_N);
  charge(loom_now());
  stack[depth++] = p;
  rep.calls[p]++;
}

void loom_prof_pop(double flops, double bytes) {
  if (omp_in_parallel()) return;
  LOOM_ASSERT(depth > 1); /* LOOM_PART_OTHER stays open until loom_prof_stop */
  charge(loom_now());
  loom_part p = stack[--depth];
  rep.flops[p] += flops;
  rep.bytes[p] += bytes;
}

int loom_prof_gemm_role(const char *name) {
  static const struct {
    const char *suffix;
    int role;
  } map[] = {{"attn.q.weight", LOOM_GEMM_QKV},   {"attn.k.weight", LOOM_GEMM_QKV},
             {"attn.v.weight", LOOM_GEMM_QKV},   {"attn.o.weight", LOOM_GEMM_PROJ},
             {"mlp.gate.weight", LOOM_GEMM_FC1}, {"mlp.up.weight", LOOM_GEMM_FC1},
             {"mlp.down.weight", LOOM_GEMM_FC2}, {"lm_head.weight", LOOM_GEMM_HEAD},
             {"embed.weight", LOOM_GEMM_HEAD},
             /* Mixture-of-Experts layers: the router, the shared expert (an MLP) */
             {"moe.router.weight", LOOM_GEMM_ROUTER},
             {"moe.shared.gate.weight", LOOM_GEMM_FC1},
             {"moe.shared.up.weight", LOOM_GEMM_FC1},
             {"moe.shared.down.weight", LOOM_GEMM_FC2}};
  size_t n = strlen(name);
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    size_t m = strlen(map[i].suffix);
    if (n >= m && !strcmp(name + n - m, map[i].suffix)) return map[i].role;
  }
  return -1;
}

const char *loom_prof_part_name(loom_part p) {
  static const char *const names[] = {
      "unattributed", "qkv fwd",      "qkv dgrad",     "qkv wgrad",     "proj fwd",
      "proj dgrad",   "proj wgrad",   "fc1 fwd",       "fc1 dgrad",     "fc1 wgrad",
      "fc2 fwd",      "fc2 dgrad",    "fc2 wgrad",     "lm head fwd",   "lm head dgrad",
      "lm head wgrad", "router fwd",   "router dgrad",  "router wgrad",  "attention fwd",
      "attention bwd", "experts fwd",  "experts bwd",   "norms",         "activations",
      "cross-entropy", "embeddings",   "zero grads",    "grad clip norm", "adamw",
      "bf16 convert",  "moe route",    "moe permute",   "moe combine",   "data loading"};
  _Static_assert(sizeof names / sizeof names[0] == LOOM_PART_N, "one name per part");
  return p >= 0 && p < LOOM_PART_N ? names[p] : "?";
}

/* Helpers shared by the simulator tests: a Megatron GPT spec (Korthikanti et al. 2022's
 * models), strategies, running the `loom` executable with captured output, and substring
 * checks on messages. */
#ifndef LOOM_SIM_TEST_UTIL_H
#define LOOM_SIM_TEST_UTIL_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "run_loom.h"
#include "loom/core.h"
#include "loom/sim.h"

static inline const char *source_dir(void) {
  const char *s = getenv("LOOM_SOURCE_DIR");
  return s && *s ? s : LOOM_SOURCE_DIR;
}

/* GPT (Megatron): LayerNorm, GELU MLP of 4h, biases, learned positions, tied embedding */
static inline loom_model_spec megatron_gpt(int h, int heads, int layers, int vocab, int seq) {
  loom_model_spec s;
  memset(&s, 0, sizeof s);
  s.arch = LOOM_ARCH_GPT2;
  s.vocab_size = s.padded_vocab = vocab;
  s.hidden = h;
  s.layers = layers;
  s.heads = s.kv_heads = heads;
  s.head_dim = h / heads;
  s.intermediate = 4 * h;
  s.max_seq = seq;
  s.norm_eps = 1e-5;
  s.qkv_bias = true;
  s.tied_embeddings = true;
  s.init_std = 0.02;
  return s;
}

static inline loom_sim_strategy strategy(int dp, int tp, int pp, int vpp, int mbs, int m,
                                         int seq) {
  loom_sim_strategy st;
  memset(&st, 0, sizeof st);
  st.dp = dp, st.tp = tp, st.pp = pp, st.sp = 1, st.vpp = vpp;
  st.micro_batch = mbs, st.microbatches = m, st.seq = seq;
  snprintf(st.schedule, sizeof st.schedule, "%s",
           pp == 1 ? "none" : vpp > 1 ? "interleaved" : "1f1b");
  st.dtype = LOOM_DT_FP16;
  st.bucket_mb = 25;
  return st;
}

/* True when msg contains every NULL-terminated substring; prints the message otherwise. */
static inline int contains_all(const char *msg, ...) {
  va_list ap;
  va_start(ap, msg);
  int ok = 1;
  for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
    if (!strstr(msg, s)) {
      fprintf(stderr, "  message lacks \"%s\":\n  %s\n", s, msg);
      ok = 0;
    }
  va_end(ap);
  return ok;
}
#define HAS(msg, ...) contains_all(msg, __VA_ARGS__, (const char *)NULL)

/* Run `loom ARGS` (shell text) in the build directory, capturing stdout and stderr. */
static inline run_result run_loom(const char *args) { return loom_run_in("sim-cli.tmp", args); }

/* The simulated step of strategy st (its schedule generated as the executor does) into *r,
 * which the caller frees with loom_sim_result_free; fails the test on an error. */
static inline void sim_result_of(const loom_model_spec *s, const loom_hw_profile *hw,
                                 const loom_sim_strategy *st, loom_sim_result *r) {
  loom_sim_ctx c;
  loom_sim_ctx_init(&c, s, hw, st);
  loom_schedule sc;
  CHECK(loom_sim_schedule(st, NULL, &sc) == 0, "%s", loom_errmsg());
  loom_sim_opts o = {NULL, false, 0};
  CHECK(loom_sim_run(&c, &sc, &o, r) == 0, "%s", loom_errmsg());
  loom_sched_free(&sc);
}

static inline int load_hw(loom_hw_profile *hw, const char *name) {
  char *path = loom_sprintf("%s/configs/hardware/%s.yaml", source_dir(), name);
  int rc = loom_hw_load_file(hw, path);
  free(path);
  return rc;
}
#endif

/* The memory model of loom's CPU executor against what the trainer really allocates (within
 * 3%: the model mirrors src/model/decoder_memory.c item by item, without its alignment): the
 * decoder's activation arena (slots of saved activations plus the backward scratch) and its
 * parameter/gradient buffers (bf16: the native GEMMs' 2-byte weights or the rounded fp32 copy,
 * whichever this machine's GEMMs read), for GPT-2 and Llama shapes, bf16, recomputation, pipeline
 * chunks with several slots, the head on the last stage, tensor parallelism with Megatron
 * sequence parallelism, context parallelism (T/cp tokens, the ring's buffers; also inside
 * Ulysses), Ulysses x TP, Mixture-of-Experts layers (router, dispatch plan, the rows an
 * expert-parallel rank's experts may receive, the shared expert, dense layers between MoE
 * layers, recomputation); and the in-flight count the executor sizes its slots with. */
#include <math.h>

#include "loom/decoder.h"
#include "loom/kernels.h"
#include "loom/sim_bench.h"
#include "sim_test_util.h"

typedef struct {
  const char *preset;
  int B, T, tp, layers_held, slots;
  bool head, embed, bf16, recompute, seqpar;
  int cp, sp; /* 0: none */
  bool param_bf16; /* training.param_dtype=bf16 */
  int ep;          /* expert parallelism (an MoE preset): this rank holds E/ep experts */
  int sparse_step; /* an MoE preset's model.moe.sparse_step (0: the preset's): dense layers too */
} mcase;

static void check_case(const mcase *k) {
  loom_model_spec s;
  CHECK(loom_model_preset(&s, k->preset) == 0, "%s", loom_errmsg());
  if (k->sparse_step > 0) s.moe.sparse_step = k->sparse_step;
  loom_shard sh;
  memset(&sh, 0, sizeof sh);
  int cp = k->cp > 1 ? k->cp : 1, sp = k->sp > 1 ? k->sp : 1;
  sh.tp = k->tp, sh.sp = sp, sh.n_chunks = 1, sh.seq_parallel = k->seqpar;
  sh.cp = cp;
  sh.ep = k->ep > 1 ? k->ep : 1, sh.ep_rank = sh.ep - 1;
  sh.chunk_first[0] = k->embed ? 0 : 1;
  sh.chunk_last[0] = sh.chunk_first[0] + k->layers_held;
  sh.chunk_embed[0] = k->embed, sh.chunk_head[0] = k->head;
  loom_decoder *d;
  /* a tp > 1 shard needs a communicator only to run, not to be built */
  loom_comm fake = {NULL, k->tp, 0, "tp", 0, NULL}, fake_cp = {NULL, cp, 0, "cp", 0, NULL};
  loom_comm fake_sp = {NULL, sp, 0, "sp", 0, NULL};
  CHECK(loom_decoder_create_shard(&d, &s, &sh, k->B, k->T, k->bf16, k->recompute, k->slots,
                                  k->tp > 1 ? &fake : NULL, sp > 1 ? &fake_sp : NULL,
                                  cp > 1 ? &fake_cp : NULL) == 0,
        "%s", loom_errmsg());
  if (k->param_bf16) CHECK(loom_decoder_set_param_bf16(d) == 0, "%s", loom_errmsg());
  loom_hw_profile hw;
  loom_bench_profile_defaults(&hw);
  hw.attn_rate_fwd = hw.attn_rate_bwd = 1e9;
  loom_sim_strategy st = strategy(1, k->tp, 2, 1, k->B, k->slots, k->T);
  st.dtype = k->bf16 ? LOOM_DT_BF16 : LOOM_DT_FP32;
  st.param_dtype = k->param_bf16 ? LOOM_DT_BF16 : LOOM_DT_FP32;
  st.recompute = k->recompute ? LOOM_RECOMPUTE_FULL : LOOM_RECOMPUTE_NONE;
  st.seq_par = k->seqpar;
  st.cp = cp, st.sp = sp;
  if (k->ep > 1) st.ep = k->ep, st.dp = k->ep; /* one expert group over the dp ranks */
  loom_sim_ctx c;
  loom_sim_ctx_init(&c, &s, &hw, &st);
  loom_sim_memory m;
  loom_sim_memory_rank(&c, k->layers_held, k->layers_held, k->embed, k->head, k->slots, &m);
  double model = m.activations + m.workspace, real = (double)d->arena_bytes;
  CHECK(fabs(model - real) <= 0.03 * real, "%s B=%d T=%d tp=%d%s cp=%d slots=%d%s%s%s: activations "
        "+ scratch modelled %.0f, allocated %.0f (%.2f%%) (sp=%d)", k->preset, k->B, k->T, k->tp,
        k->seqpar ? "+sp" : "", cp, k->slots, k->head ? " head" : "", k->bf16 ? " bf16" : "",
        k->recompute ? " recompute" : "", model, real, 100 * (model / real - 1), sp);
  /* the decoder's parameter storage (fp32 master, then the native GEMMs' 2-byte weights or
   * the rounded fp32 copy in bf16) and its fp32 gradients */
  double buffers = (double)loom_decoder_param_bytes(d) + (double)d->layout.total * sizeof(float);
  CHECK(fabs(m.weights + m.grads - buffers) <= 0.01 * buffers,
        "%s%s%s (bf16 GEMMs %s): weights + gradients modelled %.0f, allocated %.0f", k->preset,
        k->bf16 ? " bf16" : "", k->param_bf16 ? " param_dtype=bf16" : "",
        hw.bf16_native ? "native" : "rounded", m.weights + m.grads, buffers);
  loom_decoder_free(d);
}

int main(void) {
  const mcase cases[] = {
      {"tiny-gpt2", 4, 64, 1, 4, 1, true, true, false, false, false, 0, 0, false, 0, 0},
      {"tiny-gpt2", 8, 128, 1, 2, 3, false, true, false, false, false, 0, 0, false, 0, 0},
      {"tiny-gpt2", 4, 64, 1, 4, 2, true, false, true, false, false, 0, 0, false, 0, 0},
      {"tiny-gpt2", 4, 64, 1, 4, 2, true, true, false, true, false, 0, 0, false, 0, 0},
      {"tiny-llama", 4, 64, 1, 4, 1, true, true, false, false, false, 0, 0, false, 0, 0},
      {"tiny-llama", 2, 128, 1, 3, 4, false, false, true, true, false, 0, 0, false, 0, 0},
      {"tiny-gpt2", 4, 64, 2, 4, 1, true, true, false, false, false, 0, 0, false, 0, 0},
      {"tiny-gpt2", 4, 64, 2, 4, 2, true, true, false, false, true, 0, 0, false, 0, 0},
      {"gpt2-124m", 1, 256, 1, 2, 2, true, false, false, false, false, 0, 0, false, 0, 0},
      /* context parallelism: T/cp tokens per rank and the ring's scratch */
      {"tiny-llama", 2, 256, 1, 4, 1, true, true, false, false, false, 2, 0, false, 0, 0},
      {"tiny-gpt2", 4, 256, 2, 4, 2, true, true, false, false, false, 4, 0, false, 0, 0},
      {"tiny-llama", 2, 256, 1, 3, 2, false, false, true, true, false, 4, 0, false, 0, 0},
      {"gpt2-124m", 1, 1024, 1, 2, 1, true, true, false, false, false, 8, 0, false, 0, 0},
      /* Ulysses inside cp (the ring in the attention layout), and Ulysses x TP */
      {"tiny-llama", 2, 256, 1, 4, 1, true, true, false, false, false, 2, 2, false, 0, 0},
      {"tiny-gpt2", 4, 256, 2, 4, 2, true, true, true, false, false, 2, 2, false, 0, 0},
      {"tiny-gpt2", 4, 128, 2, 4, 1, true, true, false, false, false, 0, 2, false, 0, 0},
      /* bf16 parameters: no rounded copy beside them */
      {"tiny-llama", 4, 64, 1, 4, 1, true, true, true, false, false, 0, 0, true, 0, 0},
      /* MoE layers; with expert parallelism the rank holds only its E/ep experts and carves
       * the rows it may receive (ep N k) */
      {"tiny-qwen3-moe", 4, 64, 1, 4, 1, true, true, false, false, false, 0, 0, false, 1, 0},
      {"tiny-qwen3-moe", 4, 64, 1, 4, 1, true, true, false, false, false, 0, 0, false, 2, 0},
      {"tiny-qwen3-moe", 2, 128, 1, 4, 1, true, true, true, false, false, 0, 0, false, 4, 0},
      /* a shared expert (its buffers, gradients and bf16 rounding widths) */
      {"tiny-qwen2-moe", 4, 64, 1, 4, 1, true, true, true, false, false, 0, 0, false, 2, 0},
      {"tiny-qwen2-moe", 2, 64, 1, 4, 3, false, true, false, false, false, 0, 0, false, 1, 0},
      /* dense layers between MoE layers (sparse_step 2) */
      {"tiny-qwen3-moe", 4, 64, 1, 4, 2, true, true, false, false, false, 0, 0, false, 2, 2},
      /* recomputation: the slots keep the layers' inputs, one layer's set is recomputed into
       * (with dense layers in the model, the dense MLP's and the MoE layer's buffers both) */
      {"tiny-qwen3-moe", 2, 128, 1, 4, 2, true, true, true, true, false, 0, 0, false, 2, 0},
      {"tiny-qwen2-moe", 4, 64, 1, 4, 1, true, true, false, true, false, 0, 0, false, 4, 2},
      /* tensor parallelism: every expert's (and the shared expert's) inner dimension / tp */
      {"tiny-qwen2-moe", 4, 64, 2, 4, 1, true, true, false, false, false, 0, 0, false, 2, 0},
      {"tiny-qwen3-moe", 2, 128, 2, 4, 2, true, true, true, true, false, 0, 0, false, 1, 0},
  };
  /* both GEMM backends: bf16 with native GEMMs (2-byte weights) and without (rounded copy) */
  const loom_gemm_backend backends[] = {LOOM_GEMM_ONEDNN, LOOM_GEMM_OPENBLAS};
  loom_gemm_backend saved = loom_gemm_get_backend();
  for (int b = 0; b < 2; b++) {
    loom_gemm_set_backend(backends[b]);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
  }
  loom_gemm_set_backend(saved);
  /* the executor sizes its slots with the schedule's peak in flight; the planner's closed
   * form for rank 0 agrees with it */
  struct {
    const char *name;
    int p, v, m;
  } sc[] = {{"1f1b", 4, 1, 8}, {"1f1b", 4, 1, 2}, {"gpipe", 3, 1, 5}, {"interleaved", 4, 2, 8},
            {"interleaved", 2, 3, 4}};
  for (size_t i = 0; i < sizeof sc / sizeof *sc; i++) {
    loom_schedule s;
    CHECK(loom_sched_generate(&s, sc[i].name, sc[i].p, sc[i].v, sc[i].m) == 0, "%s", loom_errmsg());
    loom_sim_strategy st = strategy(1, 1, sc[i].p, sc[i].v, 1, sc[i].m, 64);
    snprintf(st.schedule, sizeof st.schedule, "%s", sc[i].name);
    int peak = loom_sched_peak_inflight(&s, 0);
    extern int plan_inflight(const loom_sim_strategy *st);
    CHECK(plan_inflight(&st) == peak, "%s p=%d v=%d m=%d: closed form %d, schedule %d",
          sc[i].name, sc[i].p, sc[i].v, sc[i].m, plan_inflight(&st), peak);
    loom_sched_free(&s);
  }
  return harness_finish("test_sim_memory");
}

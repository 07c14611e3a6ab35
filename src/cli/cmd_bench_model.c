/* `loom bench model`: single-process speed of this machine with every thread — a training step
 * of a model preset (tokens/s, achieved model FLOP/s, MFU against the measured GEMM peak of
 * the step's dtype and against the instruction peak of this machine's profile where it has one,
 * peak resident memory), the GEMM peak per dtype and backend at a square
 * shape and at the step's own linear-layer shapes, and the streaming memory bandwidth; then a
 * hardware profile calibrated as `loom bench` calibrates (one thread per core: the devices of a
 * CPU profile) with this run's figures as its notes, and optionally JSON for
 * bench/vs_pytorch.sh. The step is loom_train_step (forward, backward, clip, AdamW) on random
 * tokens, so it is exactly what `loom train` runs per micro-batch on one process. model.KEY=VALUE
 * arguments change the preset as in `loom train` (bench/moe_vs_pytorch.sh: a dense model of the
 * MoE model's active parameters). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "loom/config.h"
#include "loom/core.h"
#include "loom/decoder.h"
#include "loom/hw.h"
#include "loom/kernels.h"
#include "loom/model.h"
#include "loom/prof.h"
#include "loom/roofline.h"
#include "loom/sim_bench.h"
#include "loom/optim.h"

typedef struct {
  const char *model, *dtype, *gemm, *json, *out;
  int B, T, steps, warmup;
  bool no_gemm, quiet, roofline;
  const char *sets[64]; /* model.KEY=VALUE arguments (argv's strings), nsets of them */
  int nsets;
} opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: loom bench model [--model PRESET] [--batch B] [--seq T] [--dtype fp32|bf16]\n"
          "                        [--steps N] [--warmup W] [--gemm onednn|openblas]\n"
          "                        [--no-gemm] [--json FILE] [--out PROFILE] [--quiet]\n"
          "                        [--roofline] [model.KEY=VALUE ...]\n\n"
          "Time training steps of a model preset on this process (OMP_NUM_THREADS threads):\n"
          "tokens/s, model FLOP/s (6 x matmul params + causal attention per token), MFU against\n"
          "the GEMM peak measured here for the step's dtype, peak resident memory. Then the GEMM\n"
          "peak per dtype/backend and the memory bandwidth with every thread, and a hardware\n"
          "profile for loom sim (calibrated like 'loom bench', one thread per core) with these\n"
          "figures as notes (default configs/hardware/this-machine-step.yaml).\n\n"
          "  --model PRESET  default gpt2-124m (loom model list); model.KEY=VALUE changes it as\n"
          "                  in loom train (model.hidden=512 model.moe.experts=16 ...)\n"
          "  --batch B       micro-batch, default 4;   --seq T  sequence length, default 64\n"
          "  --dtype D       fp32 (default) or bf16 (bf16 matmul inputs, fp32 accumulation)\n"
          "  --steps N       timed steps, default 5 (median reported); --warmup W default 1\n"
          "  --gemm B        GEMM backend (default $LOOM_GEMM or onednn)\n"
          "  --no-gemm       skip the GEMM peak and bandwidth measurements (MFU not given)\n"
          "  --json FILE     the results as one JSON object\n"
          "  --roofline      one more step, profiled: each part (GEMMs by role and phase,\n"
          "                  attention, norms, activations, cross-entropy, embeddings, AdamW,\n"
          "                  clipping, bf16 conversions, zeroing, unattributed) with its time,\n"
          "                  work, rate and fraction of its bound (the dtype's instruction\n"
          "                  peak in this machine's profile, from 'loom bench', else the best\n"
          "                  GEMM measured here; or the streaming bandwidth measured here),\n"
          "                  and the bottleneck\n");
}

/* --batch, --seq, --steps, --warmup: whole numbers (range checked after parsing) */
static int whole(const char *v, int *dst) {
  char *end;
  long n = strtol(v, &end, 10);
  if (end == v || *end || n < 0 || n > 1 << 30) return loom_err("takes a whole number, not '%s'", v);
  *dst = (int)n;
  return 0;
}
static int take_batch(const char *v, void *ctx) { return whole(v, &((opts *)ctx)->B); }
static int take_seq(const char *v, void *ctx) { return whole(v, &((opts *)ctx)->T); }
static int take_steps(const char *v, void *ctx) { return whole(v, &((opts *)ctx)->steps); }
static int take_warmup(const char *v, void *ctx) { return whole(v, &((opts *)ctx)->warmup); }

/* LOOM_CLI_OK, LOOM_CLI_HELP, LOOM_CLI_BAD (printed), or -1 with loom_err set. */
static int parse(opts *o, int argc, char **argv) {
  *o = (opts){"gpt2-124m", "fp32", NULL, NULL, "configs/hardware/this-machine-step.yaml", 4, 64,
              5, 1, false, false, false, {NULL}, 0};
  const loom_cli_opt table[] = {
      LOOM_OPT_VALUE("--model", &o->model), LOOM_OPT_VALUE("--dtype", &o->dtype),
      LOOM_OPT_VALUE("--gemm", &o->gemm),   LOOM_OPT_VALUE("--json", &o->json),
      LOOM_OPT_VALUE("--out", &o->out),     LOOM_OPT_EACH("--batch", take_batch),
      LOOM_OPT_EACH("--seq", take_seq),     LOOM_OPT_EACH("--steps", take_steps),
      LOOM_OPT_EACH("--warmup", take_warmup), LOOM_OPT_FLAG("--no-gemm", &o->no_gemm),
      LOOM_OPT_FLAG("--quiet", &o->quiet),  LOOM_OPT_FLAG("--roofline", &o->roofline),
      {0}};
  loom_cli_parser p = {.command = "bench model", .opts = table, .ctx = o};
  int rc = loom_cli_parse(&p, argc, argv, 1);
  for (int i = 0; rc == LOOM_CLI_OK && i < p.npos; i++) {
    if (strncmp(p.pos[i], "model.", 6) || !strchr(p.pos[i], '=') || i >= 64) {
      fprintf(stderr,
              "loom bench model: unexpected argument '%s' (up to 64 model.KEY=VALUE; see "
              "loom bench model --help)\n",
              p.pos[i]);
      rc = LOOM_CLI_BAD;
    } else {
      o->sets[o->nsets++] = p.pos[i];
    }
  }
  free(p.pos);
  if (rc) return rc;
  if (strcmp(o->dtype, "fp32") && strcmp(o->dtype, "bf16"))
    return loom_err("--dtype must be fp32 or bf16, found '%s'", o->dtype);
  if (o->B < 1 || o->T < 1 || o->steps < 1 || o->warmup < 0)
    return loom_err("--batch, --seq and --steps must be positive");
  if (o->gemm) {
    int b = loom_gemm_backend_parse(o->gemm);
    if (b < 0) return loom_err("--gemm must be onednn or openblas, found '%s'", o->gemm);
    loom_gemm_set_backend((loom_gemm_backend)b);
  }
  return 0;
}

/* CPU time of the process, every thread, in seconds: with one thread the step's own time,
 * whatever other processes take of the core (a shared machine stretches wall time only) */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the median of n sorted values */
static double median_sorted(const double *x, int n) {
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  double step_s, tokens_s, flops_s, rss_gib, loss_first, loss_last, min_s, max_s;
  double cpu_s, cpu_min_s;    /* the same steps in CPU time of the process (every thread) */
  double fwd_s, bwd_s, opt_s; /* one more step timed by part */
  loom_prof_report prof;      /* --roofline: one more step, profiled */
  double prof_wall;           /* its wall time measured around it */
} step_result;

/* The step: loom_train_step on random tokens, `warmup` untimed steps then `steps` timed. */
static int run_steps(const opts *o, const loom_model_spec *spec, step_result *r, FILE *log) {
  loom_decoder *d;
  bool bf16 = !strcmp(o->dtype, "bf16");
  if (loom_decoder_create(&d, spec, o->B, o->T, bf16, false)) return LOOM_ERR;
  loom_decoder_init_params(d, 1234);
  loom_config cfg;
  loom_config_defaults(&cfg);
  loom_config_training t = cfg.training;
  t.steps = o->warmup + o->steps;
  t.warmup_steps = 1;
  loom_adamw_state opt;
  loom_adamw_state_init(&opt, d->layout.total);
  size_t BT = (size_t)o->B * o->T;
  int32_t *tok = loom_malloc((BT + 1) * sizeof(int32_t));
  loom_rng rng;
  loom_rng_seed(&rng, 7);
  for (size_t i = 0; i <= BT; i++) tok[i] = (int32_t)loom_rng_below(&rng, (uint64_t)spec->vocab_size);
  double *times = loom_malloc(2 * (size_t)o->steps * sizeof(double)), *cpu = times + o->steps;
  for (int s = 0; s < o->warmup + o->steps; s++) {
    loom_step_result sr;
    double t0 = loom_now(), c0 = cpu_now();
    loom_train_step(d, &opt, &t, tok, tok + 1, 1, &sr);
    double dt = loom_now() - t0, dc = cpu_now() - c0;
    if (s == 0) r->loss_first = sr.loss;
    r->loss_last = sr.loss;
    if (s >= o->warmup) times[s - o->warmup] = dt, cpu[s - o->warmup] = dc;
    if (log)
      fprintf(log, "  step %d: %.3f s (CPU %.3f s), loss %.4f%s\n", s, dt, dc, sr.loss,
              s < o->warmup ? " (warm-up)" : "");
  }
  /* one more step by part: zero + forward, backward, clip + AdamW (what loom_train_step does) */
  double t0 = loom_now(), ls;
  int cnt;
  loom_decoder_zero_grads(d);
  loom_decoder_forward(d, tok, tok + 1, &ls, &cnt);
  double t1 = loom_now();
  loom_decoder_backward(d, cnt ? 1.0f / (float)cnt : 0.0f);
  double t2 = loom_now();
  (void)loom_grad_clip(d, t.grad_clip);
  loom_adamw_apply(&opt, d, &t, t.lr);
  double t3 = loom_now();
  r->fwd_s = t1 - t0, r->bwd_s = t2 - t1, r->opt_s = t3 - t2;
  if (o->roofline) { /* the same loom_train_step, every part timed */
    loom_step_result sr;
    double w0 = loom_now();
    loom_prof_start();
    loom_train_step(d, &opt, &t, tok, tok + 1, 1, &sr);
    loom_prof_stop(&r->prof);
    r->prof_wall = loom_now() - w0;
  }
  qsort(times, (size_t)o->steps, sizeof(double), cmp_double);
  qsort(cpu, (size_t)o->steps, sizeof(double), cmp_double);
  r->step_s = median_sorted(times, o->steps);
  r->cpu_s = median_sorted(cpu, o->steps);
  r->cpu_min_s = cpu[0];
  r->min_s = times[0];
  r->max_s = times[o->steps - 1];
  r->tokens_s = (double)BT / r->step_s;
  r->flops_s = loom_decoder_flops_per_token(spec, o->T) * (double)BT / r->step_s;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  r->rss_gib = (double)ru.ru_maxrss / (1024.0 * 1024.0);
  free(times), free(tok);
  loom_adamw_state_free(&opt);
  loom_decoder_free(d);
  return 0;
}

/* ---- GEMM peak per dtype and backend, with all threads ------------------------------------ */

typedef struct {
  int bf16, M, N, K;
  void *A, *B;
  float *C;
} gjob;

static void gemm_call(void *p) {
  gjob *g = p;
  if (g->bf16)
    loom_gemm_bf16_w(0, 1, g->M, g->N, g->K, g->A, g->K, g->B, g->K, NULL, 0.0f, g->C, g->N);
  else loom_gemm_f32(0, 1, g->M, g->N, g->K, g->A, g->K, g->B, g->K, NULL, 0.0f, g->C, g->N);
}

/* GFLOP/s of y (M,N) = x (M,K) W^T (bf16: the trainer's weight call, loom_gemm_bf16_w, so
 * the peak includes W in oneDNN's blocked layout where that is faster) */
static double gemm_rate(int bf16, int M, int N, int K) {
  size_t a = (size_t)M * K, b = (size_t)N * K;
  float *A = loom_alloc(a * 4), *B = loom_alloc(b * 4), *C = loom_alloc((size_t)M * N * 4);
  for (size_t i = 0; i < a; i++) A[i] = (float)(i % 13) * 0.01f;
  for (size_t i = 0; i < b; i++) B[i] = (float)(i % 7) * 0.01f;
  if (bf16) loom_f32_to_bf16_n((uint16_t *)A, A, a), loom_f32_to_bf16_n((uint16_t *)B, B, b);
  gjob g = {bf16, M, N, K, A, B, C};
  double t = loom_bench_time(gemm_call, &g, 1.0);
  if (bf16) loom_gemm_weights_release(B, b * sizeof(uint16_t));
  loom_free(A), loom_free(B), loom_free(C);
  return 2.0 * M * N * K / t / 1e9;
}

typedef struct {
  const char *label;
  int M, N, K;
} shape;

/* The instruction peak of the step's dtype for `threads` threads in this machine's profile
 * (loom bench's peak section), named in name[] ("bf16 AMX tdpbf16ps instruction peak, 2
 * threads"); 0 when there is no profile or it has none (why[] says so). */
static double profile_instruction_peak(bool bf16, int threads, char *name, size_t n, char *why,
                                       size_t nw) {
  loom_hw_profile hw;
  name[0] = why[0] = 0;
  if (loom_hw_load(&hw, "this-machine")) {
    snprintf(why, nw, "no profile of this machine (%s)", loom_errmsg());
    loom_err_clear();
    return 0;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int used = cores > 0 && threads > cores ? (int)cores : threads;
  char basis[160];
  loom_hw_dtype dt = bf16 ? LOOM_DT_BF16 : LOOM_DT_FP32;
  double peak = loom_hw_instruction_peak(&hw, dt, used, basis, sizeof basis);
  if (!(peak > 0)) {
    snprintf(why, nw, "the profile of this machine (%s) has no instruction peak: 'loom bench "
             "--only peak' measures it", hw.path);
    return 0;
  }
  snprintf(name, n, "%s %s instruction peak (%s, %s)", bf16 ? "bf16" : "fp32",
           loom_hw_unit_instruction(bf16 ? hw.ipeak_bf16_unit : LOOM_UNIT_FMA), basis, hw.path);
  return peak;
}

/* The model: the preset, changed by the model.KEY=VALUE arguments as `loom train` changes it
 * (the same overrides and resolution, so the errors name the key). */
static int model_spec(const opts *o, loom_model_spec *spec) {
  if (!o->nsets) return loom_model_preset(spec, o->model);
  loom_config cfg;
  loom_config_defaults(&cfg);
  char *preset = loom_sprintf("model.preset=%s", o->model);
  int rc = loom_config_override(&cfg, preset);
  free(preset);
  for (int i = 0; !rc && i < o->nsets; i++) rc = loom_config_override(&cfg, o->sets[i]);
  return rc ? rc : loom_model_spec_from_config(spec, &cfg.model);
}

int loom_cmd_bench_model(int argc, char **argv) {
  opts o;
  loom_model_spec spec;
  int prc = parse(&o, argc, argv);
  if (prc == LOOM_CLI_HELP) return usage(stdout), 0;
  if (prc == LOOM_CLI_BAD) return 2;
  if (prc || model_spec(&o, &spec)) {
    fprintf(stderr, "loom bench model: %s\n", loom_errmsg());
    return 2;
  }
  FILE *log = o.quiet ? NULL : stdout;
  int threads = omp_get_max_threads();
  bool bf16 = !strcmp(o.dtype, "bf16");
  if (log) {
    printf("loom bench model: %s", o.model);
    for (int i = 0; i < o.nsets; i++) printf(" %s", o.sets[i]);
    printf(" B=%d T=%d %s, %d threads, GEMM %s (%s), kernels %s\n", o.B, o.T, o.dtype, threads,
           loom_gemm_backend_name(loom_gemm_get_backend()), loom_gemm_isa(), loom_kernels_simd());
  }
  step_result r = {0};
  if (run_steps(&o, &spec, &r, log)) {
    fprintf(stderr, "loom bench model: %s\n", loom_errmsg());
    return 1;
  }
  /* GEMM peaks: a square shape and the step's linear layers (forward role) */
  int N = o.B * o.T, C = spec.hidden;
  shape shapes[] = {{"square 3072^3", 3072, 3072, 3072},
                    {"qkv/o (N,C,C)", N, C, C},
                    {"mlp up (N,I,C)", N, spec.intermediate, C},
                    {"mlp down (N,C,I)", N, C, spec.intermediate},
                    {"lm head (N,V,C)", N < 2048 ? N : 2048, spec.padded_vocab, C}};
  enum { NS = sizeof shapes / sizeof shapes[0] };
  double rate[3][NS] = {{0}}, peak[3] = {0}; /* fp32 onednn, fp32 openblas, bf16 native */
  loom_hw_profile hw;
  loom_bench_profile_defaults(&hw);
  loom_bench_ctx bctx = {1.0, NULL, 0, 1, NULL, NULL};
  int native = loom_gemm_bf16_native();
  if (!o.no_gemm) {
    loom_gemm_backend keep = loom_gemm_get_backend();
    for (int v = 0; v < 3; v++) {
      if (v == 2 && !native) continue;
      loom_gemm_set_backend(v == 1 ? LOOM_GEMM_OPENBLAS : LOOM_GEMM_ONEDNN);
      for (int s = 0; s < NS; s++) {
        rate[v][s] = gemm_rate(v == 2, shapes[s].M, shapes[s].N, shapes[s].K);
        if (rate[v][s] > peak[v]) peak[v] = rate[v][s];
      }
    }
    loom_gemm_set_backend(keep);
    loom_bench_memory(&hw, &bctx);
  }
  double dt_peak = bf16 ? (native ? peak[2] : peak[0] > peak[1] ? peak[0] : peak[1])
                        : (peak[0] > peak[1] ? peak[0] : peak[1]);
  double mfu = dt_peak > 0 ? r.flops_s / 1e9 / dt_peak : 0;
  /* the instruction peak of this machine's profile (not with --no-gemm: nothing is held to a
   * bound then) */
  char ipeak_name[768] = "", ipeak_why[640] = "";
  double ipeak = o.no_gemm ? 0 : profile_instruction_peak(bf16, threads, ipeak_name,
                                                          sizeof ipeak_name, ipeak_why,
                                                          sizeof ipeak_why);
  char notes[8192], mfu_s[1024] = "";
  if (dt_peak > 0) /* --no-gemm: no peak measured, no MFU (absent rather than 0%) */
    snprintf(mfu_s, sizeof mfu_s, ", MFU %.1f%% of the measured %s GEMM peak %.1f GFLOP/s",
             100 * mfu, o.dtype, dt_peak);
  if (ipeak > 0 && dt_peak > 0) {
    size_t used = strlen(mfu_s);
    snprintf(mfu_s + used, sizeof mfu_s - used, " (library); MFU %.1f%% of the %s, %.1f GFLOP/s",
             100 * r.flops_s / ipeak, ipeak_name, ipeak / 1e9);
  }
  int n = snprintf(notes, sizeof notes,
                   "loom bench model (%d threads): %s B=%d T=%d %s, GEMM %s (%s)\n"
                   "step %.3f s median of %d (min %.3f, max %.3f; CPU %.3f s), %.1f tokens/s, "
                   "%.1f GFLOP/s model FLOPs%s, peak RSS %.2f GiB\n"
                   "one more step by part: zero + forward %.3f s, backward %.3f s, clip + AdamW "
                   "%.3f s\n",
                   threads, o.model, o.B, o.T, o.dtype,
                   loom_gemm_backend_name(loom_gemm_get_backend()), loom_gemm_isa(), r.step_s,
                   o.steps, r.min_s, r.max_s, r.cpu_s, r.tokens_s, r.flops_s / 1e9, mfu_s,
                   r.rss_gib, r.fwd_s, r.bwd_s, r.opt_s);
  if (!o.no_gemm) {
    n += snprintf(notes + n, sizeof notes - (size_t)n,
                  "GEMM GFLOP/s with %d threads (y = x W^T): shape | fp32 onednn | fp32 openblas "
                  "| bf16 %s\n", threads, native ? "onednn" : "(not native)");
    for (int s = 0; s < NS; s++)
      n += snprintf(notes + n, sizeof notes - (size_t)n, "  %-18s %5d x %6d x %5d  %7.1f  %7.1f  %7.1f\n",
                    shapes[s].label, shapes[s].M, shapes[s].N, shapes[s].K, rate[0][s], rate[1][s],
                    rate[2][s]);
    n += snprintf(notes + n, sizeof notes - (size_t)n,
                  "memory bandwidth %.2f GB/s (streaming copy/triad, %d threads)\n", hw.mem_bw / 1e9,
                  threads);
  }
  if (log) printf("%s", notes);
  loom_roofline_row rows[LOOM_PART_N];
  int nrows = 0;
  if (o.roofline) {
    double bw = o.no_gemm ? 0 : hw.mem_bw; /* --no-gemm: nothing measured, no fractions */
    /* compute parts against the instruction peak where the profile has one, the library's
     * best GEMM measured here otherwise */
    double bound = ipeak > 0 ? ipeak : dt_peak * 1e9;
    nrows = loom_roofline_build(&r.prof, bound, bw, rows);
    printf("profiled step: %.3f s wall around it (median step %.3f s); data loading: none in "
           "this step (random tokens in memory)\n", r.prof_wall, r.step_s);
    char bound_name[832];
    if (ipeak > 0) {
      snprintf(bound_name, sizeof bound_name, "%s", ipeak_name);
      printf("compute bound: the %s, %.1f GFLOP/s; the library's best %s GEMM measured here "
             "with %d threads: %.1f GFLOP/s = %.1f%% of it\n", ipeak_name, ipeak / 1e9, o.dtype,
             threads, dt_peak, 100 * dt_peak * 1e9 / ipeak);
    } else {
      snprintf(bound_name, sizeof bound_name, "%s library GEMM peak (best measured here)", o.dtype);
      if (!o.no_gemm) printf("compute bound: the library's best %s GEMM measured here; %s\n",
                             o.dtype, ipeak_why);
    }
    loom_roofline_print_bound(stdout, &r.prof, rows, nrows, bound, bound_name, bw);
  }
  if (!o.no_gemm && o.out) {
    /* the profile's devices are the cores (one thread per rank): calibrate it as `loom bench`
     * does, one thread, and keep this run's figures as its notes */
    loom_hw_profile prof;
    loom_bench_profile_defaults(&prof);
    loom_bench_ctx one = {0.5, NULL, 0, 1, NULL, NULL};
    omp_set_num_threads(1);
    int crc = loom_bench_run(&prof, &one, "gemm,peak,memory,vector,attention");
    omp_set_num_threads(threads);
    if (crc) {
      fprintf(stderr, "loom bench model: %s\n", loom_errmsg());
      return 1;
    }
    char *yaml = loom_hw_to_yaml(&prof, notes);
    int rc = yaml ? loom_write_file_atomic(o.out, yaml, strlen(yaml)) : LOOM_ERR;
    free(yaml);
    if (rc) fprintf(stderr, "loom bench model: %s\n", loom_errmsg());
    else if (log) printf("profile written to %s\n", o.out);
  }
  if (o.json) {
    FILE *f = fopen(o.json, "w");
    if (!f) return fprintf(stderr, "loom bench model: cannot write %s\n", o.json), 1;
    fprintf(f,
            "{\"model\": \"%s\", \"B\": %d, \"T\": %d, \"dtype\": \"%s\", \"threads\": %d, "
            "\"gemm\": \"%s\", \"isa\": \"%s\", \"step_s\": %.6f, \"step_min_s\": %.6f, "
            "\"step_max_s\": %.6f, \"cpu_step_s\": %.6f, \"cpu_step_min_s\": %.6f, "
            "\"tokens_s\": %.3f, \"flops_s\": %.6g, ",
            o.model, o.B, o.T, o.dtype, threads, loom_gemm_backend_name(loom_gemm_get_backend()),
            loom_gemm_isa(), r.step_s, r.min_s, r.max_s, r.cpu_s, r.cpu_min_s, r.tokens_s,
            r.flops_s);
    if (dt_peak > 0) fprintf(f, "\"mfu\": %.4f, \"gemm_peak_gflops\": %.3f, ", mfu, dt_peak);
    else fprintf(f, "\"mfu\": null, \"gemm_peak_gflops\": null, "); /* --no-gemm */
    /* the profile's instruction peak and the MFU against it (null without one) */
    if (ipeak > 0)
      fprintf(f, "\"instruction_peak_gflops\": %.3f, \"mfu_instruction\": %.4f, ", ipeak / 1e9,
              r.flops_s / ipeak);
    else fprintf(f, "\"instruction_peak_gflops\": null, \"mfu_instruction\": null, ");
    fprintf(f, "\"peak_rss_gib\": %.4f, \"loss_first\": %.6f, \"loss_last\": %.6f, "
            "\"fwd_s\": %.6f, \"bwd_s\": %.6f, \"opt_s\": %.6f", r.rss_gib, r.loss_first,
            r.loss_last, r.fwd_s, r.bwd_s, r.opt_s);
    if (o.roofline) {
      fprintf(f, ", \"roofline_step_s\": %.6f, \"roofline_wall_s\": %.6f, ", r.prof.total,
              r.prof_wall);
      if (ipeak > 0 || dt_peak > 0) /* the compute bound of the rows' fractions */
        fprintf(f, "\"roofline_bound\": \"%s\", \"roofline_bound_gflops\": %.3f, ",
                ipeak > 0 ? "instruction" : "library", ipeak > 0 ? ipeak / 1e9 : dt_peak);
      else fprintf(f, "\"roofline_bound\": null, \"roofline_bound_gflops\": null, ");
      fprintf(f, "\"roofline\": ");
      loom_roofline_json(f, rows, nrows);
    }
    fprintf(f, "}\n");
    fclose(f);
  }
  return 0;
}

/* `loom sim`, `loom plan` and `loom bench` end to end: a train config and overrides on a
 * profile, the Chrome trace, user-written schedules (valid, and rejected with the rank, the
 * instruction and the reason: unmatched send, backward before forward, deadlock, memory over
 * the limit), a plan written as a train config that loads, help and usage errors. */
#include "sim_test_util.h"

static void write_text(const char *path, const char *text) {
  loom_mkdir_p("sim-cli.tmp");
  CHECK(loom_write_file_atomic(path, text, strlen(text)) == 0, "write %s", path);
}

static void test_sim_config(void) {
  run_result r = run_loom("sim model.preset=gpt2-124m training.seq_len=1024 training.micro_batch_size=8 "
                          "training.grad_accum=4 training.dtype=bf16 parallel.tp=2 --hardware h100-sxm --nodes 2 "
                          "--trace sim-cli.tmp/t.json");
  CHECK(r.status == 0, "exit %d: %s", r.status, r.err);
  CHECK(HAS(r.out, "strategy       dp=8 tp=2", "step time", "tokens/s", "MFU / HFU", "bubble",
            "communication", "memory per rank", "trace written to sim-cli.tmp/t.json"),
        "report:\n%s", r.out);
  run_done(&r);
  char *trace = slurp("sim-cli.tmp/t.json");
  CHECK(HAS(trace, "\"traceEvents\"", "\"name\":\"forward chunk=0 mb=0\"", "\"name\":\"optimizer-step\"",
            "\"pid\":15", "\"name\":\"communication\"", "dp all-reduce (bucket)"),
        "trace content");
  free(trace);
  /* the same config file as loom train */
  write_text("sim-cli.tmp/run.yaml", "model:\n  preset: llama3-8b\ntraining:\n  seq_len: 8192\n"
        "  micro_batch_size: 1\n  grad_accum: 16\n  dtype: bf16\n  activation_checkpointing: true\n"
        "parallel:\n  tp: 8\n  pp: 2\n  schedule: 1f1b\n");
  r = run_loom("sim sim-cli.tmp/run.yaml --hardware h200 --nodes 4");
  CHECK(r.status == 0 && HAS(r.out, "dp=2 tp=8 pp=2", "recompute=full"), "config file: %d %s%s",
        r.status, r.out, r.err);
  /* two stages: the critical rank's idle time is named among the parts of its step */
  CHECK(HAS(r.out, "bottleneck     compute ", "the pipeline bubble "), "pipeline bottleneck: %s", r.out);
  run_done(&r);
  r = run_loom("sim sim-cli.tmp/run.yaml --hardware h200 --gpus 24");
  CHECK(r.status == 1 && HAS(r.err, "24"), "mesh does not fit: %d %s", r.status, r.err);
  run_done(&r);
}

static const char *good =
    "schedule name=mine pp=2 vpp=1 microbatches=2\n"
    "rank 0\n  load mb=0\n  forward chunk=0 mb=0\n  send-act chunk=0 mb=0 to=1\n"
    "  load mb=1\n  forward chunk=0 mb=1\n  send-act chunk=0 mb=1 to=1\n"
    "  recv-grad chunk=0 mb=0 from=1\n  backward chunk=0 mb=0\n"
    "  recv-grad chunk=0 mb=1 from=1\n  backward chunk=0 mb=1\n  reduce-grads\n  optimizer-step\n"
    "rank 1\n  load mb=0\n  recv-act chunk=0 mb=0 from=0\n  forward chunk=0 mb=0\n"
    "  backward chunk=0 mb=0\n  send-grad chunk=0 mb=0 to=0\n  load mb=1\n"
    "  recv-act chunk=0 mb=1 from=0\n  forward chunk=0 mb=1\n  backward chunk=0 mb=1\n"
    "  send-grad chunk=0 mb=1 to=0\n  reduce-grads\n  optimizer-step\n";

static char *replace(const char *text, const char *from, const char *to) {
  const char *p = strstr(text, from);
  LOOM_ASSERT(p);
  return loom_sprintf("%.*s%s%s", (int)(p - text), text, to, p + strlen(from));
}

static void test_custom_schedules(void) {
  const char *model = "model.preset=gpt2-124m training.seq_len=1024 training.micro_batch_size=4";
  write_text("sim-cli.tmp/good.sched", good);
  char *cmd = loom_sprintf("sim %s --hardware a100-80gb --gpus 2 --schedule sim-cli.tmp/good.sched", model);
  run_result r = run_loom(cmd);
  free(cmd);
  CHECK(r.status == 0 && HAS(r.out, "pp=2", "m=2 mine"), "custom schedule runs: %d %s%s", r.status,
        r.out, r.err);
  run_done(&r);
  struct {
    const char *from, *to, *want1, *want2;
  } cases[] = {
      {"  recv-act chunk=0 mb=1 from=0\n", "", "rank 0, instruction 5 'send-act chunk=0 mb=1 to=1'",
       "unmatched send"},
      {"  forward chunk=0 mb=0\n  backward chunk=0 mb=0\n", "  backward chunk=0 mb=0\n  forward chunk=0 mb=0\n",
       "rank 1, instruction 2 'backward chunk=0 mb=0'", "backward before forward"},
      {"  forward chunk=0 mb=0\n  send-act chunk=0 mb=0 to=1\n  load mb=1\n  forward chunk=0 mb=1\n"
       "  send-act chunk=0 mb=1 to=1\n  recv-grad chunk=0 mb=0 from=1\n",
       "  forward chunk=0 mb=0\n  recv-grad chunk=0 mb=0 from=1\n  send-act chunk=0 mb=0 to=1\n  load mb=1\n"
       "  forward chunk=0 mb=1\n  send-act chunk=0 mb=1 to=1\n",
       "deadlock", "rank 0, instruction 2 'recv-grad chunk=0 mb=0 from=1'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *text = replace(good, cases[i].from, cases[i].to);
    write_text("sim-cli.tmp/bad.sched", text);
    free(text);
    cmd = loom_sprintf("sim %s --hardware a100-80gb --gpus 2 --schedule sim-cli.tmp/bad.sched", model);
    r = run_loom(cmd);
    free(cmd);
    CHECK(r.status == 1 && HAS(r.err, "sim-cli.tmp/bad.sched", cases[i].want1, cases[i].want2),
          "case %zu: exit %d: %s", i, r.status, r.err);
    run_done(&r);
  }
  /* memory over the limit: GPipe keeps every micro-batch's activations */
  loom_schedule s;
  CHECK(loom_sched_generate(&s, "gpipe", 2, 1, 64) == 0, "%s", loom_errmsg());
  char *text = loom_sched_to_text(&s);
  write_text("sim-cli.tmp/gpipe.sched", text);
  free(text);
  loom_sched_free(&s);
  r = run_loom("sim model.preset=llama3-8b training.seq_len=8192 training.micro_batch_size=1 "
               "training.dtype=bf16 parallel.tp=8 --hardware a100-80gb --gpus 16 --schedule sim-cli.tmp/gpipe.sched");
  CHECK(r.status == 1 && HAS(r.err, "sim-cli.tmp/gpipe.sched", "rank 0, instruction", "'forward chunk=0 mb=",
                             "memory over the limit", "GiB"),
        "OOM: exit %d: %s", r.status, r.err);
  CHECK(HAS(r.out, "OUT OF MEMORY"), "report marks the OOM:\n%s", r.out);
  run_done(&r);
}

static void test_plan(void) {
  run_result r = run_loom("plan --model gpt2-124m --hardware a100-80gb --gpus 16 --global-batch 64 "
                          "--seq 1024 --write-config sim-cli.tmp/best.yaml");
  CHECK(r.status == 0, "plan exit %d: %s", r.status, r.err);
  CHECK(HAS(r.out, "configurations/s", "why #1 wins", "MFU", "wrote the winner to sim-cli.tmp/best.yaml"),
        "plan report:\n%s", r.out);
  run_done(&r);
  loom_config cfg;
  loom_config_defaults(&cfg);
  CHECK(loom_config_load(&cfg, "sim-cli.tmp/best.yaml") == 0 && loom_config_validate(&cfg) == 0,
        "the written config loads: %s", loom_errmsg());
  CHECK(cfg.parallel.dp * cfg.parallel.tp * cfg.parallel.pp * cfg.parallel.sp <= 16 &&
            !strcmp(cfg.model.preset, "gpt2-124m"),
        "written strategy");
  r = run_loom("plan --model gpt2-124m --hardware a100-80gb");
  CHECK(r.status == 2 && HAS(r.err, "--gpus"), "missing --gpus: %d %s", r.status, r.err);
  run_done(&r);
  /* a vision-language model: the planner's vision mode is written as vision.parallel.* and
   * loom sim reads the same mode back from the written config */
  r = run_loom("plan --model qwen2.5-vl-7b --hardware h100-sxm --gpus 8 --global-batch 16 "
               "--seq 4352 data.format=vqa data.image_max_pixels=3211264 "
               "--write-config sim-cli.tmp/vl.yaml");
  CHECK(r.status == 0, "VLM plan exit %d: %s", r.status, r.err);
  const char *mode = strstr(r.out, "vision=");
  char want[16] = "";
  if (mode) sscanf(mode, "vision=%15[a-z]", want);
  run_done(&r);
  loom_config_defaults(&cfg);
  CHECK(loom_config_load(&cfg, "sim-cli.tmp/vl.yaml") == 0, "%s", loom_errmsg());
  const loom_config_vision_parallel *v = &cfg.vision_parallel;
  const char *written = cfg.parallel.tp > 1 && v->sp == cfg.parallel.tp && v->tp == 1   ? "sp"
                        : cfg.parallel.tp > 1 && v->tp == cfg.parallel.tp && v->sp == 1 ? "tp"
                        : v->tp == 1 && v->sp == 1                                       ? "replicate"
                                                                                          : "?";
  CHECK(want[0] && !strcmp(want, written), "the winner's vision=%s written as vision.parallel "
        "tp=%ld sp=%ld with parallel.tp=%ld", want, v->tp, v->sp, cfg.parallel.tp);
  r = run_loom("sim sim-cli.tmp/vl.yaml --hardware h100-sxm --gpus 8");
  char again[32];
  snprintf(again, sizeof again, "vision=%s", want);
  CHECK(r.status == 0 && HAS(r.out, again), "loom sim reads %s back: %s", again, r.out);
  run_done(&r);
}

static void test_help_and_usage(void) {
  run_result r = run_loom("sim --help");
  CHECK(r.status == 0 && HAS(r.out, "--hardware", "--schedule", "--trace"), "sim --help");
  run_done(&r);
  r = run_loom("sim model.preset=gpt2-124m");
  CHECK(r.status == 2 && HAS(r.err, "--hardware is required"), "no hardware: %s", r.err);
  run_done(&r);
  r = run_loom("sim --hardware a100-80gb --frobnicate");
  CHECK(r.status == 2 && HAS(r.err, "unknown option '--frobnicate'"), "bad option: %s", r.err);
  run_done(&r);
  r = run_loom("sim --list-hardware");
  CHECK(r.status == 0 && HAS(r.out, "a100-80gb", "h100-sxm", "h200"), "list: %s", r.out);
  run_done(&r);
  r = run_loom("plan --help");
  CHECK(r.status == 0 && HAS(r.out, "--write-config", "--global-batch"), "plan --help");
  run_done(&r);
  r = run_loom("bench --help");
  CHECK(r.status == 0 && HAS(r.out, "gemm", "memory", "vector", "attention", "mpi"), "bench --help");
  run_done(&r);
}

/* sum of the "NN.N%" shares on the bottleneck line (0 when there is none) */
static double bottleneck_shares(const char *out, char *line, size_t cap) {
  const char *b = strstr(out, "bottleneck     ");
  if (!b) return 0;
  size_t n = strcspn(b, "\n");
  snprintf(line, cap, "%.*s", (int)n, b);
  double sum = 0;
  for (const char *p = line; (p = strchr(p, '%')); p++) {
    const char *q = p;
    while (q > line && (q[-1] == '.' || (q[-1] >= '0' && q[-1] <= '9'))) q--;
    sum += atof(q);
  }
  return sum;
}

/* a vision-language model: "1 sequence", the bottleneck line whose shares make up the step,
 * memory named first when out of memory, the encoder's own trace row; loom plan's vision
 * column, aligned under its header */
static void test_vlm_report(void) {
  const char *m = "model.preset=qwen2.5-vl-7b parallel.tp=4 data.format=vqa data.image_max_pixels=802816 "
                  "data.image_min_pixels=802816 training.seq_len=1280 training.dtype=bf16 "
                  "training.activation_checkpointing=true vision.parallel.sp=4 vision.parallel.tp=1";
  char *cmd = loom_sprintf("sim %s training.micro_batch_size=1 --hardware h100-sxm-hf --trace sim-cli.tmp/v.json", m);
  run_result r = run_loom(cmd);
  free(cmd);
  CHECK(r.status == 0, "exit %d: %s", r.status, r.err);
  CHECK(HAS(r.out, "(1 sequence of 1280 tokens per step)") && !strstr(r.out, "1 sequences"), "%s", r.out);
  char line[512] = "";
  double sum = bottleneck_shares(r.out, line, sizeof line);
  /* one stage: the step is compute + exposed communication + optimizer; the line shows the
   * four largest parts, each rounded to 0.1% */
  /* with host dispatch (h100-sxm-hf) at 1280 tokens the GPU waits for DTensor's dispatch of
   * the text layers more than it computes: that is named */
  CHECK(strstr(line, "bottleneck     the GPU waiting for the CPU to issue (host dispatch) ") &&
            strstr(line, "compute ") && sum > 99.0 && sum < 100.3,
        "bottleneck line sums to %.1f%%: %s", sum, line);
  CHECK(strstr(line, "exposed all-to-all") || strstr(line, "exposed all-reduce"), "%s", line);
  run_done(&r);
  char *trace = slurp("sim-cli.tmp/v.json");
  CHECK(trace && HAS(trace, "\"tid\":2,\"args\":{\"name\":\"vision encoder\"}",
                     "\"name\":\"vision encoder forward\",\"cat\":\"vision\"",
                     "\"name\":\"vision encoder backward\""), "vision rows in the trace");
  free(trace);
  cmd = loom_sprintf("sim %s training.micro_batch_size=64 --hardware h100-sxm-hf", m);
  r = run_loom(cmd);
  free(cmd);
  sum = bottleneck_shares(r.out, line, sizeof line);
  CHECK(r.status == 1 && strstr(line, "bottleneck     memory (rank 0 needs ") &&
            strstr(line, "of 76.61 GiB); its time: "),
        "OOM bottleneck: %d %s", r.status, line);
  /* what to do names only the remedies that apply: recomputation is already on and there is
   * neither a pipeline nor a data-parallel replica to shard over */
  CHECK(HAS(r.err, "try a smaller micro-batch (training.micro_batch_size=32)",
            "more tensor or pipeline parallelism (parallel.tp, parallel.pp)") &&
            !strstr(r.err, "gpipe") && !strstr(r.err, "activation_checkpointing") &&
            !strstr(r.err, "parallel.zero"),
        "OOM remedies: %s", r.err);
  run_done(&r);
  /* a GPipe pipeline over the limit is told to run 1F1B; data-parallel ranks, a ZeRO stage */
  r = run_loom("sim model.preset=llama3-8b parallel.pp=4 parallel.dp=2 parallel.schedule=gpipe "
               "training.seq_len=8192 training.micro_batch_size=1 training.global_batch_size=32 "
               "training.dtype=bf16 --hardware h100-sxm --gpus 8");
  CHECK(r.status == 1 && HAS(r.err, "memory over the limit",
                             "parallel.schedule=1f1b instead of gpipe",
                             "recomputation (training.activation_checkpointing=true)",
                             "a higher ZeRO stage (parallel.zero=1)"),
        "GPipe OOM remedies: %d %s", r.status, r.err);
  run_done(&r);
  /* the state alone over the limit: no remedy for activations */
  r = run_loom("sim model.preset=llama3-8b training.dtype=bf16 --hardware h100-sxm --gpus 1");
  CHECK(r.status == 1 && HAS(r.err, "try more tensor or pipeline parallelism",
                             "bf16 optimizer state (training.optim_dtype=bf16)") &&
            !strstr(r.err, "micro-batch") && !strstr(r.err, "recomputation"),
        "state OOM remedies: %d %s", r.status, r.err);
  run_done(&r);
  r = run_loom("plan --model qwen2.5-vl-7b --hardware h100-sxm-hf --gpus 4 --global-batch 4 "
               "--seq 1280 --top 8");
  CHECK(r.status == 0, "plan: %d %s", r.status, r.err);
  const char *hdr = strstr(r.out, "\n#   ");
  CHECK(hdr != NULL, "plan header: %s", r.out);
  if (hdr) {
    hdr++;
    const char *v = strstr(hdr, " vision "), *rk = strstr(hdr, " ranks ");
    int vcol = v ? (int)(v - hdr) + 1 : -1, rend = rk ? (int)(rk - hdr) + 6 : -1;
    int rows = 0;
    for (const char *l = strchr(hdr, '\n'); l && l[1] >= '1' && l[1] <= '9'; l = strchr(l + 1, '\n')) {
      const char *row = l + 1;
      rows++;
      CHECK(vcol > 0 && (!strncmp(row + vcol, "sp ", 3) || !strncmp(row + vcol, "tp ", 3) ||
                         !strncmp(row + vcol, "replicate", 9)),
            "vision column at %d: %.*s", vcol, (int)strcspn(row, "\n"), row);
      CHECK(rend > 0 && row[rend - 1] >= '0' && row[rend - 1] <= '9' && row[rend] == ' ',
            "ranks right-aligned under its header: %.*s", (int)strcspn(row, "\n"), row);
    }
    CHECK(rows >= 2, "plan rows: %d", rows);
  }
  run_done(&r);
}

int main(void) {
  test_sim_config();
  test_vlm_report();
  test_custom_schedules();
  test_plan();
  test_help_and_usage();
  return harness_finish("test_sim_cli");
}

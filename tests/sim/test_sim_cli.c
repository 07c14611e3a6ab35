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

int main(void) {
  test_sim_config();
  test_custom_schedules();
  test_plan();
  test_help_and_usage();
  return harness_finish("test_sim_cli");
}

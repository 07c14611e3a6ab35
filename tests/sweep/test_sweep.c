/* Sweep files and their expansion (loom/sweep.h): grid order and configs, random draws
 * (ranges, quantisation, log scale, distinct points, same seed -> same points), exclude and
 * constraints, descriptive names, errors with file:line, and the generated directory
 * (configs, manifest.txt, run_sweep.sh passing bash -n) read back. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "loom/core.h"
#include "loom/sweep.h"

static char dir[64];

static char *write_file(const char *name, const char *text) {
  char *path = loom_sprintf("%s/%s", dir, name);
  LOOM_ASSERT(loom_write_file_atomic(path, text, strlen(text)) == 0);
  return path;
}

static int expand_text(const char *text, loom_sweep_plan *plan) {
  char *path = write_file("s.yaml", text);
  loom_sweep_spec s;
  int rc = loom_sweep_load(&s, path);
  if (!rc) {
    rc = loom_sweep_expand(&s, plan);
    loom_sweep_spec_free(&s);
  }
  free(path);
  return rc;
}

static void grid(void) {
  free(write_file("base.yaml", "model: {preset: gpt2-124m}\ntraining: {micro_batch_size: 4, dtype: bf16}\n"));
  loom_sweep_plan p;
  int rc = expand_text("name: g\nbase: base.yaml\noverrides: [training.steps=7]\n"
                       "parameters:\n  parallel.tp: {values: [1, 2]}\n  parallel.pp: [1, 2]\n"
                       "  training.activation_checkpointing: {value: true}\nstrategy: grid\n", &p);
  CHECK(rc == 0, "grid: %s", loom_errmsg());
  if (rc) return;
  CHECK(p.n == 4 && !strcmp(p.name, "g"), "4 points, got %d", p.n);
  const char *names[] = {"gpt2-124m_tp1_pp1_ckpt", "gpt2-124m_tp1_pp2_ckpt",
                         "gpt2-124m_tp2_pp1_ckpt", "gpt2-124m_tp2_pp2_ckpt"};
  for (int i = 0; i < p.n; i++) {
    CHECK(!strcmp(p.points[i].name, names[i]), "name %d: %s, want %s", i, p.points[i].name, names[i]);
    CHECK(!strcmp(p.points[i].cfg.run.name, names[i]), "run.name = point name");
    CHECK(p.points[i].cfg.parallel.tp == 1 + i / 2 && p.points[i].cfg.parallel.pp == 1 + i % 2,
          "last parameter varies fastest");
    CHECK(p.points[i].ranks == (1 + i / 2) * (1 + i % 2), "ranks = dp*tp*pp*sp");
    CHECK(p.points[i].cfg.training.steps == 7, "overrides applied");
    CHECK(p.points[i].cfg.training.micro_batch_size == 4, "base config applied");
    CHECK(p.points[i].cfg.training.activation_checkpointing, "fixed value applied");
    CHECK(p.points[i].nassign == 3 && !strcmp(p.points[i].assign[0], i < 2 ? "parallel.tp=1" : "parallel.tp=2"),
          "assignments");
  }
  loom_sweep_plan_free(&p);
  /* the name from the issue, with explicit name keys */
  rc = expand_text("base: base.yaml\nparameters: {parallel.tp: [2]}\nname_keys: [parallel.tp, "
                   "parallel.pp, training.micro_batch_size, training.dtype, "
                   "training.activation_checkpointing]\noverrides: "
                   "[training.activation_checkpointing=true]\n", &p);
  CHECK(rc == 0 && p.n == 1 && !strcmp(p.points[0].name, "gpt2-124m_tp2_pp1_bs4_bf16_ckpt"),
        "descriptive name: %s", rc ? loom_errmsg() : p.points[0].name);
  CHECK(rc == 0 && !strcmp(p.name, "s"), "default sweep name = file name");
  if (!rc) loom_sweep_plan_free(&p);
}

static void exclude_and_constraints(void) {
  loom_sweep_plan p;
  int rc = expand_text("parameters:\n  parallel.dp: [1, 2, 4]\n  parallel.tp: [1, 2, 4]\n"
                       "  training.dtype: [fp32, bf16]\n"
                       "constraints: [\"ranks = 4\"]\n"
                       "exclude: [{parallel.tp: 4, training.dtype: fp32}]\n", &p);
  CHECK(rc == 0, "constraints: %s", loom_errmsg());
  if (rc) return;
  /* (dp,tp) with dp*tp = 4: (1,4) (2,2) (4,1), x 2 dtypes, minus (tp 4, fp32) */
  CHECK(p.n == 5, "5 points, got %d", p.n);
  for (int i = 0; i < p.n; i++) {
    CHECK(p.points[i].ranks == 4, "ranks 4");
    CHECK(!(p.points[i].cfg.parallel.tp == 4 && !strcmp(p.points[i].cfg.training.dtype, "fp32")),
          "excluded combination present: %s", p.points[i].name);
  }
  loom_sweep_plan_free(&p);
  rc = expand_text("parameters: {training.lr: [1e-3, 2e-3]}\nconstraints: [\"training.lr > 1\"]\n", &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "nothing to run"), "all excluded: %s", loom_errmsg());
  rc = expand_text("parameters: {training.lr: [1e-3]}\nconstraints: [\"training.lrr > 1\"]\n", &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "constraint 1: column 1: unknown column 'training.lrr' "
                                         "(did you mean 'training.lr'?)"),
        "bad constraint: %s", loom_errmsg());
}

static void random_draws(void) {
  const char *text = "parameters:\n"
                     "  training.lr: {min: 1e-5, max: 1e-2, distribution: log_uniform}\n"
                     "  model.hidden: {min: 64, max: 256, distribution: int_uniform, q: 64}\n"
                     "  training.warmup_ratio: {min: 0.0, max: 0.2}\n"
                     "  training.dtype: {values: [fp32, bf16]}\n"
                     "strategy: random\nnum_runs: 12\nseed: 5\n";
  loom_sweep_plan a, b;
  int rc = expand_text(text, &a);
  CHECK(rc == 0, "random: %s", loom_errmsg());
  if (rc) return;
  CHECK(a.n == 12, "num_runs points, got %d", a.n);
  int small_lr = 0;
  for (int i = 0; i < a.n; i++) {
    const loom_config *c = &a.points[i].cfg;
    CHECK(c->training.lr >= 1e-5 && c->training.lr <= 1e-2, "lr in range: %g", c->training.lr);
    CHECK(c->model.hidden >= 64 && c->model.hidden <= 256 && c->model.hidden % 64 == 0,
          "hidden quantised: %ld", c->model.hidden);
    CHECK(c->training.warmup_ratio >= 0 && c->training.warmup_ratio <= 0.2, "uniform in range");
    small_lr += c->training.lr < 3e-4; /* log-uniform: about half below the geometric middle */
    for (int j = 0; j < i; j++) CHECK(strcmp(a.points[i].name, a.points[j].name), "distinct names");
  }
  CHECK(small_lr >= 2 && small_lr <= 10, "log-uniform spread: %d of 12 below 3e-4", small_lr);
  rc = expand_text(text, &b);
  CHECK(rc == 0 && b.n == a.n, "same seed again");
  for (int i = 0; !rc && i < a.n; i++)
    CHECK(!strcmp(a.points[i].name, b.points[i].name), "same seed, same points");
  if (!rc) loom_sweep_plan_free(&b);
  char *other = loom_sprintf("%.*sseed: 6\n", (int)(strstr(text, "seed:") - text), text);
  rc = expand_text(other, &b);
  free(other);
  CHECK(rc == 0 && strcmp(a.points[0].name, b.points[0].name), "another seed, other points");
  if (!rc) loom_sweep_plan_free(&b);
  loom_sweep_plan_free(&a);
  /* too few distinct points */
  rc = expand_text("parameters: {training.dtype: [fp32, bf16]}\nstrategy: random\nnum_runs: 3\n", &a);
  CHECK(rc != 0 && strstr(loom_errmsg(), "found only 2 distinct points"), "small space: %s",
        loom_errmsg());
}

/* Loading must fail with "s.yaml:<line>:" and `what` in the message. */
static void bad(const char *text, int line, const char *what) {
  char *path = write_file("s.yaml", text);
  loom_sweep_spec s;
  int rc = loom_sweep_load(&s, path);
  char where[300];
  snprintf(where, sizeof where, "%s:%d:", path, line);
  CHECK(rc != 0, "should fail: %s", text);
  CHECK(rc != 0 && strstr(loom_errmsg(), where), "want '%s' in: %s", where, loom_errmsg());
  CHECK(rc != 0 && strstr(loom_errmsg(), what), "want '%s' in: %s", what, loom_errmsg());
  if (!rc) loom_sweep_spec_free(&s);
  free(path);
}

static void errors(void) {
  bad("parameters:\n  training.lrr: [1]\n", 2, "did you mean 'training.lr'?");
  bad("parameters:\n  training.lr: [1e-3]\nstratgy: grid\n", 3, "unknown sweep key 'stratgy'; did you mean 'strategy'?");
  bad("parameters:\n  training.steps: {values: [10, ten]}\n", 2, "training.steps");
  bad("parameters:\n  model.hidden: {min: 64, max: 128}\n", 2, "only strategy: random can sample");
  bad("parameters:\n  training.lr: {min: 1, max: 0.1}\nstrategy: random\nnum_runs: 2\n", 2, "min 1 is above max 0.1");
  bad("parameters:\n  training.lr: {min: 0, max: 1, distribution: log_uniform}\nstrategy: random\nnum_runs: 2\n", 2, "log_uniform needs min > 0");
  bad("parameters:\n  training.lr: {min: 0.1, max: 1, distribution: gauss}\n", 2, "unknown distribution 'gauss'");
  bad("parameters:\n  training.dtype: {min: 0, max: 1}\nstrategy: random\nnum_runs: 1\n", 2, "not numeric");
  bad("parameters:\n  training.lr: {values: [1e-3], max: 2}\n", 2, "either values or min/max");
  bad("parameters:\n  training.lr: [1e-3]\n  training.lr: [2e-3]\n", 3, "given twice");
  bad("parameters:\n  training.lr: [1e-3]\nstrategy: random\n", 1, "needs num_runs");
  bad("parameters:\n  training.lr: [1e-3]\nstrategy: bayes\n", 3, "grid or random");
  bad("base: nowhere.yaml\nparameters: {training.lr: [1e-3]}\n", 1, "base config 'nowhere.yaml' not found");
  bad("name: x\n", 1, "no parameters");
  bad("parameters: {training.lr: [1e-3]}\nexclude: [{training.dtyp: fp32}]\n", 2, "did you mean 'training.dtype'?");
  bad("parameters: {training.lr: [1e-3]}\nslurm: {partiton: x}\n", 2, "did you mean 'partition'?");
  bad("parameters: {training.lr: [1e-3]\n", 2, "YAML syntax error");
}

static void generated_dir(void) {
  loom_sweep_plan p, back;
  int rc = expand_text("name: gen\nparameters:\n  training.lr: [1e-4, 3e-4]\n  parallel.dp: [1, 2]\n", &p);
  CHECK(rc == 0, "expand: %s", loom_errmsg());
  if (rc) return;
  p.points[1].skip = true;
  char *out = loom_sprintf("%s/gen", dir);
  CHECK(loom_sweep_write(&p, out, "s.yaml", false) == 0, "write: %s", loom_errmsg());
  CHECK(loom_sweep_write(&p, out, "s.yaml", false) != 0 && strstr(loom_errmsg(), "--force"),
        "no silent overwrite");
  CHECK(loom_sweep_write(&p, out, "s.yaml", true) == 0, "--force");
  char *cmd = loom_sprintf("bash -n %s/run_sweep.sh", out);
  CHECK(system(cmd) == 0, "run_sweep.sh passes bash -n");
  free(cmd);
  char *script = loom_sprintf("%s/run_sweep.sh", out), *text;
  size_t len;
  LOOM_ASSERT(loom_read_file(script, &text, &len) == 0);
  char line[128];
  snprintf(line, sizeof line, "\"%s:1\"", p.points[1].name);
  CHECK(strstr(text, line) != NULL, "skip flag 1 for a skipped point");
  snprintf(line, sizeof line, "\"%s:0\"", p.points[0].name);
  CHECK(strstr(text, line) != NULL, "skip flag 0 otherwise");
  CHECK(strstr(text, "sweep run \"$HERE\"") != NULL, "runs loom sweep run on its directory");
  free(text);
  free(script);
  rc = loom_sweep_read_dir(&back, out);
  CHECK(rc == 0, "read back: %s", loom_errmsg());
  if (!rc) {
    CHECK(back.n == 4 && !strcmp(back.name, "gen"), "4 points of sweep gen");
    for (int i = 0; i < back.n && i < p.n; i++) {
      CHECK(!strcmp(back.points[i].name, p.points[i].name), "same names in order");
      CHECK(back.points[i].cfg.training.lr == p.points[i].cfg.training.lr &&
                back.points[i].ranks == p.points[i].ranks, "same configs");
      CHECK(back.points[i].nassign == 2 && !strcmp(back.points[i].assign[1], p.points[i].assign[1]),
            "same assignments");
    }
    loom_sweep_plan_free(&back);
  }
  CHECK(loom_sweep_read_dir(&back, dir) != 0 && strstr(loom_errmsg(), "no manifest.txt"),
        "not a sweep directory");
  free(out);
  loom_sweep_plan_free(&p);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/loom-sweep-test.XXXXXX");
  LOOM_ASSERT(mkdtemp(dir));
  grid();
  exclude_and_constraints();
  random_draws();
  errors();
  generated_dir();
  char *cmd = loom_sprintf("rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  free(cmd);
  return harness_finish("test_sweep");
}

/* Linked parameters (`link: KEY`), `${key}` values and command-line overrides of sweep files
 * (loom/sweep.h): linked values go together and form one grid dimension (and one random
 * draw), interpolations take the point's value of the key, an override fixes a key (a swept
 * one leaves the sweep, its linked parameters keep going together, repeated points run once),
 * the names of vision and image keys, and the errors (file:line, what to do). */
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "loom/core.h"
#include "loom/sweep.h"

static char dir[64];

/* Load a sweep text, apply the overrides, expand. */
static int expand(const char *text, const char *const *ov, int nov, loom_sweep_plan *plan) {
  char *path = loom_sprintf("%s/s.yaml", dir);
  LOOM_ASSERT(loom_write_file_atomic(path, text, strlen(text)) == 0);
  loom_sweep_spec s;
  int rc = loom_sweep_load(&s, path);
  free(path);
  if (rc) return rc;
  for (int i = 0; i < nov && !rc; i++) rc = loom_sweep_override(&s, ov[i]);
  if (!rc) rc = loom_sweep_expand(&s, plan);
  loom_sweep_spec_free(&s);
  return rc;
}

static const char *const vl_grid =
    "parameters:\n"
    "  model.preset: [qwen2.5-vl-7b, qwen2.5-vl-32b]\n"
    "  parallel.tp: {values: [4, 8], link: model.preset}\n"
    "  vision.parallel.sp: {values: [\"${parallel.tp}\", 1]}\n"
    "  vision.parallel.tp: {values: [1, \"${parallel.tp}\"], link: vision.parallel.sp}\n"
    "  training.micro_batch_size: [1, 2]\n"
    "name_keys: [parallel.tp, vision.parallel.sp, vision.parallel.tp, training.micro_batch_size]\n";

static void linked_grid(void) {
  loom_sweep_plan p;
  int rc = expand(vl_grid, NULL, 0, &p);
  CHECK(rc == 0, "linked grid: %s", loom_errmsg());
  if (rc) return;
  CHECK(p.n == 8, "2 models x 2 vision strategies x 2 batches = 8 points, got %d", p.n);
  for (int i = 0; i < p.n; i++) {
    const loom_config *c = &p.points[i].cfg;
    long tp = i < 4 ? 4 : 8;
    bool sp = (i / 2) % 2 == 0;
    CHECK(!strcmp(c->model.preset, i < 4 ? "qwen2.5-vl-7b" : "qwen2.5-vl-32b") && c->parallel.tp == tp,
          "point %d: model and tp go together (%s tp %ld)", i, c->model.preset, c->parallel.tp);
    CHECK(c->vision_parallel.sp == (sp ? tp : 1) && c->vision_parallel.tp == (sp ? 1 : tp),
          "point %d: ${parallel.tp} resolved (vision sp %ld tp %ld)", i, c->vision_parallel.sp,
          c->vision_parallel.tp);
    CHECK(c->training.micro_batch_size == 1 + i % 2, "batch varies fastest");
    CHECK(p.points[i].ranks == tp, "ranks = tp");
  }
  CHECK(!strcmp(p.points[0].name, "qwen2.5-vl-7b_tp4_vsp4_vtp1_bs1"), "name: %s", p.points[0].name);
  CHECK(!strcmp(p.points[7].name, "qwen2.5-vl-32b_tp8_vsp1_vtp8_bs2"), "name: %s", p.points[7].name);
  CHECK(!strcmp(p.points[0].assign[2], "vision.parallel.sp=4"), "assignment holds the resolved "
        "value: %s", p.points[0].assign[2]);
  loom_sweep_plan_free(&p);
  /* image names: the side of a square pixel budget */
  rc = expand("parameters:\n  data.image_max_pixels: [200704, 1000]\n", NULL, 0, &p);
  CHECK(rc == 0 && p.n == 2 && !strcmp(p.points[0].name, "tiny-gpt2_img448") &&
        !strcmp(p.points[1].name, "tiny-gpt2_maxpx1000"),
        "image names: %s", rc ? loom_errmsg() : p.points[0].name);
  if (!rc) loom_sweep_plan_free(&p);
}

static void linked_random(void) {
  loom_sweep_plan p;
  int rc = expand("parameters:\n  parallel.tp: [1, 2, 4]\n"
                  "  training.micro_batch_size: {values: [8, 4, 2], link: parallel.tp}\n"
                  "  training.lr: {min: 1e-4, max: 1e-3}\n"
                  "strategy: random\nnum_runs: 6\nseed: 3\n", NULL, 0, &p);
  CHECK(rc == 0, "random with links: %s", loom_errmsg());
  if (rc) return;
  for (int i = 0; i < p.n; i++)
    CHECK(p.points[i].cfg.parallel.tp * p.points[i].cfg.training.micro_batch_size == 8,
          "drawn together: tp %ld bs %ld", p.points[i].cfg.parallel.tp,
          p.points[i].cfg.training.micro_batch_size);
  loom_sweep_plan_free(&p);
}

static void overrides(void) {
  loom_sweep_plan p;
  /* fixing the model and its mesh: the vision strategies follow the new tp */
  const char *ov[] = {"model.preset=tiny-qwen2.5-vl", "parallel.tp=2", "training.steps=3"};
  int rc = expand(vl_grid, ov, 3, &p);
  CHECK(rc == 0, "overrides: %s", loom_errmsg());
  if (!rc) {
    CHECK(p.n == 4, "repeated points run once: 4 points, got %d", p.n);
    for (int i = 0; i < p.n; i++) {
      const loom_config *c = &p.points[i].cfg;
      CHECK(!strcmp(c->model.preset, "tiny-qwen2.5-vl") && c->parallel.tp == 2 && c->training.steps == 3,
            "fixed keys applied to %s", p.points[i].name);
      CHECK(c->vision_parallel.sp * c->vision_parallel.tp == 2, "vision over tp 2 in %s",
            p.points[i].name);
      CHECK(p.points[i].nassign == 3, "fixed keys leave the assignments (%d)", p.points[i].nassign);
    }
    CHECK(!strcmp(p.points[0].name, "tiny-qwen2.5-vl_tp2_vsp2_vtp1_bs1"), "name: %s", p.points[0].name);
    loom_sweep_plan_free(&p);
  }
  /* fixing the first of a linked group: the others still go together */
  const char *ov2[] = {"model.preset=qwen2.5-vl-7b"};
  rc = expand("parameters:\n  model.preset: [qwen2.5-vl-7b, qwen2.5-vl-32b]\n"
              "  parallel.tp: {values: [4, 8], link: model.preset}\n"
              "  training.micro_batch_size: {values: [2, 1], link: model.preset}\n", ov2, 1, &p);
  CHECK(rc == 0 && p.n == 2, "relinked group: %s", rc ? loom_errmsg() : "");
  if (!rc) {
    for (int i = 0; i < p.n; i++)
      CHECK(p.points[i].cfg.parallel.tp * p.points[i].cfg.training.micro_batch_size == 8,
            "tp and batch still linked");
    loom_sweep_plan_free(&p);
  }
  /* ~KEY resets a swept key to its default */
  const char *ov3[] = {"~training.micro_batch_size"};
  rc = expand(vl_grid, ov3, 1, &p);
  CHECK(rc == 0 && p.n == 4 && p.points[0].cfg.training.micro_batch_size == 8,
        "~KEY: %s", rc ? loom_errmsg() : "");
  if (!rc) loom_sweep_plan_free(&p);
  const char *bad[] = {"parallel.tpp=2"};
  rc = expand(vl_grid, bad, 1, &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "override 'parallel.tpp=2'") &&
        strstr(loom_errmsg(), "parallel.tp"), "unknown key: %s", loom_errmsg());
  const char *bad2[] = {"parallel.tp=two"};
  rc = expand(vl_grid, bad2, 1, &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "override 'parallel.tp=two'"), "bad value: %s", loom_errmsg());
}

static void errors(void) {
  loom_sweep_plan p;
  int rc = expand("parameters:\n  parallel.tp: [1, 2]\n"
                  "  training.micro_batch_size: {values: [1, 2, 4], link: parallel.tp}\n", NULL, 0, &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "s.yaml:3: training.micro_batch_size has 3 values but "
                                         "the parameter it is linked with, parallel.tp (line 2), has 2"),
        "counts: %s", loom_errmsg());
  rc = expand("parameters:\n  parallel.tp: [1, 2]\n"
              "  training.micro_batch_size: {values: [1, 2], link: parallel.pp}\n", NULL, 0, &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "link: parallel.pp is not a parameter of this sweep"),
        "link to a fixed key: %s", loom_errmsg());
  rc = expand("parameters:\n  parallel.tp: [1, 2]\n"
              "  training.lr: {min: 1e-4, max: 1e-3, link: parallel.tp}\nstrategy: random\nnum_runs: 2\n",
              NULL, 0, &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "linked parameters take values"), "range: %s", loom_errmsg());
  rc = expand("parameters:\n  vision.parallel.sp: [\"${parallel.tpp}\"]\n", NULL, 0, &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "s.yaml:2") && strstr(loom_errmsg(), "parallel.tp"),
        "unknown interpolated key: %s", loom_errmsg());
  rc = expand("parameters:\n  parallel.tp: [\"${parallel.tp}\"]\n", NULL, 0, &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "refers to the key itself"), "self: %s", loom_errmsg());
  rc = expand("parameters:\n  parallel.tp: [\"x${parallel.dp}\"]\n", NULL, 0, &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "an interpolation is the whole value"), "partial: %s",
        loom_errmsg());
  rc = expand("parameters:\n  parallel.dp: [\"${parallel.tp}\"]\n  parallel.tp: [\"${parallel.pp}\"]\n",
              NULL, 0, &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "whose own values are interpolations"), "chain: %s",
        loom_errmsg());
  rc = expand("parameters:\n  training.dtype: [\"${parallel.tp}\"]\n", NULL, 0, &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "parameter training.dtype: ${parallel.tp} = "),
        "resolved value of the wrong type: %s", loom_errmsg());
  rc = expand("parameters: {parallel.tp: [1]}\nsim: {hardwar: h200}\n", NULL, 0, &p);
  CHECK(rc != 0 && strstr(loom_errmsg(), "unknown sim setting 'hardwar'"), "sim section: %s", loom_errmsg());
  rc = expand("parameters: {parallel.tp: [1]}\nsim: {hardware: h200}\n", NULL, 0, &p);
  CHECK(rc == 0 && !strcmp(p.hardware, "h200"), "sim hardware kept in the plan");
  if (!rc) loom_sweep_plan_free(&p);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/loom-sweep-link.XXXXXX");
  LOOM_ASSERT(mkdtemp(dir));
  linked_grid();
  linked_random();
  overrides();
  errors();
  char *cmd = loom_sprintf("rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  free(cmd);
  return harness_finish("test_sweep_link");
}

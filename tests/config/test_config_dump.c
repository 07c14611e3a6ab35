/* The YAML dump: to_yaml -> load round trip is bit-identical (memcmp of the whole struct)
 * for edge-case floats, random doubles and awkward strings; layout (sections, schema order,
 * float spelling); save/hash; validation errors; and every configs/examples YAML file loads
 * and validates. */
#include <dirent.h>
#include <math.h>

#include "config_test_util.h"

#define SCRATCH "config-dump.tmp"

/* to_yaml(c) loaded over fresh defaults must give exactly c. */
static int round_trips(const loom_config *c, const char *what) {
  char *yaml = loom_config_to_yaml(c);
  const char *path = scratch(SCRATCH, "rt.yaml", yaml);
  loom_config back;
  loom_config_defaults(&back);
  int ok = loom_config_load(&back, path) == 0;
  if (!ok) fprintf(stderr, "%s: reload failed: %s\n%s", what, loom_errmsg(), yaml);
  ok = ok && memcmp(&back, c, sizeof back) == 0;
  if (!ok) fprintf(stderr, "%s: not identical after round trip:\n%s", what, yaml);
  free(yaml);
  return ok;
}

static void test_defaults_round_trip(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(round_trips(&c, "defaults"), "defaults");
}

static void test_edge_values(void) {
  static const double edge[] = {0.1 + 0.2, 1e-300, 5e-324, -0.0, 1.7976931348623157e308,
                                123456789.123456789, 3e-4, 1.0 / 3.0, 2.2250738585072014e-308,
                                -1e22, 0.5, 100.0};
  for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
    loom_config c;
    loom_config_defaults(&c);
    c.training.lr = edge[i];
    c.model.rope_theta = -edge[i];
    c.model.norm_eps = edge[i] * 0.5;
    char what[64];
    snprintf(what, sizeof what, "float %.17g", edge[i]);
    CHECK(round_trips(&c, what), "%s", what);
  }
  loom_config c;
  loom_config_defaults(&c);
  c.run.seed = -9223372036854775807L - 1;
  c.training.steps = 9223372036854775807L;
  c.training.activation_checkpointing = true;
  c.checkpoint.save_final = false;
  CHECK(round_trips(&c, "extreme ints, bools"), "ints");
}

static void test_random_doubles(void) {
  loom_rng r;
  loom_rng_seed(&r, 42);
  int bad = 0;
  for (int i = 0; i < 300; i++) {
    loom_config c;
    loom_config_defaults(&c);
    double v[3];
    for (int j = 0; j < 3; j++) {
      uint64_t bits = loom_rng_u64(&r);
      memcpy(&v[j], &bits, sizeof v[j]);
      if (!isfinite(v[j])) v[j] = loom_rng_uniform(&r);
    }
    c.training.lr = v[0], c.training.beta1 = v[1], c.model.init_std = v[2];
    c.training.eps = loom_rng_uniform(&r) * 1e-6;
    if (!round_trips(&c, "random doubles")) bad++;
  }
  CHECK(bad == 0, "%d random configs did not round-trip", bad);
}

static void test_strings(void) {
  static const char *const s[] = {"",        "plain",    "with space", " leading", "trailing ",
                                  "yes",     "NULL",     "~",          "123",      "1e5",
                                  "a: b",    "# hash",   "quote\"s",   "back\\slash",
                                  "new\nline", "tab\there", "bell\x07", "del\x7f", "ütf-8 ✓",
                                  "-dash",   "[list]",   "{map}",      "'single'", "%pct",
                                  "@at",     "*star",    "&amp",       "!bang",    "|pipe",
                                  ">gt",     "a,b",      "runs/x_1.2-b"};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
    loom_config c;
    loom_config_defaults(&c);
    snprintf(c.run.name, sizeof c.run.name, "%s", s[i]);
    memset(c.data.train_shards, 0, sizeof c.data.train_shards); /* as the loader leaves it */
    snprintf(c.data.train_shards, sizeof c.data.train_shards, "%s/%s", s[i], s[i]);
    CHECK(round_trips(&c, s[i]), "string [%s]", s[i]);
  }
  loom_config c;
  loom_config_defaults(&c);
  memset(c.run.output_dir, 'o', sizeof c.run.output_dir - 1); /* longest that fits */
  CHECK(round_trips(&c, "511-byte string"), "max-length string");
  strcpy(c.model.arch, "llama");
  strcpy(c.model.qkv_bias, "false");
  strcpy(c.training.lr_schedule, "constant");
  CHECK(round_trips(&c, "enums"), "enums");
}

static void test_layout(void) {
  loom_config c;
  loom_config_defaults(&c);
  char *y = loom_config_to_yaml(&c);
  const char *head = "run:\n  name: \"\"\n  output_dir: runs\n  seed: 1337\n  max_restarts: 0\n"
                     "  tags: \"\"\n  notes: \"\"\n  parent: \"\"\n  parent_checkpoint: \"\"\n"
                     "model:\n";
  CHECK(!strncmp(y, head, strlen(head)),
        "starts with the run section in schema order:\n%s", y);
  const char *order[] = {"\nrun:", "\nmodel:", "\ntraining:", "\ndata:", "\ncheckpoint:"};
  char *yy = loom_sprintf("\n%s", y);
  const char *prev = yy;
  for (int i = 0; i < 5; i++) {
    const char *at = strstr(yy, order[i]);
    CHECK(at && at >= prev, "section %s in order", order[i] + 1);
    if (at) prev = at;
  }
  CHECK(strstr(y, "  lr: 0.0003\n") && strstr(y, "  eps: 1.0e-08\n") &&
            strstr(y, "  grad_clip: 1.0\n") && strstr(y, "  rope_theta: 0.0\n"),
        "short float spelling:\n%s", y);
  CHECK(strstr(y, "  qkv_bias: \"\"\n") && strstr(y, "  save_final: true\n"), "enum/bool");
  int lines = 0;
  for (const char *p = y; *p; p++) lines += *p == '\n';
  /* run, model, model.moe, training, data, checkpoint, parallel, vision, vision.parallel */
  CHECK(lines == (int)loom_config_nkeys + 9, "all %zu keys plus 9 section headers (%d lines)",
        loom_config_nkeys, lines);
  free(yy);
  free(y);
}

static void test_save_and_hash(void) {
  loom_config c, d;
  loom_config_defaults(&c);
  loom_config_defaults(&d);
  uint64_t h0 = loom_config_hash(&c);
  CHECK(h0 == loom_config_hash(&d), "hash is deterministic");
  c.training.lr = 1e-3;
  CHECK(loom_config_hash(&c) != h0, "hash changes with a value");
  loom_mkdir_p(SCRATCH);
  CHECK(loom_config_save(&c, SCRATCH "/saved.yaml") == 0, "%s", loom_errmsg());
  char *text = NULL, *y = loom_config_to_yaml(&c);
  CHECK(loom_read_file(SCRATCH "/saved.yaml", &text, NULL) == 0 && !strcmp(text, y),
        "saved file is to_yaml");
  CHECK(loom_config_load(&d, SCRATCH "/saved.yaml") == 0 && memcmp(&c, &d, sizeof c) == 0,
        "saved file loads back identically");
  CHECK(loom_config_hash(&d) == loom_config_hash(&c), "hash after reload");
  CHECK(loom_config_save(&c, SCRATCH "/no/such/dir/x.yaml") != 0, "save to a missing dir");
  CHECK_MSG("saving the config", "x.yaml");
  free(text);
  free(y);
}

/* Apply one override to the defaults and expect validation to fail with all substrings. */
static void invalid(const char *ov, const char *s1, const char *s2) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(loom_config_override(&c, ov) == 0, "%s: %s", ov, loom_errmsg());
  CHECK(loom_config_validate(&c) != 0, "%s should not validate", ov);
  CHECK_MSG("invalid config: ", s1, s2);
}

static void test_validate(void) {
  invalid("training.steps=-1", "training.steps = -1 is out of range", "must be >= 0");
  invalid("training.micro_batch_size=-1", "training.micro_batch_size = -1", ">= 1");
  invalid("training.seq_len=0", "training.seq_len = 0", ">= 1");
  invalid("training.grad_accum=0", "training.grad_accum = 0", ">= 1");
  invalid("training.log_every=0", "training.log_every = 0", ">= 1");
  invalid("training.warmup_ratio=1", "training.warmup_ratio = 1.0", "in [0, 1)");
  invalid("training.warmup_ratio=-0.1", "training.warmup_ratio = -0.1", "in [0, 1)");
  invalid("training.lr=0", "training.lr = 0.0", "must be > 0");
  invalid("training.min_lr_ratio=1.5", "training.min_lr_ratio = 1.5", "in [0, 1]");
  invalid("training.beta1=1", "training.beta1 = 1.0", "in [0, 1)");
  invalid("training.beta2=-0.5", "training.beta2 = -0.5", "in [0, 1)");
  invalid("training.eps=0", "training.eps = 0.0", "> 0");
  invalid("training.grad_clip=-1", "training.grad_clip = -1.0", ">= 0");
  invalid("training.weight_decay=-0.01", "training.weight_decay = -0.01", ">= 0");
  invalid("model.vocab_pad_multiple=0", "model.vocab_pad_multiple = 0", ">= 1");
  invalid("checkpoint.every=-5", "checkpoint.every = -5", ">= 0");

  loom_config c;
  loom_config_defaults(&c);
  CHECK(loom_config_override(&c, "training.min_lr_ratio=1") == 0 &&
            loom_config_override(&c, "training.beta1=0") == 0 &&
            loom_config_override(&c, "training.grad_clip=0") == 0 &&
            loom_config_validate(&c) == 0,
        "range edges that are allowed: %s", loom_errmsg());
  strcpy(c.training.dtype, "fp16"); /* set in code, bypassing the loader */
  CHECK(loom_config_validate(&c) != 0, "enum checked");
  CHECK_MSG("training.dtype = 'fp16' is not allowed", "one of fp32, bf16");
  loom_config_defaults(&c);
  c.training.lr = NAN;
  CHECK(loom_config_validate(&c) != 0, "NaN rejected");
  CHECK_MSG("training.lr");
}

static void test_examples(void) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/configs/examples", source_dir());
  DIR *d = opendir(dir);
  CHECK(d != NULL, "cannot open %s", dir);
  if (!d) return;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".yaml")) continue;
    char *path = loom_sprintf("%s/%s", dir, e->d_name);
    loom_config c;
    loom_config_defaults(&c);
    CHECK(loom_config_load(&c, path) == 0 && loom_config_validate(&c) == 0, "%s: %s", path,
          loom_errmsg());
    CHECK(round_trips(&c, path), "%s round trip", path);
    free(path);
    n++;
  }
  closedir(d);
  CHECK(n >= 1, "no example configs found in %s", dir);
}

int main(void) {
  test_defaults_round_trip();
  test_edge_values();
  test_random_doubles();
  test_strings();
  test_layout();
  test_save_and_hash();
  test_validate();
  test_examples();
  loom_rm_rf(SCRATCH);
  return harness_finish("test_config_dump");
}

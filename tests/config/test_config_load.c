/* Config loading: schema defaults, nested and dotted YAML, typed value rules, and every
 * load error (message names file:line, the key, and the suggestion / expected type). */
#include "config_test_util.h"

#define SCRATCH "config-load.tmp"

static void test_defaults(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(!strcmp(c.run.name, "") && !strcmp(c.run.output_dir, "runs") && c.run.seed == 1337,
        "run defaults");
  CHECK(!strcmp(c.model.preset, "tiny-gpt2") && !strcmp(c.model.arch, ""), "model preset/arch");
  CHECK(c.model.vocab_size == 0 && c.model.vocab_pad_multiple == 64 && c.model.hidden == 0 &&
            c.model.layers == 0 && c.model.heads == 0 && c.model.kv_heads == 0 &&
            c.model.head_dim == 0 && c.model.intermediate == 0 && c.model.max_seq == 0,
        "model sizes");
  CHECK(c.model.norm_eps == 0 && c.model.rope_theta == 0 && c.model.init_std == 0.02,
        "model floats");
  CHECK(!strcmp(c.model.qkv_bias, "") && !strcmp(c.model.tied_embeddings, ""), "tri-states");
  CHECK(c.training.steps == 200 && c.training.micro_batch_size == 8 &&
            c.training.seq_len == 64 && c.training.grad_accum == 1,
        "training sizes");
  CHECK(c.training.lr == 3e-4 && c.training.min_lr_ratio == 0.1 &&
            !strcmp(c.training.lr_schedule, "cosine") && c.training.warmup_steps == 0 &&
            c.training.warmup_ratio == 0.05,
        "schedule");
  CHECK(c.training.weight_decay == 0.1 && c.training.beta1 == 0.9 && c.training.beta2 == 0.95 &&
            c.training.eps == 1e-8 && c.training.grad_clip == 1.0,
        "optimizer");
  CHECK(!strcmp(c.training.dtype, "fp32") && !c.training.activation_checkpointing &&
            !c.training.decay_norms_and_biases && c.training.log_every == 10,
        "dtype/flags");
  CHECK(!strcmp(c.data.train_shards, "data/demo/train.bin") &&
            !strcmp(c.data.tokenizer, "data/demo/tokenizer.json"),
        "data");
  CHECK(c.checkpoint.every == 0 && c.checkpoint.save_final && c.checkpoint.keep_last == 0,
        "checkpoint");
  CHECK(loom_config_validate(&c) == 0, "defaults validate: %s", loom_errmsg());
}

static void test_nested(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(loom_config_load(&c, fixture("nested.yaml")) == 0, "%s", loom_errmsg());
  CHECK(!strcmp(c.run.name, "nested-test") && c.run.seed == 7, "run");
  CHECK(!strcmp(c.model.preset, "gpt2-124m") && !strcmp(c.model.arch, "gpt2"), "arch canonical");
  CHECK(!strcmp(c.model.qkv_bias, "true") && c.model.rope_theta == 500000, "model");
  CHECK(c.training.steps == 1000 && c.training.lr == 6e-4 && c.training.warmup_ratio == 0.5,
        "training numbers");
  CHECK(!strcmp(c.training.lr_schedule, "linear") && !strcmp(c.training.dtype, "bf16"), "enums");
  CHECK(c.training.activation_checkpointing && !c.training.decay_norms_and_biases, "bools");
  CHECK(!strcmp(c.data.train_shards, "data/fineweb/*.bin"), "quoted string");
  CHECK(c.checkpoint.every == 100 && !c.checkpoint.save_final, "checkpoint");
  CHECK(c.training.micro_batch_size == 8 && !strcmp(c.data.tokenizer, "data/demo/tokenizer.json"),
        "untouched keys keep defaults");
}

static void test_dotted(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(loom_config_load(&c, fixture("dotted.yaml")) == 0, "%s", loom_errmsg());
  CHECK(!strcmp(c.run.name, "dotted-test") && c.training.lr == 1e-3 && c.training.steps == 50,
        "dotted keys");
  CHECK(c.model.vocab_size == 50257 && c.checkpoint.keep_last == 3, "mixed with nested");
}

/* Two-level sections: vision: {parallel: {...}}, the dumped "vision.parallel:" header, and
 * text.parallel.* landing in parallel.*. */
static void test_module_sections(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(c.vision_parallel.tp == 0 && c.vision_parallel.sp == 0 && c.vision_parallel.zero == -1 &&
            !strcmp(c.vision_parallel.placement, "collocated"),
        "vision.parallel defaults follow the text strategy");
  CHECK(loom_config_load(&c, scratch(SCRATCH, "mod.yaml",
                                     "vision:\n  parallel:\n    sp: 2\n    zero: 1\n"
                                     "text:\n  parallel:\n    tp: 2\n")) == 0,
        "%s", loom_errmsg());
  CHECK(c.vision_parallel.sp == 2 && c.vision_parallel.zero == 1 && c.parallel.tp == 2,
        "nested module sections (sp %ld zero %ld tp %ld)", c.vision_parallel.sp,
        c.vision_parallel.zero, c.parallel.tp);
  loom_config_defaults(&c);
  CHECK(loom_config_load(&c, scratch(SCRATCH, "mod2.yaml",
                                     "vision.parallel:\n  tp: 2\ntext.parallel.dp: 3\n")) == 0,
        "%s", loom_errmsg());
  CHECK(c.vision_parallel.tp == 2 && c.parallel.dp == 3, "dotted module section headers");
  loom_config_defaults(&c);
  CHECK(loom_config_load(&c, scratch(SCRATCH, "mod3.yaml", "vision:\n  parallel:\n    spp: 2\n")),
        "unknown key inside a nested section");
  CHECK(strstr(loom_errmsg(), "vision.parallel.spp") && strstr(loom_errmsg(), ":3"),
        "names the key and line: %s", loom_errmsg());
  loom_config_defaults(&c);
  c.vision_parallel.tp = -1;
  CHECK(loom_config_validate(&c) && strstr(loom_errmsg(), "vision.parallel.tp = -1 is out of range"),
        "negative vision tp: %s", loom_errmsg());
  loom_config_defaults(&c);
  c.vision_parallel.zero = 4;
  CHECK(loom_config_validate(&c) && strstr(loom_errmsg(), "vision.parallel.zero = 4"),
        "vision zero 4: %s", loom_errmsg());
}

static void test_empty_and_null_section(void) {
  loom_config c, d;
  loom_config_defaults(&c);
  loom_config_defaults(&d);
  CHECK(loom_config_load(&c, scratch(SCRATCH, "empty.yaml", "# nothing\n")) == 0, "%s",
        loom_errmsg());
  CHECK(loom_config_load(&c, scratch(SCRATCH, "nullsec.yaml", "training:\nrun:\n")) == 0, "%s",
        loom_errmsg());
  CHECK(memcmp(&c, &d, sizeof c) == 0, "empty file / empty sections leave the defaults");
}

/* Load `text` from a scratch file and expect failure; the config must be untouched. */
static int load_fails(const char *name, const char *text) {
  loom_config c, before;
  loom_config_defaults(&c);
  memcpy(&before, &c, sizeof c);
  int rc = loom_config_load(&c, scratch(SCRATCH, name, text));
  CHECK(memcmp(&c, &before, sizeof c) == 0, "failed load of %s modified the config", name);
  return rc != 0;
}

static void test_unknown_keys(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(loom_config_load(&c, fixture("unknown_key.yaml")) != 0, "typo accepted");
  CHECK_MSG("unknown_key.yaml:7: unknown key 'training.lrr'; did you mean 'training.lr'?");

  CHECK(load_fails("u2.yaml", "training.lrr: 1\n"), "dotted typo");
  CHECK_MSG("u2.yaml:1: unknown key 'training.lrr'; did you mean 'training.lr'?");
  CHECK(load_fails("u3.yaml", "run:\n  name: x\ntraining:\n  seed: 3\n"), "key in wrong section");
  CHECK_MSG("u3.yaml:4:", "'training.seed'", "did you mean 'run.seed'?");
  CHECK(load_fails("u4.yaml", "trainig:\n  lr: 1\n"), "section typo");
  CHECK_MSG("u4.yaml:1:", "unknown section 'trainig'", "did you mean 'training'?");
  CHECK(load_fails("u5.yaml", "training:\n  micro_batch: 4\n"), "prefix");
  CHECK_MSG("u5.yaml:2:", "did you mean 'training.micro_batch_size'?");
  CHECK(load_fails("u6.yaml", "training:\n  zzzzzz: 4\n"), "nothing close");
  CHECK_MSG("u6.yaml:2: unknown key 'training.zzzzzz'", "loom config schema");
  CHECK(load_fails("u7.yaml", "lr: 1e-3\n"), "bare key");
  CHECK_MSG("u7.yaml:1: unknown key 'lr'; did you mean 'training.lr'?");
  CHECK(load_fails("u8.yaml", "model:\n  layer: 4\n"), "within-section last component");
  CHECK_MSG("did you mean 'model.layers'?");
}

static void test_type_errors(void) {
  CHECK(load_fails("t1.yaml", "training:\n  lr: 1e-3\n  steps: abc\n"), "int");
  CHECK_MSG("t1.yaml:3: expected an integer for training.steps, found 'abc'");
  CHECK(load_fails("t2.yaml", "training.steps: 1.5\n"), "fractional int");
  CHECK_MSG("t2.yaml:1: expected an integer for training.steps, found '1.5'");
  CHECK(load_fails("t3.yaml", "run.seed: 99999999999999999999999\n"), "int overflow");
  CHECK_MSG("t3.yaml:1:", "run.seed", "out of range");
  CHECK(load_fails("t4.yaml", "training.lr: .inf\n"), "inf float");
  CHECK_MSG("t4.yaml:1: expected a float for training.lr", "infinity and NaN are not allowed");
  CHECK(load_fails("t5.yaml", "training.lr: fast\n"), "float");
  CHECK_MSG("t5.yaml:1: expected a float for training.lr, found 'fast'");
  CHECK(load_fails("t6.yaml", "training.lr: 1e999\n"), "float overflow");
  CHECK_MSG("t6.yaml:1:", "out of range");
  CHECK(load_fails("t7.yaml", "checkpoint:\n  save_final: maybe\n"), "bool");
  CHECK_MSG("t7.yaml:2: expected a bool for checkpoint.save_final, found 'maybe'",
            "true/false, yes/no or on/off");
  CHECK(load_fails("t8.yaml", "training:\n  lr_schedule: cosin\n"), "enum");
  CHECK_MSG("t8.yaml:2: training.lr_schedule must be one of constant, linear, cosine",
            "found 'cosin'", "did you mean 'cosine'?");
  CHECK(load_fails("t9.yaml", "model.arch: bert\n"), "enum with empty value");
  CHECK_MSG("t9.yaml:1: model.arch must be one of \"\", gpt2, llama; found 'bert'");
  CHECK(load_fails("t10.yaml", "training:\n  steps:\n"), "null value");
  CHECK_MSG("t10.yaml:2:", "training.steps has no value");
}

static void test_shape_errors(void) {
  CHECK(load_fails("s1.yaml", "run: 5\n"), "section scalar");
  CHECK_MSG("s1.yaml:1: 'run' is a section and takes a mapping of keys", "not a scalar");
  /* the alias section names parallel's keys (a fuzzed input once crashed here) */
  CHECK(load_fails("s1b.yaml", "text.parallel: 256\n"), "alias section scalar");
  CHECK_MSG("s1b.yaml:1: 'text.parallel' is a section and takes a mapping of keys", "(e.g. '",
            "not a scalar");
  CHECK(load_fails("s2.yaml", "model:\n  - a\n"), "section list");
  CHECK_MSG("s2.yaml:2:", "'model' is a section", "not a list");
  CHECK(load_fails("s3.yaml", "training:\n  lr:\n    value: 1\n"), "key mapping");
  CHECK_MSG("s3.yaml:3: training.lr takes a float, not a mapping");
  CHECK(load_fails("s4.yaml", "training.steps: [1, 2]\n"), "key list");
  CHECK_MSG("s4.yaml:1: training.steps takes an integer, not a list");
  CHECK(load_fails("s5.yaml", "- a\n- b\n"), "top-level list");
  CHECK_MSG("s5.yaml:1: the top level must be a mapping");
  CHECK(load_fails("s6.yaml", "run:\n  name: a\n---\nrun:\n  name: b\n"), "two documents");
  CHECK_MSG("s6.yaml:4:", "second YAML document");
}

static void test_duplicates(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(loom_config_load(&c, fixture("dup_key.yaml")) != 0, "nested + dotted duplicate");
  CHECK_MSG("dup_key.yaml:4: duplicate key 'training.lr' (first set at line 2)");
  CHECK(load_fails("d1.yaml", "training:\n  lr: 1\n  lr: 2\n"), "same-mapping duplicate");
  CHECK_MSG("d1.yaml:3: duplicate key 'training.lr' (first set at line 2)");
  CHECK(load_fails("d2.yaml", "run:\n  seed: 1\nmodel:\n  hidden: 8\nrun:\n  name: x\n"),
        "duplicate section");
  CHECK_MSG("d2.yaml:5: duplicate section 'run' (first at line 1)");
}

static void test_syntax_and_file_errors(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(loom_config_load(&c, fixture("syntax_error.yaml")) != 0, "syntax error");
  CHECK_MSG("syntax_error.yaml:4:", "YAML syntax error");
  CHECK(load_fails("y1.yaml", "training:\n  lr: 1\n bad: 2\n"), "bad indentation");
  CHECK_MSG("y1.yaml:3:", "YAML syntax error");
  CHECK(load_fails("y2.yaml", "training:\n\tlr: 1\n"), "tab");
  CHECK_MSG("y2.yaml:2:", "YAML syntax error");
  CHECK(loom_config_load(&c, SCRATCH "/does-not-exist.yaml") != 0, "missing file");
  CHECK_MSG("'" SCRATCH "/does-not-exist.yaml' does not exist");
  CHECK(loom_config_load(&c, SCRATCH) != 0, "directory");
  CHECK_MSG("is a directory");
}

static void test_value_rules(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(loom_config_load(&c, scratch(SCRATCH, "v1.yaml",
                                     "training:\n  lr: 1e-3\n  min_lr_ratio: .5\n"
                                     "  grad_clip: 2\n  steps: +12\n"
                                     "  activation_checkpointing: ON\n"
                                     "  decay_norms_and_biases: True\n"
                                     "run:\n  seed: -5\n  name: \"123\"\n"
                                     "model.tied_embeddings: false\n")) == 0,
        "%s", loom_errmsg());
  CHECK(c.training.lr == 1e-3 && c.training.min_lr_ratio == 0.5 && c.training.grad_clip == 2.0,
        "floats");
  CHECK(c.training.steps == 12 && c.run.seed == -5, "ints");
  CHECK(c.training.activation_checkpointing && c.training.decay_norms_and_biases, "bools");
  CHECK(!strcmp(c.run.name, "123") && !strcmp(c.model.tied_embeddings, "false"), "strings");

  char big[700], text[800];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  snprintf(text, sizeof text, "run:\n  name: %s\n", big);
  CHECK(load_fails("v2.yaml", text), "too-long string");
  CHECK_MSG("v2.yaml:2: run.name is too long: 699 bytes, at most 511 fit");
  CHECK(load_fails("v3.yaml", "model:\n  preset: "
                              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"),
        "64-char preset does not fit 64-byte field");
  CHECK_MSG("model.preset is too long: 64 bytes, at most 63 fit");
}

int main(void) {
  test_defaults();
  test_nested();
  test_dotted();
  test_module_sections();
  test_empty_and_null_section();
  test_unknown_keys();
  test_type_errors();
  test_shape_errors();
  test_duplicates();
  test_syntax_and_file_errors();
  test_value_rules();
  loom_rm_rf(SCRATCH);
  return harness_finish("test_config_load");
}

/* The precision-policy keys (training.param_dtype/optim_dtype/reduce_dtype, vision.*_dtype):
 * their defaults, a YAML file setting them loads and dumps back identically, bad values and
 * the refused combination (bf16 storage with fp32 compute) are errors naming the keys. */
#include "config_test_util.h"

#define SCRATCH "config-precision.tmp"

static void test_defaults(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(!strcmp(c.training.param_dtype, "fp32"), "param_dtype default %s", c.training.param_dtype);
  CHECK(!strcmp(c.training.optim_dtype, "fp32"), "optim_dtype default %s", c.training.optim_dtype);
  CHECK(!strcmp(c.training.reduce_dtype, "fp32"), "reduce_dtype default %s",
        c.training.reduce_dtype);
  CHECK(c.vision.param_dtype[0] == 0 && c.vision.optim_dtype[0] == 0, "vision defaults not \"\"");
  CHECK(loom_config_validate(&c) == 0, "defaults invalid: %s", loom_errmsg());
}

static void test_load_and_dump(void) {
  loom_config c, back;
  loom_config_defaults(&c);
  const char *path = scratch(SCRATCH, "p.yaml",
                             "training:\n  dtype: bf16\n  param_dtype: bf16\n  optim_dtype: bf16\n"
                             "  reduce_dtype: bf16\nvision:\n  param_dtype: fp32\n"
                             "  optim_dtype: bf16\n  parallel:\n    zero: 1\n");
  CHECK(loom_config_load(&c, path) == 0, "load: %s", loom_errmsg());
  CHECK(!strcmp(c.training.param_dtype, "bf16") && !strcmp(c.training.optim_dtype, "bf16") &&
            !strcmp(c.training.reduce_dtype, "bf16"), "training keys not loaded");
  CHECK(!strcmp(c.vision.param_dtype, "fp32") && !strcmp(c.vision.optim_dtype, "bf16") &&
            c.vision_parallel.zero == 1, "vision keys not loaded next to vision.parallel");
  CHECK(loom_config_validate(&c) == 0, "valid policy refused: %s", loom_errmsg());
  char *yaml = loom_config_to_yaml(&c);
  CHECK(strstr(yaml, "vision:\n  param_dtype: fp32\n  optim_dtype: bf16\n") != NULL,
        "dump has no vision section:\n%s", yaml);
  loom_config_defaults(&back);
  CHECK(loom_config_load(&back, scratch(SCRATCH, "back.yaml", yaml)) == 0, "reload: %s",
        loom_errmsg());
  CHECK(memcmp(&back, &c, sizeof c) == 0, "dump -> load is not identical");
  free(yaml);
}

static void test_errors(void) {
  loom_config c;
  loom_config_defaults(&c);
  CHECK(loom_config_override(&c, "training.optim_dtype=fp16") != 0, "fp16 accepted");
  CHECK_MSG("training.optim_dtype", "fp32, bf16", "fp16");
  CHECK(loom_config_override(&c, "training.param_dtype=") != 0, "\"\" accepted for training");
  CHECK(loom_config_override(&c, "training.param_dtype=bf16") == 0, "%s", loom_errmsg());
  CHECK(loom_config_validate(&c) != 0, "bf16 parameters with fp32 compute accepted");
  CHECK_MSG("training.param_dtype = bf16 needs training.dtype = bf16", "set training.dtype=bf16");
  loom_config_defaults(&c);
  CHECK(loom_config_override(&c, "vision.param_dtype=bf16") == 0, "%s", loom_errmsg());
  CHECK(loom_config_validate(&c) != 0, "bf16 vision parameters with fp32 compute accepted");
  CHECK_MSG("vision.param_dtype = bf16 needs training.dtype = bf16");
  CHECK(loom_config_override(&c, "training.dtype=bf16") == 0, "%s", loom_errmsg());
  CHECK(loom_config_validate(&c) == 0, "bf16 vision with bf16 compute: %s", loom_errmsg());
  /* fp32 storage with bf16 reductions is FSDP2's MixedPrecisionPolicy(reduce_dtype=bf16) */
  loom_config_defaults(&c);
  CHECK(loom_config_override(&c, "training.reduce_dtype=bf16") == 0, "%s", loom_errmsg());
  CHECK(loom_config_validate(&c) == 0, "bf16 reduce of fp32 grads refused: %s", loom_errmsg());
}

int main(void) {
  test_defaults();
  test_load_and_dump();
  test_errors();
  return harness_finish("test_config_precision");
}

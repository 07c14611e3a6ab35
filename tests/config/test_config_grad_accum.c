/* loom_config_resolve_grad_accum: training.global_batch_size -> training.grad_accum =
 * global / (micro_batch_size * parallel.dp), refusals that show the arithmetic, and the
 * config left unchanged by a refusal. */
#include "../harness.h"
#include "loom/config.h"
#include "loom/core.h"

static loom_config make(long global, long micro, long dp, long accum) {
  loom_config c;
  loom_config_defaults(&c);
  c.training.global_batch_size = global;
  c.training.micro_batch_size = micro;
  c.parallel.dp = dp;
  c.training.grad_accum = accum;
  return c;
}

static void test_derived(void) {
  loom_config c = make(0, 3, 2, 5); /* unset: grad_accum untouched */
  CHECK(loom_config_resolve_grad_accum(&c) == 0 && c.training.grad_accum == 5, "got %ld",
        c.training.grad_accum);
  c = make(16, 2, 2, 1);
  CHECK(loom_config_resolve_grad_accum(&c) == 0 && c.training.grad_accum == 4, "got %ld",
        c.training.grad_accum);
  c = make(16, 2, 2, 4); /* agreeing explicit value */
  CHECK(loom_config_resolve_grad_accum(&c) == 0 && c.training.grad_accum == 4, "got %ld",
        c.training.grad_accum);
  c = make(6, 6, 1, 1); /* exactly one micro-batch */
  CHECK(loom_config_resolve_grad_accum(&c) == 0 && c.training.grad_accum == 1, "got %ld",
        c.training.grad_accum);
  c = make(512, 1, 64, 1);
  CHECK(loom_config_resolve_grad_accum(&c) == 0 && c.training.grad_accum == 8, "got %ld",
        c.training.grad_accum);
}

static void test_refused(void) {
  loom_config c = make(10, 4, 1, 1);
  CHECK(loom_config_resolve_grad_accum(&c) != 0 && c.training.grad_accum == 1, "accepted");
  CHECK(strstr(loom_errmsg(), "training.global_batch_size = 10 is not a multiple of "
                              "training.micro_batch_size x parallel.dp = 4 x 1 = 4 (remainder 2)"),
        "%s", loom_errmsg());
  c = make(12, 2, 4, 1); /* 12 = 1.5 x (2 x 4) */
  CHECK(loom_config_resolve_grad_accum(&c) != 0, "accepted");
  CHECK(strstr(loom_errmsg(), "= 2 x 4 = 8 (remainder 4)"), "%s", loom_errmsg());
  c = make(16, 2, 2, 3);
  CHECK(loom_config_resolve_grad_accum(&c) != 0 && c.training.grad_accum == 3, "accepted");
  CHECK(strstr(loom_errmsg(), "training.global_batch_size = 16 gives grad_accum = 16 / "
                              "(micro_batch_size 2 x dp 2) = 4, but training.grad_accum = 3"),
        "%s", loom_errmsg());
  CHECK(strstr(loom_errmsg(), "training.grad_accum=1 lets global_batch_size decide"), "%s",
        loom_errmsg());
  c = make(3, 4, 1, 1); /* smaller than one micro-batch */
  CHECK(loom_config_resolve_grad_accum(&c) != 0, "accepted");
  CHECK(strstr(loom_errmsg(), "(remainder 3)"), "%s", loom_errmsg());
}

int main(void) {
  test_derived();
  test_refused();
  return harness_finish("test_config_grad_accum");
}

/* Fuzz harness: sweep files (`loom sweep show/run`): the YAML loader, then the expansion of
 * the grid or random draws with their constraints (filter expressions over config keys),
 * exclusions and `${key}` references. Relative base configs resolve against the source tree
 * (LOOM_SOURCE_DIR, set by the CTest replay; `make fuzz` runs from the source tree).
 * Invariant beyond memory safety: every expanded point's config validates, and the points
 * have distinct names. */
#include "fuzz_util.h"
#include "loom/config.h"
#include "loom/core.h"
#include "loom/sweep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int moved;
  if (!moved++) {
    const char *src = getenv("LOOM_SOURCE_DIR");
    if (src && chdir(src)) abort();
  }
  loom_sweep_spec s;
  if (loom_sweep_load(&s, fuzz_input_file(data, size, ".yaml"))) {
    loom_err_clear();
    return 0;
  }
  loom_sweep_plan plan;
  memset(&plan, 0, sizeof plan);
  if (loom_sweep_expand(&s, &plan) == 0) {
    for (int i = 0; i < plan.n; i++) {
      if (loom_config_validate(&plan.points[i].cfg))
        FUZZ_FINDING("point %d (%s) does not validate: %s", i, plan.points[i].name,
                     loom_errmsg());
      for (int j = 0; j < i && plan.n <= 1000; j++)
        if (!strcmp(plan.points[i].name, plan.points[j].name))
          FUZZ_FINDING("points %d and %d are both named '%s'", j, i, plan.points[i].name);
    }
    loom_sweep_plan_free(&plan);
  }
  loom_sweep_spec_free(&s);
  loom_err_clear();
  return 0;
}

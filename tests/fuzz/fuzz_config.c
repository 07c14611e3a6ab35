/* Fuzz harness: the run config (config.yaml through libyaml, then Hydra-style overrides), its
 * validation, the model spec it resolves to and its parameter count.
 * Input: YAML text, then optionally a NUL byte followed by override lines ("key=value", one a
 * line). Invariant beyond memory safety: a config that loads and validates dumps to a
 * config.yaml that loads back into the identical config (every key equal, same hash), which
 * is what `loom train --resume` relies on. */
#include "fuzz_util.h"
#include "loom/config.h"
#include "loom/core.h"
#include "loom/model.h"

/* Load yaml[0..n) (if any) and apply the overrides; 0 when the config is usable. */
static int build(loom_config *c, const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t ylen = nul ? (size_t)(nul - data) : size;
  loom_config_defaults(c);
  if (ylen && loom_config_load(c, fuzz_input_file(data, ylen, ".yaml"))) return -1;
  if (!nul) return 0;
  char *ov = fuzz_input_string(nul + 1, size - ylen - 1);
  int rc = 0;
  for (char *line = ov, *end; rc == 0 && line; line = end) {
    end = strchr(line, '\n');
    if (end) *end++ = 0;
    if (*line) rc = loom_config_override(c, line);
  }
  free(ov);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  loom_config c;
  if (build(&c, data, size) || loom_config_validate(&c)) return 0;
  char *yaml = loom_config_to_yaml(&c);
  uint64_t h = loom_config_hash(&c);
  loom_config back;
  loom_config_defaults(&back);
  if (loom_config_load(&back, fuzz_input_file((const uint8_t *)yaml, strlen(yaml), ".yaml")))
    FUZZ_FINDING("a validated config dumps to a config.yaml that does not load: %s",
                 loom_errmsg());
  char *again = loom_config_to_yaml(&back);
  if (strcmp(yaml, again) || loom_config_hash(&back) != h)
    FUZZ_FINDING("config.yaml does not load back to the same config:\n--- dumped\n%s--- reloaded"
                 "\n%s", yaml, again);
  free(again);
  free(yaml);
  loom_model_spec spec;
  if (loom_model_spec_from_config(&spec, &c.model) == 0) {
    size_t all = loom_model_count_params(&spec, true), real = loom_model_count_params(&spec, false);
    if (real > all) FUZZ_FINDING("parameter count without padding %zu > with padding %zu", real, all);
  }
  loom_err_clear();
  return 0;
}

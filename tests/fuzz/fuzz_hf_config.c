/* Fuzz harness: Hugging Face config.json as `loom ckpt import` maps it onto model.* (jansson,
 * then the typed getters of src/ckpt/hf_config.c), the model spec it resolves to, and its
 * parameter count. Input: one selector byte (even: the tensors have GPT-2 names, odd:
 * Llama/Qwen2 names), then the config.json text. Invariants beyond memory safety and no
 * integer overflow: a config.json that imports to a valid spec that some Hugging Face class
 * computes exports (loom_hf_config_json) a config.json that imports back to the same spec. */
#include "fuzz_util.h"
#include "loom/config.h"
#include "loom/core.h"
#include "loom/hf.h"
#include "loom/model.h"

/* config.json text -> checked spec; 0 on success. */
static int import(const char *text, size_t len, loom_arch arch, loom_model_spec *spec) {
  loom_config c;
  loom_config_defaults(&c);
  const char *path = fuzz_input_file((const uint8_t *)text, len, ".json");
  if (loom_hf_config_load(&c, path, arch)) return -1;
  return loom_model_spec_from_config(spec, &c.model);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  loom_arch arch = data[0] % 2 == 0 ? LOOM_ARCH_GPT2 : LOOM_ARCH_LLAMA;
  loom_model_spec spec, back;
  if (import((const char *)data + 1, size - 1, arch, &spec) == 0) {
    size_t all = loom_model_count_params(&spec, true), real = loom_model_count_params(&spec, false);
    if (real > all) FUZZ_FINDING("parameter count without padding %zu > with padding %zu", real, all);
    char *json = loom_hf_config_json(&spec, LOOM_DT_F32);
    if (!json) { /* a model no Hugging Face class computes: export refuses it, naming why */
      loom_err_clear();
      return 0;
    }
    if (import(json, strlen(json), arch, &back))
      FUZZ_FINDING("an imported spec exports a config.json that does not import: %s\n%s",
                   loom_errmsg(), json);
    if (memcmp(&spec, &back, sizeof spec))
      FUZZ_FINDING("the exported config.json imports to a different spec:\n%s", json);
    free(json);
  }
  loom_err_clear();
  return 0;
}

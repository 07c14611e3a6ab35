/* Fuzz harness: hardware profiles (`loom sim --hardware`, `loom plan`, what `loom bench`
 * writes): the YAML tree, the mapping of each key and loom_hw_check. Invariant beyond memory
 * safety: a profile that loads writes (loom_hw_to_yaml) a profile that loads back equal, the
 * same profile byte for byte, which the written text then shows a second time unchanged. */
#include "fuzz_util.h"
#include "loom/core.h"
#include "loom/hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_input_string(data, size);
  loom_hw_profile a, b;
  if (loom_hw_parse(&a, text, "profile.yaml") == 0) {
    char *w1 = loom_hw_to_yaml(&a, "written by fuzz_hw\nsecond line");
    if (loom_hw_parse(&b, w1, "profile.yaml"))
      FUZZ_FINDING("a loaded profile writes a profile that does not load: %s\n%s",
                   loom_errmsg(), w1);
    char *w2 = loom_hw_to_yaml(&b, "written by fuzz_hw\nsecond line");
    if (strcmp(w1, w2) || memcmp(&a, &b, sizeof a))
      FUZZ_FINDING("the written profile loads back different:\n--- first\n%s--- second\n%s", w1,
                   w2);
    free(w1);
    free(w2);
  }
  loom_err_clear();
  free(text);
  return 0;
}

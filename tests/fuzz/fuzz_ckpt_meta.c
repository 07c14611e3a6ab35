/* Fuzz harness: a checkpoint's JSON metadata as `loom train --resume` reads it:
 * trainer_state.json (step, loader position, rng words, config hash) and the file lists of
 * index.json. Input: one selector byte (even: trainer_state.json, odd: index.json), then the
 * JSON text. Invariants beyond memory safety: a trainer state that parses has step >= 1,
 * non-negative counters, a finite elapsed time and a non-zero rng state (what the optimizer
 * and the loader assume); every listed file name stays inside the checkpoint directory. */
#include <math.h>

#include "fuzz_util.h"
#include "loom/core.h"
#include "train/checkpoint_meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  if (data[0] % 2 == 0) {
    loom_train_state ts;
    if (loom_ckpt_state_parse(text, len, "trainer_state.json", &ts) == 0) {
      if (ts.step < 1 || ts.tokens_seen < 0 || ts.skipped_bad < 0 || ts.loader_batch_windows < 0 ||
          !isfinite(ts.elapsed) || ts.elapsed < 0)
        FUZZ_FINDING("trainer state accepted with step %ld, tokens %ld, skipped %ld, windows "
                     "%ld, elapsed %g", ts.step, ts.tokens_seen, ts.skipped_bad,
                     ts.loader_batch_windows, ts.elapsed);
      if (!(ts.rng.s[0] | ts.rng.s[1] | ts.rng.s[2] | ts.rng.s[3]))
        FUZZ_FINDING("trainer state accepted with an all-zero rng");
    }
  } else {
    static const char *const kinds[] = {"model", "optimizer", "gradients"};
    char **names;
    int n;
    if (loom_ckpt_index_parse(text, len, "index.json", kinds[data[0] / 2 % 3], &names, &n) == 0) {
      for (int i = 0; i < n; i++)
        if (!names[i][0] || strchr(names[i], '/') || !strcmp(names[i], "..") ||
            !strcmp(names[i], "."))
          FUZZ_FINDING("index.json file name '%s' points outside the checkpoint", names[i]);
      loom_ckpt_names_free(names, n);
    }
  }
  loom_err_clear();
  return 0;
}

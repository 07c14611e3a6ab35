/* Fuzz harness: a checkpoint's JSON metadata as `loom train --resume` reads it:
 * trainer_state.json (step, loader position, rng words, config hash), the file lists of
 * index.json and the loom.pieces metadata of a sharded file. Input: one selector byte (mod 3:
 * 0 trainer_state.json, 1 index.json, 2 loom.pieces), then the JSON text. Invariants beyond memory safety: a trainer state that parses has step >= 1,
 * non-negative counters, a finite elapsed time and a non-zero rng state (what the optimizer
 * and the loader assume); every listed file name stays inside the checkpoint directory. */
#include <jansson.h>
#include <limits.h>
#include <math.h>

#include "fuzz_util.h"
#include "loom/core.h"
#include "ckpt/checkpoint_meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  if (data[0] % 3 == 2) {
    json_t *o = json_loadb(text, len, 0, NULL);
    if (o && loom_ckpt_pieces_check(o, "model.safetensors") == 0) {
      const char *key;
      json_t *d;
      json_object_foreach(o, key, d) {
        json_int_t r = json_integer_value(json_array_get(json_object_get(d, "lshape"), 0));
        json_int_t sd = json_integer_value(json_object_get(d, "split_dim"));
        if (r < 0 || r > INT_MAX || sd < -1 || sd > 1)
          FUZZ_FINDING("piece '%s' accepted with lshape[0] %lld, split_dim %lld", key,
                       (long long)r, (long long)sd);
      }
    }
    json_decref(o);
  } else if (data[0] % 3 == 0) {
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
    if (loom_ckpt_index_parse(text, len, "index.json", kinds[data[0] / 3 % 3], &names, &n) == 0) {
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

/* The checks of a run's tokenizer shared by `loom train` and `loom generate`
 * (include/loom/tokenizer_check.h): the file exists, and its vocabulary fits the model and
 * is the one the token shards were written with. Loading (and so parsing) is
 * loom_tokenizer_load's, with its messages. */
#include "loom/tokenizer_check.h"

#include "loom/core.h"

int loom_tokenizer_check_exists(const char *what, const char *path) {
  if (path[0] && loom_is_dir(path))
    return loom_err("%s is '%s', a directory, not a tokenizer.json", what, path);
  if (path[0] && loom_path_exists(path)) return 0;
  return loom_err("%s is '%s', which does not exist", what, path);
}

int loom_tokenizer_check_model(const loom_tokenizer *t, const char *path, int model_vocab,
                               const char *hint) {
  int n = loom_tokenizer_vocab_size(t);
  if (n <= model_vocab) return 0;
  return loom_err("the tokenizer %s has %d tokens but the model's vocabulary is %d: wrong "
                  "tokenizer%s", path, n, model_vocab, hint);
}

int loom_tokenizer_check_shards(const loom_tokenizer *t, const char *path, uint32_t shard_vocab,
                                const char *shards) {
  int n = loom_tokenizer_vocab_size(t);
  if ((uint32_t)n == shard_vocab) return 0;
  return loom_err("the tokenizer %s has %d tokens but the token shards %s were written with a "
                  "vocabulary of %u (their header): not the tokenizer they were made with; set "
                  "data.tokenizer to that one (or data.tokenizer=\"\" to train without one)",
                  path, n, shards, shard_vocab);
}

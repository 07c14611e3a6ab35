/* Checks of a run's tokenizer, one place for every command that reads it: `loom train` at the
 * start (data.tokenizer against the model and the token shards) and `loom generate` (against
 * the checkpoint's model), with the same messages. src/data/tokenizer_check.c */
#ifndef LOOM_TOKENIZER_CHECK_H
#define LOOM_TOKENIZER_CHECK_H
#include <stdint.h>

#include "loom/tokenizer.h"

/* what names path ("data.tokenizer", "data.tokenizer of runs/<id>/config.yaml"): an error
 * "<what> is '<path>', which does not exist" (or "..., a directory, not a tokenizer.json")
 * unless path is a file. */
int loom_tokenizer_check_exists(const char *what, const char *path);
/* The tokenizer's ids fit a model vocabulary of model_vocab tokens; else "the tokenizer
 * <path> has N tokens but the model's vocabulary is V: wrong tokenizer<hint>". */
int loom_tokenizer_check_model(const loom_tokenizer *t, const char *path, int model_vocab,
                               const char *hint);
/* Token shards written with this tokenizer: their header's vocab_size (the largest over the
 * shards) is the tokenizer's token count, as `loom data tokenize` writes it; else an error
 * naming both files and both counts. */
int loom_tokenizer_check_shards(const loom_tokenizer *t, const char *path, uint32_t shard_vocab,
                                const char *shards);
#endif

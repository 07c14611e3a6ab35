/* Parsing of a checkpoint's JSON metadata (src/ckpt/checkpoint_meta.c): trainer_state.json
 * and the file lists of index.json. Private to src/train; the fuzz harness
 * tests/fuzz/fuzz_ckpt_meta.c calls it directly. */
#ifndef LOOM_TRAIN_CHECKPOINT_META_H
#define LOOM_TRAIN_CHECKPOINT_META_H
#include <stddef.h>

#include "loom/checkpoint.h"

/* trainer_state.json text (path names it in errors) into *ts. Every field is checked: step
 * >= 1, counters >= 0, elapsed finite and >= 0, config_hash and the 4 rng words hex strings
 * of 1..16 digits, rng not all zero. *ts is written only on success. */
int loom_ckpt_state_parse(const char *text, size_t len, const char *path, loom_train_state *ts);
/* The same, reading the file. */
int loom_ckpt_state_read(const char *path, loom_train_state *ts);

/* The "<kind>_files" list of index.json text (kind: model, optimizer, gradients) as *n
 * malloc'd names (*names malloc'd; free with loom_ckpt_names_free). Each entry must be a
 * plain file name inside the checkpoint directory: a non-empty string without '/' or a NUL,
 * not "." or "..". */
int loom_ckpt_index_parse(const char *text, size_t len, const char *path, const char *kind,
                          char ***names, int *n);
void loom_ckpt_names_free(char **names, int n);

/* The "loom.pieces" metadata of a checkpoint file (parsed JSON; path names the file): an object
 * mapping entry names to {"tensor": name, "gshape": [r, c], "lshape": [r, c], "split_dim": -1|0|1,
 * "split_start": n, "begin": n} with every number an integer in 0..INT_MAX (split_dim -1..1,
 * begin >= 0). Errors name the file, the entry and the field. */
int loom_ckpt_pieces_check(const void *pieces_json, const char *path);

#endif

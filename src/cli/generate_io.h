/* Helpers of `loom generate` (src/cli/generate_io.c). */
#ifndef LOOM_CLI_GENERATE_IO_H
#define LOOM_CLI_GENERATE_IO_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/generate.h"

/* Streaming state: bytes of each row's tokens as they come; row 0 is printed (stream) up to
 * the point where no stop string could still begin, and cut before a stop string. */
typedef struct {
  const loom_tokenizer *tok;
  const char *const *stop;
  int n_stop;
  bool stream;          /* print row 0 as it comes */
  char **buf;           /* (rows) bytes so far */
  size_t *len, *cap, *printed;
  bool *cut;            /* a stop string was found: nothing more to print */
} loom_gen_streamer;

/* loom_gen_options.on_token: ctx is a loom_gen_streamer */
void loom_gen_cli_on_token(void *ctx, int row, int32_t id);
/* "1,2,3" -> ids (malloc'd) of *n tokens, each in [0, vocab) */
int loom_gen_cli_parse_ids(const char *text, int32_t **ids, int *n, int vocab);
/* the prompt lines of FILE (malloc'd strings); blank lines are skipped */
int loom_gen_cli_read_lines(const char *path, char ***lines, int *n);
/* t with each maximal ill-formed UTF-8 subsequence replaced by U+FFFD (malloc'd) */
char *loom_gen_cli_utf8(const char *t);
#endif

/* Test helper of tests/data/pretok_check.py: loom's pre-tokenizer split (loom_regex_split, the
 * function the tokenizer and the trainer use) on many texts. argv[1]: gpt2 | qwen2. First
 * output line: PCRE2's Unicode version. Then for each stdin line (one text, hex-encoded) one
 * output line: the pieces, each hex-encoded, separated by spaces.
 * `pretok_dump --tokenizer tokenizer.json`: the same, but each output line holds the token
 * ids loom_tokenizer_encode gives (decimal, separated by spaces). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/core.h"
#include "loom/tokenizer.h"

static int print_piece(void *first, const char *p, size_t n) {
  if (!*(int *)first) putchar(' ');
  *(int *)first = 0;
  for (size_t i = 0; i < n; i++) printf("%02x", (unsigned char)p[i]);
  return 0;
}

int main(int argc, char **argv) {
  int ids_mode = argc == 3 && !strcmp(argv[1], "--tokenizer");
  if (!ids_mode && (argc != 2 || (strcmp(argv[1], "gpt2") && strcmp(argv[1], "qwen2")))) {
    fprintf(stderr, "usage: pretok_dump gpt2|qwen2 | --tokenizer FILE  < hex lines\n");
    return 2;
  }
  loom_regex *re = NULL;
  loom_tokenizer *tok = NULL;
  if (ids_mode ? loom_tokenizer_load(&tok, argv[2])
               : loom_regex_compile(&re, !strcmp(argv[1], "gpt2") ? LOOM_GPT2_PATTERN
                                                                 : LOOM_QWEN2_PATTERN)) {
    fprintf(stderr, "%s\n", loom_errmsg());
    return 1;
  }
  char ver[64];
  pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, ver);
  printf("%s\n", ver);
  char *line = NULL, *text = NULL;
  size_t cap = 0, tcap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, stdin)) > 0) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    if ((size_t)n / 2 + 1 > tcap) {
      tcap = (size_t)n / 2 + 1;
      text = realloc(text, tcap);
      if (!text) abort();
    }
    size_t len = 0;
    for (ssize_t i = 0; i + 1 < n; i += 2) {
      unsigned v;
      if (sscanf(line + i, "%2x", &v) != 1) return fprintf(stderr, "bad hex line\n"), 1;
      text[len++] = (char)v;
    }
    int first = 1;
    if (tok) {
      int32_t *ids;
      size_t nid;
      if (loom_tokenizer_encode(tok, text, len, &ids, &nid)) {
        fprintf(stderr, "%s\n", loom_errmsg());
        return 1;
      }
      for (size_t i = 0; i < nid; i++) printf(i ? " %d" : "%d", (int)ids[i]);
      free(ids);
    } else if (loom_regex_split(re, text, len, print_piece, &first)) {
      fprintf(stderr, "%s\n", loom_errmsg());
      return 1;
    }
    putchar('\n');
  }
  free(line);
  free(text);
  loom_regex_free(re);
  loom_tokenizer_free(tok);
  return 0;
}

/* Input and output helpers of `loom generate` (src/cli/cmd_generate.c): streaming a row's
 * text with stop strings held back, token ids from --prompt-ids, prompt lines from --prompts,
 * and valid UTF-8 for --json. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/generate_io.h"

/* ---- streaming ----------------------------------------------------------------------------
 * Bytes of each row's tokens as they come; a row's text is printed up to the point where no
 * stop string could still begin (held back until it is known), and cut before a stop string. */

void loom_gen_cli_on_token(void *ctx, int row, int32_t id) {
  loom_gen_streamer *st = ctx;
  size_t n;
  const char *bytes = loom_tokenizer_token_bytes(st->tok, id, &n);
  if (!bytes || st->cut[row]) return;
  if (st->len[row] + n + 1 > st->cap[row]) {
    st->cap[row] = 2 * (st->len[row] + n + 1);
    st->buf[row] = loom_realloc(st->buf[row], st->cap[row], 1);
  }
  memcpy(st->buf[row] + st->len[row], bytes, n);
  st->len[row] += n;
  st->buf[row][st->len[row]] = 0;
  if (!st->stream || row != 0) return;
  char *b = st->buf[row];
  size_t safe = st->len[row];
  for (int i = 0; i < st->n_stop; i++) {
    const char *s = st->stop[i];
    size_t sl = strlen(s);
    if (!sl) continue;
    char *hit = strstr(b, s);
    if (hit) {
      st->cut[row] = true;
      if ((size_t)(hit - b) < safe) safe = (size_t)(hit - b);
      continue;
    }
    /* the longest suffix of b that is a prefix of s may still become s */
    for (size_t k = sl - 1; k > 0; k--)
      if (k <= st->len[row] && !memcmp(b + st->len[row] - k, s, k)) {
        if (st->len[row] - k < safe) safe = st->len[row] - k;
        break;
      }
  }
  if (safe > st->printed[row]) {
    fwrite(b + st->printed[row], 1, safe - st->printed[row], stdout);
    fflush(stdout);
    st->printed[row] = safe;
  }
}

/* ---- prompts ----------------------------------------------------------------------------- */
int loom_gen_cli_parse_ids(const char *text, int32_t **ids, int *n, int vocab) {
  *ids = NULL;
  *n = 0;
  const char *p = text;
  int cap = 0;
  while (*p) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v >= vocab) {
      free(*ids);
      *ids = NULL;
      return loom_err("--prompt-ids: '%s' is not a token id in [0, %d)", p, vocab);
    }
    if (*n == cap) {
      cap = cap ? 2 * cap : 64;
      *ids = loom_realloc(*ids, (size_t)cap, sizeof **ids);
    }
    (*ids)[(*n)++] = (int32_t)v;
    p = end;
    while (*p == ',' || *p == ' ') p++;
  }
  if (*n == 0) {
    free(*ids);
    *ids = NULL;
    return loom_err("--prompt-ids: an empty row (no token ids)");
  }
  return 0;
}

/* The prompt lines of FILE (without the newline): blank lines (empty or whitespace only, as a
 * text editor leaves between prompts or at the end) are skipped. */
int loom_gen_cli_read_lines(const char *path, char ***lines, int *n) {
  char *data;
  size_t len;
  *lines = NULL;
  *n = 0;
  if (loom_read_file(path, &data, &len)) return loom_err_prefix("--prompts: ");
  int cap = 0, line = 0, rc = 0;
  char *p = data;
  while (*p && !rc) {
    char *e = strchr(p, '\n');
    if (e) *e = 0;
    line++;
    size_t l = strlen(p);
    if (l && p[l - 1] == '\r') p[--l] = 0;
    if (strspn(p, " \t\v\f\r") == l) { /* a blank line */
      if (!e) break;
      p = e + 1;
      continue;
    }
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      *lines = loom_realloc(*lines, (size_t)cap, sizeof **lines);
    }
    (*lines)[(*n)++] = loom_strdup(p);
    if (!e) break;
    p = e + 1;
  }
  free(data);
  if (!rc && *n == 0)
    rc = line ? loom_err("--prompts %s: the file holds no prompts (its %d line%s blank); "
                         "write one prompt a line", path, line, line == 1 ? " is" : "s are")
              : loom_err("--prompts %s: the file is empty; write one prompt a line", path);
  return rc;
}

/* The tokenizer: --tokenizer, else tokenizer.json of a Hugging Face directory, else the run's
 * data.tokenizer when that file exists. NULL (with *why saying what was looked for) when none. */
/* text as valid UTF-8 for JSON: each maximal ill-formed subsequence becomes U+FFFD (the
 * Unicode "maximal subpart" practice, as Python's bytes.decode("utf-8", "replace")); malloc'd */
char *loom_gen_cli_utf8(const char *t) {
  size_t n = strlen(t), o = 0;
  char *out = loom_malloc(3 * n + 1);
  LOOM_ASSERT(out);
  const unsigned char *u = (const unsigned char *)t;
  for (size_t i = 0; i < n;) {
    unsigned b = u[i];
    int need = b < 0x80 ? 0 : b >= 0xC2 && b <= 0xDF ? 1 : b >= 0xE0 && b <= 0xEF ? 2
             : b >= 0xF0 && b <= 0xF4 ? 3 : -1;
    if (need == 0) {
      out[o++] = (char)b;
      i++;
      continue;
    }
    size_t k = 1;
    if (need > 0)
      for (; k <= (size_t)need && i + k < n; k++) {
        unsigned c = u[i + k], lo = 0x80, hi = 0xBF;
        if (k == 1) { /* the second byte's range depends on the lead */
          if (b == 0xE0) lo = 0xA0;
          else if (b == 0xED) hi = 0x9F;
          else if (b == 0xF0) lo = 0x90;
          else if (b == 0xF4) hi = 0x8F;
        }
        if (c < lo || c > hi) break;
      }
    if (need > 0 && k == (size_t)need + 1) { /* a whole valid sequence */
      memcpy(out + o, t + i, k);
      o += k;
      i += k;
    } else {
      memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
      i += k;
    }
  }
  out[o] = 0;
  return out;
}

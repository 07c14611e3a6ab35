/* The tokenize pipeline's producer side (src/data/corpus_internal.h): the inputs read in turn
 * and cut into units of work of about `chunk` bytes -- a plain-text document only where the
 * tokenizer says a cut cannot change its encoding, JSON Lines only between lines -- with the
 * empty-input checks that need the whole file. */
#include <stdlib.h>

#include "data/corpus_internal.h"
#include "loom/core.h"
#include "loom/tokenizer.h"

void loom_corpus_unit_clear(loom_corpus_unit *u) {
  free(u->text);
  free(u->ids);
  free(u->err);
  memset(u, 0, sizeof *u);
}

/* Unit of the current file holding a copy of buf[0, len), which leaves buf. */
static void take(loom_corpus_reader *r, loom_corpus_unit *u, size_t len) {
  *u = (loom_corpus_unit){.file = r->file, .jsonl = loom_corpus_is_jsonl(r->inputs[r->file]),
                          .text = loom_malloc(len + 1), .len = len, .line = r->line};
  memcpy(u->text, r->buf, len);
  u->text[len] = 0;
  for (size_t i = 0; u->jsonl && i < len; i++) r->line += r->buf[i] == '\n';
  memmove(r->buf, r->buf + len, r->len - len);
  r->len -= len;
}

/* Read up to chunk more bytes of the current file; sets eof at its end. */
static int read_more(loom_corpus_reader *r) {
  if (r->cap - r->len < r->chunk + 1) {
    r->cap = r->len + r->chunk + 1;
    r->buf = loom_realloc(r->buf, r->cap, 1);
  }
  size_t n;
  if (loom_text_in_read(r->in, r->buf + r->len, r->chunk, &n)) return LOOM_ERR;
  if (!r->text_seen) r->text_seen = !loom_corpus_blank(r->buf + r->len, n);
  r->len += n;
  r->total += n;
  r->eof = n == 0;
  return 0;
}

size_t loom_corpus_find_cut(const loom_tokenizer *t, const char *text, size_t len, size_t from) {
  const char *s = text + from - 1, *nl; /* a cut p follows a newline at p - 1 */
  while (s < text + len && (nl = memchr(s, '\n', (size_t)(text + len - s)))) {
    size_t p = (size_t)(nl - text) + 1;
    if (p < len && loom_tokenizer_can_split(t, text, len, p)) return p;
    s = nl + 1;
  }
  return 0;
}

static void close_file(loom_corpus_reader *r) {
  r->done_bytes += loom_text_in_size(r->in);
  loom_text_in_close(r->in);
  r->in = NULL;
  r->file++;
}

/* Plain text: the next part of the document (1), or 0 when more must be read. */
static int next_plain(loom_corpus_reader *r, loom_corpus_unit *u) {
  const char *path = r->inputs[r->file];
  if (!r->eof) {
    size_t from = r->scan > r->chunk ? r->scan : r->chunk;
    size_t cut = r->len > r->chunk ? loom_corpus_find_cut(r->tok, r->buf, r->len, from) : 0;
    if (cut == 0) {
      if (r->len > r->chunk) r->scan = r->len; /* look on from here once more is read */
      return 0;
    }
    take(r, u, cut);
    r->scan = 0;
    return 1;
  }
  if (r->total == 0)
    return loom_err("%s: the file is empty: there is no text to tokenize; remove it from the "
                    "inputs", path);
  if (!r->text_seen)
    return loom_err("%s: holds only whitespace: there is no text to tokenize; remove it from "
                    "the inputs", path);
  take(r, u, r->len);
  u->doc_end = u->file_end = true;
  close_file(r);
  return 1;
}

/* JSON Lines: the next run of whole lines (1), or 0 when more must be read. */
static int next_jsonl(loom_corpus_reader *r, loom_corpus_unit *u) {
  if (r->eof) {
    if (r->total == 0)
      return loom_err("%s: the file is empty: there are no documents to tokenize; remove it "
                      "from the inputs", r->inputs[r->file]);
    take(r, u, r->len); /* the rest, maybe nothing: the unit that ends the file */
    u->file_end = true;
    close_file(r);
    return 1;
  }
  if (r->len < r->chunk) return 0;
  size_t cut = r->len;
  while (cut > 0 && r->buf[cut - 1] != '\n') cut--;
  if (cut == 0) return 0; /* one line longer than a chunk: read on */
  take(r, u, cut);
  return 1;
}

int loom_corpus_reader_next(loom_corpus_reader *r, loom_corpus_unit *u) {
  for (;;) {
    if (!r->in) {
      if (r->file >= r->n_inputs) return 0;
      if (loom_text_in_open(&r->in, r->inputs[r->file])) return LOOM_ERR;
      r->len = r->scan = 0;
      r->total = 0;
      r->line = 1;
      r->eof = r->text_seen = false;
    }
    int got = loom_corpus_is_jsonl(r->inputs[r->file]) ? next_jsonl(r, u) : next_plain(r, u);
    if (got) return got;
    if (read_more(r)) return LOOM_ERR;
  }
}

uint64_t loom_corpus_reader_consumed(const loom_corpus_reader *r) {
  return r->done_bytes + (r->in ? loom_text_in_consumed(r->in) : 0);
}

void loom_corpus_reader_close(loom_corpus_reader *r) {
  loom_text_in_close(r->in);
  free(r->buf);
  memset(r, 0, sizeof *r);
}

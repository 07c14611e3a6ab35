/* Private to src/data/corpus_*.c: JSON Lines lines to documents, and the inputs cut into units
 * of work for the tokenize pipeline. */
#ifndef LOOM_DATA_CORPUS_INTERNAL_H
#define LOOM_DATA_CORPUS_INTERNAL_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/corpus.h"

/* Whether bytes [0, n) are all ASCII whitespace (true for n = 0). */
bool loom_corpus_blank(const char *s, size_t n);

/* Line `line` of JSON Lines file path (len bytes, no newline): *text / *n the string in
 * `field` (pointing into *doc, which the caller releases with json_decref). A blank line
 * gives *doc NULL and *text NULL (skipped). Errors name path:line: not JSON, not an object,
 * no such field (listing the object's fields), a field that is not a string. */
int loom_corpus_jsonl_text(const char *path, uint64_t line, const char *s, size_t len,
                           const char *field, json_t **doc, const char **text, size_t *n);

/* ---- units of work (src/data/corpus_units.c) --------------------------------------------------
 * The inputs cut, one unit at a time, into what one thread encodes: a plain-text document in
 * parts of about `chunk` bytes, cut only where loom_tokenizer_can_split allows, or runs of
 * whole JSON Lines lines of about `chunk` bytes. */
typedef struct {
  int file;      /* index of its input */
  bool jsonl;
  bool doc_end;  /* plain text: the document's last part */
  bool file_end; /* the file's last unit (JSON Lines: may hold no line) */
  char *text;    /* (len + 1) malloc'd, NUL-terminated */
  size_t len;
  uint64_t line; /* JSON Lines: the number of its first line */
  /* what encoding it gave */
  int32_t *ids; /* (n) */
  size_t n, cap;
  uint64_t docs, blank_docs, lines; /* JSON Lines: documents, blank texts, non-blank lines */
  char *err;                        /* the message of its error, or NULL */
} loom_corpus_unit;

typedef struct {
  const char *const *inputs;
  int n_inputs;
  const struct loom_tokenizer *tok; /* decides the cuts */
  size_t chunk;
  int file;         /* the input being read (n_inputs: all read) */
  loom_text_in *in; /* it, open; NULL between files */
  char *buf;        /* text read, not yet in a unit */
  size_t len, cap;
  size_t scan;      /* plain text: no cut before this position of buf */
  bool eof, text_seen;
  uint64_t total;   /* text bytes of the file so far */
  uint64_t line;    /* JSON Lines: the number of buf's first line */
  uint64_t done_bytes; /* file sizes of the inputs read */
} loom_corpus_reader;

/* The next unit into *u (its results zeroed): 1; 0 when every input is read; -1 on an error
 * naming the file (an empty or whitespace-only text file, an empty JSON Lines file, damaged
 * data). */
int loom_corpus_reader_next(loom_corpus_reader *r, loom_corpus_unit *u);
/* Bytes of the input files read so far (progress). */
uint64_t loom_corpus_reader_consumed(const loom_corpus_reader *r);
void loom_corpus_reader_close(loom_corpus_reader *r);
void loom_corpus_unit_clear(loom_corpus_unit *u); /* frees what it holds */
/* The first position >= from (from >= 1) of text[0, len) where the encoding may be cut: just
 * after a newline, where loom_tokenizer_can_split allows it; 0 when there is none. */
size_t loom_corpus_find_cut(const struct loom_tokenizer *t, const char *text, size_t len,
                            size_t from);
#endif

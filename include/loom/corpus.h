/* loom corpora: the text files `loom data tokenize` and `loom data train-tokenizer` read, and
 * the tokenize pipeline that turns them into token shards (docs/FORMATS-data.md, "Corpora").
 *
 * Inputs: plain text (one file = one document), or JSON Lines (a name ending in .jsonl or
 * .json: one JSON object a line, its text in a field, default "text", one document a line, as
 * Hugging Face datasets export them); either may be gzip (.gz) or zstd (.zst) compressed,
 * read as a stream. Errors name the file and line.
 *
 * Tokenizing: the documents are encoded on several threads and written in input order; the
 * shards are byte-identical whatever the thread count, and identical to encoding each
 * document whole: a long plain-text document is cut only where loom_tokenizer_can_split says
 * the encoding does not change, a JSON Lines document is never cut. */
#ifndef LOOM_CORPUS_H
#define LOOM_CORPUS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- reading a corpus file ------------------------------------------------------------------ */

typedef struct loom_text_in loom_text_in;
/* Open path: plain bytes, or gzip (.gz) / zstd (.zst) by its name (the data must then start
 * with that format's magic bytes). */
int loom_text_in_open(loom_text_in **in, const char *path);
/* Up to cap bytes of text into buf: *n bytes, 0 at the end. Damaged compressed data is an
 * error naming the file, the line and the byte of the text where it stopped. */
int loom_text_in_read(loom_text_in *in, char *buf, size_t cap, size_t *n);
uint64_t loom_text_in_consumed(const loom_text_in *in); /* bytes of the file read so far */
uint64_t loom_text_in_size(const loom_text_in *in);     /* the file's size on disk */
void loom_text_in_close(loom_text_in *in);
/* Whether path names JSON Lines: .jsonl or .json, before an optional .gz or .zst. */
bool loom_corpus_is_jsonl(const char *path);

/* The documents of a corpus file joined into one text (malloc'd, NUL-terminated, *len bytes):
 * a plain-text file as it is, a JSON Lines file's non-blank `field` texts separated by sep.
 * Refused: an empty file, a file of whitespace only, JSON Lines without a document. */
int loom_corpus_read_text(const char *path, const char *field, const char *sep, char **text,
                          size_t *len);

/* ---- tokenizing a corpus -------------------------------------------------------------------- */

typedef struct {
  uint64_t in_bytes, in_total; /* bytes of the input files read so far, and their sizes */
  uint64_t text_bytes;         /* text read (after decompression) */
  uint64_t tokens, documents;  /* written so far */
  uint64_t skipped;            /* JSON Lines documents whose text is empty or blank */
  double seconds;              /* since the start */
} loom_corpus_progress;
/* Called from the calling thread after every batch of work (done = false) and once at the
 * end (done = true). */
typedef void (*loom_corpus_progress_fn)(void *ctx, const loom_corpus_progress *p, bool done);

typedef struct {
  const char *tokenizer;     /* tokenizer.json */
  const char *const *inputs; /* (n_inputs) corpus files */
  int n_inputs;
  const char *out;       /* one shard; with shard_tokens, where the shards go (below) */
  uint64_t shard_tokens; /* 0: one shard at out; else shards of this many tokens and a
                                manifest (loom_shard_set_open) */
  bool eot;              /* end every document with <|endoftext|> (always for JSON Lines) */
  const char *field;     /* JSON Lines: the text field (NULL: "text") */
  int threads;           /* encoding threads (<= 0: every core OpenMP offers) */
  size_t chunk_bytes;    /* text per unit of work (0: 1 MiB); small in tests */
  loom_corpus_progress_fn progress;
  void *progress_ctx;
} loom_corpus_opts;

typedef struct {
  loom_corpus_progress p; /* the totals */
  int shards;             /* files written */
  char *manifest;         /* its path (malloc'd) with shard_tokens, else NULL */
  int removed_stale;      /* shards of an earlier, longer run of the same name removed */
  int threads;            /* threads used */
} loom_corpus_result;

/* Tokenize the inputs into shards. On any error nothing is left at the output (the earlier
 * files of that name are untouched) and the message names the file and line. Refused: an empty
 * or whitespace-only text file, JSON Lines without a document, output without any token. */
int loom_corpus_tokenize(const loom_corpus_opts *o, loom_corpus_result *r);
void loom_corpus_result_free(loom_corpus_result *r);

#endif

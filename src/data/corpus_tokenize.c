/* `loom data tokenize`'s pipeline (include/loom/corpus.h): the calling thread reads the inputs
 * and cuts them into units of work (a plain-text document in parts cut where the encoding
 * cannot change, JSON Lines in runs of whole lines); a round of units is encoded on every
 * thread (OpenMP, one tokenizer each), then written in input order, so the shards do not
 * depend on the thread count. */
#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "data/corpus_internal.h"
#include "loom/core.h"
#include "loom/corpus.h"
#include "loom/shard.h"
#include "loom/tokenizer.h"

#define EOT           "<|endoftext|>"
#define DEFAULT_CHUNK (1u << 20)

/* One unit of work: a part of a plain-text document, or whole JSON Lines lines. */
typedef struct {
  int file;
  bool jsonl;
  bool doc_end;  /* plain text: the document's last part */
  bool file_end; /* the file's last unit */
  char *text;
  size_t len;
  uint64_t line; /* JSON Lines: the number of its first line */
  /* the results */
  int32_t *ids;
  size_t n, cap;
  uint64_t docs, blank_docs, lines; /* JSON Lines: documents, blank texts, non-blank lines */
  char *err;
} unit;

typedef struct {
  const loom_corpus_opts *o;
  const char *field;
  int threads;
  loom_tokenizer **tok; /* (threads) one per thread: a tokenizer is not thread-safe */
  int32_t eot;          /* the end-of-document token, or -1 when documents are not ended */
  size_t chunk;
  unit *units; /* (n_units) of the current round */
  int n_units, round_max;
  loom_shard_writer *one;                             /* one shard (no shard size) */
  loom_shard_set *set;                                /* shards and a manifest */
  uint64_t *in_bytes, *in_docs, *in_blank, *in_lines; /* (n_inputs) */
  uint64_t done_bytes;                                /* bytes of the inputs finished */
  loom_text_in *cur;
  loom_corpus_progress p;
  double t0;
} ctx;

/* ---- encoding a unit (on any thread) --------------------------------------------------------- */

static void push(unit *u, const int32_t *ids, size_t n) {
  if (u->n + n > u->cap) {
    u->cap = 2 * (u->n + n);
    u->ids = loom_realloc(u->ids, u->cap, sizeof *u->ids);
  }
  memcpy(u->ids + u->n, ids, n * sizeof *ids);
  u->n += n;
}

static int encode_jsonl(const ctx *c, unit *u, loom_tokenizer *t) {
  const char *path = c->o->inputs[u->file];
  uint64_t line = u->line;
  for (size_t at = 0; at < u->len; line++) {
    const char *s = u->text + at, *nl = memchr(s, '\n', u->len - at);
    size_t len = nl ? (size_t)(nl - s) : u->len - at;
    at += len + 1;
    json_t *doc;
    const char *text;
    size_t n;
    if (loom_corpus_jsonl_text(path, line, s, len, c->field, &doc, &text, &n)) return LOOM_ERR;
    if (!doc) continue; /* a blank line */
    u->lines++;
    int rc = 0;
    if (loom_corpus_blank(text, n)) {
      u->blank_docs++;
    } else {
      int32_t *ids;
      size_t k;
      rc = loom_tokenizer_encode(t, text, n, &ids, &k);
      if (!rc) {
        push(u, ids, k);
        push(u, &c->eot, 1); /* ends the document */
        u->docs++;
        free(ids);
      } else {
        loom_err_prefix("%s:%llu: ", path, (unsigned long long)line);
      }
    }
    json_decref(doc);
    if (rc) return rc;
  }
  return 0;
}

static void encode_unit(const ctx *c, unit *u, loom_tokenizer *t) {
  int rc;
  if (u->jsonl) {
    rc = encode_jsonl(c, u, t);
  } else {
    free(u->ids);
    rc = loom_tokenizer_encode(t, u->text, u->len, &u->ids, &u->n);
    if (rc) u->ids = NULL, loom_err_prefix("%s: ", c->o->inputs[u->file]);
  }
  if (rc) u->err = loom_strdup(loom_errmsg());
}

/* ---- writing, in input order ------------------------------------------------------------------ */

static int out_append(ctx *c, const int32_t *ids, size_t n) {
  return c->set ? loom_shard_set_append(c->set, ids, n) : loom_shard_writer_append(c->one, ids, n);
}

/* The checks that need a whole JSON Lines file: some document, some text. */
static int check_jsonl_file(const ctx *c, int f) {
  const char *path = c->o->inputs[f];
  if (c->in_lines[f] == 0)
    return loom_err("%s: holds no documents (every line is blank); give a JSON Lines file with "
                    "one object a line",
                    path);
  if (c->in_docs[f] == 0)
    return loom_err("%s: every document's '%s' is empty or blank (%llu documents): there is no "
                    "text to tokenize; check --field",
                    path, c->field, (unsigned long long)c->in_blank[f]);
  return 0;
}

static int write_unit(ctx *c, unit *u) {
  if (u->err) return loom_err("%s", u->err);
  if (out_append(c, u->ids, u->n)) return LOOM_ERR;
  c->p.tokens += u->n;
  c->p.text_bytes += u->len;
  if (u->jsonl) {
    c->in_docs[u->file] += u->docs;
    c->in_blank[u->file] += u->blank_docs;
    c->in_lines[u->file] += u->lines;
    c->p.documents += u->docs;
    c->p.skipped += u->blank_docs;
    return u->file_end ? check_jsonl_file(c, u->file) : 0;
  }
  if (!u->doc_end) return 0;
  c->in_docs[u->file]++;
  c->p.documents++;
  if (c->eot < 0) return 0;
  c->p.tokens++;
  return out_append(c, &c->eot, 1);
}

static void progress(ctx *c, bool done) {
  c->p.in_bytes = c->done_bytes + (c->cur ? loom_text_in_consumed(c->cur) : 0);
  c->p.seconds = loom_now() - c->t0;
  if (c->o->progress) c->o->progress(c->o->progress_ctx, &c->p, done);
}

/* Encode the round's units on every thread, then write them in order. */
static int run_round(ctx *c) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(c->threads)
  for (int i = 0; i < c->n_units; i++) encode_unit(c, &c->units[i], c->tok[omp_get_thread_num()]);
  int rc = 0;
  for (int i = 0; i < c->n_units; i++) {
    unit *u = &c->units[i];
    if (!rc) rc = write_unit(c, u);
    free(u->text), free(u->ids), free(u->err);
  }
  c->n_units = 0;
  if (!rc) progress(c, false);
  return rc;
}

/* A unit of file f holding a copy of text[0, len). */
static unit *add_unit(ctx *c, int f, bool jsonl, const char *text, size_t len) {
  unit *u = &c->units[c->n_units++];
  *u = (unit){.file = f, .jsonl = jsonl, .text = loom_malloc(len + 1), .len = len};
  memcpy(u->text, text, len);
  u->text[len] = 0;
  return u;
}

/* ---- reading and cutting the inputs ------------------------------------------------------------ */

typedef struct {
  char *v;
  size_t len, cap;
} pending;

/* Read up to c->chunk more bytes of in onto p; *n read (0 at the end). */
static int read_more(ctx *c, pending *p, size_t *n) {
  if (p->cap - p->len < c->chunk + 1) {
    p->cap = p->len + c->chunk + 1;
    p->v = loom_realloc(p->v, p->cap, 1);
  }
  int rc = loom_text_in_read(c->cur, p->v + p->len, c->chunk, n);
  p->len += *n;
  return rc;
}

static void drop_front(pending *p, size_t k) {
  memmove(p->v, p->v + k, p->len - k);
  p->len -= k;
}

/* A plain-text file: one document, cut into parts of about c->chunk bytes where the
 * tokenizer allows. Refused: an empty file, a file of whitespace only. */
static int feed_plain(ctx *c, int f) {
  pending p = {0};
  size_t scan = c->chunk, n;
  bool text = false;
  uint64_t total = 0;
  int rc = 0;
  while (!(rc = read_more(c, &p, &n))) {
    if (!text) text = !loom_corpus_blank(p.v + p.len - n, n);
    total += n;
    if (n == 0) break;
    while (p.len > c->chunk) {
      size_t cut = loom_corpus_find_cut(c->tok[0], p.v, p.len, scan < c->chunk ? c->chunk : scan);
      if (cut == 0) {
        scan = p.len; /* look on from here once more is read */
        break;
      }
      add_unit(c, f, false, p.v, cut);
      drop_front(&p, cut);
      scan = c->chunk;
      if (c->n_units == c->round_max && (rc = run_round(c))) break;
    }
    if (rc) break;
  }
  const char *path = c->o->inputs[f];
  if (!rc && total == 0)
    rc = loom_err("%s: the file is empty: there is no text to tokenize; remove it from the "
                  "inputs",
                  path);
  else if (!rc && !text)
    rc = loom_err("%s: holds only whitespace: there is no text to tokenize; remove it from the "
                  "inputs",
                  path);
  if (!rc) {
    unit *u = add_unit(c, f, false, p.v, p.len);
    u->doc_end = u->file_end = true;
  }
  free(p.v);
  return rc;
}

/* A JSON Lines file: runs of whole lines of about c->chunk bytes. */
static int feed_jsonl(ctx *c, int f) {
  pending p = {0};
  size_t n;
  uint64_t line = 1; /* of p's first byte */
  int rc = 0;
  bool any = false;
  while (!(rc = read_more(c, &p, &n))) {
    bool end = n == 0;
    any |= n > 0;
    if (!end && p.len < c->chunk) continue;
    size_t cut = p.len; /* at the end: the rest, maybe nothing (the unit ends the file) */
    if (!end) {         /* up to the last newline */
      while (cut > 0 && p.v[cut - 1] != '\n') cut--;
      if (cut == 0) continue; /* one line longer than a chunk: read on */
    }
    unit *u = add_unit(c, f, true, p.v, cut);
    u->line = line;
    for (size_t i = 0; i < cut; i++) line += p.v[i] == '\n';
    drop_front(&p, cut);
    if (end) {
      u->file_end = true;
      break;
    }
    if (c->n_units == c->round_max && (rc = run_round(c))) break;
  }
  if (!rc && !any)
    rc = loom_err("%s: the file is empty: there are no documents to tokenize; remove it from "
                  "the inputs",
                  c->o->inputs[f]);
  free(p.v);
  return rc;
}

static int feed(ctx *c, int f) {
  if (loom_text_in_open(&c->cur, c->o->inputs[f])) return LOOM_ERR;
  int rc = loom_corpus_is_jsonl(c->o->inputs[f]) ? feed_jsonl(c, f) : feed_plain(c, f);
  c->done_bytes += loom_text_in_size(c->cur);
  loom_text_in_close(c->cur);
  c->cur = NULL;
  if (!rc && c->n_units == c->round_max) rc = run_round(c);
  return rc;
}

/* ---- setting up -------------------------------------------------------------------------------- */

/* Every input exists and is a file; their sizes (progress). */
static int check_inputs(ctx *c) {
  for (int i = 0; i < c->o->n_inputs; i++) {
    struct stat st;
    const char *path = c->o->inputs[i];
    if (stat(path, &st) != 0)
      return loom_err("%s: cannot open: %s; check the path", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
      return loom_err("%s: is a directory; give the corpus files in it (e.g. %s/*.txt)", path,
                      path);
    c->in_bytes[i] = (uint64_t)st.st_size;
    c->p.in_total += (uint64_t)st.st_size;
  }
  return 0;
}

static int load_tokenizers(ctx *c) {
  c->tok = loom_calloc((size_t)c->threads, sizeof *c->tok);
  for (int i = 0; i < c->threads; i++)
    if (loom_tokenizer_load(&c->tok[i], c->o->tokenizer)) return LOOM_ERR;
  bool jsonl = false;
  for (int i = 0; i < c->o->n_inputs; i++) jsonl |= loom_corpus_is_jsonl(c->o->inputs[i]);
  c->eot = -1;
  if (!c->o->eot && !jsonl) return 0;
  c->eot = loom_tokenizer_token_id(c->tok[0], EOT);
  if (c->eot < 0)
    return loom_err("%s has no %s token, which %s; use a tokenizer that has it (loom data "
                    "train-tokenizer adds it)",
                    c->o->tokenizer, EOT,
                    c->o->eot ? "--eot ends every document with"
                              : "ends every JSON Lines document");
  return 0;
}

static int open_output(ctx *c) {
  uint32_t vocab = (uint32_t)loom_tokenizer_vocab_size(c->tok[0]);
  if (c->o->shard_tokens)
    return loom_shard_set_open(&c->set, c->o->out, vocab, c->eot, c->o->shard_tokens);
  if (loom_shard_writer_open(&c->one, c->o->out, vocab)) return LOOM_ERR;
  return c->eot >= 0 ? loom_shard_writer_set_eod(c->one, c->eot) : 0;
}

/* "fnv1a64:<hex>" of the tokenizer file's bytes, malloc'd. */
static char *tokenizer_hash(const char *path) {
  char *data;
  size_t len;
  if (loom_read_file(path, &data, &len)) return loom_strdup("unknown");
  char *h = loom_sprintf("fnv1a64:%016llx", (unsigned long long)loom_hash64(data, len, 0));
  free(data);
  return h;
}

static int close_output(ctx *c, loom_corpus_result *r) {
  if (c->p.tokens == 0)
    return loom_err("the inputs hold no text to tokenize (0 tokens): nothing written");
  if (!c->set) {
    int rc = loom_shard_writer_close(c->one);
    c->one = NULL;
    r->shards = rc ? 0 : 1;
    return rc;
  }
  char *hash = tokenizer_hash(c->o->tokenizer);
  loom_shard_provenance pv = {c->o->tokenizer, hash,       c->p.documents, c->o->inputs,
                              c->in_bytes,     c->in_docs, c->o->n_inputs};
  r->manifest = loom_strdup(loom_shard_set_manifest(c->set));
  int rc = loom_shard_set_close(c->set, &pv, &r->shards, &r->removed_stale);
  c->set = NULL;
  free(hash);
  return rc;
}

int loom_corpus_tokenize(const loom_corpus_opts *o, loom_corpus_result *r) {
  memset(r, 0, sizeof *r);
  ctx c = {.o = o, .field = o->field ? o->field : "text", .t0 = loom_now()};
  c.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
  c.chunk = o->chunk_bytes ? o->chunk_bytes : DEFAULT_CHUNK;
  c.round_max = 4 * c.threads;
  c.units = loom_calloc((size_t)c.round_max, sizeof *c.units);
  size_t n = (size_t)(o->n_inputs > 0 ? o->n_inputs : 1);
  c.in_bytes = loom_calloc(n, sizeof *c.in_bytes);
  c.in_docs = loom_calloc(n, sizeof *c.in_docs);
  c.in_blank = loom_calloc(n, sizeof *c.in_blank);
  c.in_lines = loom_calloc(n, sizeof *c.in_lines);
  int rc = o->n_inputs > 0 ? 0 : loom_err("no input files to tokenize");
  if (!rc) rc = check_inputs(&c);
  if (!rc) rc = load_tokenizers(&c);
  if (!rc) rc = open_output(&c);
  for (int f = 0; f < o->n_inputs && !rc; f++) rc = feed(&c, f);
  if (!rc && c.n_units) rc = run_round(&c);
  for (int i = 0; i < c.n_units; i++) free(c.units[i].text); /* after an error */
  if (!rc) rc = close_output(&c, r);
  if (rc) {
    loom_shard_writer_abort(c.one);
    loom_shard_set_abort(c.set);
    loom_corpus_result_free(r);
    memset(r, 0, sizeof *r);
  } else {
    progress(&c, true);
    r->p = c.p;
    r->threads = c.threads;
  }
  for (int i = 0; c.tok && i < c.threads; i++) loom_tokenizer_free(c.tok[i]);
  free(c.tok), free(c.units);
  free(c.in_bytes), free(c.in_docs), free(c.in_blank), free(c.in_lines);
  return rc;
}

void loom_corpus_result_free(loom_corpus_result *r) {
  free(r->manifest);
  r->manifest = NULL;
}

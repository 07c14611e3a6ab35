/* loom token shards: a flat binary file of token ids with a 64-byte header
 * (docs/FORMATS-data.md). All integers little-endian:
 *   offset  size  field
 *        0     8  magic "LOOMTOK1"
 *        8     4  u32 version: 1, or 2 when the end-of-document token is recorded
 *       12     4  u32 dtype: 1 = uint16 tokens, 2 = uint32 tokens
 *       16     8  u64 token count N
 *       24     4  u32 vocab_size (every token id is < vocab_size)
 *       28     4  u32 end-of-document token (version 2 only; < vocab_size); version 1: zero
 *       32    32  reserved, zero
 *       64  N*w  the tokens (w = 2 or 4 bytes)
 * A version-2 shard marks document ends: its documents are the runs of tokens ending at each
 * end-of-document token (packed training, data.pack_documents). Writers write version 1 when
 * no end-of-document token is set (such files are byte-identical to older loom's), so every
 * reader of version 1 files still reads them; readers accept both versions.
 * Writers pick uint16 when vocab_size <= 65536 and write atomically (PATH.tmp.<pid>, then
 * rename), so a shard either exists complete or not at all. Readers validate the header and
 * that the file holds exactly N tokens; every error names the file and says what to do. */
#ifndef LOOM_SHARD_H
#define LOOM_SHARD_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOOM_SHARD_MAGIC "LOOMTOK1"
#define LOOM_SHARD_HEADER_BYTES 64
#define LOOM_SHARD_VERSION 1     /* no end-of-document token recorded */
#define LOOM_SHARD_VERSION_EOD 2 /* end-of-document token at offset 28 */
#define LOOM_SHARD_U16 1
#define LOOM_SHARD_U32 2

typedef struct {
  uint32_t version;
  uint32_t dtype;      /* LOOM_SHARD_U16 or LOOM_SHARD_U32 */
  uint64_t count;      /* tokens */
  uint32_t vocab_size;
  int has_eod;         /* version 2: eod_token is the end-of-document token */
  int32_t eod_token;   /* meaningful only when has_eod */
} loom_shard_header;

/* dtype a writer uses for this vocabulary size. */
uint32_t loom_shard_dtype_for_vocab(uint32_t vocab_size);
/* Bytes per token of a dtype (2 or 4; 0 for an unknown dtype). */
size_t loom_shard_dtype_bytes(uint32_t dtype);

/* Write n tokens (each in [0, vocab_size)) as one shard, atomically. */
int loom_shard_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab_size);
/* The same as a version-2 shard recording end-of-document token eod (eod < 0: version 1). */
int loom_shard_write_docs(const char *path, const int32_t *tokens, uint64_t n,
                          uint32_t vocab_size, int32_t eod);

/* Streaming writer: tokens go to PATH.tmp.<pid>; close() fixes the header and renames it
 * into place; abort() (or any failed call) removes the temporary file. */
typedef struct loom_shard_writer loom_shard_writer;
int loom_shard_writer_open(loom_shard_writer **w, const char *path, uint32_t vocab_size);
int loom_shard_writer_append(loom_shard_writer *w, const int32_t *tokens, size_t n);
uint64_t loom_shard_writer_count(const loom_shard_writer *w);
/* Record the end-of-document token (the shard becomes version 2); the caller appends it after
 * every document. Error when eod is outside [0, vocab_size). */
int loom_shard_writer_set_eod(loom_shard_writer *w, int32_t eod);
int loom_shard_writer_close(loom_shard_writer *w); /* frees w, also on error */
void loom_shard_writer_abort(loom_shard_writer *w); /* frees w */

/* ---- shard sets: a stream in shards of a fixed size, with a manifest ------------------------
 * Shards PREFIX_000000.bin, PREFIX_000001.bin, ... of shard_tokens tokens each (the last holds
 * the rest) and the manifest PREFIX.manifest.json, where PREFIX is the output path without a
 * trailing ".bin"; an output that is a directory (or ends in '/') holds DIR/shard_<n>.bin and
 * DIR/manifest.json. The manifest (JSON, written last and atomically):
 *   {"format": "loom-token-shards", "version": 1, "vocab_size", "dtype", "tokens",
 *    "shard_tokens", "end_of_document": id | null, "documents", "tokenizer": {"path",
 *    "hash": "fnv1a64:<16 hex digits of the file's bytes>", "vocab_size"},
 *    "inputs": [{"path", "bytes", "documents"}], "shards": [{"path", "tokens"}]}
 * with shard paths relative to the manifest's directory. Shards are written under staging
 * names (PREFIX_<n>.bin.part.<pid>) and renamed into place only once all are complete;
 * closing then removes PREFIX_<n>.bin files beyond the new last one (an earlier, longer run),
 * so a directory of the shards holds this run's stream only. */
#define LOOM_SHARD_MANIFEST_FORMAT "loom-token-shards"
typedef struct loom_shard_set loom_shard_set;
/* eod < 0: version-1 shards; else every shard records it (version 2). */
int loom_shard_set_open(loom_shard_set **s, const char *out, uint32_t vocab_size, int32_t eod,
                        uint64_t shard_tokens);
int loom_shard_set_append(loom_shard_set *s, const int32_t *tokens, size_t n);
uint64_t loom_shard_set_count(const loom_shard_set *s);
const char *loom_shard_set_manifest(const loom_shard_set *s); /* its path */
/* What the manifest records besides the shards (NULL: nothing). */
typedef struct {
  const char *tokenizer;      /* tokenizer.json as given */
  const char *tokenizer_hash; /* "fnv1a64:..." */
  uint64_t documents;
  const char *const *inputs;  /* (n_inputs) */
  const uint64_t *input_bytes, *input_documents;
  int n_inputs;
} loom_shard_provenance;
/* Finish: rename the shards into place, write the manifest, remove stale shards. Frees s
 * (also on error, then removing what it wrote). *shards written, *removed stale ones. */
int loom_shard_set_close(loom_shard_set *s, const loom_shard_provenance *pv, int *shards,
                         int *removed);
void loom_shard_set_abort(loom_shard_set *s); /* removes every shard written; frees s */

/* A manifest read back (src/data/shard_manifest.c): shard paths resolved against the
 * manifest's directory, and the tokens each must hold. */
typedef struct {
  struct {
    char *path;
    uint64_t tokens;
  } *shards;
  size_t n;
  uint32_t vocab_size;
  int32_t eod; /* -1: none */
  uint64_t tokens;
} loom_shard_manifest;
/* A regular file whose name ends in ".json". */
bool loom_shard_is_manifest(const char *path);
int loom_shard_manifest_read(const char *path, loom_shard_manifest *m);
void loom_shard_manifest_free(loom_shard_manifest *m);

/* A validated, memory-mapped shard. */
typedef struct {
  loom_shard_header h;
  const uint8_t *tokens; /* h.count tokens of h.dtype, little-endian */
  void *map;
  size_t map_len;
  char *path;
  int32_t max_token; /* largest token id in the file, -1 when it holds none */
} loom_shard;

/* Open and validate: missing file, too short, bad magic, unknown version or dtype, dtype
 * too narrow for vocab_size, a size that does not match the token count, and any token
 * >= vocab_size (the error names the first one's index and byte offset). Reads every token
 * once. */
int loom_shard_open(loom_shard *s, const char *path);
void loom_shard_close(loom_shard *s);
/* Copy tokens [start, start + n) (must lie inside the shard) into out as int32. */
void loom_shard_copy(const loom_shard *s, uint64_t start, uint64_t n, int32_t *out);
/* Validate and read only the header. */
int loom_shard_read_header(const char *path, loom_shard_header *h);
/* Read the whole shard into a malloc'd int32 array (*tokens, h->count entries). */
int loom_shard_read(const char *path, loom_shard_header *h, int32_t **tokens);
/* A shard opened from manifest `manifest` must hold what it promises (tokens, vocab_size,
 * end-of-document token); else an error naming both files. */
int loom_shard_manifest_check(const char *manifest, const char *shard, uint64_t tokens,
                              const loom_shard_header *h, const loom_shard_manifest *m);

#endif

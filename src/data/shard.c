/* Token shard files (format in include/loom/shard.h and docs/FORMATS-data.md): atomic
 * streaming writer, validating memory-mapped reader. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/shard.h"

uint32_t loom_shard_dtype_for_vocab(uint32_t vocab_size) {
  return vocab_size <= 65536u ? LOOM_SHARD_U16 : LOOM_SHARD_U32;
}

size_t loom_shard_dtype_bytes(uint32_t dtype) {
  return dtype == LOOM_SHARD_U16 ? 2 : dtype == LOOM_SHARD_U32 ? 4 : 0;
}

/* ---- little-endian helpers --------------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) {
  return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void encode_header(uint8_t out[LOOM_SHARD_HEADER_BYTES], const loom_shard_header *h) {
  memset(out, 0, LOOM_SHARD_HEADER_BYTES);
  memcpy(out, LOOM_SHARD_MAGIC, 8);
  put_u32(out + 8, h->version);
  put_u32(out + 12, h->dtype);
  put_u64(out + 16, h->count);
  put_u32(out + 24, h->vocab_size);
  if (h->has_eod) put_u32(out + 28, (uint32_t)h->eod_token);
}

/* ---- writer ----------------------------------------------------------------------------- */

struct loom_shard_writer {
  char *path, *tmp;
  FILE *f;
  loom_shard_header h;
  uint8_t *buf; /* conversion buffer */
  size_t buf_cap;
};

int loom_shard_writer_open(loom_shard_writer **out, const char *path, uint32_t vocab_size) {
  *out = NULL;
  if (vocab_size == 0) return loom_err("%s: cannot write a shard with vocab_size 0", path);
  loom_shard_writer *w = loom_calloc(1, sizeof *w);
  w->path = loom_strdup(path);
  w->tmp = loom_tmp_path(path);
  w->h = (loom_shard_header){LOOM_SHARD_VERSION, loom_shard_dtype_for_vocab(vocab_size), 0,
                             vocab_size, 0, 0};
  w->f = fopen(w->tmp, "wb");
  if (!w->f) {
    int e = errno;
    loom_err("%s: cannot write the shard: %s (does the directory exist?)", path, strerror(e));
    loom_shard_writer_abort(w);
    return -1;
  }
  uint8_t hdr[LOOM_SHARD_HEADER_BYTES];
  encode_header(hdr, &w->h); /* count fixed at close */
  if (fwrite(hdr, 1, sizeof hdr, w->f) != sizeof hdr) {
    loom_err("%s: cannot write the shard header (disk full?)", path);
    loom_shard_writer_abort(w);
    return -1;
  }
  *out = w;
  return 0;
}

uint64_t loom_shard_writer_count(const loom_shard_writer *w) { return w->h.count; }

int loom_shard_writer_set_eod(loom_shard_writer *w, int32_t eod) {
  if (eod < 0 || (uint32_t)eod >= w->h.vocab_size)
    return loom_err("%s: end-of-document token %d is outside the vocabulary [0, %u)", w->path,
                    (int)eod, w->h.vocab_size);
  w->h.version = LOOM_SHARD_VERSION_EOD;
  w->h.has_eod = 1;
  w->h.eod_token = eod;
  return 0;
}

int loom_shard_writer_append(loom_shard_writer *w, const int32_t *tokens, size_t n) {
  size_t width = loom_shard_dtype_bytes(w->h.dtype);
  if (n * width > w->buf_cap) {
    w->buf_cap = n * width;
    w->buf = loom_realloc(w->buf, w->buf_cap, 1);
  }
  for (size_t i = 0; i < n; i++) {
    if (tokens[i] < 0 || (uint32_t)tokens[i] >= w->h.vocab_size)
      return loom_err("%s: token %d at position %llu is outside the vocabulary [0, %u)",
                      w->path, (int)tokens[i], (unsigned long long)(w->h.count + i),
                      w->h.vocab_size);
    uint32_t v = (uint32_t)tokens[i];
    for (size_t k = 0; k < width; k++) w->buf[i * width + k] = (uint8_t)(v >> (8 * k));
  }
  if (n && fwrite(w->buf, width, n, w->f) != n)
    return loom_err("%s: cannot write tokens (disk full?)", w->path);
  w->h.count += n;
  return 0;
}

static void writer_free(loom_shard_writer *w) {
  free(w->path);
  free(w->tmp);
  free(w->buf);
  free(w);
}

void loom_shard_writer_abort(loom_shard_writer *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  unlink(w->tmp);
  writer_free(w);
}

int loom_shard_writer_close(loom_shard_writer *w) {
  uint8_t hdr[LOOM_SHARD_HEADER_BYTES];
  encode_header(hdr, &w->h);
  int ok = fseek(w->f, 0, SEEK_SET) == 0 && fwrite(hdr, 1, sizeof hdr, w->f) == sizeof hdr;
  ok = (fflush(w->f) == 0) && ok;
  ok = (fsync(fileno(w->f)) == 0) && ok;
  ok = (fclose(w->f) == 0) && ok;
  w->f = NULL;
  if (!ok || rename(w->tmp, w->path) != 0) {
    loom_err("%s: cannot finish the shard: %s (disk full?)", w->path, strerror(errno));
    loom_shard_writer_abort(w);
    return -1;
  }
  writer_free(w);
  return 0;
}

int loom_shard_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab_size) {
  return loom_shard_write_docs(path, tokens, n, vocab_size, -1);
}

int loom_shard_write_docs(const char *path, const int32_t *tokens, uint64_t n,
                          uint32_t vocab_size, int32_t eod) {
  loom_shard_writer *w;
  if (loom_shard_writer_open(&w, path, vocab_size)) return -1;
  if ((eod >= 0 && loom_shard_writer_set_eod(w, eod)) ||
      loom_shard_writer_append(w, tokens, (size_t)n)) {
    loom_shard_writer_abort(w);
    return -1;
  }
  return loom_shard_writer_close(w);
}

/* ---- reader ----------------------------------------------------------------------------- */

#define REMEDY "re-create it with 'loom data tokenize'"

/* Validate a header against the file size. */
static int check_header(const char *path, const uint8_t *b, uint64_t size, loom_shard_header *h) {
  if (memcmp(b, LOOM_SHARD_MAGIC, 8) != 0)
    return loom_err("%s: not a loom token shard (the first 8 bytes are not \"%s\"); pass a "
                    "file written by 'loom data tokenize'", path, LOOM_SHARD_MAGIC);
  *h = (loom_shard_header){get_u32(b + 8), get_u32(b + 12), get_u64(b + 16), get_u32(b + 24),
                           0, 0};
  if (h->version != LOOM_SHARD_VERSION && h->version != LOOM_SHARD_VERSION_EOD)
    return loom_err("%s: shard version %u is unknown (this loom reads versions %d and %d); %s "
                    "with this loom", path, h->version, LOOM_SHARD_VERSION,
                    LOOM_SHARD_VERSION_EOD, REMEDY);
  size_t width = loom_shard_dtype_bytes(h->dtype);
  if (width == 0)
    return loom_err("%s: unknown dtype %u in the header (1 = uint16, 2 = uint32); the file is "
                    "corrupt: %s", path, h->dtype, REMEDY);
  if (h->vocab_size == 0 || h->vocab_size > (uint32_t)INT32_MAX ||
      (h->dtype == LOOM_SHARD_U16 && h->vocab_size > 65536u))
    return loom_err("%s: vocab_size %u does not fit dtype %u; the file is corrupt: %s", path,
                    h->vocab_size, h->dtype, REMEDY);
  if (h->version == LOOM_SHARD_VERSION_EOD) {
    uint32_t eod = get_u32(b + 28);
    if (eod >= h->vocab_size)
      return loom_err("%s: end-of-document token %u (header offset 28) is not below the "
                      "header's vocab_size %u; the file is corrupt: %s", path, eod,
                      h->vocab_size, REMEDY);
    h->has_eod = 1;
    h->eod_token = (int32_t)eod;
  }
  uint64_t held = (size - LOOM_SHARD_HEADER_BYTES) / width;
  uint64_t rest = (size - LOOM_SHARD_HEADER_BYTES) % width;
  if (h->count > held)
    return loom_err("%s: truncated: header says %llu tokens, file holds %llu; %s", path,
                    (unsigned long long)h->count, (unsigned long long)held, REMEDY);
  if (held != h->count || rest)
    return loom_err("%s: %llu unexpected bytes after the %llu tokens the header announces; "
                    "the file is corrupt: %s", path,
                    (unsigned long long)(size - LOOM_SHARD_HEADER_BYTES - h->count * width),
                    (unsigned long long)h->count, REMEDY);
  return 0;
}

/* Open the file and read its size and header bytes; returns the fd or -1. */
static int open_shard(const char *path, uint64_t *size, uint8_t hdr[LOOM_SHARD_HEADER_BYTES]) {
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return loom_err("%s: cannot open the token shard: %s; check the path or create it with "
                    "'loom data tokenize'", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return loom_err("%s: not a regular file; pass a token shard (.bin)", path);
  }
  *size = (uint64_t)st.st_size;
  if (*size < LOOM_SHARD_HEADER_BYTES) {
    close(fd);
    return loom_err("%s: too short to be a token shard (%llu bytes, the header alone is %d); "
                    "%s", path, (unsigned long long)*size, LOOM_SHARD_HEADER_BYTES, REMEDY);
  }
  if (pread(fd, hdr, LOOM_SHARD_HEADER_BYTES, 0) != LOOM_SHARD_HEADER_BYTES) {
    close(fd);
    return loom_err("%s: cannot read the header: %s", path, strerror(errno));
  }
  return fd;
}

int loom_shard_read_header(const char *path, loom_shard_header *h) {
  uint64_t size;
  uint8_t hdr[LOOM_SHARD_HEADER_BYTES];
  int fd = open_shard(path, &size, hdr);
  if (fd < 0) return -1;
  close(fd);
  return check_header(path, hdr, size, h);
}

/* Every token must be < the header's vocab_size (which is <= INT32_MAX, so every id fits an
 * int32 once this holds); records the largest. Names the first bad token by index and byte
 * offset. */
static int check_tokens(loom_shard *s) {
  uint64_t n = s->h.count, vmax = 0;
  uint32_t vocab = s->h.vocab_size;
  for (uint64_t i = 0; i < n; i++) {
    uint32_t v = s->h.dtype == LOOM_SHARD_U16
                     ? (uint32_t)(s->tokens[2 * i] | s->tokens[2 * i + 1] << 8)
                     : get_u32(s->tokens + 4 * i);
    if (v >= vocab)
      return loom_err("%s: token %u at index %llu (byte offset %llu) is not below the header's "
                      "vocab_size %u; the file is corrupt: %s", s->path, v,
                      (unsigned long long)i,
                      (unsigned long long)(LOOM_SHARD_HEADER_BYTES +
                                           i * loom_shard_dtype_bytes(s->h.dtype)),
                      vocab, REMEDY);
    if (v > vmax) vmax = v;
  }
  s->max_token = n ? (int32_t)vmax : -1;
  return 0;
}

int loom_shard_open(loom_shard *s, const char *path) {
  memset(s, 0, sizeof *s);
  uint64_t size;
  uint8_t hdr[LOOM_SHARD_HEADER_BYTES];
  int fd = open_shard(path, &size, hdr);
  if (fd < 0) return -1;
  if (check_header(path, hdr, size, &s->h)) {
    close(fd);
    return -1;
  }
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (map == MAP_FAILED) return loom_err("%s: cannot map the shard: %s", path, strerror(e));
  s->map = map;
  s->map_len = (size_t)size;
  s->tokens = (const uint8_t *)map + LOOM_SHARD_HEADER_BYTES;
  s->path = loom_strdup(path);
  if (check_tokens(s)) {
    loom_shard_close(s);
    return -1;
  }
  return 0;
}

void loom_shard_close(loom_shard *s) {
  if (s->map) munmap(s->map, s->map_len);
  free(s->path);
  memset(s, 0, sizeof *s);
}

void loom_shard_copy(const loom_shard *s, uint64_t start, uint64_t n, int32_t *out) {
  LOOM_ASSERT(start + n <= s->h.count);
  if (s->h.dtype == LOOM_SHARD_U16) {
    const uint8_t *p = s->tokens + 2 * start;
    for (uint64_t i = 0; i < n; i++) out[i] = (int32_t)(p[2 * i] | p[2 * i + 1] << 8);
  } else {
    const uint8_t *p = s->tokens + 4 * start;
    for (uint64_t i = 0; i < n; i++) out[i] = (int32_t)get_u32(p + 4 * i);
  }
}

int loom_shard_read(const char *path, loom_shard_header *h, int32_t **tokens) {
  loom_shard s;
  if (loom_shard_open(&s, path)) return -1;
  *h = s.h;
  *tokens = loom_malloc_for((size_t)s.h.count * sizeof **tokens, "the token shard");
  loom_shard_copy(&s, 0, s.h.count, *tokens);
  loom_shard_close(&s);
  return 0;
}

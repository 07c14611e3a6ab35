/* Reading corpus files as text streams: plain, gzip (zlib) or zstd (libzstd), by the file's
 * name, with the compressed formats' magic bytes checked and damaged data reported with the
 * line and text offset where it stopped (include/loom/corpus.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "loom/core.h"
#include "loom/corpus.h"

enum { PLAIN, GZIP, ZSTD };

struct loom_text_in {
  char *path;
  int kind;
  FILE *f;       /* PLAIN, ZSTD */
  gzFile gz;     /* GZIP */
  ZSTD_DCtx *z;  /* ZSTD */
  uint8_t *zbuf; /* ZSTD: compressed bytes read, not yet decompressed */
  ZSTD_inBuffer zin;
  size_t zlast; /* ZSTD: the last return of ZSTD_decompressStream (0: frame ended) */
  uint64_t size, consumed, text, lines;
};

#define ZBUF_BYTES (1u << 17)
#define GZ_READ    (1u << 14)

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

bool loom_corpus_is_jsonl(const char *path) {
  size_t n = strlen(path);
  if (has_suffix(path, ".gz")) n -= 3;
  else if (has_suffix(path, ".zst")) n -= 4;
  char *base = loom_strndup(path, n);
  bool jsonl = has_suffix(base, ".jsonl") || has_suffix(base, ".json");
  free(base);
  return jsonl;
}

/* The file's first bytes must be the format's magic number. */
static int check_magic(loom_text_in *in) {
  static const uint8_t gz[2] = {0x1f, 0x8b}, zs[4] = {0x28, 0xb5, 0x2f, 0xfd};
  const uint8_t *want = in->kind == GZIP ? gz : zs;
  size_t n = in->kind == GZIP ? 2 : 4;
  uint8_t got[4] = {0};
  size_t k = fread(got, 1, n, in->f);
  rewind(in->f);
  if (k == n && !memcmp(got, want, n)) return 0;
  return loom_err("%s: not %s data (%s); compress it with %s, or name it without the %s "
                  "suffix if it is plain text",
                  in->path, in->kind == GZIP ? "gzip" : "zstd",
                  k < n ? "the file is too short" : "the first bytes are not its magic number",
                  in->kind == GZIP ? "gzip" : "zstd", in->kind == GZIP ? ".gz" : ".zst");
}

static int open_stream(loom_text_in *in) {
  if (in->kind == PLAIN) return 0;
  if (check_magic(in)) return LOOM_ERR;
  if (in->kind == ZSTD) {
    in->z = ZSTD_createDCtx();
    in->zbuf = loom_malloc(ZBUF_BYTES);
    in->zin = (ZSTD_inBuffer){in->zbuf, 0, 0};
    return in->z ? 0 : loom_err("%s: cannot create a zstd decoder (out of memory?)", in->path);
  }
  int fd = dup(fileno(in->f));
  in->gz = fd >= 0 ? gzdopen(fd, "rb") : NULL;
  if (!in->gz) return loom_err("%s: cannot open it as gzip data: %s", in->path, strerror(errno));
  gzbuffer(in->gz, 1u << 17);
  return 0;
}

int loom_text_in_open(loom_text_in **out, const char *path) {
  *out = NULL;
  struct stat st;
  if (stat(path, &st) != 0)
    return loom_err("%s: cannot open: %s; check the path", path, strerror(errno));
  if (S_ISDIR(st.st_mode))
    return loom_err("%s: is a directory; give the corpus files in it (e.g. %s/*.txt)", path, path);
  loom_text_in *in = loom_calloc(1, sizeof *in);
  in->path = loom_strdup(path);
  in->kind = has_suffix(path, ".gz") ? GZIP : has_suffix(path, ".zst") ? ZSTD : PLAIN;
  in->size = (uint64_t)st.st_size;
  in->f = fopen(path, "rb");
  if (!in->f) {
    loom_err("%s: cannot open: %s", path, strerror(errno));
    loom_text_in_close(in);
    return LOOM_ERR;
  }
  if (open_stream(in)) {
    loom_text_in_close(in);
    return LOOM_ERR;
  }
  *out = in;
  return 0;
}

/* "... after line L (byte B of the text)": where the readable text stops. */
static int damaged(loom_text_in *in, const char *what) {
  char where[96] = "before any of its text could be read";
  if (in->text)
    snprintf(where, sizeof where, "after line %llu (byte %llu of the text)",
             (unsigned long long)in->lines, (unsigned long long)in->text);
  return loom_err("%s: %s %s; the file is damaged or truncated: re-create or re-download it",
                  in->path, what, where);
}

/* The text before damage comes first; the damage is reported by the next read (its line is
 * then where the text stops). */
static int read_gzip(loom_text_in *in, char *buf, size_t cap, size_t *n) {
  /* small reads: zlib drops the text of a read that meets damage, so this bounds what the
   * error's position leaves out */
  int k = gzread(in->gz, buf, (unsigned)(cap > GZ_READ ? GZ_READ : cap));
  int err = Z_OK;
  const char *msg = gzerror(in->gz, &err);
  if (k <= 0 && err != Z_OK && err != Z_STREAM_END) {
    const char *sep = strncmp(msg, "<fd:", 4) ? NULL : strstr(msg, ": "); /* zlib's "<fd:5>: " */
    char what[160];
    snprintf(what, sizeof what, "corrupt gzip data (%s)",
             err == Z_BUF_ERROR ? "it ends in the middle of the compressed stream"
             : sep              ? sep + 2
                                : msg);
    return damaged(in, what);
  }
  *n = k > 0 ? (size_t)k : 0;
  in->consumed = (uint64_t)gzoffset(in->gz);
  return 0;
}

static int read_zstd(loom_text_in *in, char *buf, size_t cap, size_t *n) {
  ZSTD_outBuffer out = {buf, cap, 0};
  while (out.pos == 0) {
    if (in->zin.pos == in->zin.size) {
      size_t k = fread(in->zbuf, 1, ZBUF_BYTES, in->f);
      if (k == 0 && ferror(in->f)) return damaged(in, strerror(errno));
      if (k == 0) {
        if (in->zlast != 0) return damaged(in, "corrupt zstd data (it ends inside a frame)");
        break;
      }
      in->zin = (ZSTD_inBuffer){in->zbuf, k, 0};
      in->consumed += k;
    }
    size_t r = ZSTD_decompressStream(in->z, &out, &in->zin);
    if (ZSTD_isError(r)) {
      char what[160];
      snprintf(what, sizeof what, "corrupt zstd data (%s)", ZSTD_getErrorName(r));
      return damaged(in, what);
    }
    in->zlast = r;
  }
  *n = out.pos;
  return 0;
}

int loom_text_in_read(loom_text_in *in, char *buf, size_t cap, size_t *n) {
  *n = 0;
  int rc = 0;
  if (in->kind == GZIP) {
    rc = read_gzip(in, buf, cap, n);
  } else if (in->kind == ZSTD) {
    rc = read_zstd(in, buf, cap, n);
  } else {
    *n = fread(buf, 1, cap, in->f);
    if (*n == 0 && ferror(in->f)) rc = damaged(in, strerror(errno));
    in->consumed += *n;
  }
  for (const char *p = buf, *end = buf + *n; p < end && (p = memchr(p, '\n', (size_t)(end - p)));
       p++)
    in->lines++;
  in->text += *n;
  return rc;
}

uint64_t loom_text_in_consumed(const loom_text_in *in) { return in->consumed; }
uint64_t loom_text_in_size(const loom_text_in *in) { return in->size; }

void loom_text_in_close(loom_text_in *in) {
  if (!in) return;
  if (in->gz) gzclose(in->gz);
  if (in->f) fclose(in->f);
  if (in->z) ZSTD_freeDCtx(in->z);
  free(in->zbuf);
  free(in->path);
  free(in);
}

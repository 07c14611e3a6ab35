/* Tar writer: deterministic ustar members (GNU 'L' entry for names over 100 bytes), end
 * marker, 10240-byte record padding; written to PATH.tmp.<pid> and renamed on close. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/tar.h"

struct loom_tar_writer {
  FILE *f;
  char *path, *tmp;
  uint64_t pos;
};

int loom_tar_writer_open(loom_tar_writer **out, const char *path) {
  loom_tar_writer *w = loom_calloc(1, sizeof *w);
  w->path = loom_strdup(path);
  w->tmp = loom_tmp_path(path);
  w->f = fopen(w->tmp, "wb");
  if (!w->f) {
    int e = errno;
    free(w->path);
    free(w->tmp);
    free(w);
    *out = NULL;
    return loom_err("cannot create %s: %s", path, strerror(e));
  }
  *out = w;
  return 0;
}

static void octal(uint8_t *f, int len, uint64_t v) { /* len-1 digits and a NUL */
  for (int i = len - 2; i >= 0; i--, v >>= 3) f[i] = (uint8_t)('0' + (v & 7));
  f[len - 1] = 0;
}

static int put(loom_tar_writer *w, const void *d, size_t n) {
  if (n && fwrite(d, 1, n, w->f) != n) return loom_err("writing %s: %s", w->tmp, strerror(errno));
  w->pos += n;
  return 0;
}

static int pad(loom_tar_writer *w) {
  static const uint8_t zeros[512];
  size_t r = (size_t)(w->pos % 512);
  return r ? put(w, zeros, 512 - r) : 0;
}

static int header(loom_tar_writer *w, const char *name, uint64_t size, char type) {
  uint8_t b[512];
  memset(b, 0, sizeof b);
  size_t nl = strlen(name);
  memcpy(b, name, nl < 100 ? nl : 100);
  octal(b + 100, 8, 0644);
  octal(b + 108, 8, 0);
  octal(b + 116, 8, 0);
  if (size >= (1ull << 33)) { /* base-256 for sizes >= 8 GiB */
    b[124] = 0x80;
    for (int i = 11; i >= 1; i--, size >>= 8) b[124 + i] = (uint8_t)(size & 0xff);
  } else {
    octal(b + 124, 12, size);
  }
  octal(b + 136, 12, 0);
  b[156] = (uint8_t)type;
  memcpy(b + 257, "ustar\0" "00", 8);
  memset(b + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += b[i];
  octal(b + 148, 7, sum);
  b[155] = ' ';
  return put(w, b, 512);
}

int loom_tar_writer_add(loom_tar_writer *w, const char *name, const void *data, size_t len) {
  size_t nl = strlen(name);
  if (nl == 0) return loom_err("%s: a tar member needs a name", w->path);
  if (nl > 100) {
    if (header(w, "././@LongLink", nl + 1, 'L') || put(w, name, nl + 1) || pad(w)) return -1;
  }
  if (header(w, name, len, '0') || put(w, data, len) || pad(w)) return -1;
  return 0;
}

static void done(loom_tar_writer *w) {
  free(w->path);
  free(w->tmp);
  free(w);
}

int loom_tar_writer_close(loom_tar_writer *w) {
  static const uint8_t zeros[10240];
  int rc = put(w, zeros, 1024);
  if (rc == 0 && w->pos % 10240) rc = put(w, zeros, 10240 - (size_t)(w->pos % 10240));
  if (fclose(w->f) && rc == 0) rc = loom_err("writing %s: %s", w->tmp, strerror(errno));
  if (rc == 0 && rename(w->tmp, w->path))
    rc = loom_err("cannot rename %s to %s: %s", w->tmp, w->path, strerror(errno));
  if (rc) remove(w->tmp);
  done(w);
  return rc;
}

void loom_tar_writer_abort(loom_tar_writer *w) {
  if (!w) return;
  fclose(w->f);
  remove(w->tmp);
  done(w);
}

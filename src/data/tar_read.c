/* Tar reader: walk the ustar headers of a file (checksums verified, GNU long names and PAX
 * path/size records applied, non-regular members skipped) and list the regular members with
 * their data offsets. Damage after the first header is recorded, not fatal. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loom/core.h"
#include "loom/tar.h"

/* Octal field (spaces / NULs allowed around the digits) or GNU base-256 (high bit set).
 * Returns -1 on a malformed field. */
static int64_t num_field(const uint8_t *f, int len) {
  if (f[0] & 0x80) {
    uint64_t v = f[0] & 0x3f;
    for (int i = 1; i < len; i++) {
      if (v >> 55) return -1;
      v = (v << 8) | f[i];
    }
    return (int64_t)v;
  }
  int i = 0;
  while (i < len && (f[i] == ' ' || f[i] == 0)) i++;
  uint64_t v = 0;
  int digits = 0;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; i++, digits++) v = v * 8 + (uint64_t)(f[i] - '0');
  for (; i < len; i++)
    if (f[i] != ' ' && f[i] != 0) return -1;
  (void)digits;
  return (int64_t)v;
}

int loom_tar_header_ok(const uint8_t b[512]) {
  int64_t want = num_field(b + 148, 8);
  if (want < 0) return 0;
  uint64_t u = 0;
  int64_t s = 0;
  for (int i = 0; i < 512; i++) {
    uint8_t c = (i >= 148 && i < 156) ? ' ' : b[i];
    u += c;
    s += (int8_t)c;
  }
  return (int64_t)u == want || s == want;
}

static int all_zero(const uint8_t *b) {
  for (int i = 0; i < 512; i++)
    if (b[i]) return 0;
  return 1;
}

static int read_at(int fd, uint64_t off, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    got += (size_t)k;
  }
  return 0;
}

/* Header name: ustar prefix "/" name, each NUL-terminated within its field. */
static char *header_name(const uint8_t *b) {
  char name[101], prefix[156];
  memcpy(name, b, 100);
  name[100] = 0;
  prefix[0] = 0;
  if (!memcmp(b + 257, "ustar\0", 6)) { /* POSIX: prefix field; GNU "ustar  " has none */
    memcpy(prefix, b + 345, 155);
    prefix[155] = 0;
  }
  return prefix[0] ? loom_sprintf("%s/%s", prefix, name) : loom_strdup(name);
}

/* PAX records "LEN key=value\n" (LEN counts the whole record, its own digits and the '\n'
 * included): pick path and size. NULL when all records are well-formed, else what is wrong
 * (malloc'd): a record whose length is not a positive decimal, runs past the entry, ends
 * before its '=' or not on a '\n', or a size that is not a non-negative decimal. */
static char *pax_apply(const char *d, size_t n, char **path, int64_t *size) {
  size_t i = 0;
  while (i < n) {
    size_t len = 0, digits = 0;
    while (i + digits < n && d[i + digits] >= '0' && d[i + digits] <= '9' && digits < 19)
      len = len * 10 + (size_t)(d[i + digits++] - '0');
    if (!digits || i + digits >= n || d[i + digits] != ' ')
      return loom_sprintf("PAX record at byte %zu does not start with a decimal length and a "
                          "space", i);
    if (len > n - i)
      return loom_sprintf("PAX record at byte %zu claims %zu bytes but only %zu remain", i, len,
                          n - i);
    const char *kv = d + i + digits + 1, *rec_end = d + i + len - 1; /* rec_end: the '\n' */
    if (len < digits + 4 || *rec_end != '\n')
      return loom_sprintf("PAX record at byte %zu (length %zu) is too short for 'key=value' or "
                          "does not end with a newline", i, len);
    const char *eq = memchr(kv, '=', (size_t)(rec_end - kv));
    if (!eq || eq == kv)
      return loom_sprintf("PAX record at byte %zu has no 'key=' before its end", i);
    size_t klen = (size_t)(eq - kv), vlen = (size_t)(rec_end - eq - 1);
    if (klen == 4 && !memcmp(kv, "path", 4)) {
      free(*path);
      *path = loom_malloc(vlen + 1);
      memcpy(*path, eq + 1, vlen);
      (*path)[vlen] = 0;
    } else if (klen == 4 && !memcmp(kv, "size", 4)) {
      int64_t v = 0;
      size_t k = 0;
      for (; k < vlen && eq[1 + k] >= '0' && eq[1 + k] <= '9'; k++) {
        if (v > (INT64_MAX - 9) / 10)
          return loom_sprintf("PAX size record at byte %zu is too large", i);
        v = v * 10 + (eq[1 + k] - '0');
      }
      if (!vlen || k != vlen)
        return loom_sprintf("PAX size record at byte %zu is not a non-negative decimal: '%.*s'",
                            i, (int)(vlen > 40 ? 40 : vlen), eq + 1);
      *size = v;
    }
    i += len;
  }
  return NULL;
}

static void add_member(loom_tar_index *ix, size_t *cap, char *name, uint64_t off, uint64_t sz) {
  if (ix->n == *cap) {
    *cap = *cap ? 2 * *cap : 64;
    ix->members = loom_realloc(ix->members, *cap, sizeof *ix->members);
  }
  ix->members[ix->n++] = (loom_tar_member){name, off, sz};
}

static void damage(loom_tar_index *ix, const char *name, char *msg) {
  ix->damage = msg;
  ix->damaged_name = name ? loom_strdup(name) : NULL;
}

/* Read a meta member's data (long name, PAX header) of at most 1 MiB. */
static char *read_meta(int fd, uint64_t off, int64_t size) {
  if (size < 0 || size > (1 << 20)) return NULL;
  char *d = loom_malloc((size_t)size + 1);
  if (read_at(fd, off, d, (size_t)size)) {
    free(d);
    return NULL;
  }
  d[size] = 0;
  return d;
}

static void walk(int fd, loom_tar_index *ix) {
  uint8_t b[512];
  uint64_t pos = 0, fsz = ix->file_size;
  size_t cap = 0;
  char *next_name = NULL, *prev = NULL;
  int64_t next_size = -1;
  for (;;) {
    if (pos == fsz) {
      ix->no_end_marker = true;
      break;
    }
    if (fsz - pos < 512) {
      damage(ix, next_name, loom_sprintf("truncated: the file ends %llu bytes into a header at "
                                         "offset %llu", (unsigned long long)(fsz - pos),
                                         (unsigned long long)pos));
      break;
    }
    if (read_at(fd, pos, b, 512)) {
      damage(ix, NULL, loom_sprintf("read error at offset %llu", (unsigned long long)pos));
      break;
    }
    if (all_zero(b)) break; /* end-of-archive marker */
    if (!loom_tar_header_ok(b)) {
      damage(ix, NULL, loom_sprintf("corrupt tar header at offset %llu (checksum mismatch)%s%s",
                                    (unsigned long long)pos, prev ? " after member " : "",
                                    prev ? prev : ""));
      break;
    }
    int64_t size = num_field(b + 124, 12);
    char type = (char)b[156];
    char *name = header_name(b);
    if (next_name) {
      free(name);
      name = next_name;
      next_name = NULL;
    }
    if (next_size >= 0 && (type == '0' || type == 0 || type == '7')) size = next_size;
    next_size = -1;
    uint64_t data = pos + 512, padded = size >= 0 ? ((uint64_t)size + 511) / 512 * 512 : 0;
    if (size < 0 || data + (uint64_t)size > fsz) {
      damage(ix, name,
             size < 0 ? loom_sprintf("corrupt size field in the header of '%s' at offset %llu",
                                     name, (unsigned long long)pos)
                      : loom_sprintf("truncated: member '%s' needs %lld bytes at offset %llu "
                                     "but the file ends at %llu", name, (long long)size,
                                     (unsigned long long)data, (unsigned long long)fsz));
      free(name);
      break;
    }
    if (type == 'L' || type == 'x') {
      char *meta = read_meta(fd, data, size), *bad = NULL;
      if (!meta) {
        damage(ix, NULL, loom_sprintf("unreadable %s entry at offset %llu",
                                      type == 'L' ? "GNU long-name" : "PAX",
                                      (unsigned long long)pos));
        free(name);
        break;
      }
      if (type == 'L') next_name = loom_strdup(meta);
      else if ((bad = pax_apply(meta, (size_t)size, &next_name, &next_size))) {
        damage(ix, NULL, loom_sprintf("malformed PAX header at offset %llu: %s",
                                      (unsigned long long)pos, bad));
        free(bad);
        free(meta);
        free(name);
        break;
      }
      free(meta);
      free(name);
    } else if (type == '0' || type == 0 || type == '7') {
      add_member(ix, &cap, name, data, (uint64_t)size);
      prev = name;
    } else {
      free(name); /* directory, link, 'g', 'K', device...: skipped */
    }
    pos = data + padded;
    if (pos > fsz) pos = fsz; /* last member's padding cut off: still complete */
  }
  free(next_name);
}

int loom_tar_scan(const char *path, loom_tar_index *ix) {
  memset(ix, 0, sizeof *ix);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return loom_err("cannot open shard %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    return loom_err("shard %s is not a regular file", path);
  }
  ix->file_size = (uint64_t)st.st_size;
  uint8_t b[512];
  if (ix->file_size < 512 || read_at(fd, 0, b, 512) || (!all_zero(b) && !loom_tar_header_ok(b))) {
    close(fd);
    return loom_err("shard %s is not a tar archive (%s): remove it from the dataset directory or "
                    "re-create it with tar", path,
                    ix->file_size < 512 ? "shorter than one 512-byte header"
                                        : "its first block is not a valid tar header");
  }
  walk(fd, ix);
  close(fd);
  return 0;
}

void loom_tar_index_free(loom_tar_index *ix) {
  for (size_t i = 0; i < ix->n; i++) free(ix->members[i].name);
  free(ix->members);
  free(ix->damage);
  free(ix->damaged_name);
  memset(ix, 0, sizeof *ix);
}

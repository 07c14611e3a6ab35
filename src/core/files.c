/* File-system helpers: mkdir -p, whole-file read, atomic write (temp file + fsync + rename),
 * checked appends, fsync of files and directories, recursive removal, atomic directory
 * replacement, monotonic clock. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loom/core.h"

double loom_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool loom_path_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

bool loom_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int loom_mkdir_p(const char *path) {
  char *p = loom_strdup(path);
  for (char *c = p + 1; *c; c++) {
    if (*c != '/') continue;
    *c = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      int e = errno;
      free(p);
      return loom_err("cannot create directory '%s': %s", path, strerror(e));
    }
    *c = '/';
  }
  int rc = 0;
  if (mkdir(p, 0755) != 0 && errno != EEXIST)
    rc = loom_err("cannot create directory '%s': %s", path, strerror(errno));
  else if (!loom_is_dir(p))
    rc = loom_err("'%s' exists and is not a directory", path);
  free(p);
  return rc;
}

/* Reads the whole of `path` into a NUL-terminated buffer. fstat first: a directory is named
 * as such (lseek/ftell of a directory on ext4 reports INT64_MAX), a regular file is read by its
 * stat size (or longer, if it grew), anything else (pipe, character device) in chunks until
 * EOF, at most 1 GiB. A failed allocation is an error, never an abort. */
#define READ_STREAM_MAX (1 << 30) /* most bytes read from a pipe or device */

int loom_read_file(const char *path, char **data, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return loom_err("cannot open '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return loom_err("cannot stat '%s': %s", path, strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return loom_err("'%s' is a directory, not a file", path);
  }
  size_t cap = 65536;
  if (S_ISREG(st.st_mode)) {
    if (st.st_size < 0 || (unsigned long long)st.st_size >= (unsigned long long)SIZE_MAX) {
      close(fd);
      return loom_err("cannot read '%s': its size %lld does not fit in memory", path,
                      (long long)st.st_size);
    }
    cap = (size_t)st.st_size + 1;
  }
  char *buf = loom_malloc(cap);
  if (!buf) {
    close(fd);
    return loom_err("cannot read '%s': out of memory for %zu bytes", path, cap);
  }
  size_t n = 0;
  for (;;) {
    char probe[4096]; /* once the buffer is full: is there more (the file grew, or a pipe)? */
    bool full = n + 1 >= cap;
    ssize_t r = full ? read(fd, probe, sizeof probe) : read(fd, buf + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(buf);
      close(fd);
      return loom_err("cannot read '%s': %s", path, strerror(e));
    }
    if (r == 0) break;
    if (full) {
      if (!S_ISREG(st.st_mode) && n >= READ_STREAM_MAX) { /* e.g. /dev/zero never ends */
        free(buf);
        close(fd);
        return loom_err("'%s' is not a regular file and gave more than %d MiB without ending; "
                        "pass a regular file", path, READ_STREAM_MAX >> 20);
      }
      size_t want = cap > SIZE_MAX / 2 ? 0 : cap * 2;
      if (want && want < n + (size_t)r + 1) want = n + (size_t)r + 1;
      char *nb = want ? realloc(buf, want) : NULL;
      if (!nb) {
        free(buf);
        close(fd);
        return loom_err("cannot read '%s': out of memory after %zu bytes", path, n);
      }
      buf = nb;
      cap = want;
      memcpy(buf + n, probe, (size_t)r);
    }
    n += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  *data = buf;
  if (len) *len = n;
  return 0;
}

char *loom_tmp_path(const char *final_path) {
  return loom_sprintf("%s.tmp.%ld", final_path, (long)getpid());
}

int loom_write_file_atomic(const char *path, const void *data, size_t len) {
  char *tmp = loom_tmp_path(path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    int e = errno;
    free(tmp);
    return loom_err("cannot write '%s': %s", path, strerror(e));
  }
  errno = 0;
  bool ok = fwrite(data, 1, len, f) == len;
  ok = ok && fflush(f) == 0;
  ok = ok && fsync(fileno(f)) == 0; /* the data reaches the disk before the name does */
  int e = errno;
  ok = (fclose(f) == 0) && ok;
  if (!e) e = errno;
  if (ok && rename(tmp, path) != 0) {
    ok = false;
    e = errno;
  }
  if (!ok) {
    unlink(tmp);
    free(tmp);
    return loom_err("cannot write '%s': %s%s", path, strerror(e ? e : EIO),
                    e == ENOSPC || e == EDQUOT ? " (the disk is full)" : "");
  }
  free(tmp);
  return 0;
}

int loom_rm_rf(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return 0;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (!d) return loom_err("cannot open directory '%s': %s", path, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char *child = loom_sprintf("%s/%s", path, e->d_name);
      int rc = loom_rm_rf(child);
      free(child);
      if (rc) {
        closedir(d);
        return rc;
      }
    }
    closedir(d);
    if (rmdir(path) != 0) return loom_err("cannot remove '%s': %s", path, strerror(errno));
  } else if (unlink(path) != 0) {
    return loom_err("cannot remove '%s': %s", path, strerror(errno));
  }
  return 0;
}

int loom_rename_dir_atomic(const char *tmp_dir, const char *final_dir) {
  /* rename() cannot replace a non-empty directory: move the old one aside first. */
  char *old = NULL;
  if (loom_path_exists(final_dir)) {
    old = loom_sprintf("%s.old.%ld", final_dir, (long)getpid());
    if (rename(final_dir, old) != 0) {
      free(old);
      return loom_err("cannot replace '%s': %s", final_dir, strerror(errno));
    }
  }
  if (rename(tmp_dir, final_dir) != 0) {
    int e = errno;
    if (old) rename(old, final_dir);
    free(old);
    return loom_err("cannot rename '%s' to '%s': %s", tmp_dir, final_dir, strerror(e));
  }
  int rc = 0;
  if (old) rc = loom_rm_rf(old);
  free(old);
  return rc;
}

int loom_fsync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return loom_err("cannot open '%s' to sync it: %s", path, strerror(errno));
  int rc = 0;
  if (fsync(fd) != 0 && errno != EINVAL) /* EINVAL: the file system cannot sync directories */
    rc = loom_err("cannot sync '%s' to disk: %s", path, strerror(errno));
  close(fd);
  return rc;
}

int loom_append_checked(FILE *f, const char *path, const char *text, size_t len) {
  if (!f) return loom_err("cannot write '%s': the file is not open", path);
  long before = ftell(f);
  errno = 0;
  bool ok = fwrite(text, 1, len, f) == len;
  ok = fflush(f) == 0 && ok;
  if (ok) return 0;
  int e = errno ? errno : EIO;
  clearerr(f);
  /* cut what reached the file of this record, so that the file ends in a whole record */
  if (before >= 0 && ftruncate(fileno(f), before) == 0) fseek(f, before, SEEK_SET);
  return loom_err("cannot write '%s': %s%s", path, strerror(e),
                  e == ENOSPC || e == EDQUOT ? " (the disk is full; free space, then resume with "
                                               "'loom train --resume latest')" : "");
}

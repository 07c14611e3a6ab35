/* Tar shards: writer -> reader round trip (offsets point at the data, long names via GNU 'L'
 * entries), PAX path records, Python/GNU-compatible layout, and damage: a non-tar file, a
 * member cut short (truncated), a corrupt header, a missing end marker. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "data_test_util.h"
#include "loom/tar.h"

#define DIR_ "data-tar.tmp"

static char *read_at(const char *path, uint64_t off, uint64_t n) {
  int fd = open(path, O_RDONLY);
  char *b = calloc(n + 1, 1);
  if (pread(fd, b, n, (off_t)off) != (ssize_t)n) b[0] = 0;
  close(fd);
  return b;
}

static void round_trip(void) {
  char *p = scratch_path(DIR_, "a.tar");
  char longname[160];
  memset(longname, 'x', 150);
  strcpy(longname + 150, ".txt");
  loom_tar_writer *w;
  CHECK(loom_tar_writer_open(&w, p) == 0, "open");
  loom_tar_writer_add(w, "000001.jpg", "JPEGDATA", 8);
  loom_tar_writer_add(w, "000001.json", "{\"question\": \"q\"}", 17);
  loom_tar_writer_add(w, longname, "long", 4);
  loom_tar_writer_add(w, "empty.txt", "", 0);
  CHECK(loom_tar_writer_close(w) == 0, "close: %s", loom_errmsg());
  loom_tar_index ix;
  CHECK(loom_tar_scan(p, &ix) == 0, "scan: %s", loom_errmsg());
  CHECK(ix.n == 4 && !ix.damage && !ix.no_end_marker, "4 members, clean (n=%zu)", ix.n);
  CHECK(ix.file_size % 10240 == 0, "padded to a 10240-byte record (%llu)",
        (unsigned long long)ix.file_size);
  if (ix.n == 4) {
    CHECK(!strcmp(ix.members[0].name, "000001.jpg") && ix.members[0].offset == 512 &&
              ix.members[0].size == 8, "first member at 512");
    char *d = read_at(p, ix.members[1].offset, ix.members[1].size);
    CHECK(!strcmp(d, "{\"question\": \"q\"}"), "json data at its offset: %s", d);
    free(d);
    CHECK(!strcmp(ix.members[2].name, longname), "GNU long name read back");
    d = read_at(p, ix.members[2].offset, 4);
    CHECK(!strcmp(d, "long"), "long-name member data");
    free(d);
    CHECK(ix.members[3].size == 0, "empty member");
  }
  loom_tar_index_free(&ix);
  /* GNU tar and Python can read it: tar lists the same names */
  char *cmd = loom_sprintf("tar tf %s > " DIR_ "/list.txt 2>&1", p);
  CHECK(system(cmd) == 0, "tar tf accepts loom's archive");
  free(cmd);
  char *list = slurp(DIR_ "/list.txt");
  CHECK(contains(list, longname) && contains(list, "000001.json"), "tar lists: %s", list);
  free(list);
  /* determinism: same input, same bytes */
  char *q = scratch_path(DIR_, "b.tar");
  loom_tar_writer_open(&w, q);
  loom_tar_writer_add(w, "000001.jpg", "JPEGDATA", 8);
  loom_tar_writer_close(w);
  loom_tar_writer_open(&w, p);
  loom_tar_writer_add(w, "000001.jpg", "JPEGDATA", 8);
  loom_tar_writer_close(w);
  char *x = slurp(p), *y = slurp(q);
  CHECK(!memcmp(x, y, 1024), "byte-identical archives");
  free(x);
  free(y);
  free(q);
  free(p);
}

/* An archive made by GNU tar with a PAX header (long name via --format=pax). */
static void pax_and_gnu(void) {
  loom_mkdir_p(DIR_ "/src");
  char name[220];
  memset(name, 'p', 120);
  strcpy(name + 120, ".txt");
  char *f = loom_sprintf(DIR_ "/src/%s", name);
  write_text(f, "pax-data");
  free(f);
  char *cmd = loom_sprintf("cd " DIR_ "/src && tar --format=pax -cf ../pax.tar %s && "
                           "tar --format=gnu -cf ../gnu.tar %s", name, name);
  CHECK(system(cmd) == 0, "GNU tar available");
  free(cmd);
  const char *files[] = {DIR_ "/pax.tar", DIR_ "/gnu.tar"};
  for (int i = 0; i < 2; i++) {
    loom_tar_index ix;
    CHECK(loom_tar_scan(files[i], &ix) == 0, "scan %s: %s", files[i], loom_errmsg());
    CHECK(ix.n == 1 && !strcmp(ix.members[0].name, name), "%s: long name (%zu members)",
          files[i], ix.n);
    if (ix.n == 1) {
      char *d = read_at(files[i], ix.members[0].offset, ix.members[0].size);
      CHECK(!strcmp(d, "pax-data"), "%s: data", files[i]);
      free(d);
    }
    loom_tar_index_free(&ix);
  }
}

static void damage(void) {
  loom_tar_index ix;
  /* a JPEG / text file named .tar */
  char *p = scratch_path(DIR_, "fake.tar");
  char junk[2048];
  memset(junk, 'j', sizeof junk);
  loom_write_file_atomic(p, junk, sizeof junk);
  CHECK(loom_tar_scan(p, &ix) != 0, "non-tar refused");
  CHECK(contains(loom_errmsg(), "fake.tar") && contains(loom_errmsg(), "not a tar"), "msg: %s",
        loom_errmsg());
  write_text(p, "tiny");
  CHECK(loom_tar_scan(p, &ix) != 0 && contains(loom_errmsg(), "not a tar"), "tiny file refused");
  free(p);

  /* truncated: cut inside the second sample's jpg */
  p = scratch_path(DIR_, "t.tar");
  loom_tar_writer *w;
  loom_tar_writer_open(&w, p);
  char big[3000];
  memset(big, 'J', sizeof big);
  loom_tar_writer_add(w, "00000000.jpg", big, sizeof big);
  loom_tar_writer_add(w, "00000000.txt", "a", 1);
  loom_tar_writer_add(w, "00000001.jpg", big, sizeof big);
  loom_tar_writer_add(w, "00000001.txt", "b", 1);
  loom_tar_writer_close(w);
  char *all;
  size_t len;
  loom_read_file(p, &all, &len);
  loom_write_file_atomic(p, all, 512 * 9 + 700); /* 2nd jpg starts at 512*9+512 */
  CHECK(loom_tar_scan(p, &ix) == 0, "truncated tar still scans: %s", loom_errmsg());
  CHECK(ix.n == 2 && ix.damage && contains(ix.damage, "truncated") && ix.damaged_name &&
            !strcmp(ix.damaged_name, "00000001.jpg"),
        "damage names the cut member: %s (%s), %zu members", ix.damage ? ix.damage : "-",
        ix.damaged_name ? ix.damaged_name : "-", ix.n);
  loom_tar_index_free(&ix);
  /* cut exactly at a header boundary: no end marker, members complete */
  loom_write_file_atomic(p, all, 512 * 9);
  CHECK(loom_tar_scan(p, &ix) == 0 && ix.n == 2 && ix.no_end_marker && !ix.damage,
        "no end marker noted");
  loom_tar_index_free(&ix);
  /* corrupt header of the third member */
  all[512 * 9 + 3] ^= 0x55;
  loom_write_file_atomic(p, all, len);
  CHECK(loom_tar_scan(p, &ix) == 0 && ix.n == 2 && ix.damage && contains(ix.damage, "checksum"),
        "corrupt header: %s", ix.damage ? ix.damage : "-");
  loom_tar_index_free(&ix);
  free(all);
  free(p);
}

int main(void) {
  loom_rm_rf(DIR_);
  round_trip();
  pax_and_gnu();
  damage();
  loom_rm_rf(DIR_);
  return harness_finish("test_tar");
}

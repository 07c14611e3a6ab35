/* loom tar archives (POSIX ustar, as WebDataset / Megatron-Energon shards use them).
 *
 * Reader: walks the 512-byte headers without reading member data, verifying each header's
 * checksum; octal or base-256 sizes; ustar name prefixes; GNU long names ('L' entries,
 * "././@LongLink") and PAX extended headers ('x': path and size records) apply to the next
 * member; 'g' / 'K' entries, directories, links and other non-regular members are skipped.
 * A file whose first block is not a tar header is an error ("not a tar archive"); damage
 * later on (a header cut short, a member whose data runs past the end of the file, a header
 * with a bad checksum) stops the walk and is reported in the index with the member being
 * read, so the complete members before it stay usable.
 *
 * Writer: ustar members (mode 0644, uid/gid 0, mtime 0: byte-identical output for identical
 * input), names longer than 100 bytes via a GNU 'L' entry, two zero blocks at the end, padded
 * to a 10240-byte record like GNU tar and Python's tarfile. Written to PATH.tmp.<pid> and
 * renamed on close: a shard is complete or absent. */
#ifndef LOOM_TAR_H
#define LOOM_TAR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  char *name;      /* member path inside the archive (malloc'd) */
  uint64_t offset; /* byte offset of the member's data in the file (a multiple of 512) */
  uint64_t size;   /* data bytes */
} loom_tar_member;

typedef struct {
  loom_tar_member *members; /* regular files in archive order */
  size_t n;
  uint64_t file_size;
  char *damage;       /* NULL, or what stopped the walk (truncated / corrupt), malloc'd */
  char *damaged_name; /* the member being read when the damage was found, or NULL */
  bool no_end_marker; /* the file ends on a block boundary without the two zero blocks */
} loom_tar_index;

/* Index a tar file. -1 (error naming the file) when it cannot be read or is not a tar at
 * all; damage after a valid start is reported in ix->damage with return value 0. */
int loom_tar_scan(const char *path, loom_tar_index *ix);
void loom_tar_index_free(loom_tar_index *ix);

/* 1 if the 512-byte block is a header with a valid checksum, else 0. */
int loom_tar_header_ok(const uint8_t block[512]);

typedef struct loom_tar_writer loom_tar_writer;
int loom_tar_writer_open(loom_tar_writer **w, const char *path);
int loom_tar_writer_add(loom_tar_writer *w, const char *name, const void *data, size_t len);
/* End marker, padding, rename into place. Frees w (also on error). */
int loom_tar_writer_close(loom_tar_writer *w);
/* Remove the temporary file; frees w. */
void loom_tar_writer_abort(loom_tar_writer *w);

#endif
